"""Memory settings: the allocator of the processes ddprof starts to ingest, and the cyclic collector
while a report is built.

**Allocator.** ``ddprof ingest`` and ingest workers:

Polars allocates with jemalloc, which by default gives each thread one of several arenas (four per
core) and keeps freed pages for seconds before it gives them back to the system. An ingest is short,
its phases run on different threads (decoding on the main one, building and writing on Polars' pool),
and it makes big transient frames: memory one thread frees cannot serve another thread's next request,
so resident memory grows phase by phase. The processes ddprof starts only to ingest use one arena for
every thread, so that any freed page serves the next request, wherever it comes from. Measured on the
54 MB trace: peak 96 MB with the default, 88 MB with one arena (1.7 times the JSON).

Giving freed pages back at once (no decay) would hold the peak lower still (82 MB) but costs twice the
page faults (36k against 18k): every transient buffer is faulted in again, and a page fault is
expensive in a virtual machine. Analyses keep the default.

The rest of the process allocates with glibc's malloc (Python's objects over 512 bytes, NumPy's arrays,
the blocks read and inflated). By default it maps a block of 128 KiB or more on its own and unmaps it when
freed, and gives the heap's top back beyond 128 KiB: ingest reads a megabyte at a time and makes arrays of
a run's events, so each was faulted in afresh, about 4,000 page faults for a trace of 50,000 events, 8 % of
its ingest. Ingest processes keep blocks up to 64 MiB in the heap and its top up to 256 MiB (glibc's
``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``, or ``mallopt`` once the process runs): a quarter of
the page faults, the same peak (measured: 64 traces of 50,000 events, peak 150 MB against 149 MB).

jemalloc reads its settings when Polars loads, so the program's own must be in the environment before
the first ``import polars`` (``import ddprof`` does not load Polars). Polars puts its defaults first in
``_RJEM_MALLOC_CONF`` and what it found there after them; jemalloc lets a later option override an
earlier one, so this setting goes last, and options the user set (other than this one) are kept. A
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
INGEST_ALLOCATOR = "narenas:1"


#: glibc malloc's settings for ingest (module doc): the variables a new process reads, and their ``mallopt``
#: parameters (``M_TRIM_THRESHOLD``, ``M_MMAP_THRESHOLD``) for a process already running.
GLIBC_MALLOC = {"MALLOC_TRIM_THRESHOLD_": (-1, 256 << 20), "MALLOC_MMAP_THRESHOLD_": (-3, 64 << 20)}


def use_ingest_allocator() -> None:
    """Set this process's allocators up for ingest: one jemalloc arena for every thread (no effect once
    Polars is loaded), glibc's malloc keeping its blocks (settings the user gave are kept)."""
    _ingest_environment()
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # glibc; elsewhere this does nothing
    except (OSError, AttributeError):
        return
    for name, (param, value) in GLIBC_MALLOC.items():
        if os.environ.get(name) == str(value):  # ours, not the user's
            mallopt(param, value)


def _ingest_environment() -> None:
    current = os.environ.get(JEMALLOC_CONF)
    os.environ[JEMALLOC_CONF] = f"{current},{INGEST_ALLOCATOR}" if current else INGEST_ALLOCATOR
    for name, (_, value) in GLIBC_MALLOC.items():
        os.environ.setdefault(name, str(value))


@contextmanager
def for_child_processes() -> Iterator[None]:
    """Processes started inside this block (they inherit the environment) use the ingest allocator
    settings; this process (its allocators and, on leaving, its environment) is left as it was."""
    names = (JEMALLOC_CONF, *GLIBC_MALLOC)
    before = {name: os.environ.get(name) for name in names}
    _ingest_environment()
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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
