"""Rank 0's last act: wait (bounded) for every rank's files, then ingest ``raw/`` into the run dir.

A rank that never finalised its meta file (it died, or is still running at the deadline) is recorded in
the manifest's ``collector`` section and left to the ingest to take or leave; it never stops the others.
Run later by hand with ``ddprof finish RUN_DIR`` (:mod:`ddprof.cli.finish_cmd`, the command rank 0 starts)
or ``ddprof ingest RUN_DIR/raw -o RUN_DIR`` (which leaves out the collector section).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ddprof.collectors import layout

from ddprof.store.rundir import Run

log = logging.getLogger("ddprof.collectors")

_background: list[subprocess.Popen] = []  # keep a reference: the child outlives nothing it needs from us


def read_meta(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _world_size(run_dir: Path) -> int:
    """From rank 0's meta file, else the rank dirs present."""
    meta = read_meta(layout.meta_path(run_dir, 0)) or {}
    if meta.get("world_size"):
        return int(meta["world_size"])
    return len(list(layout.raw_dir(run_dir).glob("rank-*/rank-*.meta.json")))


def wait_for_ranks(run_dir: Path, world_size: int, timeout_s: float,
                   poll_s: float = 0.2) -> tuple[dict[int, dict[str, Any] | None], float]:
    """Poll every rank's meta file until none says "running" or ``timeout_s`` passes."""
    start = time.monotonic()
    while True:
        metas = {r: read_meta(layout.meta_path(run_dir, r)) for r in range(world_size)}
        waited = time.monotonic() - start
        if all(m is not None and m.get("status") != "running" for m in metas.values()) or waited >= timeout_s:
            return metas, round(waited, 3)
        time.sleep(poll_s)


def summarize(metas: dict[int, dict[str, Any] | None], waited_s: float, timeout_s: float) -> dict[str, Any]:
    """The manifest's ``collector`` section."""
    from ddprof.version import __version__

    by_status: dict[str, list[int]] = {"complete": [], "failed": [], "incomplete": [], "missing": []}
    per_rank: dict[str, Any] = {}
    warnings: list[str] = []
    for rank, meta in sorted(metas.items()):
        if meta is None:
            by_status["missing"].append(rank)
            warnings.append(f"rank {rank}: no meta file ({layout.meta_path('', rank)}); "
                            "the rank never started capturing or its directory is gone")
            continue
        status = {"running": "incomplete"}.get(meta.get("status", ""), meta.get("status", "incomplete"))
        by_status.setdefault(status, []).append(rank)
        if status == "incomplete":
            warnings.append(f"rank {rank}: capture not finalised after {waited_s:g} s (rank died or still "
                            "running); whatever trace it wrote is used")
        warnings += [f"rank {rank}: {f['stage']} failed: {f['error']}" for f in meta.get("failures", [])]
        per_rank[str(rank)] = {k: meta.get(k) for k in ("status", "error", "host", "local_rank", "rank_source",
                                                        "start", "end", "traces", "flight_recorder", "failures",
                                                        "warnings", "job")}
    first = next((m for m in metas.values() if m), {})
    for key in ("world_size", "job"):
        values = {json.dumps(m.get(key), sort_keys=True) for m in metas.values() if m}
        if len(values) > 1:
            warnings.append(f"ranks disagree on {key}: {sorted(values)}; were two runs written here?")
    return {"name": "ddprof.collectors", "version": __version__, "world_size": len(metas),
            "backend": first.get("backend"), "process_groups": first.get("process_groups", []),
            "versions": first.get("versions", {}), "enabled": first.get("enabled", {}),
            **{f"ranks_{k}": v for k, v in by_status.items()},
            "waited_s": waited_s, "timeout_s": timeout_s, "warnings": warnings, "per_rank": per_rank}


def finish(run_dir: str | Path, *, world_size: int | None = None, timeout_s: float = 120.0) -> Run | None:
    """Wait for the ranks, then ``ddprof.ingest``. Logs and returns None on failure (never raises)."""
    import ddprof

    run_dir = Path(run_dir)
    try:
        world_size = world_size or _world_size(run_dir)
        metas, waited = wait_for_ranks(run_dir, world_size, timeout_s)
        collector = summarize(metas, waited, timeout_s)
        for warning in collector["warnings"]:
            log.warning("ddprof: %s", warning)
        return ddprof.ingest([layout.raw_dir(run_dir)], run_dir, extra_manifest={"collector": collector})
    except Exception as exc:
        log.error("ddprof: ingest of %s failed: %s: %s; finish it later with `ddprof finish %s` "
                  "(or `ddprof ingest %s -o %s`, which leaves out the collector section)",
                  run_dir, type(exc).__name__, exc, run_dir, layout.raw_dir(run_dir), run_dir)
        return None


def start_background(run_dir: Path, *, world_size: int | None, timeout_s: float) -> subprocess.Popen:
    """Run :func:`finish` in a detached process (``ddprof finish RUN_DIR``); its log goes to
    ``run_dir/collector-ingest.log``."""
    from ddprof.collectors.autocapture import OFF_ENV

    cmd = [sys.executable, "-m", "ddprof", "finish", str(run_dir), "--timeout", str(timeout_s)]
    if world_size:
        cmd += ["--world-size", str(world_size)]
    env = {**os.environ, OFF_ENV: "1"}  # under ddprof launch: the ingest is no process of the job to capture
    with open(Path(run_dir) / "collector-ingest.log", "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, env=env)
    _background.append(proc)
    return proc

