"""The ``ddprof`` program (console script and ``python -m ddprof``): sets the process up, then runs the CLI."""

from __future__ import annotations

import gc
import os
import sys
from typing import NamedTuple

#: ``ddprof ingest``'s options that take a value, and its flags (tests/unit/test_read_ahead.py checks them
#: against the command): what is left of its arguments are the sources.
INGEST_VALUES = frozenset({"-o", "--output", "--rank", "-j", "--jobs", "--comm-kernel", "--executor", "--address"})
INGEST_FLAGS = frozenset({"--force", "-q", "--quiet"})


def main() -> int:
    if sys.argv[1:2] in (["ingest"], ["finish"]):  # a process that only ingests: before anything loads Polars
        from ddprof.runtime.memory import use_ingest_allocator

        use_ingest_allocator()
    if sys.argv[1:2] == ["ingest"]:
        _read_ahead(sys.argv[2:])
    from ddprof.cli import main as cli_main

    code = cli_main()
    # The interpreter's shutdown runs collections over every object still alive (Polars' and NumPy's
    # modules, the run just built): ~50 ms after an ingest, for memory the process is about to give back
    # whole. Frozen objects are not traversed; finalisers and atexit handlers run as before.
    gc.freeze()
    return code


class IngestArgs(NamedTuple):
    sources: list[str]
    output: str | None
    force: bool


def ingest_args(args: list[str]) -> IngestArgs | None:
    """The sources, run dir and ``--force`` of ``ddprof ingest ARGS`` as the command will see them, or None
    for arguments this does not read (help, an option it does not know, another executor: the command
    itself will say)."""
    sources: list[str] = []
    output, force, i = None, False, 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            return IngestArgs(sources + args[i + 1:], output, force)
        if name in INGEST_VALUES:
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else None)
            if value is None or (name == "--executor" and value != "local"):
                return None
            output = value if name in ("-o", "--output") else output
            i += 1 if "=" in arg else 2
            continue
        if arg in INGEST_FLAGS or (arg[:2] in ("-o", "-j") and len(arg) > 2):  # -oDIR, -j2
            output = arg[2:] if arg[:2] == "-o" and arg != "-o" else output
            force = force or arg == "--force"
            i += 1
            continue
        if arg.startswith("-") and arg != "-":
            return None
        sources.append(arg)
        i += 1
    return IngestArgs(sources, output, force)


def _read_ahead(args: list[str]) -> None:
    """Decode one large trace while the program loads (:mod:`ddprof.readers.read_ahead`); not where the
    run dir exists and no ``--force`` asks to read the traces again (its store is most likely reused)."""
    told = ingest_args(args)
    if told is None or (not told.force and told.output and os.path.exists(os.path.join(told.output, "manifest.json"))):
        return
    from ddprof.readers import read_ahead

    trace = read_ahead.trace_of(told.sources)
    if trace is not None:
        read_ahead.start(trace)


if __name__ == "__main__":
    sys.exit(main())
