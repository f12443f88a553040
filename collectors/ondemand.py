"""Record a window of steps on request while the job runs: the ranks' side of ``ddprof trigger``.

The request. ``ddprof trigger RUN --steps N`` creates ``RUN/.ddprof/triggers/trigger-NNN.json``
(``{"id", "steps", "wall", "signalled_all", "ranks"}``) and sends ``SIGUSR2`` to every process of the
capture on its host that listens (its status file says so). The signal handler only notes the step in
progress and sets a flag; a rank looks for new trigger files at its next step boundary, at once when it got
the signal, else when ``poll_s`` (0.5 s) has passed since it last looked, so ranks on other hosts that
share the run dir's filesystem see it too, a little later.

The start step, the same on every rank. The first rank to see trigger ``k``, at the boundary where it
begins step ``s``, proposes ``S = s`` (plus ``ceil(poll_s / step time)`` when some ranks were not
signalled and will only see the file when they poll), through the store of torch.distributed:
``compare_set("ddprof/trigger/k", "", S)`` is atomic, the first proposal wins and every rank reads the
same ``S``. No warm-up step: torch.profiler prepares and starts the trace at the boundary into ``S``.
There is no collective: the training's collectives are untouched.

When every rank was signalled, the start is also confirmed, because a rank may already have passed the
boundary into ``S`` when the trigger came (in a job whose ranks move in lockstep, a rank is at most one
step ahead of another, between the last collective of a step and the next step's first). Such a rank
learns ``S`` at the boundary into ``S + 1``; it raises the start to that step (``compare_set`` again, the
start only ever grows). Every rank adds one to ``ddprof/trigger/k/acks`` once it knows its start; the last
sets ``ddprof/trigger/k/done``. At the boundary after the first step of its window a rank waits for
``done`` (every rank learnt the start by then: a rank one step ahead reaches its next boundary without
waiting for the others; waiting is bounded by ``confirm_s``, 10 s) and reads the final start; a rank that
began recording at ``S`` for this window alone drops that step (the profiler restarts) and records from the
new start. That is three store round trips per trigger and rank.

The bound. Trigger during step ``p``: the window starts at step ``p + 1`` — the first step that begins
after the trigger — when the ranks were all in step ``p``. When a rank was one step ahead (already in step
``p + 1``) the window starts at ``p + 2``, the step after the one the job's furthest rank was in: a step
that already began on some rank cannot be recorded from its start there, and every rank records the same
steps. Triggered during step 11 with ``--steps 3``, the window is steps 12-14, in the trace file
``rank-00000.trigger-001.pt.trace.json.gz``. A single process without a process group takes ``S = s``
itself. Ranks found by polling learn late; a rank that learns ``S`` after it began records what remains of
the window and its status says ``late_by``.

The window. Steps ``S .. S+N-1`` are recorded and written as
``raw/rank-R/rank-R.trigger-NNN.pt.trace.json.gz``, one file per trigger, beside the scheduled cycles'
``rank-R.cycle-NNN`` files. Triggers whose windows overlap are recorded as one and written under the last
one's name.
"""

from __future__ import annotations

import datetime
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
    confirmed: bool = True  # False while the start may still move (module doc)

    @property
    def label(self) -> str:
        return f"trigger-{self.id:03d}"


@dataclass
class Moved:
    """A window whose start moved at this boundary (module doc): it had begun at ``old_start``."""

    window: Window
    old_start: int


