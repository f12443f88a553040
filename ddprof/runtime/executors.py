"""Where per-rank work runs: in this process (the default for analyses), or as Ray tasks on a cluster.

Ingest parses each trace, and analyze analyses each group of ranks, with a function of plain arguments
that reads and writes the run dir itself (never the events through the driver), so the same call runs
here or on any machine that mounts the run dir at the same path. The driver keeps the cross-rank step.

* ``local``: in this process, one call after another (ingest keeps its own process pool:
  :mod:`ddprof.ingestion.pipeline`);
* ``ray``: each call a Ray task (``ray.remote(fn).remote(*args)``); ``address`` is the cluster's
  (``ray://head:10001``, ``head:6379``, ``auto``) or, when None, a Ray cluster started on this machine.
  Ray is an extra (``pip install 'ddprof[ray]'``): the core imports it only when asked for it.

>>> results = run_each(get_executor("ray", address="auto"), ingest_file, [(path, out, None)])   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from ddprof.errors import UsageError

R = TypeVar("R")
EXECUTORS = ("local", "ray")


class Executor(Protocol):
    """Runs ``fn(*args)`` for each args tuple; yields ``(index, result)`` as each call finishes."""

    name: str

    def each(self, fn: Callable[..., R], calls: Sequence[tuple[Any, ...]]) -> Iterator[tuple[int, R]]: ...


class LocalExecutor:
    """In this process, in order."""

    name = "local"

    def each(self, fn: Callable[..., R], calls: Sequence[tuple[Any, ...]]) -> Iterator[tuple[int, R]]:
        for i, args in enumerate(calls):
            yield i, fn(*args)


class RayExecutor:
    """Each call a Ray task; results fetched as the tasks finish. The cluster is joined (or, without an
    address, started on this machine) on first use."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray, which is not installed: pip install 'ddprof[ray]'") from None
        self._ray = ray
        self.address = address

    def _connect(self) -> None:
        if self._ray.is_initialized():
            return
        try:
            self._ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                           ignore_reinit_error=True)
        except ConnectionError as exc:
            raise UsageError(f"cannot join the Ray cluster at {self.address}: {exc}") from None

    def each(self, fn: Callable[..., R], calls: Sequence[tuple[Any, ...]]) -> Iterator[tuple[int, R]]:
        if not calls:
            return
        self._connect()
        task = self._ray.remote(fn)
        pending = {task.remote(*args): i for i, args in enumerate(calls)}
        while pending:
            done, _ = self._ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), self._ray.get(ref)


def get_executor(name: str = "local", address: str | None = None) -> Executor:
    """The executor called ``name`` (:data:`EXECUTORS`); ``address`` only for Ray."""
    if name == "local":
        if address is not None:
            raise UsageError("--address is for --executor ray (the local executor runs here)")
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address)
    raise UsageError(f"unknown executor {name!r}: choose one of {', '.join(EXECUTORS)}")


def run_each(executor: Executor | None, fn: Callable[..., R], calls: Sequence[tuple[Any, ...]]) -> list[R]:
    """``[fn(*args) for args in calls]`` on ``executor`` (None: here), in the order of ``calls``."""
    out: dict[int, R] = dict((executor or LocalExecutor()).each(fn, calls))
    return [out[i] for i in range(len(calls))]
