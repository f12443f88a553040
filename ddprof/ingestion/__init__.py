"""Traces in (any format :mod:`ddprof.readers` reads), the run-dir store out. Entry point: :func:`ingest`."""

from ddprof.ingestion.pipeline import ingest

__all__ = ["ingest"]
