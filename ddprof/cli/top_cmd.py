"""``ddprof top RUN_DIR [--once]``: a terminal view of a running job from its always-on step measures
(``RUN_DIR/measures/``, :mod:`ddprof.store.step_measures`), refreshed every second: per rank the last and
median step time, own time, time in collectives, the wait it caused, the trend, CPU and memory, and the
rank that is slow now and since when (the rule: :mod:`ddprof.analyses.live`). It only reads the run dir, so
it works from any machine that mounts it, while the job writes it and after.

Each time a rank is named slow, or stops being slow, one log line goes to stderr (and to ``--log FILE``):
``ddprof: 23:51:04 rank 1 is slow since step 20 (2 steps): its own time per step is 60.2 ms over ...``.
:class:`Watch` is that logic without the view; ``ddprof launch`` runs it beside the job.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from ddprof.errors import BadInputError

#: The newest steps of each rank the view and the rule look at.
VIEW_STEPS = 1000


@dataclass
class Watch:
    """Reads the measures as they grow and says when a rank becomes slow or recovers (module doc)."""

    run_dir: Path
    say: Callable[[str], None] = lambda line: None
    steps: int = VIEW_STEPS
    named: dict[int, Any] = field(default_factory=dict)  # rank -> the SlowRank when first named
    tail: Any = None

    def __post_init__(self) -> None:
        from ddprof.store.step_measures import MeasureTail

        self.tail = MeasureTail(self.run_dir, max_steps=self.steps)

    def poll(self) -> tuple[Any, list[Any]]:
        """Read what is new; the frame of the newest steps and the slow ranks now (each with the step and
        time it was first named since, kept while it stays slow)."""
        from ddprof.analyses.live import detect_slow_ranks

        self.tail.poll()
        frame = self.tail.frame(last_steps=self.steps)
        slow = detect_slow_ranks(frame)
        now = {s.rank: s for s in slow}
        for rank, s in now.items():
            if rank not in self.named:
                self.named[rank] = s
                self.say(f"ddprof: {_clock()} {s.describe()}")
        for rank in [r for r in self.named if r not in now]:
            first = self.named.pop(rank)
            self.say(f"ddprof: {_clock()} rank {rank} is no longer slow (it was from step {first.since_step})")
        return frame, [replace(s, since_step=self.named[s.rank].since_step, since_wall=self.named[s.rank].since_wall)
                       if self.named[s.rank].since_step < s.since_step else s for s in slow]


def _clock(wall: float | None = None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall if wall is not None else time.time()))


def _num(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def render(run_dir: Path, frame: Any, slow: list[Any], headers: dict[int, dict[str, Any]]) -> str:
    """One frame of the view."""
    from ddprof.analyses.live import rank_rows

    rows = rank_rows(frame)
    world = next((h.get("world_size") for h in headers.values() if h.get("world_size")), None)
    last_end = max((r.last_end for r in rows if r.last_end), default=None)
    step = max((r.last_step for r in rows), default=None)
    head = (f"ddprof top {run_dir} · {len(rows)} rank(s){f' of {world}' if world else ''} · step {step} · "
            f"{_clock()}" + (f" (last step ended {time.time() - last_end:.1f} s ago)" if last_end else ""))
    lines = [head]
    if slow:
        s = slow[0]
        lasted = f", {last_end - s.since_wall:.1f} s" if last_end and s.since_wall else ""
        lines.append(f"straggler: rank {s.rank}, slow since step {s.since_step} ({s.last_step - s.since_step + 1} "
                     f"steps{lasted}): own time {s.excess_ms:+.1f} ms per step over the other ranks' median")
        lines += [f"  also slow: {o.describe()}" for o in slow[1:]]
    elif len(rows) > 1:
        lines.append("straggler: none (no rank's own time stands out from the others')")
    if rows and all(r.own_ms is None for r in rows):
        lines.append("collectives: none timed (collectives issued only from C++ are not seen): own time = step time")
    table = [("rank", "step", "last ms", "median ms", "own ms", "coll ms", "wait caused ms/step", "last in",
              "trend %", "data ms", "cpu %", "cpu wait ms", "rss MB", "host cpu %", "host mem %")]
    for r in rows:
        table.append((str(r.rank), str(r.last_step), _num(r.last_ms), _num(r.median_ms), _num(r.own_ms), _num(r.coll_ms),
                      _num(r.wait_caused_ms), str(r.last_count), _num(r.trend_pct, 0, signed=True), _num(r.data_ms),
                      _num(r.cpu_pct, 0), _num(r.cpu_wait_ms), _num(r.rss_mb, 0), _num(r.host_cpu_pct, 0), _num(r.host_mem_pct, 0)))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in table]
    steps = frame.get_column("step").n_unique() if frame.height else 0
    lines.append(f"(medians over each rank's newest {steps} steps; trend: the last 10 steps against the ones before; "
                 "own = step − collectives; wait caused: what the others waited for it at its step's last collective; "
                 "cpu wait: its training thread ready to run, waiting for a CPU)")
    return "\n".join(lines)


@click.command("top")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and tests).")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between frames.")
@click.option("--log", "log_file", type=click.Path(dir_okay=False), default=None,
              help="Also append the log lines (a rank became slow, or recovered) to this file.")
def top(run_dir: str, once: bool, interval: float, log_file: str | None) -> int:
    """Show a running job's steps per rank, live: step time, own time, wait caused, the straggler, the trend.

    Reads RUN_DIR/measures/ (written by every rank under `ddprof launch` and `ddprof.profile`), while the job
    runs or after, from any machine that sees the run dir. Ctrl+C to stop.
    """
    from ddprof.store.step_measures import measure_files, measures_dir

    path = Path(run_dir)

    def say(line: str) -> None:
        click.echo(line, err=True)
        if log_file:
            with open(log_file, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    watch = Watch(path, say)
    deadline = time.monotonic() + (0 if once else 30.0)
    while not measure_files(path):
        if time.monotonic() >= deadline:
            raise BadInputError(f"no step measures in {measures_dir(path)}: run the job under `ddprof launch` or "
                                "`ddprof.profile` (step measures are on unless --no-step-measures)")
        time.sleep(min(interval, 1.0))
    tty = sys.stdout.isatty()
    try:
        while True:
            frame, slow = watch.poll()
            text = render(path, frame, slow, watch.tail.headers)
            if tty and not once:
                click.echo("\x1b[H\x1b[2J" + text)
            else:
                click.echo(text + ("" if once else "\n"))
            if once:
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
