"""ddprof: where the time went in a distributed training job.

Public API::

    ddprof.ingest(sources, out_dir)      # Kineto traces -> run dir (Parquet store)
    ddprof.open_run(run_dir)             # run dir -> Run (LazyFrames of events, manifest)
    ddprof.profile(run_dir)              # capture inside a training script (needs the `torch` extra)
"""

from __future__ import annotations

from typing import Any

from ddprof.errors import BadInputError, DdprofError, PartialRunError, RankError, SchemaError
from ddprof.rundir import Run, open_run
from ddprof.schema import EVENT_SCHEMA, SCHEMA_VERSION, validate

__version__ = "0.1.0"

__all__ = [
    "EVENT_SCHEMA", "SCHEMA_VERSION", "BadInputError", "DdprofError", "PartialRunError", "RankError",
    "Run", "SchemaError", "__version__", "ingest", "open_run", "profile", "init", "validate",
]


def ingest(*args: Any, **kwargs: Any) -> Run:
    """See :func:`ddprof.ingestion.pipeline.ingest`."""
    from ddprof.ingestion.pipeline import ingest as _ingest

    return _ingest(*args, **kwargs)


def __getattr__(name: str) -> Any:
    # The collector needs torch: import it only when asked for.
    if name in ("profile", "init"):
        from ddprof import collectors

        return getattr(collectors, name)
    raise AttributeError(f"module 'ddprof' has no attribute {name!r}")
