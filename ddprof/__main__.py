"""The ``ddprof`` program (console script and ``python -m ddprof``): sets the process up, then runs the CLI."""

from __future__ import annotations

import sys


def main() -> int:
    if sys.argv[1:2] in (["ingest"], ["finish"]):  # a process that only ingests: before anything loads Polars
        from ddprof.runtime.memory import use_ingest_allocator

        use_ingest_allocator()
    from ddprof.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
