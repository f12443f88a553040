"""The ``ddprof`` program (console script and ``python -m ddprof``): sets the process up, then runs the CLI."""

from __future__ import annotations

import gc
import sys


def main() -> int:
    if sys.argv[1:2] in (["ingest"], ["finish"]):  # a process that only ingests: before anything loads Polars
        from ddprof.runtime.memory import use_ingest_allocator

        use_ingest_allocator()
    from ddprof.cli import main as cli_main

    code = cli_main()
    # The interpreter's shutdown runs collections over every object still alive (Polars' and NumPy's
    # modules, the run just built): ~50 ms after an ingest, for memory the process is about to give back
    # whole. Frozen objects are not traversed; finalisers and atexit handlers run as before.
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(main())
