"""One event table and the frames derived from it, each computed once: the analyses' memo.

A derived frame is a function of the events (and of plain parameters) declared with :func:`derived`::

    @derived
    def kernels(p: Prepared) -> pl.DataFrame: ...

``kernels(events)`` takes a LazyFrame of events or a :class:`Prepared` wrapping one. Given a LazyFrame it
wraps it itself (its frames then serve that call only); the report wraps the run's events once, so the
work intervals, their union lengths, step windows, collective arrivals and idle gaps are computed once
for all sections instead of once per analysis. One name per frame: the same function is what an
analysis calls and what the memo keeps.

Frames handed out are Polars DataFrames: immutable, safe to share, also between threads (a frame is
computed once even when several threads ask for it at once).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Hashable
from typing import Any, Final, Generic, TypeVar

import polars as pl

T = TypeVar("T")

#: Engine for the analyses' queries: their frames are small, and the in-memory engine starts faster.
ENGINE: Final = "in-memory"


class Derived(Generic[T]):
    """A frame derived from the events: ``frame(events, *args)`` is ``compute(prepared, *args)``, kept
    in the events' :class:`Prepared`."""

    def __init__(self, compute: Callable[..., T]) -> None:
        self.compute = compute
        self._signature = inspect.signature(compute)
        functools.update_wrapper(self, compute)

    def __call__(self, events: Events, *args: Hashable, **kwargs: Hashable) -> T:
        bound = self._signature.bind(None, *args, **kwargs)  # defaults filled in: f(e) and f(e, default) are one frame
        bound.apply_defaults()
        return prepare(events).get(self, *bound.args[1:])


def derived(compute: Callable[..., T]) -> Derived[T]:
    """Declare ``compute(p: Prepared, *args)`` a derived frame (module doc)."""
    return Derived(compute)


class Prepared:
    """The event table (``events``, a LazyFrame) and the frames derived from it so far."""

    def __init__(self, events: pl.LazyFrame) -> None:
        self.events = events
        self._memo: dict[tuple[Derived[Any], tuple[Hashable, ...]], Any] = {}
        self._locks: dict[tuple[Derived[Any], tuple[Hashable, ...]], threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, frame: Derived[T], *args: Hashable) -> T:
        """``frame.compute(self, *args)``, computed once per Prepared (one lock per frame: a thread asking
        for a frame another thread is computing waits for it; frames never depend on themselves, so none
        deadlocks)."""
        key = (frame, args)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._memo:
                self._memo[key] = frame.compute(self, *args)
        return self._memo[key]

    def known(self, frame: Derived[T], *args: Hashable) -> T | None:
        """``frame(self, *args)`` when computed or provided already, else None (nothing is computed)."""
        with self._lock:
            return self._memo.get((frame, args))

    def provide(self, frame: Derived[T], value: T, *args: Hashable) -> None:
        """Make ``value`` the result of ``frame(self, *args)``: a frame known without computing it (the
        rank spans a run's manifest holds). It must be exactly what ``frame`` would compute."""
        with self._lock:
            self._memo.setdefault((frame, args), value)


Events = pl.LazyFrame | Prepared


def prepare(events: Events) -> Prepared:
    """``events`` itself if already prepared, else a new Prepared around the LazyFrame."""
    return events if isinstance(events, Prepared) else Prepared(events)


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    return lf.collect(engine=ENGINE)
