"""Collectors: capture Kineto traces and NCCL evidence from inside a training script (needs torch).

``ddprof.profile(run_dir)`` profiles a rank; ``ddprof.init(run_dir)``, called before
``init_process_group``, switches the Flight Recorder on. torch is imported when a capture starts, not
when this package is imported.
"""

from ddprof.collectors.capture import Profile, profile
from ddprof.collectors.flight_recorder import init
from ddprof.collectors.rankinfo import RankInfo, detect_rank

__all__ = ["Profile", "RankInfo", "detect_rank", "init", "profile"]
