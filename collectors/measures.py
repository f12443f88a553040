"""Always-on step measures: per rank and step, wall time, time in collectives, arrival at the step's last
collective, data-loader wait, CPU and memory, appended to ``RUN/measures/rank-NNNNN.steps.jsonl``
(the format: :mod:`ddprof.store.step_measures`).

Started by :class:`ddprof.collectors.capture.Profile` (so by ``ddprof.profile`` and ``ddprof launch`` alike,
with no edit to the script; ``step_measures=False`` / ``ddprof launch --no-step-measures`` turn it off) and
fed at each step boundary. What a step costs the job: :meth:`StepMeasures.boundary` reads two clocks, takes
the counters below and appends one tuple to a bounded deque; a daemon thread formats and appends the lines
(flushed every :data:`FLUSH_S`, so a reader sees a step within a fraction of a second), and samples the
host's CPU and memory about once a second from ``/proc``. The step never waits for the disk: when the deque
is full (the writer fell behind) the oldest record is dropped and counted; when a write fails (a full disk,
a run dir gone) the measures stop, one log line says why, and training goes on.

What is timed without the profiler:

* **collectives**: the calls of ``torch.distributed``'s Python API (``all_reduce``, ``all_gather``,
  ``broadcast``, ``barrier``, ``send``/``recv`` ...; an ``async_op=True`` call from its issue until its
  work completes, through the work's future), and the gradient all-reduces of ``DistributedDataParallel``,
  which are issued from C++: DDP's own per-iteration timers are switched on
  (``_set_ddp_runtime_logging_sample_rate(1)``, at each model's first forward) and read at each step
  boundary (``_get_ddp_logging_data``, about 10 us): the time from the first bucket's all-reduce to the
  last one's completion, and the end of the backward's compute (the rank's arrival at the last all-reduce).
  DDP computes an iteration's times at the next forward, so a step's line is written one step later, and
  the job's last step has no DDP time. The time of a collective includes the wait for the last rank to
  arrive, which is what lets ``ddprof top`` tell the rank the others wait for (its own time, the step
  minus its collectives, is the longer). Collectives issued only from C++ otherwise
  (``torch.distributed._functional_collectives``, compiled graphs, FSDP2's internals) are not seen:
  ``coll_ms`` is then null. Not chosen: a DDP communication hook in Python that times each bucket (its
  completion callbacks cost 0.5-1 ms a step on a 12-20 ms gloo step, measured), and the Flight Recorder
  (with gloo its entries carry no start or end time, and dumping 20,000 entries takes over a second, with
  torch 2.13).
* **data-loader wait**: each ``next()`` on a ``torch.utils.data.DataLoader`` iterator.
* **host**: the process's CPU time per step (``time.process_time``), its resident memory and the host's
  CPU and memory use (``/proc``; null elsewhere);
* **the training thread's CPU**: its own CPU time per step and the time it was ready to run but waited for
  a CPU (the scheduler's run-queue delay, ``/proc/self/task/TID/schedstat``: one ``pread`` of a file kept
  open: the boundary takes about 5 us instead of 2; null where the kernel keeps no such statistics), and the host's stolen time (a virtual
  machine's vCPUs waiting for the hypervisor, ``/proc/stat``). They tell a rank slowed by the machine from
  one doing more: its thread waits for a CPU while other processes, or other threads of its own, run.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import os
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from ddprof.collectors.meta import host_name

from ddprof.store.step_measures import VERSION, measures_path

log = logging.getLogger("ddprof.collectors")

FLUSH_S = 0.2  # the writer appends what the steps queued at most this often
HOST_SAMPLE_S = 1.0
QUEUE_MAX = 4096  # records waiting for the writer; beyond, the oldest is dropped (and counted)
#: torch.distributed's Python collectives that are timed (those this torch has).
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "reduce", "all_to_all",
               "all_to_all_single", "barrier", "gather", "scatter", "send", "recv", "batch_isend_irecv")


class CommClock:
    """Time in collectives since the last :meth:`take`: the union of [issue, completion] intervals (a
    collective that overlaps another adds only what it extends), their count, the last issue (thread-safe:
    async completions arrive on the backend's threads).

    A collective still open at the step's end is counted as ending there: a step that ends has waited for
    what it issued (DDP waits for its all-reduces in the backward), and the callback that reports the
    completion can run a moment after the waiting thread already went on; that late report is then ignored.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[tuple[float, float]] = []
        self._open: dict[int, float] = {}
        self._next = 0
        self.seen = False  # some collective was timed in this process

    def add(self, start: float, end: float) -> None:
        with self._lock:
            self._done.append((start, end))
            self.seen = True

    def begin(self, start: float) -> int:
        with self._lock:
            self._next += 1
            self._open[self._next] = start
            self.seen = True
            return self._next

    def end(self, token: int, end: float) -> None:
        with self._lock:
            start = self._open.pop(token, None)
            if start is not None:
                self._done.append((start, end))

    def take(self, now: float | None = None) -> tuple[float, int, float | None]:
        """(seconds in collectives, how many, the last issue) since the last call, ends clamped to ``now``."""
        with self._lock:
            done, self._done = self._done, []
            if now is not None:
                done += [(start, now) for start in self._open.values()]
                self._open.clear()
        if not done:
            return 0.0, 0, None
        done.sort()
        total, busy_until = 0.0, float("-inf")
        for start, end in done:
            if now is not None and end > now:
                end = now
            if start >= busy_until:
                total += max(0.0, end - start)
            elif end > busy_until:
                total += end - busy_until
            busy_until = max(busy_until, end)
        return total, len(done), done[-1][0]


COMM = CommClock()
_DATA = [0.0]  # seconds in DataLoader next() since the last boundary (one writer: the training thread)
_patched: set[str] = set()
_patch_lock = threading.Lock()


def _done_callback(start: float) -> Any:
    token = COMM.begin(start)

    def done(_fut: Any) -> None:
        COMM.end(token, time.perf_counter())
    return done


def _timed_collective(fn: Any) -> Any:
    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        if kwargs.get("async_op") and result is not None:
            try:
                result.get_future().add_done_callback(_done_callback(start))
                return result
            except Exception:  # a work without a future: time the call alone
                pass
        COMM.add(start, time.perf_counter())
        return result

    collective.__ddprof_original__ = fn  # type: ignore[attr-defined]
    return collective


def _first_patch(name: str) -> bool:
    """Whether the patch ``name`` is applied now for the first time in this process (it is then marked)."""
    with _patch_lock:
        if name in _patched:
            return False
        _patched.add(name)
        return True


def patch_distributed(dist: Any) -> None:
    """Time ``torch.distributed``'s Python collectives (module doc); once per process."""
    if not _first_patch("dist"):
        return
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is None or hasattr(fn, "__ddprof_original__"):
            continue
        timed = _timed_collective(fn)
        setattr(dist, name, timed)
        if c10d is not None and getattr(c10d, name, None) is fn:
            setattr(c10d, name, timed)


def _original(dist: Any, name: str) -> Any:
    fn = getattr(dist, name)
    return getattr(fn, "__ddprof_original__", fn)


_DDPS: weakref.WeakSet[Any] = weakref.WeakSet()  # the DDP models whose runtime timers are on
_DDP_SEEN: dict[int, Any] = {}  # id(model) -> the iteration its timers last reported


def patch_ddp(module: Any) -> None:
    """Switch on ``DistributedDataParallel``'s own per-iteration timers (module doc); once per process."""
    if not _first_patch("ddp"):
        return
    cls = module.DistributedDataParallel
    original_forward = cls.forward

    @functools.wraps(original_forward)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self not in _DDPS:
            _DDPS.add(self)
            try:
                self._set_ddp_runtime_logging_sample_rate(1)
            except Exception as exc:  # an unusual DDP: its collectives go untimed
                _DDPS.discard(self)
                log.info("ddprof: DDP all-reduces not timed: %s: %s", type(exc).__name__, exc)
        return original_forward(self, *args, **kwargs)

    cls.forward = forward


def ddp_iterations() -> tuple[float, int, float | None]:
    """What the DDP models' timers reported since the last call: seconds from the first gradient bucket's
    all-reduce to the last one's completion, summed over the models, their count, the latest end of a
    backward's compute (epoch seconds, where the timers give wall clocks). DDP computes an iteration's
    times at the next forward, so this is the previous step's."""
    total, count, arrive = 0.0, 0, None
    for ddp in list(_DDPS):
        try:
            data = ddp._get_ddp_logging_data()
        except Exception:
            continue
        iteration = data.get("iteration")
        if iteration is None or _DDP_SEEN.get(id(ddp)) == iteration or not data.get("backward_comm_time_end"):
            continue
        _DDP_SEEN[id(ddp)] = iteration
        total += max(0, int(data.get("backward_comm_time", 0))) / 1e9
        count += 1
        end = int(data.get("backward_compute_time_end") or 0)
        if end > 10**18:  # wall-clock nanoseconds (CPU timers)
            arrive = max(arrive or 0.0, end / 1e9)
    return total, count, arrive


def patch_dataloader(module: Any) -> None:
    """Time each ``next()`` on a DataLoader iterator (module doc); once per process."""
    if not _first_patch("loader"):
        return
    cls = module._BaseDataLoaderIter
    original = cls.__next__

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self)
        finally:
            _DATA[0] += time.perf_counter() - start

    cls.__next__ = __next__


