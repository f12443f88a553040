"""The per-rank meta file: what ran where, with which versions, what was captured and what failed."""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from ddprof.collectors.rankinfo import RankInfo

from ddprof.store.atomic import write_json_atomic
from ddprof.store.sidecar import META_FORMAT  # the format ingest reads (a light module: no Polars)

log = logging.getLogger("ddprof.collectors")

META_VERSION = 1

#: Environment variables that identify the job; the finisher warns when ranks disagree on them.
JOB_ENV = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "MASTER_ADDR", "MASTER_PORT")


def clocks() -> dict[str, int]:
    """Wall-clock and monotonic readings taken together, to relate trace clocks across hosts."""
    return {"wall_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns(), "perf_counter_ns": time.perf_counter_ns()}


def _nccl_version(torch: Any) -> str | None:
    try:
        if not torch.cuda.is_available():
            return None
        version = torch.cuda.nccl.version()
        return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except Exception as exc:  # a CUDA build without NCCL, a broken driver...
        log.debug("NCCL version unavailable: %s", exc)
        return None


def versions() -> dict[str, Any]:
    import torch

    gpus: list[str] = []
    try:
        if torch.cuda.is_available():
            gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as exc:
        log.warning("ddprof: could not list GPUs: %s", exc)
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": _nccl_version(torch),
        "gpus": gpus,
    }


def process_groups() -> list[dict[str, Any]]:
    """torch.distributed's view of the process groups (name, description, backend, size, ranks)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return []
    try:
        return list(dist.distributed_c10d._get_all_pg_configs())
    except Exception as exc:  # private API: may move between torch versions
        log.warning("ddprof: could not read the process groups: %s", exc)
        return []


def host_name() -> str:
    """The host a rank runs on, as the analyses group ranks by it (link classes: one node or several;
    ranks of one host share its clock): ``DDPROF_HOST`` where set, else the machine's hostname. Set it
    where the hostname is not the machine's: in Kubernetes each pod has its own hostname, and two pods
    of one node share its NVLink (``DDPROF_HOST`` from the downward API's ``spec.nodeName``)."""
    return os.environ.get("DDPROF_HOST") or socket.gethostname()


def cpu_set() -> str | None:
    """The CPUs the rank may run on (its affinity), as ranges: "0-3,8"; None where the OS does not say.
    Ranks bound to different CPUs of one host are placed apart: a busy CPU slows only the ranks bound to
    it (:mod:`ddprof.analyses.slow_groups`)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except OSError:
        return None
    return cpu_ranges(cpus)


def cpu_ranges(cpus: list[int]) -> str:
    """Sorted CPU numbers as ranges. Example: [0, 1, 2, 3, 8] -> "0-3,8"."""
    parts: list[str] = []
    start = prev = None
    for c in [*cpus, None]:
        if c is not None and prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(parts)


def base_meta(info: RankInfo, enabled: dict[str, Any]) -> dict[str, Any]:
    from ddprof.version import __version__

    return {
        "format": META_FORMAT,
        "version": META_VERSION,
        "collector": f"ddprof.collectors {__version__}",
        "status": "running",
        "rank": info.rank,
        "local_rank": info.local_rank,
        "world_size": info.world_size,
        "rank_source": info.source,
        "backend": info.backend,
        "process_groups": [],
        "host": host_name(),
        "cpus": cpu_set(),
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "job": {k: os.environ[k] for k in JOB_ENV if k in os.environ},
        "versions": versions(),
        "enabled": enabled,
        "start": clocks(),
        "end": None,
        "traces": [],
        "flight_recorder": [],
        "failures": [],
        "warnings": [],
    }


def write_meta(path: Path, meta: dict[str, Any]) -> bool:
    """Write the meta file; on failure log and return False (capture must never break training)."""
    try:
        write_json_atomic(path, meta)
        return True
    except Exception as exc:
        log.error("ddprof: could not write %s: %s", path, exc)
        return False
