"""ddprof: where the time went in a distributed training job.

Public API::

    ddprof.ingest(sources, out_dir)      # Kineto traces -> run dir (Parquet store)
    ddprof.open_run(run_dir)             # run dir -> Run (LazyFrames of events, manifest)
    ddprof.analyze(path)                 # traces, run dir or Flight Recorder dumps -> the report (a dict;
                                         # .table("bubbles"): its per-step rows, a Polars DataFrame)
    ddprof.profile(run_dir)              # capture inside a training script (needs the `torch` extra)

``import ddprof`` loads neither Polars nor torch: names that need them are imported on first use, so the
``ddprof`` program can set Polars' allocator up before it loads (:mod:`ddprof.runtime.memory`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ddprof.errors import BadInputError, DdprofError, PartialRunError, RankError, SchemaError
from ddprof.version import __version__

if TYPE_CHECKING:
    from ddprof.report.tables import AnalysisReport
    from ddprof.store.rundir import Run, open_run
    from ddprof.store.schema import EVENT_SCHEMA, SCHEMA_VERSION, validate

__all__ = [
    "EVENT_SCHEMA", "SCHEMA_VERSION", "BadInputError", "DdprofError", "PartialRunError", "RankError",
    "Run", "SchemaError", "__version__", "analyze", "ingest", "open_run", "profile", "init", "validate",
]


def ingest(*args: Any, **kwargs: Any) -> Run:
    """See :func:`ddprof.ingestion.pipeline.ingest`."""
    from ddprof.ingestion.pipeline import ingest as _ingest

    return _ingest(*args, **kwargs)


def analyze(*args: Any, **kwargs: Any) -> AnalysisReport:
    """See :func:`ddprof.inputs.analyze.analyze`: what ``ddprof analyze PATH --format json`` prints, with its
    detail tables (``.table(name)``: :mod:`ddprof.report.tables`)."""
    from ddprof.inputs.analyze import analyze as _analyze

    return _analyze(*args, **kwargs)


_CORE = {"Run": "ddprof.store.rundir", "open_run": "ddprof.store.rundir", "EVENT_SCHEMA": "ddprof.store.schema",
         "SCHEMA_VERSION": "ddprof.store.schema", "validate": "ddprof.store.schema"}


def __getattr__(name: str) -> Any:
    if name in _CORE:  # these load Polars
        return getattr(import_module(_CORE[name]), name)
    # The collector needs torch: import it only when asked for.
    if name in ("profile", "init"):
        from ddprof import collectors

        return getattr(collectors, name)
    raise AttributeError(f"module 'ddprof' has no attribute {name!r}")
