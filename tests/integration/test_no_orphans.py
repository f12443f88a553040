"""No process of ddprof outlives the one that started it: an ingest killed outright (SIGKILL) leaves no
pool worker and no resource tracker behind (:mod:`ddprof.runtime.lifetime`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddprof.synth import Spec, generate

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")


def _session(sid: int) -> dict[int, str]:
    """The live processes of session ``sid`` (zombies are dead): pid -> command line."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] != "Z":
            out[int(d.name)] = cmd
    return out


def _wait_for(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_a_killed_ingest_leaves_no_worker_and_no_tracker(tmp_path):
    generate(Spec(ranks=64, steps=4, kernels=100), tmp_path / "gen")  # 18 MB: past the parallel threshold
    proc = subprocess.Popen([sys.executable, "-m", "ddprof", "ingest", str(tmp_path / "gen" / "traces"), "-o",
                             str(tmp_path / "run"), "-j", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        workers = lambda: [c for c in _session(proc.pid).values() if "spawn_main" in c]  # noqa: E731
        assert _wait_for(lambda: len(workers()) == 2, 30), f"no pool started: {_session(proc.pid)}"
        time.sleep(0.5)  # the workers are parsing
        assert proc.poll() is None, "the ingest ended before it could be killed"
        started = _session(proc.pid)
        assert any("resource_tracker" in c for c in started.values()), started
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(2)
        assert _session(proc.pid) == {}, f"left running after the ingest was killed: {_session(proc.pid)}"
    finally:
        for pid in _session(proc.pid):
            os.kill(pid, signal.SIGKILL)


def test_a_worker_without_the_kernel_signal_still_follows_its_parent(tmp_path):
    """Where the kernel sends nothing (no prctl), the watch thread ends the worker once its parent died."""
    worker = textwrap.dedent("""
        import sys, time
        sys.platform = "darwin"  # take the portable path: the watch thread alone
        from ddprof.runtime.lifetime import bind_to_parent
        bind_to_parent(int(sys.argv[1]))
        time.sleep(60)
    """)
    parent = textwrap.dedent(f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {worker!r}, str(os.getpid())])
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], start_new_session=True)
    try:
        assert _wait_for(lambda: len(_session(proc.pid)) == 2, 30), _session(proc.pid)
        time.sleep(0.5)  # the worker has bound itself
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _wait_for(lambda: _session(proc.pid) == {}, 2), _session(proc.pid)
    finally:
        for pid in _session(proc.pid):
            os.kill(pid, signal.SIGKILL)
