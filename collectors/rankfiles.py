"""What one rank writes under ``raw/rank-NNNNN/``: its meta file, its traces, its Flight Recorder dumps.

Every file is written atomically. Every failure is logged with its reason, recorded in the meta file and
in :attr:`RankFiles.failures`, and swallowed: capture never breaks training.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import logging
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from ddprof.collectors import flight_recorder, layout
from ddprof.collectors.meta import base_meta, clocks, process_groups, write_meta
from ddprof.collectors.rankinfo import RankInfo

from ddprof.store.atomic import output_error, write_atomic

log = logging.getLogger("ddprof.collectors")


def initialised_dist() -> Any:
    """torch.distributed when it is initialised, else None (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


class RankFiles:
    def __init__(self, run_dir: Path, info: RankInfo):
        self.run_dir, self.info = run_dir, info
        self.failures: list[dict[str, str]] = []
        self.meta: dict[str, Any] = {}
        self.writable = False
        self.closed = False  # the final meta file was written
        self._lock = threading.Lock()  # the Flight Recorder watcher thread writes too
        self._cycle = 0

    def open(self, enabled: dict[str, Any]) -> bool:
        """Create the rank dir and write the meta file (status "running"); False when that fails."""
        try:
            self.meta = base_meta(self.info, enabled)
            layout.rank_raw_dir(self.run_dir, self.info.rank).mkdir(parents=True, exist_ok=True)
            self.writable = write_meta(layout.meta_path(self.run_dir, self.info.rank), self.meta)
        except Exception as exc:
            self.fail("setup", exc)
        return self.writable

    def write_trace(self, prof: Any, label: str | None = None) -> Path | None:
        """``on_trace_ready`` of torch.profiler: the cycle's trace (or the window ``label`` names),
        gzip-compressed; the path written, None when that failed."""
        target = layout.trace_path(self.run_dir, self.info.rank, self._cycle, label)
        tmp = target.with_name(f".{target.name}.export.tmp")  # not a *.json: ingest never picks it up
        if label is None:
            self._cycle += 1
        try:
            prof.export_chrome_trace(str(tmp))
            if not tmp.exists():  # the profiler logs its own write errors (a full disk) and returns
                full = shutil.disk_usage(tmp.parent).free < 1 << 20
                raise output_error(target, OSError(errno.ENOSPC if full else errno.EIO,
                                                   "the profiler wrote no trace (its own error is on stderr)"))

            def compress(dest: Path) -> None:
                with open(tmp, "rb") as src, gzip.open(dest, "wb", compresslevel=6) as out:
                    shutil.copyfileobj(src, out, 1 << 20)

            write_atomic(target, compress)
            self._record("traces", target.name)
            return target
        except Exception as exc:
            self.fail("export", exc)
            return None
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".tmp")):  # the profiler writes through PATH.tmp
                with contextlib.suppress(OSError):
                    leftover.unlink(missing_ok=True)

    def dump_flight_recorder(self, reason: str) -> None:
        dist = initialised_dist()
        try:
            path = flight_recorder.dump(self.run_dir, self.info.rank, str(dist.get_backend()) if dist else None)
            log.info("ddprof: rank %d dumped the Flight Recorder (%s) to %s", self.info.rank, reason, path)
            self._record("flight_recorder", {"file": path.name, "reason": reason, "bytes": path.stat().st_size,
                                             **clocks()})
        except Exception as exc:
            self.fail(f"flight_recorder dump ({reason})", exc)

    def close(self, exc: BaseException | None) -> RankInfo:
        """Final meta file: end clocks, status, and torch.distributed's view (backend, world size, groups)."""
        dist = initialised_dist()
        with self._lock:
            if dist is not None:
                try:
                    if dist.get_rank() != self.info.rank:
                        self.meta["warnings"].append(
                            f"torch.distributed says rank {dist.get_rank()}, the environment said "
                            f"{self.info.rank} at entry; files are under rank {self.info.rank}")
                    backend, world = str(dist.get_backend()), dist.get_world_size()
                    self.meta.update(backend=backend, world_size=world, process_groups=process_groups())
                    self.info = RankInfo(self.info.rank, self.info.local_rank, world, self.info.source, backend)
                except Exception as err:
                    self.meta["failures"].append({"stage": "exit", "error": f"{type(err).__name__}: {err}"})
            self.meta["end"] = clocks()
            self.meta["status"] = "complete" if exc is None else "failed"
            if exc is not None:
                self.meta["error"] = f"training raised {type(exc).__name__}: {exc}"
        self.closed = self._write()
        return self.info

    def warn(self, message: str) -> None:
        log.warning("ddprof: %s", message)
        with self._lock:
            self.meta.setdefault("warnings", []).append(message)

    def fail(self, stage: str, exc: BaseException) -> None:
        log.error("ddprof: rank %s: %s failed: %s: %s (training continues)", self.info.rank, stage,
                  type(exc).__name__, exc)
        record = {"stage": stage, "error": f"{type(exc).__name__}: {exc}"}
        self.failures.append(record)
        if self.meta:
            self._record("failures", record)

    def _record(self, key: str, item: Any) -> None:
        with self._lock:
            self.meta[key].append(item)
        self._write()

    def _write(self) -> bool:
        if not self.writable:
            return False
        with self._lock:
            snapshot = json.loads(json.dumps(self.meta, default=str))
        return write_meta(layout.meta_path(self.run_dir, self.info.rank), snapshot)
