"""The exit-code contract the fuzzers hold every case to (:class:`Contract`), where their cases are written
(:func:`case_root`), and their limits: whatever an input holds, ``ddprof ingest`` / ``analyze`` end with
0, 2 or 3, never a traceback, never 70 (a bug), never a warning leaked to stderr, in bounded time and
memory."""

from __future__ import annotations

import faulthandler
import io
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, TextIO

import pytest

from ddprof.cli import main

EXAMPLES = int(os.environ.get("DDPROF_FUZZ_EXAMPLES", "1000"))
#: Limits of one case: a trace of a few hundred events must never take longer, whatever it holds.
CASE_SECONDS = 20
PEAK_RSS_BYTES = 4 << 30


class CaseHung(Exception):
    """Raised in the middle of a case by the per-case alarm: the CLI reports it as a bug (exit 70), with
    the stack it was stuck in."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseHung(f"one case ran past {CASE_SECONDS} s")


def case_root(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """Where a fuzzer's cases are written: a fresh directory on ``/dev/shm`` (a memory file system: no
    disk flushes per case) when there is one, else the test's temporary directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix=f"ddprof-{name}-", dir=shm))
    return tmp_path_factory.mktemp(name)


class Contract:
    """Runs one case through the CLI and checks the contract; counts exit codes by command.

    ``stacks``: where the hard stop writes every thread's stack (default: the process's stderr)."""

    stacks: TextIO | None = None

    def __init__(self, root: Path) -> None:
        self.root, self.n, self.codes = root, 0, Counter()
        self.by_command: dict[str, Counter] = {}
        self.slowest, self.slowest_case, self.t0 = 0.0, [""], time.perf_counter()

    def check(self, args: list[str], allowed: frozenset[int] = frozenset({0, 2, 3})) -> int:
        out, err = io.StringIO(), io.StringIO()
        alarm = hasattr(signal, "setitimer")
        if alarm:
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        # a case stuck in C code (which the alarm's handler waits for) stops the process, its stacks shown
        faulthandler.dump_traceback_later(CASE_SECONDS * 3, exit=True, file=self.stacks or sys.__stderr__)
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught, redirect_stdout(out), redirect_stderr(err):
                warnings.simplefilter("always")
                rc = main(args)
        finally:
            took = time.perf_counter() - t0
            faulthandler.cancel_dump_traceback_later()
            if alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
        text = err.getvalue()
        self.codes[rc] += 1
        self.by_command.setdefault(args[0], Counter())[rc] += 1
        if took > self.slowest:
            self.slowest, self.slowest_case = took, args
        assert took < CASE_SECONDS, f"{took:.1f} s for one case {args}:\n{text}"
        assert rc in allowed, f"exit {rc} for {args}:\n{text}"
        assert "Traceback" not in text, text
        leaked = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, DeprecationWarning)]
        assert not leaked, leaked
        if rc:
            assert text.startswith("ddprof: error: "), text
        return rc

    def case_dir(self) -> Path:
        self.n += 1
        d = self.root / f"case-{self.n}"
        d.mkdir()
        return d

    def summary(self, what: str) -> str:
        """``fuzzed traces: N cases, C commands in S s (slowest T s), exit codes {...}: ingest {...}, ...``."""
        cmds = ", ".join(f"{cmd} {dict(sorted(c.items()))}" for cmd, c in sorted(self.by_command.items()))
        return (f"fuzzed {what}: {self.n} cases, {sum(self.codes.values())} commands in "
                f"{time.perf_counter() - self.t0:.0f} s (slowest {self.slowest:.2f} s, {self.slowest_case[0]}), "
                f"exit codes {dict(sorted(self.codes.items()))}: {cmds}")


def contract_for(tmp_path_factory: pytest.TempPathFactory, name: str, what: str) -> Iterator[Contract]:
    """A fuzz module's :class:`Contract` (its fixture yields from this): cases under :func:`case_root`,
    removed after; the summary printed; the process's peak memory held under :data:`PEAK_RSS_BYTES`."""
    c = Contract(case_root(tmp_path_factory, name))
    yield c
    shutil.rmtree(c.root, ignore_errors=True)
    print(f"\n{c.summary(what)}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert peak < PEAK_RSS_BYTES, f"peak memory {peak >> 20} MiB"
