"""``ddprof launch -o RUN_DIR -- torchrun ... train.py``: the command line of
:func:`ddprof.collectors.launch.launch` (it never imports torch itself)."""

from __future__ import annotations

import click

from ddprof.collectors.flight_recorder import DEFAULT_BUFFER
from ddprof.collectors.launch import launch as launch_job


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", "run_dir", required=True, type=click.Path(file_okay=False),
              help="Run dir for the capture (must not hold one already).")
@click.option("--fr-buffer", type=click.IntRange(min=0), default=DEFAULT_BUFFER, show_default=True,
              help="Flight Recorder entries kept per rank (0: leave the Flight Recorder alone).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def launch(run_dir: str, fr_buffer: int, command: tuple[str, ...]) -> int:
    """Run COMMAND (e.g. torchrun ... train.py) with ddprof's capture settings on every rank.

    \b
    ddprof launch -o runs/job-42 -- torchrun --nproc-per-node 8 train.py
    """
    return launch_job(run_dir, list(command), fr_buffer=fr_buffer)