class OnDemand:
    """The listener of one process: call :meth:`boundary` at every step boundary, before the profiler's step."""

    def __init__(self, run_dir: Path, status: ProcessStatus, *, poll_s: float = 0.5, confirm_s: float = 10.0,
                 step: int = 0):
        self.run_dir = run_dir
        self.status = status
        self.poll_s = poll_s
        self.confirm_s = confirm_s
        self.windows: list[Window] = []
        self.step_in_progress = step
        self._seen: set[int] = set()
        self._flag = False
        self._signalled_in: int | None = None
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
                self.signalled()

            signal.signal(TRIGGER_SIGNAL, handler)
            self._handler = handler
            return True
        except (ValueError, OSError) as exc:  # not the main thread
            log.info("ddprof: no %s listener (%s); on-demand capture polls the trigger files", TRIGGER_SIGNAL.name,
                     exc)
            return False

    def signalled(self) -> None:
        """What the signal handler does: note the step in progress, look at the next boundary."""
        if not self._flag:
            self._signalled_in = self.step_in_progress
        self._flag = True

    def listening(self) -> bool:
        """True while our handler is still the one installed (the trigger command signals only then)."""
        return self._handler is not None and signal.getsignal(TRIGGER_SIGNAL) is self._handler

    # -- at a step boundary ----------------------------------------------------------------------------------
    def boundary(self, next_step: int) -> list[Moved]:
        """The job is about to begin ``next_step``: pick up new triggers (cheap when there are none), confirm
        the start of windows that began; return the windows whose start moved (module doc)."""
        self.step_in_progress = next_step  # before the flag is read: a signal from now on is seen here or next
        now = time.monotonic()
        if self._last_boundary is not None:
            self._step_s = now - self._last_boundary
        self._last_boundary = now
        moved = self._confirm(next_step) if self.windows else []
        if not self._flag and now - self._last_poll < self.poll_s:
            return moved
        signalled_in, self._flag, self._signalled_in = self._signalled_in if self._flag else None, False, None
        self._last_poll = now
        listening = self.listening()
        if listening != self.status.data.get("listening"):
            self.status.update(listening=listening, force=True)
        try:
            names = sorted(p.name for p in trigger_dir(self.run_dir).glob("trigger-*.json"))
        except OSError:
            return moved
        for name in names:
            try:
                trigger_id = int(name[len("trigger-"):-len(".json")])
            except ValueError:
                continue
            if trigger_id in self._seen:
                continue
            self._seen.add(trigger_id)
            self._accept(trigger_id, next_step, signalled_in)
        return moved

    def _accept(self, trigger_id: int, next_step: int, signalled_in: int | None) -> None:
        confirm = False
        try:
            request = json.loads(trigger_path(self.run_dir, trigger_id).read_text(encoding="utf-8"))
            steps = int(request["steps"])
            margin = 0
            if not request.get("signalled_all", False) and self._step_s:
                margin += math.ceil(self.poll_s / max(self._step_s, 1e-6))
            store = self._store()
            expected = len(request.get("ranks") or [])
            confirm = bool(request.get("signalled_all", False)) and store is not None and expected > 1
            start = self._agree(store, trigger_id, next_step + margin)
            if confirm:
                if start < next_step:  # this rank had passed the boundary into the start: the start moves here
                    start = self._raise(store, trigger_id, next_step)
                if int(store.add(self._key(trigger_id, "acks"), 1)) >= expected:
                    store.set(self._key(trigger_id, "done"), "1")
        except Exception as exc:
            log.error("ddprof: trigger %d in %s ignored: %s: %s", trigger_id, self.run_dir, type(exc).__name__, exc)
            self.status.append("errors", f"trigger {trigger_id}: {type(exc).__name__}: {exc}")
            return
        first = max(start, next_step)
        window = Window(trigger_id, first, start + steps - 1, start, confirmed=not confirm)
        entry: dict[str, Any] = {"id": trigger_id, "requested_start": start, "start_step": first, "end_step": window.end,
                 "seen_at_step": next_step, "signalled_in_step": signalled_in, "seen_wall": time.time(),
                 "late_by": first - start, "confirmed": window.confirmed, "began_wall": None, "written": None}
        if window.end < first:
            entry["why"] = f"this rank learnt of the window at step {next_step}, after it ended"
            log.warning("ddprof: trigger %d: window %d-%d already over at step %d", trigger_id, start, window.end,
                        next_step)
        else:
            self.windows.append(window)
            window.extra = entry
        self.status.append("windows", entry)
        log.info("ddprof: trigger %d: recording steps %d-%d", trigger_id, first, window.end)

    @staticmethod
    def _key(trigger_id: int, what: str = "") -> str:
        return f"{STORE_PREFIX}{trigger_id}" + (f"/{what}" if what else "")

    def _store(self) -> Any:
        """The store of the default process group; None for a single process or no process group."""
        dist = initialised_dist()
        if dist is None or dist.get_world_size() == 1:
            return None
        return dist.distributed_c10d._get_default_store()

    def _agree(self, store: Any, trigger_id: int, proposal: int) -> int:
        """The start step every rank uses: the first proposal stored (module doc)."""
        if store is None:
            return proposal
        got = store.compare_set(self._key(trigger_id), "", str(proposal))
        return int(got.decode() if isinstance(got, bytes) else got)

    def _raise(self, store: Any, trigger_id: int, want: int) -> int:
        """Raise the stored start to at least ``want``; the start it holds then."""
        current = int(store.get(self._key(trigger_id)))
        while current < want:
            got = store.compare_set(self._key(trigger_id), str(current), str(want))
            current = int(got.decode() if isinstance(got, bytes) else got)
        return current

    def _confirm(self, next_step: int) -> list[Moved]:
        """At the boundary after a window's first step: wait until every rank knows the start, read it."""
        moved, confirmed = [], False
        for w in self.windows:
            if w.confirmed or next_step <= w.start:
                continue
            w.confirmed = confirmed = True
            w.extra["confirmed"] = True
            try:
                store = self._store()
                if store is None:
                    continue
                try:
                    store.wait([self._key(w.id, "done")], datetime.timedelta(seconds=self.confirm_s))
                except Exception as exc:  # a rank that never answered: keep the start as it is
                    w.extra["confirmed"] = False
                    log.warning("ddprof: trigger %d: not every rank confirmed the start within %g s (%s)", w.id,
                                self.confirm_s, exc)
                final = int(store.get(self._key(w.id)))
            except Exception as exc:
                log.error("ddprof: trigger %d: start not confirmed: %s: %s", w.id, type(exc).__name__, exc)
                self.status.append("errors", f"trigger {w.id}: {type(exc).__name__}: {exc}")
                continue
            if final > w.start:
                moved.append(Moved(w, w.start))
                w.end += final - w.requested_start
                w.start = w.requested_start = final
                w.began_wall = None
                w.extra.update(start_step=final, requested_start=final, end_step=w.end, began_wall=None,
                               moved_from=moved[-1].old_start)
                log.info("ddprof: trigger %d: a rank was a step ahead; recording steps %d-%d", w.id, w.start, w.end)
        if confirmed:
            self.status.write(force=True)
        return moved

    # -- what the profiler does at a step -----------------------------------------------------------------
    def covering(self, step: int) -> Window | None:
        return next((w for w in self.windows if w.start <= step <= w.end), None)

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
