"""Ingest workers held to a core each (ddprof.runtime.affinity): which cores, when, and that a worker's
threads, those it had and those it starts, are all held."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from ddprof.ingestion.pipeline import _start_worker
from ddprof.runtime import affinity
from ddprof.runtime.affinity import PIN_SETTING, cores_for, hold_to_core

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU affinity is Linux's")


def test_cores_for_the_workers_only_where_there_are_enough(monkeypatch):
    monkeypatch.delenv(PIN_SETTING, raising=False)
    monkeypatch.setattr(affinity.os, "sched_getaffinity", lambda pid: {5, 2, 7}, raising=False)
    assert cores_for(3) == [2, 5, 7]
    assert cores_for(2) is None  # fewer workers than cores: left free to go where the machine is idle
    assert cores_for(4) is None  # more workers than cores: the scheduler shares them
    assert cores_for(1) is None  # one worker: nothing to keep apart
    monkeypatch.setenv(PIN_SETTING, "off")
    assert cores_for(2) is None

    def unsupported(pid):
        raise AttributeError("sched_getaffinity")

    monkeypatch.delenv(PIN_SETTING)
    monkeypatch.setattr(affinity.os, "sched_getaffinity", unsupported, raising=False)
    assert cores_for(2) is None


def _affinities() -> tuple[set[int], set[int]]:
    """The worker's main thread's CPU set and that of a thread it starts now."""
    seen: list[set[int]] = []
    t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
    t.start()
    t.join()
    return os.sched_getaffinity(0), seen[0]


@linux
def test_a_worker_and_the_threads_it_starts_hold_to_the_core_it_is_given():
    context = get_context("spawn")
    core = max(os.sched_getaffinity(0))
    queue = context.SimpleQueue()
    queue.put(core)
    with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_start_worker,
                             initargs=(os.getpid(), queue)) as pool:
        main, started = pool.submit(_affinities).result(timeout=60)
    assert main == {core} and started == {core}
    with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_start_worker,
                             initargs=(os.getpid(), None)) as pool:  # none given: left as it was
        main, _ = pool.submit(_affinities).result(timeout=60)
    assert main == os.sched_getaffinity(0)


def test_holding_without_a_core_to_take_does_nothing():
    queue = get_context("spawn").SimpleQueue()
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    hold_to_core(queue)  # empty
    hold_to_core(None)
    assert (os.sched_getaffinity(0) if before is not None else None) == before
