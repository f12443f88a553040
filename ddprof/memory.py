"""Memory settings: the allocator of the processes ddprof starts to ingest, and the cyclic collector
while a report is built.

**Allocator.** ``ddprof ingest`` and ingest workers:

Polars allocates with jemalloc, which keeps freed pages for seconds before it gives them back to the
system. An ingest is short and makes big transient frames, so its resident memory only grows: each
phase's freed pages stay resident while the next phase takes new ones. The processes ddprof starts only
to ingest give freed pages back at once. Measured on the 54 MB trace: 26 MB less peak (111 to 85 MB,
2.1 to 1.6 times the JSON), for 0 to 20% more time depending on what a page fault costs on the machine
(pages given back are faulted in again; interleaved medians 0.57 vs 0.53 s on one day, 0.54 vs 0.65 s on
another). Analyses keep the default: they run about a fifth slower the other way.

jemalloc reads its settings when Polars loads, so the program's own must be in the environment before
the first ``import polars`` (``import ddprof`` does not load Polars). Polars puts its defaults first in
``_RJEM_MALLOC_CONF`` and what it found there after them; jemalloc lets a later option override an
earlier one, so this setting goes last, and options the user set (other than these two) are kept. A
library caller's own process is left as it is; the ingest workers it starts get the setting.

**Cyclic collector.** A report allocates tens of thousands of small containers (its rows, Polars'
expression objects) that form no reference cycles. Each such burst sets off the collector's passes, and
its full passes also walk every object the imports made: measured on the 54 MB trace, 125 passes took
about 60 ms of a 190 ms report (one full pass 29 ms). :func:`collector_paused` turns it off for a block
and restores it after.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

JEMALLOC_CONF = "_RJEM_MALLOC_CONF"  # the variable Polars' jemalloc reads
GIVE_BACK_FREED = "dirty_decay_ms:0,muzzy_decay_ms:0"


def give_back_freed_memory() -> None:
    """Set this process's allocator to give freed pages back at once (no effect once Polars is loaded)."""
    current = os.environ.get(JEMALLOC_CONF)
    os.environ[JEMALLOC_CONF] = f"{current},{GIVE_BACK_FREED}" if current else GIVE_BACK_FREED


@contextmanager
def for_child_processes() -> Iterator[None]:
    """Processes started inside this block (they inherit the environment) give freed pages back at once;
    this process's environment is restored on leaving."""
    before = os.environ.get(JEMALLOC_CONF)
    give_back_freed_memory()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(JEMALLOC_CONF, None)
        else:
            os.environ[JEMALLOC_CONF] = before


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside this block (reference counting still frees everything
    that is not in a cycle), and as it was on leaving."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
