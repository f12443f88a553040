"""``ddprof trigger RUN --steps N``: ask a running capture to record the next N steps on every rank.

The requester's side of :mod:`ddprof.collectors.ondemand` (the protocol is described there): write the
trigger file, send ``SIGUSR2`` to each capturing process of this host that listens, then wait (at most
``wait_s``) until every capturing rank has begun the window and confirmed its start, and report the
steps, the ranks and the latency from the trigger to the first recorded step::

    trigger 1: ranks 0-1 record steps 64-65 (trace rank-R.trigger-001); the trigger came during step 63;
    the first recorded step, 64, began 31.6 ms after it (bound: the step after the one in progress)

A capturing process is one whose status file names its rank and records no exit; one on another host
counts while its status was updated in the last ``stale_s`` (60 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprof.collectors.ondemand import TRIGGER_SIGNAL, trigger_dir, trigger_path

from ddprof.errors import UsageError
from ddprof.store.capture_status import read_statuses
from ddprof.vocabulary.units import fmt_us


@dataclass
class TriggerResult:
    id: int
    steps: int
    wall: float
    ranks: list[int]
    signalled: list[int]
    windows: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its window entry
    missing: list[int] = field(default_factory=list)  # capturing ranks that did not begin the window in time

    @property
    def aligned(self) -> bool:
        starts = {w.get("start_step") for w in self.windows.values()}
        return not self.missing and len(starts) == 1 and all(not w.get("late_by") for w in self.windows.values())

    def latency_s(self) -> float | None:
        began = [w["began_wall"] for w in self.windows.values() if w.get("began_wall")]
        return max(began) - self.wall if began else None

    def step_in_progress(self) -> int | None:
        """The step the job was in when the trigger came: the furthest signalled rank's (None: none signalled)."""
        steps = [w["signalled_in_step"] for w in self.windows.values() if w.get("signalled_in_step") is not None]
        return max(steps) if steps else None

    @property
    def within_bound(self) -> bool | None:
        """Whether the window starts at most one step after the step in progress (None: nobody signalled)."""
        p = self.step_in_progress()
        if p is None or not self.windows:
            return None
        return max(w["start_step"] for w in self.windows.values()) <= p + 1

    def describe(self) -> str:
        if not self.windows:
            return (f"trigger {self.id}: no rank began the window yet (ranks {self.ranks}); it is recorded when "
                    "they next reach a step boundary")
        w0 = next(iter(self.windows.values()))
        ranks = sorted(self.windows)
        span = f"{ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else str(ranks)
        text = (f"trigger {self.id}: ranks {span} record steps {w0['start_step']}-{w0['end_step']} "
                f"(trace rank-R.trigger-{self.id:03d})")
        progress = self.step_in_progress()
        if progress is not None:
            text += f"; the trigger came during step {progress}"
        else:
            text += (f"; the ranks found the trigger by polling, at the start of step "
                     f"{min(w['seen_at_step'] for w in self.windows.values())}")
        latency = self.latency_s()
        if latency is not None:
            text += f"; the first recorded step, {w0['start_step']}, began {fmt_us(latency * 1e6)} after it"
            if progress is not None:
                text += (" (bound: the step after the one in progress)" if self.within_bound else
                         f" ({w0['start_step'] - progress} steps after the step in progress: over the bound)")
        late = {r: w["late_by"] for r, w in self.windows.items() if w.get("late_by")}
        if late:
            text += f"; late ranks (steps missed at the start): {late}"
        if self.missing:
            text += f"; ranks {self.missing} did not answer"
        return text


def capturing(run_dir: Path, stale_s: float = 60.0) -> list[dict[str, Any]]:
    """The status of every process of ``run_dir`` that captures now (module doc)."""
    host, now, out = socket.gethostname(), time.time(), []
    for status in read_statuses(run_dir):
        if status.get("rank") is None or status.get("exit") is not None:
            continue
        if status.get("host") == host:
            try:
                os.kill(int(status["pid"]), 0)
            except (ProcessLookupError, ValueError, KeyError):
                continue
            except PermissionError:
                pass
        elif now - float(status.get("updated_wall") or 0) > stale_s:
            continue
        out.append(status)
    return out


def _claim_id(run_dir: Path, body: dict[str, Any]) -> int:
    """Create the next ``trigger-NNN.json`` whole and exclusively (written aside, then hard-linked)."""
    folder = trigger_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".pending-{socket.gethostname()}-{os.getpid()}"
    existing = [int(p.name[8:11]) for p in folder.glob("trigger-[0-9][0-9][0-9].json")]
    trigger_id = max(existing, default=0) + 1
    try:
        while True:
            tmp.write_text(json.dumps({**body, "id": trigger_id}), encoding="utf-8")
            try:
                os.link(tmp, trigger_path(run_dir, trigger_id))
                return trigger_id
            except FileExistsError:
                trigger_id += 1
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def trigger(run_dir: str | Path, steps: int = 3, *, send_signal: bool = True, wait_s: float = 60.0,
            poll_s: float = 0.1) -> TriggerResult:
    """Ask for a window of ``steps`` steps (module doc); raises UsageError when nothing captures there."""
    run_dir = Path(run_dir).absolute()
    if steps < 1:
        raise UsageError(f"--steps {steps}: expected at least 1")
    live = capturing(run_dir)
    if not live:
        seen = read_statuses(run_dir)
        why = (f"{len(seen)} process(es) reported, none captures now (ended, or no step counted yet)" if seen
               else "no process of a ddprof launch or ddprof.profile(on_demand=True) reported there")
        raise UsageError(f"{run_dir}: nothing to trigger: {why}")
    host = socket.gethostname()
    to_signal = [s for s in live if send_signal and s.get("host") == host and s.get("listening")]
    wall = time.time()
    ranks = sorted({int(s["rank"]) for s in live})
    body = {"steps": steps, "wall": wall, "signalled_all": len(to_signal) == len(live), "ranks": ranks,
            "by": f"{host}:{os.getpid()}"}
    trigger_id = _claim_id(run_dir, body)
    signalled = []
    for status in to_signal:
        try:
            os.kill(int(status["pid"]), TRIGGER_SIGNAL)
            signalled.append(int(status["rank"]))
        except OSError:
            pass
    result = TriggerResult(trigger_id, steps, wall, ranks, sorted(signalled))
    deadline = time.monotonic() + wait_s
    while True:
        result.windows = _begun(run_dir, trigger_id)
        if all(r in result.windows for r in ranks) or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    result.missing = [r for r in ranks if r not in result.windows]
    return result


def _begun(run_dir: Path, trigger_id: int) -> dict[int, dict[str, Any]]:
    out = {}
    for status in read_statuses(run_dir):
        for window in status.get("windows") or []:
            if window.get("id") == trigger_id and ((window.get("began_wall") and window.get("confirmed", True))
                                                   or window.get("why")):
                out[int(status["rank"])] = window
    return out
