"""Collectors: capture Kineto traces and NCCL evidence from a training job (needs torch).

``ddprof.profile(run_dir)`` profiles a rank; ``ddprof.init(run_dir)``, called before
``init_process_group``, switches the Flight Recorder on; ``ddprof launch`` captures a script that does
neither (:mod:`ddprof.collectors.bootstrap`). Names are imported on first use: torch when a capture
starts, Polars when a capture ends, so the bootstrap that every process of a launched job loads at
start-up stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddprof.collectors.capture import Profile, profile
    from ddprof.collectors.flight_recorder import init
    from ddprof.collectors.rankinfo import RankInfo, detect_rank

__all__ = ["Profile", "RankInfo", "detect_rank", "init", "profile"]

_WHERE = {"Profile": "capture", "profile": "capture", "init": "flight_recorder", "RankInfo": "rankinfo",
          "detect_rank": "rankinfo"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"ddprof.collectors.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'ddprof.collectors' has no attribute {name!r}")
