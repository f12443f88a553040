"""A process's own account of its capture: ``RUN/.ddprof/status/HOST-PID.json``.

Written by every process of a job under ``ddprof launch`` and by ``ddprof.profile(on_demand=True)``: at
start, when capture starts, when a window begins or is written, at exit, and in between at most every
``min_interval_s`` (2 s) at a step boundary. ``ddprof trigger`` reads it (which processes run where,
their step, the windows they began) and ``ddprof analyze`` explains from it a run dir without a trace
(:mod:`ddprof.store.capture_status`). Writes are atomic (a temporary sibling named as :mod:`ddprof.store.atomic`
names its own, then a rename; written here with the standard library alone because every process of a
launched job loads this module at start-up); a write that fails is logged once and capture goes on.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ddprof.store.capture_status import STATUS_DIR

log = logging.getLogger("ddprof.collectors")


def status_path(run_dir: str | Path, host: str | None = None, pid: int | None = None) -> Path:
    host = host or socket.gethostname()
    return Path(run_dir) / STATUS_DIR / f"{host}-{os.getpid() if pid is None else pid}.json"


class ProcessStatus:
    """The status dict of this process and its throttled, atomic writer (thread-safe)."""

    def __init__(self, run_dir: Path, *, step_source: str, min_interval_s: float = 2.0):
        self.path = status_path(run_dir)
        self.min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._last_write = 0.0
        self._broken = False
        now = time.time()
        self.data: dict[str, Any] = {
            "pid": os.getpid(), "host": socket.gethostname(), "argv": list(getattr(sys, "orig_argv", sys.argv)),
            "rank": None, "world_size": None, "step_source": step_source, "started_wall": now,
            "updated_wall": now, "steps_seen": 0, "step": 0, "step_wall": None, "first_recorded_step": None,
            "recording": None, "windows": [], "traces": [], "errors": [], "exit": None,
        }

    def update(self, *, force: bool = False, **fields: Any) -> None:
        with self._lock:
            self.data.update(fields)
        self.write(force=force)

    def append(self, key: str, item: Any) -> None:
        with self._lock:
            self.data[key].append(item)
        self.write(force=True)

    def write(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if self._broken or (not force and now - self._last_write < self.min_interval_s):
            return
        self._last_write = now
        with self._lock:
            self.data["updated_wall"] = time.time()
            snapshot = {k: list(v) if isinstance(v, list) else v for k, v in self.data.items()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.tmp-{socket.gethostname()}-{os.getpid()}-status")
            tmp.write_text(json.dumps(snapshot, default=str), encoding="utf-8")
            os.replace(tmp, self.path)
        except Exception as exc:  # an unwritable run dir or a full disk: say so once, never stop training
            self._broken = True
            log.error("ddprof: cannot write the status file %s: %s (capture status is no longer recorded; "
                      "training continues)", self.path, exc)
