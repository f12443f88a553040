"""One event table and the frames several analyses derive from it, each computed once.

Every analysis takes ``events``: a LazyFrame of events, or a :class:`Prepared` wrapping one. Given a
LazyFrame it wraps it itself (its intermediate frames then serve that call only); the report wraps the
run's events once, so the work intervals, their union lengths, step windows, collective arrivals and
idle gaps are computed once for all sections instead of once per analysis.

A derived frame is a pure function of the events (and of plain parameters), registered by the
function that computes it: ``prepared.get(fn, *args)`` returns ``fn(prepared, *args)``, computed on
the first call and kept. Frames handed out are Polars DataFrames: immutable, safe to share, also
between threads (``get`` computes each frame once even when several threads ask for it at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, Final, TypeVar

import polars as pl

T = TypeVar("T")

#: Engine for the analyses' queries: their frames are small, and the in-memory engine starts faster.
ENGINE: Final = "in-memory"


class Prepared:
    """The event table (``events``, a LazyFrame) and the frames derived from it so far."""

    def __init__(self, events: pl.LazyFrame) -> None:
        self.events = events
        self._memo: dict[tuple[Callable[..., Any], tuple[Hashable, ...]], Any] = {}
        self._locks: dict[tuple[Callable[..., Any], tuple[Hashable, ...]], threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, fn: Callable[..., T], *args: Hashable) -> T:
        """``fn(self, *args)``, computed once per Prepared (one lock per frame: a thread asking for a frame
        another thread is computing waits for it; frames never depend on themselves, so none deadlocks)."""
        key = (fn, args)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._memo:
                self._memo[key] = fn(self, *args)
        return self._memo[key]

    def provide(self, fn: Callable[..., T], frame: T, *args: Hashable) -> None:
        """Make ``frame`` the result of ``fn(self, *args)``: a frame known without computing it (the rank
        spans a run's manifest holds). It must be exactly what ``fn`` would return."""
        with self._lock:
            self._memo.setdefault((fn, args), frame)


Events = pl.LazyFrame | Prepared


def prepare(events: Events) -> Prepared:
    """``events`` itself if already prepared, else a new Prepared around the LazyFrame."""
    return events if isinstance(events, Prepared) else Prepared(events)


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    return lf.collect(engine=ENGINE)
