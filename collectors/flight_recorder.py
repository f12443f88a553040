"""PyTorch's Flight Recorder: switch it on before the process group exists, and dump it per rank.

The Flight Recorder keeps the last N collectives of every process group in a ring buffer. Its size is
read when the first process group is created, so :func:`init` must run before ``init_process_group``.
The names are those of torch 2.13 (the pinned version), which warns that the older names
``TORCH_NCCL_TRACE_BUFFER_SIZE`` and ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` are deprecated:
``TORCH_FR_BUFFER_SIZE``, ``TORCH_FR_DUMP_TEMP_FILE`` (torch appends the rank) and
``TORCH_NCCL_DUMP_ON_TIMEOUT`` (NCCL's watchdog dumps when a collective times out). A value the user set
under either name is respected. In torch 2.13 the recorder also records gloo collectives; NCCL has a
recorder of its own.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ddprof.collectors import layout
from ddprof.collectors.rankinfo import RankInfo, detect_rank

from ddprof.store.atomic import write_bytes_atomic

log = logging.getLogger("ddprof.collectors")

BUFFER_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # current name first
FILE_ENV = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DUMP_ON_TIMEOUT_ENV = "TORCH_NCCL_DUMP_ON_TIMEOUT"
DEFAULT_BUFFER = 20000


def fr_env(run_dir: Path, rank: int | None, buffer_size: int, dump_on_timeout: bool,
           environ: dict[str, str]) -> dict[str, str]:
    """The variables to set (a new dict). Explicit user settings win, except a prefix ddprof chose."""
    updates: dict[str, str] = {}
    if not any(name in environ for name in BUFFER_ENV):
        updates[BUFFER_ENV[0]] = str(buffer_size)
    if dump_on_timeout and DUMP_ON_TIMEOUT_ENV not in environ:
        updates[DUMP_ON_TIMEOUT_ENV] = "1"
    prefix = layout.raw_dir(run_dir) / layout.FR_FILE_STEM if rank is None else layout.fr_prefix(run_dir, rank)
    current = [environ[name] for name in FILE_ENV if name in environ]
    if not current or all(c.startswith(str(layout.raw_dir(run_dir))) for c in current):
        updates[FILE_ENV[0]] = str(prefix)
    return updates


def init(run_dir: str | Path | None = None, *, flight_recorder: bool = True,
         buffer_size: int = DEFAULT_BUFFER, dump_on_timeout: bool = True) -> RankInfo:
    """Call early in each rank, before ``torch.distributed.init_process_group``.

    Claims ``run_dir/raw/rank-NNNNN/`` for this rank (refusing a run dir that already holds this rank's
    capture, see :mod:`ddprof.collectors.layout`) and switches the Flight Recorder on, its dumps going to
    that directory. Returns the rank as detected from the launcher's environment.
    """
    path = layout.resolve_run_dir(run_dir)
    info = detect_rank()
    layout.claim(path, info.rank, "init")
    if flight_recorder:
        os.environ.update(fr_env(path, info.rank, buffer_size, dump_on_timeout, dict(os.environ)))
    return info


def buffer_enabled() -> bool:
    for name in BUFFER_ENV:
        try:
            if int(os.environ.get(name, "0")) > 0:
                return True
        except ValueError:
            return False
    return False


def dump_function(backend: str | None):
    """torch's dump entry point for this backend, or None where this build has none."""
    try:
        import torch._C._distributed_c10d as c10d
    except ImportError:
        return None
    if backend and "nccl" in backend and hasattr(c10d, "_dump_nccl_trace"):
        return c10d._dump_nccl_trace
    return getattr(c10d, "_dump_fr_trace", None)


def dump(run_dir: Path, rank: int, backend: str | None) -> Path:
    """Write this rank's Flight Recorder (pickle, torch's format) to ``raw/rank-NNNNN/fr_trace_rank_N``."""
    fn = dump_function(backend)
    if fn is None:
        raise RuntimeError("this torch build has no Flight Recorder dump (_dump_nccl_trace/_dump_fr_trace)")
    data = fn()
    return write_bytes_atomic(layout.fr_path(run_dir, rank), data)
