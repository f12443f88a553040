"""A data-parallel CPU (gloo) run with one fault of known cause on one rank, placed event by event: what
:mod:`ddprof.analyses.straggler_cause` is tested on.

:class:`FaultyDP`, per step and rank, on the main thread (tid 1), with the step starting at t0 and every
rank starting its steps together (the all-reduce that ends each step ends for all at once)::

    DataLoader span [t0+10, t0+L-10) holding aten::randn [t0+12, +5)
    ops i = 0..n-1: aten::addmm (A), aten::view (V), a gap g after each
    c10d::allreduce_ [a, a+5)        (a: after the last op, a gap g, + the comm delay)
    gloo:all_reduce on tid 2 [a, e)  (e = the latest arrival + T on every rank)
    aten::add_ (optimizer) [e+g, +opt)  the step ends opt + g later

with ``L`` = 50 µs, plus ``delay`` on the faulty rank for ``input``. The faults (``fault`` on ``rank``):

* ``compute``: its addmm take ``factor`` × A (the same ops, more work);
* ``input``: ``delay`` more before its first op, inside the DataLoader span;
* ``stalls``: a pause of ``delay`` after its ops, every ``every``-th step (the rest normal);
* ``contention``: one in ``every`` of its addmm (a different one each step) stretches by a time slice
  ``delay`` (a busy CPU: the typical op as long as the others', a few far longer); with ``bursts``, only
  every ``every``-th step (a busy neighbour now and then: long steps like stalls, but inside ops);
* ``comm``: ``delay`` more between its last op and its collective entry;
* ``idle``: ``delay`` outside any op halfway through its ops, every step (a sleep or a lock mid-step);
* ``slow_core``: every op of its takes ``factor`` × its time, on the same input shapes as the others'
  (the same work on a core its host shares or runs slower: contention, named from
  :data:`~ddprof.analyses.straggler_cause.CONTENTION_MIN` up, the host's below it);
* ``late_end``: every ``every``-th step its all-reduce ends ``delay`` after the others' (its communication
  thread descheduled: the host's), and its next step starts that much later, so the others wait for it
  there: pauses that are the host's, no straggler (:func:`~ddprof.analyses.straggler_cause.host_pauses`);
* ``none``: a clean run.

``shapes`` (default on): each CPU op carries its recorded input shapes (the store's ``shapes``, a checksum):
the same on every rank, but the faulty rank's addmm under ``compute`` (more work: more rows). Off, the run
is as one recorded without shapes, where more work and a slower core look alike.

``shift`` (any fault): the faulty rank starts each step ``shift`` later, all of its work with it, so it
arrives late at every all-reduce with nothing in its step to explain it (its process descheduled between
steps). On a CPU run that is the host's, not the rank's: no straggler (:func:`FaultyDP.truth`).

Every duration gets a seeded jitter of ±``jitter`` (a share), so the ranks are never exactly equal.
:meth:`FaultyDP.truth` is the straggler and its cause class (None for ``none``).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Any

import polars as pl

from ddprof.store.schema import conform
from ddprof.synth.kineto import to_kineto
from ddprof.synth.schedule import US

#: The cause class each fault is (``ddprof.analyses.straggler_cause``).
CAUSE = {"compute": "compute", "input": "input", "stalls": "stalls", "contention": "contention",
         "comm": "communication", "idle": "host idle", "slow_core": "contention", "late_end": None, "none": None}
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@dataclass(frozen=True)
class FaultyDP:
    fault: str = "compute"
    rank: int = 1
    ranks: int = 4
    steps: int = 12
    ops: int = 8
    A: int = 400 * US
    V: int = 5 * US
    g: int = 20 * US
    T: int = 300 * US
    opt: int = 100 * US
    factor: float = 3.0
    delay: int = 3000 * US
    every: int = 4
    jitter: float = 0.05
    bursts: bool = False
    shift: int = 0
    shapes: bool = True
    seed: int = 0
    base: int = 1_700_000_000_000_000 * US

    def __post_init__(self) -> None:
        if self.fault not in CAUSE:
            raise ValueError(f"fault {self.fault!r}: one of {sorted(CAUSE)}")

    def _j(self, rng: random.Random, dur: float) -> int:
        """``dur`` with its jitter, in whole µs."""
        return max(1, round(dur * (1 + rng.uniform(-self.jitter, self.jitter)) / US)) * US

    def events(self) -> pl.DataFrame:
        out: list[dict[str, Any]] = []

        def add(rank: int, step: int, name: str, ts: int, dur: int, tid: int = 1, kind: str = "cpu_op",
                **extra: Any) -> None:
            bigger = rank == self.rank and self.fault == "compute" and name == "aten::addmm"
            shapes = zlib.crc32(f"{name}{' x' + str(self.factor) if bigger else ''}".encode()) \
                if self.shapes and kind == "cpu_op" else None
            out.append({"rank": rank, "ts_ns": ts, "dur_ns": dur, "pid": 100, "tid": tid,
                        "kind": kind, "cat": "cpu_op" if kind == "cpu_op" else "user_annotation", "name": name,
                        "step": step, "shapes": shapes, **extra})

        t0 = self.base
        coll: dict[str, Any] = dict(coll_op="all_reduce", pg="0", group_size=self.ranks, bytes=1 << 20,
                                    in_bytes=1 << 20, out_bytes=1 << 20, dtype="Float")
        carry = dict.fromkeys(range(self.ranks), 0)  # how much later than t0 a rank starts the step
        for s in range(self.steps):
            arrive: dict[int, int] = {}
            starts: dict[int, int] = {}
            for r in range(self.ranks):
                rng = random.Random(f"{self.seed}-{r}-{s}")
                bad = r == self.rank
                start = t0 + (self.shift if bad else 0) + carry[r]
                starts[r] = start
                lead = 50 * US + (self.delay if bad and self.fault == "input" else 0)
                add(r, s, LOADER, start + 10 * US, lead - 20 * US, kind="annotation")
                add(r, s, "aten::randn", start + 12 * US, 5 * US)  # the batch made, then the slow fetch
                t = start + lead
                for i in range(self.ops):
                    busy = not self.bursts or s % self.every == self.every - 1
                    stretch = self.delay if bad and self.fault == "contention" and busy and i % self.every == s % self.every \
                        else 0
                    a = self._j(rng, self.A * (self.factor if bad and self.fault in ("compute", "slow_core") else 1)) \
                        + stretch
                    add(r, s, "aten::addmm", t, a)
                    t += a + self._j(rng, self.g)
                    k = self.factor if bad and self.fault == "slow_core" else 1
                    add(r, s, "aten::view", t, self._j(rng, self.V * k))
                    t += self._j(rng, self.V * k) + self._j(rng, self.g)
                    if bad and self.fault == "idle" and i == self.ops // 2 - 1:
                        t += self.delay
                if bad and self.fault == "stalls" and s % self.every == self.every - 1:
                    t += self.delay
                t += self._j(rng, self.g) + (self.delay if bad and self.fault == "comm" else 0)
                add(r, s, "c10d::allreduce_", t, 5 * US, **coll)
                arrive[r] = t
            e = max(arrive.values()) + self.T
            late = self.delay if self.fault == "late_end" and s % self.every == self.every - 1 else 0
            for r in range(self.ranks):
                carry[r] = late if r == self.rank else 0  # its all-reduce ends this much after the others'
                add(r, s, "gloo:all_reduce", arrive[r], e + carry[r] - arrive[r], tid=2, kind="comm", **coll)
                add(r, s, "aten::add_", e + carry[r] + self.g, self.opt)
            end = e + 2 * self.g + self.opt
            for r in range(self.ranks):
                add(r, s, f"ProfilerStep#{s}", starts[r], end + carry[r] - starts[r], kind="annotation")
            t0 = end
        return conform(pl.DataFrame(out, infer_schema_length=None)).sort("rank", "ts_ns")

    def kineto(self) -> dict[int, dict[str, Any]]:
        return to_kineto(self.events(), self.ranks, backend="gloo")

    def truth(self) -> dict[str, Any]:
        """The straggler (None on a clean run) and its cause class."""
        cause = CAUSE[self.fault]
        return {"straggler": None if cause is None else self.rank, "cause": cause}
