"""Record a window of steps on request while the job runs: the ranks' side of ``ddprof trigger``.

The request. ``ddprof trigger RUN --steps N`` creates ``RUN/.ddprof/triggers/trigger-NNN.json``
(``{"id", "steps", "wall", "signalled_all"}``) and sends ``SIGUSR2`` to every process of the capture on its
host that listens (its status file says so). A rank looks for new trigger files at a step boundary: at
once when it got the signal, else when ``poll_s`` (0.5 s) has passed since it last looked, so ranks on
other hosts that share the run dir's filesystem see it too, a little later. The signal handler only sets a
flag; nothing happens outside a step boundary.

The start step, the same on every rank. The first rank to see trigger ``k``, at the boundary where it
begins step ``s``, proposes ``S = s + 1`` (plus ``ceil(poll_s / step time)`` when some ranks were not
signalled and will only see the file when they poll), through the store of torch.distributed:
``compare_set("ddprof/trigger/k", "", S)`` is atomic, the first proposal wins and every rank reads the
same ``S``. That is one store round trip per trigger and rank, and no collective: the training's
collectives are untouched. A single process without a process group takes ``S = s + 1`` itself.
``S`` must lie after the step any rank is in when it learns it: in a job whose ranks move in lockstep
(DDP, tensor parallel: a collective every step) a rank is at most one step ahead of another, so
``s + 1`` is safe. A rank that still learns ``S`` late records what remains of the window and its status
says ``late_by``.

The bound. Trigger during step ``p``: the first rank to see it is at the boundary into ``p + 1`` at the
latest, so the window starts at step ``p + 2`` at most (step ``p + 1`` is its warm-up) — with the
example below, triggered during step 11, the window is steps 13-15 and is in the trace file
``rank-00000.trigger-001.pt.trace.json.gz``.

The window. Steps ``S .. S+N-1`` are recorded, ``S-1`` is the warm-up when the rank knew in time; the
trace is written as ``raw/rank-R/rank-R.trigger-NNN.pt.trace.json.gz``, one file per trigger, beside the
scheduled cycles' ``rank-R.cycle-NNN`` files. Triggers whose windows overlap are recorded as one and
written under the last one's name.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprof.collectors.rankfiles import initialised_dist
from ddprof.collectors.status import ProcessStatus

log = logging.getLogger("ddprof.collectors")

TRIGGER_DIR = Path(".ddprof") / "triggers"
TRIGGER_SIGNAL = signal.SIGUSR2
STORE_PREFIX = "ddprof/trigger/"


def trigger_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / TRIGGER_DIR


def trigger_path(run_dir: str | Path, trigger_id: int) -> Path:
    return trigger_dir(run_dir) / f"trigger-{trigger_id:03d}.json"


@dataclass
class Window:
    id: int
    start: int  # first recorded step
    end: int  # last recorded step (inclusive)
    requested_start: int
    began_wall: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"trigger-{self.id:03d}"


class OnDemand:
    """The listener of one process: call :meth:`boundary` at every step boundary, before the profiler's step."""

    def __init__(self, run_dir: Path, status: ProcessStatus, *, poll_s: float = 0.5):
        self.run_dir = run_dir
        self.status = status
        self.poll_s = poll_s
        self.windows: list[Window] = []
        self._seen: set[int] = set()
        self._flag = False
        self._last_poll = float("-inf")  # the first boundary looks: a trigger may be waiting already
        self._last_boundary: float | None = None
        self._step_s: float | None = None
        self._handler: Any = None

    # -- the signal ----------------------------------------------------------------------------------------
    def install_signal(self) -> bool:
        """Listen for ``SIGUSR2`` (main thread only, and only when nobody else handles it)."""
        try:
            if signal.getsignal(TRIGGER_SIGNAL) not in (signal.SIG_DFL, None):
                log.warning("ddprof: %s already has a handler; on-demand capture polls %s instead",
                            TRIGGER_SIGNAL.name, trigger_dir(self.run_dir))
                return False

            def handler(signum: int, frame: Any) -> None:
                self._flag = True

            signal.signal(TRIGGER_SIGNAL, handler)
            self._handler = handler
            return True
        except (ValueError, OSError) as exc:  # not the main thread
            log.info("ddprof: no %s listener (%s); on-demand capture polls the trigger files", TRIGGER_SIGNAL.name,
                     exc)
            return False

    def listening(self) -> bool:
        """True while our handler is still the one installed (the trigger command signals only then)."""
        return self._handler is not None and signal.getsignal(TRIGGER_SIGNAL) is self._handler

    # -- at a step boundary ----------------------------------------------------------------------------------
    def boundary(self, next_step: int) -> None:
        """The job is about to begin ``next_step``: pick up new triggers (cheap when there are none)."""
        now = time.monotonic()
        if self._last_boundary is not None:
            self._step_s = now - self._last_boundary
        self._last_boundary = now
        if not self._flag and now - self._last_poll < self.poll_s:
            return
        self._flag = False
        self._last_poll = now
        listening = self.listening()
        if listening != self.status.data.get("listening"):
            self.status.update(listening=listening, force=True)
        try:
            names = sorted(p.name for p in trigger_dir(self.run_dir).glob("trigger-*.json"))
        except OSError:
            return
        for name in names:
            try:
                trigger_id = int(name[len("trigger-"):-len(".json")])
            except ValueError:
                continue
            if trigger_id in self._seen:
                continue
            self._seen.add(trigger_id)
            self._accept(trigger_id, next_step)

    def _accept(self, trigger_id: int, next_step: int) -> None:
        try:
            request = json.loads(trigger_path(self.run_dir, trigger_id).read_text(encoding="utf-8"))
            steps = int(request["steps"])
            margin = 1
            if not request.get("signalled_all", False) and self._step_s:
                margin += math.ceil(self.poll_s / max(self._step_s, 1e-6))
            start = self._agree(trigger_id, next_step + margin)
        except Exception as exc:
            log.error("ddprof: trigger %d in %s ignored: %s: %s", trigger_id, self.run_dir, type(exc).__name__, exc)
            self.status.append("errors", f"trigger {trigger_id}: {type(exc).__name__}: {exc}")
            return
        first = max(start, next_step)
        window = Window(trigger_id, first, start + steps - 1, start)
        entry: dict[str, Any] = {"id": trigger_id, "requested_start": start, "start_step": first, "end_step": window.end,
                 "seen_at_step": next_step, "seen_wall": time.time(), "late_by": first - start,
                 "began_wall": None, "written": None}
        if window.end < first:
            entry["why"] = f"this rank learnt of the window at step {next_step}, after it ended"
            log.warning("ddprof: trigger %d: window %d-%d already over at step %d", trigger_id, start, window.end,
                        next_step)
        else:
            self.windows.append(window)
            window.extra = entry
        self.status.append("windows", entry)
        log.info("ddprof: trigger %d: recording steps %d-%d", trigger_id, first, window.end)

    def _agree(self, trigger_id: int, proposal: int) -> int:
        """The start step every rank uses: the first proposal stored (module doc)."""
        dist = initialised_dist()
        if dist is None or dist.get_world_size() == 1:
            return proposal
        store = dist.distributed_c10d._get_default_store()
        got = store.compare_set(f"{STORE_PREFIX}{trigger_id}", "", str(proposal))
        return int(got.decode() if isinstance(got, bytes) else got)

    # -- what the profiler does at a step -----------------------------------------------------------------
    def covering(self, step: int) -> Window | None:
        return next((w for w in self.windows if w.start <= step <= w.end), None)

    def starts_at(self, step: int) -> bool:
        return any(w.start == step for w in self.windows)

    def began(self, step: int) -> None:
        """Step ``step`` begins being recorded: note the wall time of each window starting there."""
        for w in self.windows:
            if w.start == step and w.began_wall is None:
                w.began_wall = time.time()
                w.extra["began_wall"] = w.began_wall
                self.status.write(force=True)

    def written(self, step: int, file_name: str) -> None:
        """A window ending at or before ``step`` was written to ``file_name``."""
        for w in list(self.windows):
            if w.end <= step:
                w.extra["written"] = file_name
                self.windows.remove(w)
        self.status.write(force=True)
