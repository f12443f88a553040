"""Where the collector writes, and the rule that keeps two runs from mixing in one run dir.

::

    run_dir/raw/rank-00003/rank-00003.meta.json                  what ran, where, what was enabled, failures
    run_dir/raw/rank-00003/rank-00003.cycle-000.pt.trace.json.gz   one Kineto trace per profiled cycle
    run_dir/raw/rank-00003/rank-00003.trigger-001.pt.trace.json.gz one per window asked for by ddprof trigger
    run_dir/raw/rank-00003/fr_trace_rank_3                       latest Flight Recorder dump (torch's pickle)

Policy for a run dir that already holds a capture: **refuse at entry**, before training starts. A rank
refuses when the run dir has a ``manifest.json`` or when its own ``rank-NNNNN.meta.json`` exists (every
rank writes its meta file when it enters :func:`ddprof.profile`, so a rerun trips on every rank that
ran before). Nothing is versioned or overwritten: pick a new directory or delete the old one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ddprof.errors import UsageError
from ddprof.store.rundir import MANIFEST

RUN_DIR_ENV = "DDPROF_RUN_DIR"
FR_FILE_STEM = "fr_trace_rank_"

_claims: dict[Path, str] = {}
_claims_lock = threading.Lock()


def raw_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "raw"


def rank_raw_dir(run_dir: str | Path, rank: int) -> Path:
    return raw_dir(run_dir) / f"rank-{rank:05d}"


def meta_path(run_dir: str | Path, rank: int) -> Path:
    return rank_raw_dir(run_dir, rank) / f"rank-{rank:05d}.meta.json"


def trace_path(run_dir: str | Path, rank: int, cycle: int, label: str | None = None) -> Path:
    """The gzip Kineto trace of the ``cycle``-th profiled cycle (0, 1, ... one per schedule repeat), or of
    the window ``label`` names (``trigger-001``: the window of ``ddprof trigger`` number 1)."""
    return rank_raw_dir(run_dir, rank) / f"rank-{rank:05d}.{label or f'cycle-{cycle:03d}'}.pt.trace.json.gz"


def fr_prefix(run_dir: str | Path, rank: int) -> Path:
    """Prefix for torch's own Flight Recorder dumps; torch appends the rank number."""
    return rank_raw_dir(run_dir, rank) / FR_FILE_STEM


def fr_path(run_dir: str | Path, rank: int) -> Path:
    return Path(f"{fr_prefix(run_dir, rank)}{rank}")


def resolve_run_dir(run_dir: str | Path | None) -> Path:
    """The run dir given, else ``$DDPROF_RUN_DIR`` (set by ``ddprof launch``)."""
    if run_dir is None:
        run_dir = os.environ.get(RUN_DIR_ENV)
        if not run_dir:
            raise UsageError(f"no run dir: pass one to ddprof.profile()/ddprof.init() or set ${RUN_DIR_ENV} "
                             "(ddprof launch -o RUN_DIR does)")
    return Path(run_dir).absolute()


def check_unused(run_dir: Path, rank: int) -> None:
    """Raise :class:`UsageError` if ``run_dir`` already holds a capture for this rank (see module doc)."""
    if (run_dir / MANIFEST).exists():
        raise UsageError(f"{run_dir} already holds an ingested run ({MANIFEST} exists); ddprof never mixes "
                         "two runs in one run dir: choose a new directory or delete this one")
    meta = meta_path(run_dir, rank)
    if meta.exists():
        raise UsageError(f"{run_dir} already holds a capture of rank {rank} ({meta}); ddprof never mixes two "
                         "runs in one run dir: choose a new directory or delete this one")


def claim(run_dir: Path, rank: int, by: str) -> None:
    """Reserve the rank's raw dir for this process. ``by`` is "init" or "profile".

    ``init`` then ``profile`` on the same run dir is one capture; a second ``profile`` is a second run
    and is refused like a rerun.
    """
    key = rank_raw_dir(run_dir, rank)
    with _claims_lock:
        held = _claims.get(key)
        if held == "profile" or (held == "init" and by == "init"):
            raise UsageError(f"this process already captured rank {rank} into {run_dir}; use a new run dir "
                             "for a second capture")
        if held is None:
            check_unused(run_dir, rank)
        _claims[key] = by


def profiling_here() -> bool:
    """Whether this process has entered ``ddprof.profile`` (the launcher's capture then stands aside)."""
    with _claims_lock:
        return "profile" in _claims.values()
