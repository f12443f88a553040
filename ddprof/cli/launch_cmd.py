"""``ddprof launch -o RUN_DIR [options] -- torchrun ... train.py``: the command line of
:func:`ddprof.collectors.launch.launch` (it never imports torch itself)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import click

from ddprof.collectors.flight_recorder import DEFAULT_BUFFER
from ddprof.collectors.launch import launch as launch_job


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", "run_dir", required=True, type=click.Path(file_okay=False),
              help="Run dir for the capture (must not hold one already).")
@click.option("--step-on", default=None, metavar="MODULE:FUNCTION",
              help="Count a step at each return from this function (default: one step per optimizer step).")
@click.option("--step-on-loader", default=None, metavar="MODULE:NAME",
              help="Count a step per batch drawn from this loader: a class (torch.utils.data:DataLoader, every "
                   "instance) or a loader object a module defines (mytrain.data:train_loader).")
@click.option("--wait", type=click.IntRange(min=0), default=1, show_default=True, help="Steps skipped per cycle.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Steps warming the profiler up per cycle.")
@click.option("--active", type=click.IntRange(min=0), default=3, show_default=True,
              help="Steps recorded per cycle (0: record only what `ddprof trigger` asks for).")
@click.option("--repeat", type=click.IntRange(min=0), default=1, show_default=True,
              help="Cycles (0: until the job ends, one trace file per cycle).")
@click.option("--record-shapes/--no-record-shapes", default=True, show_default=True,
              help="Record input shapes (collective sizes come from them).")
@click.option("--profile-memory", is_flag=True, help="Record tensor allocations.")
@click.option("--with-stack", is_flag=True, help="Record Python stacks of the operators.")
@click.option("--fr-buffer", type=click.IntRange(min=0), default=DEFAULT_BUFFER, show_default=True,
              help="Flight Recorder entries kept per rank (0: leave the Flight Recorder alone).")
@click.option("--ingest-timeout", type=float, default=120.0, show_default=True,
              help="Seconds rank 0 waits at exit for the other ranks' files before it ingests.")
@click.option("--step-measures/--no-step-measures", default=True, show_default=True,
              help="Append every step's wall time, collectives, data wait, CPU and memory to RUN_DIR/measures "
                   "(what `ddprof top RUN_DIR` shows).")
@click.option("--auto-trigger", is_flag=True,
              help="When a rank becomes slow (the rule of `ddprof top`), record a window of --auto-trigger-steps "
                   "on every rank, as `ddprof trigger` does; at most one per --auto-trigger-every seconds.")
@click.option("--auto-trigger-steps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Steps each automatic window records.")
@click.option("--auto-trigger-every", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="Seconds at least between two automatic windows.")
@click.option("--no-capture", is_flag=True,
              help="Only set the environment (for a script that calls ddprof.profile itself).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def launch(run_dir: str, step_on: str | None, step_on_loader: str | None, wait: int, warmup: int, active: int, repeat: int,
           record_shapes: bool, profile_memory: bool, with_stack: bool, fr_buffer: int, ingest_timeout: float,
           step_measures: bool, auto_trigger: bool, auto_trigger_steps: int, auto_trigger_every: float,
           no_capture: bool, command: tuple[str, ...]) -> int:
    """Run COMMAND (e.g. torchrun ... train.py) with ddprof's capture settings on every rank.

    The script needs no change: every rank records the schedule's steps (by default steps 2-4, a step
    being one optimizer step) and any window `ddprof trigger RUN_DIR` asks for while it runs; at exit
    rank 0 ingests the run dir in the background.

    \b
    ddprof launch -o runs/job-42 -- torchrun --nproc-per-node 8 train.py
    ddprof analyze runs/job-42
    """
    profile = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat, "record_shapes": record_shapes,
               "profile_memory": profile_memory, "with_stack": with_stack, "ingest_timeout_s": ingest_timeout,
               "flight_recorder": fr_buffer > 0, "step_measures": step_measures}
    if auto_trigger and not step_measures:
        raise click.UsageError("--auto-trigger needs the step measures (drop --no-step-measures)")
    watcher = None
    if step_measures and not no_capture:
        watcher = LaunchWatch(Path(run_dir).absolute(), auto_trigger_steps if auto_trigger else 0,
                              auto_trigger_every)
        watcher.start()
    try:
        return launch_job(run_dir, list(command), fr_buffer=fr_buffer, capture=not no_capture, profile=profile,
                          step_on=step_on, step_on_loader=step_on_loader,
                          say=lambda line: click.echo(line, err=True))
    finally:
        if watcher is not None:
            watcher.stop()


class LaunchWatch:
    """Beside the job, in the launcher's process (never in a rank): once a second, read the step measures,
    log a line when a rank becomes slow or recovers (:class:`ddprof.cli.top_cmd.Watch`) and, with
    ``trigger_steps``, ask every rank for a window of that many steps (``ddprof trigger``), at most one per
    ``every_s``. A failure is logged and the watch stops; the job is never touched by it."""

    def __init__(self, run_dir: Path, trigger_steps: int, every_s: float, interval_s: float = 1.0):
        self.run_dir, self.trigger_steps, self.every_s, self.interval_s = run_dir, trigger_steps, every_s, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddprof-launch-watch", daemon=True)
        self._last_trigger = float("-inf")
        self.triggers: list[Any] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _say(self, line: str) -> None:
        click.echo(line, err=True)

    def _run(self) -> None:
        from ddprof.cli.top_cmd import Watch

        try:
            watch = Watch(self.run_dir, self._say)
            while not self._stop.wait(self.interval_s):
                before = set(watch.named)
                watch.poll()
                new = set(watch.named) - before
                if new and self.trigger_steps and time.monotonic() - self._last_trigger >= self.every_s:
                    self._last_trigger = time.monotonic()
                    threading.Thread(target=self._trigger, args=(sorted(new),), daemon=True).start()
        except Exception as exc:
            self._say(f"ddprof: the live watch stopped: {type(exc).__name__}: {exc} (the job goes on)")

    def _trigger(self, ranks: list[int]) -> None:
        from ddprof.collectors.trigger import trigger as trigger_window

        try:
            result = trigger_window(self.run_dir, self.trigger_steps, wait_s=60.0)
            self.triggers.append(result)
            self._say(f"ddprof: auto-trigger (rank(s) {', '.join(map(str, ranks))} became slow): {result.describe()}")
        except Exception as exc:
            self._say(f"ddprof: auto-trigger failed: {type(exc).__name__}: {exc} (the job goes on)")
