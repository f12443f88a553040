"""What a capture's processes said about themselves, for a run dir that holds no trace.

Every process of a job under ``ddprof launch`` (and every ``ddprof.profile(on_demand=True)``) keeps a
small status file, ``RUN/.ddprof/status/HOST-PID.json``, written by :mod:`ddprof.collectors.status`:
when it started, its rank, the steps it saw, what it was recording, how it ended. When
``ddprof analyze RUN`` finds no trace, :func:`explain_no_trace` turns those files into the reason, e.g.::

    no trace in runs/plain: 2 processes of the capture reported, none wrote a trace
      rank 0 (host vm, pid 4121): 0 steps seen (step source: optimizer.step); ended: exited normally: no
        step was counted (optimizer.step never ran); name the step function with ddprof launch --step-on ...
      rank 1 (host vm, pid 4122): 3 steps seen (step source: optimizer.step); was recording steps 2-4; no
        exit recorded: last update 12 s ago (killed, or still running): the process ended while recording,
        before the window was written

and for a job launched with ``--active 0`` that no ``ddprof trigger`` asked for a window::

    no trace file in runs/ondemand: 2 processes of the capture reported, none wrote a trace: they record on
    demand only (--active 0) and no trigger was sent
      rank 0 (host vm, pid 4130): 40 steps seen (step source: optimizer.step); ended: exited normally:
        --active 0 records only the windows ddprof trigger asks for, and no trigger was sent: ask with
        ddprof trigger runs/ondemand --steps N while the job runs

The reader lives in the core (it only reads JSON); the writer in the collectors.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

#: Status files of a capture, relative to the run dir (a hidden folder: trace discovery never enters it).
STATUS_DIR = Path(".ddprof") / "status"


def read_statuses(run_dir: Path) -> list[dict[str, Any]]:
    """Every readable status file of ``run_dir``, ordered by rank (unknown ranks last), then host and pid."""
    folder = Path(run_dir) / STATUS_DIR
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return sorted(out, key=lambda s: (s.get("rank") is None, s.get("rank") or 0, str(s.get("host")),
                                      int(s.get("pid") or 0)))


def _steps(window: dict[str, Any]) -> str:
    first, last = window.get("start_step"), window.get("end_step")
    return f"steps {first}-{last}" if first != last else f"step {first}"


def describe(status: dict[str, Any], now: float | None = None, run_dir: Path | None = None) -> str:
    """One process in one line: who, how many steps, what it recorded or was recording, how it ended (and,
    without a trace, why: named commands use ``run_dir``)."""
    now = time.time() if now is None else now
    who = f"rank {status['rank']}" if status.get("rank") is not None else "process"
    parts = []
    steps = int(status.get("steps_seen") or 0)
    parts.append(f"{steps} step{'s' * (steps != 1)} seen (step source: {status.get('step_source', '?')})")
    recording = status.get("recording")
    if recording:
        parts.append(f"was recording {_steps(recording)}")
    written = status.get("traces") or []
    if written:
        parts.append(f"wrote {len(written)} trace(s)")
    end = status.get("exit")
    if end:
        parts.append(f"ended: {end.get('how', '?')}")
    else:
        age = now - float(status.get("updated_wall") or now)
        parts.append(f"no exit recorded: last update {age:.0f} s ago (killed, or still running)")
    reason = status.get("why_no_trace") or _why(status, steps, bool(end), run_dir)
    return (f"{who} (host {status.get('host')}, pid {status.get('pid')}): " + "; ".join(parts)
            + (f": {reason}" if reason and not written else ""))


def _why(status: dict[str, Any], steps: int, ended: bool, run_dir: Path | None) -> str:
    if status.get("errors"):
        return "capture failed: " + "; ".join(str(e) for e in status["errors"][-3:])
    if steps == 0 and status.get("rank") is None:
        return ("no step was counted in this process, which named no rank: expected of a parent that only "
                "starts the ranks (mp.spawn); otherwise name the step function with ddprof launch --step-on")
    if steps == 0:
        return (f"no step was counted ({status.get('step_source', 'the step source')} never ran); "
                "name the step function with ddprof launch --step-on MODULE:FUNCTION (or the loader with "
                "--step-on-loader MODULE:NAME)")
    if status.get("recording") and not ended:  # the first recorded step had begun: the schedule was reached
        return "the process ended while recording, before the window was written"
    if status.get("active") == 0 and not status.get("windows"):  # on demand only, and never asked
        return ("--active 0 records only the windows ddprof trigger asks for, and no trigger was sent: "
                f"ask with ddprof trigger {run_dir or 'RUN'} --steps N while the job runs")
    first = status.get("first_recorded_step")
    if first is not None and steps <= int(first):
        return f"the job ended before step {first}, the first the schedule records; lower --wait/--warmup"
    return ""


def never_asked(statuses: list[dict[str, Any]]) -> bool:
    """Whether every rank of the capture records only on demand (``--active 0``) and none was asked for a
    window (no ``ddprof trigger`` reached it)."""
    ranked = [s for s in statuses if s.get("rank") is not None]
    return bool(ranked) and all(s.get("active") == 0 and not s.get("windows") for s in ranked)


def explain_no_trace(run_dir: Path) -> str | None:
    """Why ``run_dir`` holds no trace, from its processes' status files; None when it has none."""
    statuses = read_statuses(run_dir)
    if not statuses:
        return None
    now = time.time()
    lines = [f"no trace file in {run_dir}: {len(statuses)} process(es) of the capture reported, none wrote "
             "a trace" + (": they record on demand only (--active 0) and no trigger was sent"
                          if never_asked(statuses) else "")]
    lines += [f"  {describe(s, now, run_dir)}" for s in statuses]
    return "\n".join(lines)
