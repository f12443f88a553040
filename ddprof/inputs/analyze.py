"""The report of what a user names (``ddprof.analyze(path)``): the source opened
(:func:`.sources.open_source`: raw traces ingested into a cache, a run dir, Flight Recorder dumps) and its
report built (:func:`ddprof.analyses.report.build_report`, a pure function of the run and the dumps)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ddprof.analyses.report import build_report
from ddprof.inputs.sources import IngestProgress, open_source
from ddprof.report.tables import AnalysisReport
from ddprof.runtime.executors import Executor


def analyze(*sources: str | Path, cache: str | Path | None = None, rank_map: dict[str, int] | None = None,
            progress: IngestProgress | None = None, comm_kernels: Sequence[str] | None = None,
            executor: Executor | None = None) -> AnalysisReport:
    """The report of what the user names: raw traces (ingested into ``cache``, by default beside them),
    a run dir, or a directory of Flight Recorder dumps; exactly what ``ddprof analyze SOURCES --format json``
    prints. ``rank_map`` gives the rank of traces that do not say (``{"trace.json": 3}``); ``comm_kernels``
    the rules naming communication kernels (:func:`ddprof.inputs.sources.open_source`); ``executor`` where the
    per-rank work runs (:mod:`ddprof.runtime.executors`; default: here)."""
    with open_source(sources, cache=cache, rank_map=rank_map, progress=progress, comm_kernels=comm_kernels,
                     executor=executor) as src:
        return build_report(src.run, dumps=src.dumps, executor=executor)
