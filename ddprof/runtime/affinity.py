"""One core each for the ingest workers.

An ingest worker is three threads taking turns: the interpreter's, Polars' pool (one thread: the pool of
workers already spreads the traces over the cores) and Polars' writer. Each Polars operation hands work
from one to another and waits. Left to the scheduler, two workers on two cores keep moving their threads
from core to core, each handover wakes a thread on the other core, and the caches are cold where it
lands. With each worker held to a core of its own, its threads take their turns on it.

Measured: two processes ingesting 30 generated traces of 50,000 events each, side by side on this 2-core
machine, three rounds: 108-113 ms of wall time a trace held to a core each, 115-120 ms not (CPU 107-111
against 109-116 ms; peak memory 138-142 against 148-150 MB).

Workers are held only where there are as many of them as cores (the process's CPU set, as
``sched_getaffinity`` gives it: a container's or ``taskset``'s limits count), the default: every core then
has a worker whatever the placement. With fewer workers (``-j``) they are left to the scheduler, so that two
runs side by side do not both pile onto the first cores; so are they where the platform cannot hold them
(not Linux). ``DDPROF_PIN_WORKERS=off`` leaves them all to the scheduler (a machine other jobs crowd onto
some cores).
"""

from __future__ import annotations

import os
from typing import Any, Final

#: The environment variable that turns holding workers to cores off.
PIN_SETTING: Final = "DDPROF_PIN_WORKERS"


def cores_for(workers: int) -> list[int] | None:
    """The core of each of ``workers`` workers, or None where they are left to the scheduler (module doc)."""
    if os.environ.get(PIN_SETTING, "").lower() in ("off", "0", "false", "no"):
        return None
    try:
        available = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None
    if workers < 2 or len(available) != workers:
        return None
    return available


def core_queue(context: Any, workers: int) -> Any:
    """A queue (of the ``multiprocessing`` context the workers start in) holding the core of each worker, for
    :func:`hold_to_core` in each; None where they are left to the scheduler (:func:`cores_for`)."""
    cores = cores_for(workers)
    if cores is None:
        return None
    queue = context.SimpleQueue()
    for core in cores:
        queue.put(core)
    return queue


def hold_to_core(cores: Any) -> None:
    """Hold this process, every thread it has and every thread it starts, to the next core ``cores`` (a
    queue of core numbers, one taken per worker) gives; nothing where it gives none or cannot."""
    if cores is None:
        return
    try:
        core = cores.get() if not cores.empty() else None
    except (OSError, EOFError):
        return
    if core is None:
        return
    try:
        for thread in os.listdir("/proc/self/task"):  # threads started before this one (threads inherit)
            os.sched_setaffinity(int(thread), {core})
    except (AttributeError, OSError, ValueError):
        return
