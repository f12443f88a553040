"""The ``ddprof`` program (console script and ``python -m ddprof``): sets the process up, then runs the CLI."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from pathlib import Path
from typing import NamedTuple, NoReturn

#: The commands that read a trace ahead (:mod:`ddprof.readers.read_ahead`): their options that take a value
#: and their flags (tests/unit/test_read_ahead.py checks them against the commands); what is left of the
#: arguments are the sources.
OPTIONS = {
    "ingest": (frozenset({"-o", "--output", "--rank", "-j", "--jobs", "--comm-kernel", "--executor", "--address"}),
               frozenset({"--force", "-q", "--quiet"})),
    "analyze": (frozenset({"--format", "-o", "--output", "--cache", "--rank", "--comm-kernel", "--executor",
                           "--address"}), frozenset()),
    "whatif": (frozenset({"--cache", "--comm-faster", "--comm-kernel", "--format", "--kernel", "-o", "--output",
                          "--rank", "--steps", "--straggler"}),
               frozenset({"--attribution", "--no-attribution", "--comm-overlap", "--data-loading",
                          "--no-data-loading", "--grad-overlap", "--no-grad-overlap", "--host-gaps", "--no-host-gaps",
                          "--typical-links"})),
    "export": (frozenset({"--cache", "--comm-kernel", "--perfetto", "--rank", "--ranks", "--steps"}),
               frozenset({"--raw-clocks"})),
}
_LONG = {"-o": "--output", "-j": "--jobs", "-q": "--quiet"}


def main() -> int:
    if sys.argv[1:2] in (["ingest"], ["finish"]):  # a process that only ingests: before anything loads Polars
        from ddprof.runtime.memory import use_ingest_allocator

        use_ingest_allocator()
    if len(sys.argv) > 1 and sys.argv[1] in OPTIONS:
        _read_ahead(sys.argv[1], sys.argv[2:])
    from ddprof.cli import main as cli_main

    code = cli_main(program=True)
    # The interpreter's shutdown runs collections over every object still alive (Polars' and NumPy's
    # modules, the run just built): ~50 ms after an ingest, for memory the process is about to give back
    # whole. Frozen objects are not traversed; finalisers and atexit handlers run as before.
    gc.freeze()
    return code


def run() -> NoReturn:
    """The console script and ``python -m ddprof``: :func:`main`, then the process ends at once (:func:`_end`)
    when no thread of the program is left to wait for."""
    code = main()
    if threading.active_count() == 1:
        _end(code)
    sys.exit(code)


def _end(code: int) -> NoReturn:
    """End the process as the interpreter's exit would, without tearing the interpreter down: the exit
    handlers run (and with them the finalisers registered for exit: temporary directories), the standard
    streams are flushed, then the process ends. The teardown frees every module and object one by one, for
    memory the process gives back whole: measured after ingesting the 54 MB trace, 12-18 ms from the last
    handler to the process's end against 20-35 ms."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: as the interpreter says, the output was lost
            code = code or 120
    os._exit(code)


class Told(NamedTuple):
    sources: list[str]
    options: dict[str, str | bool]  # by long name: a value, or True for a flag


def command_args(command: str, args: list[str]) -> Told | None:
    """The sources and options of ``ddprof COMMAND ARGS`` as the command will see them, or None for arguments
    this does not read (help, an option it does not know, another executor: the command will say)."""
    values, flags = OPTIONS[command]
    sources: list[str] = []
    options: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg == "--":
            return Told(sources + args[i + 1:], options)
        if arg[:2] in values and len(arg) > 2 and not arg.startswith("--"):  # -oDIR, -j2
            name, eq, value = arg[:2], "=", arg[2:]
        if name in values:
            if not eq:
                if i + 1 == len(args):
                    return None
                i, value = i + 1, args[i + 1]
            options[_LONG.get(name, name)] = value
            i += 1
            continue
        if arg in flags:
            options[_LONG.get(arg, arg)] = True
            i += 1
            continue
        if arg.startswith("-") and arg != "-":
            return None
        sources.append(arg)
        i += 1
    return Told(sources, options)


def _read_ahead(command: str, args: list[str]) -> None:
    """Decode one large trace while the program loads (:mod:`ddprof.readers.read_ahead`); not where its store
    is most likely reused (the run dir or cache it would be ingested into exists, and ``ingest`` is not told
    ``--force``), nor for a run dir (opened as it is) or another executor."""
    told = command_args(command, args)
    if told is None or told.options.get("--executor", "local") != "local" or len(told.sources) != 1:
        return
    source = Path(told.sources[0])
    store = _store_of(command, told, source)
    if (source / "manifest.json").exists() or (store is not None and (store / "manifest.json").exists()
                                               and not told.options.get("--force")):
        return
    from ddprof.readers import read_ahead

    trace = read_ahead.trace_of(told.sources)
    if trace is not None:
        read_ahead.start(trace)


def _store_of(command: str, told: Told, source: Path) -> Path | None:
    """Where the command ingests the traces: ``ingest``'s run dir, the others' cache (None: a temporary one)."""
    if command == "ingest":
        out = told.options.get("--output")
        return Path(out) if isinstance(out, str) else None
    cache = told.options.get("--cache")
    if isinstance(cache, str):
        return Path(cache)
    from ddprof.inputs.cache import default_cache

    return default_cache(source)


if __name__ == "__main__":
    run()