def install_hooks() -> None:
    """Patch what is imported now, and the rest when it is imported (through the launcher's import hook)."""
    from ddprof.collectors.autocapture import after_import

    for name, patch in (("torch.distributed", patch_distributed), ("torch.nn.parallel.distributed", patch_ddp),
                        ("torch.utils.data.dataloader", patch_dataloader)):
        def guarded(module: Any, patch: Any = patch) -> None:
            try:
                patch(module)
            except Exception as exc:
                log.error("ddprof: step measures cannot time %s: %s: %s (training continues)", module.__name__,
                          type(exc).__name__, exc)
        after_import(name, guarded)


class _Host:
    """The latest host samples (``/proc``; None where it cannot be read)."""

    def __init__(self) -> None:
        self.rss_mb: float | None = None
        self.cpu_pct: float | None = None
        self.mem_pct: float | None = None
        self.steal_pct: float | None = None
        self._cpu: tuple[int, int, int] | None = None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def sample(self) -> None:
        try:
            with open("/proc/self/statm", "rb") as f:
                self.rss_mb = int(f.read().split()[1]) * self._page / 1e6
            with open("/proc/stat", "rb") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
            # user nice system idle iowait irq softirq steal guest guest_nice: guest time is in user already
            fields = fields[:8]
            idle, total = fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields)
            steal = fields[7] if len(fields) > 7 else 0
            if self._cpu is not None and total > self._cpu[1]:
                self.cpu_pct = round(100.0 * (1 - (idle - self._cpu[0]) / (total - self._cpu[1])), 1)
                self.steal_pct = round(100.0 * (steal - self._cpu[2]) / (total - self._cpu[1]), 1)
            self._cpu = (idle, total, steal)
            info: dict[bytes, int] = {}
            with open("/proc/meminfo", "rb") as f:
                for line in f:
                    key, _, rest = line.partition(b":")
                    if key in (b"MemTotal", b"MemAvailable"):
                        info[key] = int(rest.split()[0])
            if info.get(b"MemTotal"):
                self.mem_pct = round(100.0 * (1 - info.get(b"MemAvailable", 0) / info[b"MemTotal"]), 1)
        except (OSError, ValueError, IndexError):
            pass


