"""``ddprof trigger RUN_DIR [--steps N]``: the command line of :func:`ddprof.collectors.trigger.trigger`.

Exit 0 when every capturing rank began the window at the same step, 1 when some rank did not answer
within ``--timeout`` or began late (the line names them), 2 when nothing captures in RUN_DIR.
"""

from __future__ import annotations

import click

from ddprof.collectors.trigger import trigger as trigger_window


@click.command("trigger")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True, help="Steps to record.")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for every rank to begin the window.")
@click.option("--no-signal", is_flag=True, help="Do not send SIGUSR2; the ranks find the trigger file by polling.")
def trigger(run_dir: str, steps: int, timeout: float, no_signal: bool) -> int:
    """Ask a running capture (ddprof launch, or ddprof.profile(on_demand=True)) to record the next steps.

    Writes RUN_DIR/.ddprof/triggers/trigger-NNN.json and sends SIGUSR2 to the capturing processes of this
    host; every rank records the same N steps, from the step after the one in progress, into
    raw/rank-R/rank-R.trigger-NNN.pt.trace.json.gz, and the command prints that step and the latency.
    """
    result = trigger_window(run_dir, steps, send_signal=not no_signal, wait_s=timeout)
    click.echo(result.describe())
    return 0 if result.aligned else 1
