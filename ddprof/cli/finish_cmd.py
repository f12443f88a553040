"""``ddprof finish RUN_DIR``: wait for a capture's ranks, then ingest their files into the run dir.

Rank 0 starts it in the background at exit (:func:`ddprof.collectors.finish.start_background`); run it by
hand when rank 0 died or its ingest failed. Exit 0 when the run dir was ingested, 1 when not (the log
says why).
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from ddprof.collectors.finish import finish as finish_capture
from ddprof.collectors.finish import log


@click.command("finish")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--world-size", type=click.IntRange(min=1), default=None,
              help="Ranks to wait for (default: rank 0's meta file says, else the rank dirs present).")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the ranks to finish writing.")
def finish(run_dir: str, world_size: int | None, timeout: float) -> int:
    """Wait for a capture's ranks to write their files, then ingest them into RUN_DIR."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run = finish_capture(Path(run_dir), world_size=world_size, timeout_s=timeout)
    if run is None:
        return 1
    log.info("ddprof: ingested %s: ranks %s of world size %s", run_dir, run.ranks, run.world_size)
    return 0