class StepMeasures:
    """The measures of one rank: :meth:`boundary` at each step end (cheap, never blocks), :meth:`close` at exit."""

    def __init__(self, run_dir: Path, rank: int, world_size: int | None, first_step: int = 0):
        self.path = measures_path(run_dir, rank)
        self.rank = rank
        self.step = first_step  # the step in progress
        self.dropped = 0
        self.stopped: str | None = None
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._wake = threading.Event()
        self._closing = False
        self._host = _Host()
        self._wall0 = time.time() - time.perf_counter()  # perf_counter -> epoch seconds
        self._last = time.perf_counter()
        self._cpu = time.process_time()
        self._sched: int | None = None  # the training thread's schedstat, opened at its first boundary
        self._thread_cpu = self._waited = 0
        COMM.take()
        ddp_iterations()
        self._held: dict[str, Any] | None = None  # the newest step, written once DDP reported its all-reduces
        _DATA[0] = 0.0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")  # noqa: SIM115 (kept open by the writer thread, closed in close())
        header = {"kind": "header", "version": VERSION, "rank": rank, "world_size": world_size,
                  "host": host_name(), "pid": os.getpid(), "start": time.time(), "first_step": first_step}
        self._file.write(json.dumps(header).encode() + b"\n")
        self._file.flush()
        self._thread = threading.Thread(target=self._run, name="ddprof-step-measures", daemon=True)
        self._thread.start()

    def boundary(self) -> None:
        """The step in progress ended (called on the training thread; never raises, never waits)."""
        if self.stopped is not None:
            return
        now, cpu = time.perf_counter(), time.process_time()
        thread_cpu, waited = self._schedstat()
        coll_s, coll_n, last_issue = COMM.take(now)
        data_s, _DATA[0] = _DATA[0], 0.0
        ddp = ddp_iterations() if _DDPS else None
        queue = self._queue
        if len(queue) >= QUEUE_MAX:
            queue.popleft()
            self.dropped += 1
        sched = None if thread_cpu is None or waited is None else (thread_cpu - self._thread_cpu, waited - self._waited)
        queue.append((self.step, now, now - self._last, coll_s, coll_n, last_issue, data_s, cpu - self._cpu, ddp,
                      sched))
        self.step += 1
        self._last, self._cpu = now, cpu
        if sched is not None:
            self._thread_cpu, self._waited = thread_cpu, waited  # type: ignore[assignment]

    def _schedstat(self) -> tuple[int | None, int | None]:
        """The calling (training) thread's CPU time and run-queue wait so far, in ns; (None, None) where the
        kernel keeps no schedstat. The first call opens the thread's file and reads the starting values."""
        if self._sched == -1:
            return None, None
        try:
            if self._sched is None:
                self._sched = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
                fields = os.pread(self._sched, 128, 0).split()
                self._thread_cpu, self._waited = int(fields[0]), int(fields[1])
                return None, None  # the step in progress started before the file was open: no delta for it
            fields = os.pread(self._sched, 128, 0).split()
            return int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError, AttributeError):
            self._close_sched()
            return None, None

    def _close_sched(self) -> None:
        fd, self._sched = self._sched, -1  # not read again
        if fd is not None and fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _lines(self, rec: tuple[Any, ...]) -> list[bytes]:
        """The lines a queued step makes ready: the step before it, now that its DDP all-reduces are known
        (``ddp_iterations`` reports them one step late), when DDP models are timed; else the step itself."""
        step, now, wall, coll_s, coll_n, last_issue, data_s, cpu, ddp, sched = rec
        host = self._host
        seen = COMM.seen or ddp is not None
        out: dict[str, Any] = {
            "step": step, "end": round(self._wall0 + now, 6), "wall_ms": round(wall * 1e3, 4),
            "coll_ms": round(coll_s * 1e3, 4) if seen else None, "coll_n": coll_n if seen else None,
            "arrive": round(self._wall0 + last_issue, 6) if last_issue is not None else None,
            "data_ms": round(data_s * 1e3, 4), "cpu_ms": round(cpu * 1e3, 3), "rss_mb": host.rss_mb,
            "host_cpu_pct": host.cpu_pct, "host_mem_pct": host.mem_pct,
            "thread_cpu_ms": round(sched[0] / 1e6, 3) if sched else None,
            "wait_ms": round(sched[1] / 1e6, 3) if sched else None, "host_steal_pct": host.steal_pct}
        ready = []
        held, self._held = self._held, None
        if held is not None:
            if ddp is not None and ddp[1]:
                held["coll_ms"] = round((held["coll_ms"] or 0.0) + ddp[0] * 1e3, 4)
                held["coll_n"] = (held["coll_n"] or 0) + ddp[1]
                if ddp[2] is not None and (held["arrive"] is None or ddp[2] > held["arrive"]):
                    held["arrive"] = round(ddp[2], 6)
            ready.append(held)
        if ddp is not None:  # DDP models were timed at this boundary (decided there: a model may be gone by now)
            self._held = out
        else:
            ready.append(out)
        return [json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in ready]

    def _run(self) -> None:
        next_sample = 0.0
        while True:
            closing = self._closing
            now = time.monotonic()
            if now >= next_sample:
                self._host.sample()
                next_sample = now + HOST_SAMPLE_S
            lines = []
            while self._queue:
                lines += self._lines(self._queue.popleft())
            if closing and self._held is not None:  # the last step: its all-reduces are never reported
                self._held.update(coll_ms=None, coll_n=None)  # unknown, not zero
                lines.append(json.dumps(self._held, separators=(",", ":")).encode() + b"\n")
                self._held = None
            if lines:
                try:
                    self._file.write(b"".join(lines))
                    self._file.flush()
                except Exception as exc:
                    self._stop(f"{type(exc).__name__}: {exc}")
                    return
            if closing:
                return
            self._wake.wait(FLUSH_S)

    def _stop(self, why: str) -> None:
        self.stopped = why
        self._queue.clear()
        log.error("ddprof: step measures of rank %d stopped: cannot write %s: %s (training continues)", self.rank,
                  self.path, why)
        with contextlib.suppress(Exception):
            self._file.close()

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued (waiting at most ``timeout_s``) and close the file."""
        self._closing = True
        self._wake.set()
        self._thread.join(timeout_s)
        self._close_sched()
        if self.dropped:
            log.warning("ddprof: step measures of rank %d: %d record(s) dropped (the writer fell behind)", self.rank,
                        self.dropped)
        if self.stopped is None:
            with contextlib.suppress(Exception):
                self._file.close()


def start(run_dir: Path, rank: int, world_size: int | None, first_step: int) -> StepMeasures | None:
    """Begin measuring this rank's steps; None (logged) when the measure file cannot be created."""
    try:
        install_hooks()
        return StepMeasures(run_dir, rank, world_size, first_step)
    except Exception as exc:
        log.error("ddprof: no step measures for rank %d: %s: %s (training continues)", rank, type(exc).__name__, exc)
        return None
