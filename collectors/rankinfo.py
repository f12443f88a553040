"""Which rank is this process? torch.distributed if initialised, else the launcher's environment.

Single process with no launcher variables is rank 0 of 1: the one legitimate default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ddprof.errors import UsageError

#: (rank, local rank, world size) variables of the launchers we know, in order of preference.
LAUNCHER_ENV = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),                                      # torchrun, torch.distributed
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),                          # srun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),                                # MPICH / Intel MPI
)


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    world_size: int | None
    source: str
    backend: str | None = None


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"environment variable {name}={value!r} is not an integer") from None


def _local_rank(env: Mapping[str, str]) -> int | None:
    for _, local_var, _ in LAUNCHER_ENV:
        value = _int_env(env, local_var)
        if value is not None:
            return value
    return None


def detect_rank(env: Mapping[str, str] | None = None) -> RankInfo:
    env = os.environ if env is None else env
    dist = sys.modules.get("torch.distributed")  # never import torch just to learn it is not in use
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
        local = _local_rank(env)
        return RankInfo(rank, rank if local is None else local, dist.get_world_size(), "torch.distributed",
                        str(dist.get_backend()))
    for rank_var, local_var, size_var in LAUNCHER_ENV:
        rank = _int_env(env, rank_var)
        if rank is None:
            continue
        local = _int_env(env, local_var)
        return RankInfo(rank, rank if local is None else local, _int_env(env, size_var), f"env:{rank_var}")
    return RankInfo(0, 0, 1, "default: single process")
