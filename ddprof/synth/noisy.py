"""Generated data-parallel runs for the regression check: step times that vary with noise, known changes.

``NoisyDP``, per rank r and step s (all times whole µs, GPU kernels on stream 7, the all-reduce on 20)::

    [host op]   fwd [t0+40, +F·n)   bwd [.., +B·n + slow)   all_reduce buckets [arrive, e)   opt [e+10, +Opt·n)   step ends +30

with n a lognormal noise factor per (rank, step, kernel) (sd ``noise``) times one factor per run (sd
``run_noise``: nights differ a little as a whole), ``slow`` = ``slow_us`` on ``slow_rank``. Each of the
``buckets`` all-reduces of ``nbytes`` starts on a rank when its backward ends; every rank leaves it at the
latest arrival plus the transfer ``T / bw`` (noise as well), so a slow rank makes the others wait, and a
``bw`` of 0.7 is a 30 % drop in bus bandwidth. ``ProfilerStep#s`` spans the step on each rank and the
next step starts where it ended. Two runs with the same parameters but their ``seed`` differ by noise only.

The known causes of a slower run, one parameter each:

* ``host_us``: host work per step before the forward (``aten::copy_`` on the main thread, ``host_us · n``
  long), which the forward waits for; ``host_factor`` scales every piece of host work: on a GPU run that op
  (the kernels keep their times, the GPU waits longer), on a CPU run (``device="cpu"``) every op and the
  gloo transfer, which runs on the host too. 1.5 is a machine 1.5 times slower (another job beside it);
* ``factors``: ``(("bwd", 1.3),)`` makes one piece of work (``fwd``, ``bwd``, ``opt``, ``host``) 1.3 times
  longer on every rank: a change of the code; ``extra_us`` adds a new op after the forward (on rank
  ``extra_rank`` alone where given: one rank given more ops, as a pipeline stage given more layers);
* ``slow_rank``/``slow_us`` (one rank), ``bw`` (communication), ``buckets`` (the workload);
* ``pause_us``/``pause_share``: a share of the steps (drawn at random) in which one rank, each in turn,
  pauses ``pause_us`` outside any op before the step's first op and the others wait for it at the
  all-reduce: a machine busy now and then, one core at a time (its fastest steps keep their time).

``device="cpu"``: every op is a CPU op on the main thread (``aten::addmm`` forward, ``aten::mm`` backward,
``aten::add_`` optimizer step, ``aten::copy_`` host op, ``aten::cat`` the extra op) and each all-reduce a
``gloo:all_reduce`` on thread 2, as a gloo job records them; with ``shapes``, each op carries its recorded
input shapes (one per op name, the same in every run: a ``factors`` change is then the same work taking
longer, as a slower host gives it; without, nothing says what an op ran on).

``NoisyPipeline``: a pipeline run whose bubble per stage is known, one stage's larger on demand.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from typing import Any

import polars as pl

from ddprof.synth.kineto import to_kineto
from ddprof.synth.scenarios import COMM_NAMES, US, Rows, p2p_rows, step_row

AR = COMM_NAMES["nccl_dev"]


@dataclass(frozen=True)
class NoisyDP:
    ranks: int = 4
    steps: int = 20
    F: int = 3000
    B: int = 5000
    Opt: int = 800
    T: int = 1200
    nbytes: int = 64 << 20
    buckets: int = 1
    noise: float = 0.02
    run_noise: float = 0.01
    slow_rank: int | None = None
    slow_us: int = 0
    bw: float = 1.0
    seed: int = 0
    base: int = 1_700_000_000_000_000 * US
    device: str = "gpu"
    host_us: int = 0
    host_factor: float = 1.0
    factors: tuple[tuple[str, float], ...] = ()
    extra_us: int = 0
    extra_rank: int | None = None
    pause_us: int = 0
    pause_share: float = 0.0
    shapes: bool = False

    def names(self) -> dict[str, str]:
        """The op (CPU) or kernel (GPU) name of each piece of work."""
        if self.device == "cpu":
            return {"fwd": "aten::addmm", "bwd": "aten::mm", "opt": "aten::add_", "host": "aten::copy_",
                    "extra": "aten::cat"}
        return {"fwd": "gemm_fwd_kernel", "bwd": "gemm_bwd_kernel", "opt": "sgd_kernel", "host": "aten::copy_",
                "extra": "fused_extra_kernel"}

    def events(self) -> pl.DataFrame:
        if self.device == "cpu":
            return self._cpu_events()
        rng = random.Random(f"noisy-dp-{self.seed}")
        run_factor = math.exp(rng.gauss(0, self.run_noise))

        def us(x: float, sd: float | None = None) -> int:
            return max(1, round(x * run_factor * math.exp(rng.gauss(0, self.noise if sd is None else sd))))

        rows = Rows()
        t0 = [self.base + r * 7 * US for r in range(self.ranks)]
        meta = dict(coll_op="all_reduce", pg="0", group_size=self.ranks, bytes=self.nbytes,
                    in_bytes=self.nbytes, out_bytes=self.nbytes, dtype="Float")
        fac = dict(self.factors)
        pauses = 0
        for s in range(self.steps):
            bwd_end = []
            paused = None
            if self.pause_us and rng.random() < self.pause_share:
                paused, pauses = pauses % self.ranks, pauses + 1
            for r in range(self.ranks):
                f = t0[r] + 40 * US + (self.pause_us * US if r == paused else 0)
                if self.host_us:
                    hd = us(self.host_us * self.host_factor * fac.get("host", 1.0)) * US
                    rows.add(rank=r, ts_ns=f, dur_ns=hd, pid=100, tid=1, kind="cpu_op", cat="cpu_op",
                             name="aten::copy_", step=s)
                    f += hd + 30 * US
                fd = us(self.F * fac.get("fwd", 1.0)) * US
                rows.kernel(r, s, "compute", "gemm_fwd_kernel", f, fd, 7, f - 20 * US)
                if self.extra_us and self.extra_rank in (None, r):
                    xd = us(self.extra_us) * US
                    rows.kernel(r, s, "compute", "fused_extra_kernel", f + fd, xd, 7, f - 18 * US)
                    fd += xd
                bd = (us(self.B * fac.get("bwd", 1.0)) + (self.slow_us if r == self.slow_rank else 0)) * US
                rows.kernel(r, s, "compute", "gemm_bwd_kernel", f + fd, bd, 7, f - 15 * US)
                bwd_end.append(f + fd + bd)
            start = list(bwd_end)
            for _ in range(self.buckets):
                end = max(start) + us(self.T / self.bw, self.noise / 2) * US
                for r in range(self.ranks):
                    rows.kernel(r, s, "comm", AR, start[r], end - start[r], 20, t0[r] + 30 * US, **meta)
                start = [end] * self.ranks
            for r in range(self.ranks):
                o = start[r] + 10 * US
                od = us(self.Opt * fac.get("opt", 1.0)) * US
                rows.kernel(r, s, "compute", "sgd_kernel", o, od, 7, t0[r] + 35 * US)
                step_end = o + od + 30 * US
                step_row(rows, r, s, t0[r], step_end - t0[r])
                t0[r] = step_end
        return rows.frame()

    def _cpu_events(self) -> pl.DataFrame:
        """The same job as a gloo run on CPUs (module doc): every op host work, scaled by ``host_factor``."""
        rng = random.Random(f"noisy-dp-cpu-{self.seed}")
        run_factor = math.exp(rng.gauss(0, self.run_noise))
        fac, name, hf = dict(self.factors), self.names(), self.host_factor

        def us(x: float, sd: float | None = None) -> int:
            return max(1, round(x * hf * run_factor * math.exp(rng.gauss(0, self.noise if sd is None else sd))))

        rows = Rows()

        def op(r: int, s: int, part: str, ts: int, dur: int) -> int:
            rows.add(rank=r, ts_ns=ts, dur_ns=dur, pid=100, tid=1, kind="cpu_op", cat="cpu_op", name=name[part],
                     step=s, **({"shapes": zlib.crc32(name[part].encode())} if self.shapes else {}))
            return ts + dur

        t0 = [self.base + r * 7 * US for r in range(self.ranks)]
        meta = dict(coll_op="all_reduce", pg="0", group_size=self.ranks, bytes=self.nbytes,
                    in_bytes=self.nbytes, out_bytes=self.nbytes, dtype="Float")
        pauses = 0
        for s in range(self.steps):
            bwd_end = []
            paused = None
            if self.pause_us and rng.random() < self.pause_share:
                paused, pauses = pauses % self.ranks, pauses + 1
            for r in range(self.ranks):
                t = t0[r] + 40 * US + (self.pause_us * US if r == paused else 0)
                if self.host_us:
                    t = op(r, s, "host", t, us(self.host_us * fac.get("host", 1.0)) * US) + 20 * US
                t = op(r, s, "fwd", t, us(self.F * fac.get("fwd", 1.0)) * US)
                if self.extra_us and self.extra_rank in (None, r):
                    t = op(r, s, "extra", t, us(self.extra_us) * US)
                slow = self.slow_us if r == self.slow_rank else 0
                bwd_end.append(op(r, s, "bwd", t, (us(self.B * fac.get("bwd", 1.0)) + slow) * US))
            start = list(bwd_end)
            for _ in range(self.buckets):
                end = max(start) + us(self.T / self.bw, self.noise / 2) * US
                for r in range(self.ranks):
                    rows.add(rank=r, ts_ns=start[r], dur_ns=end - start[r], pid=100, tid=2, kind="comm",
                             cat="user_annotation", name="gloo:all_reduce", step=s, **meta)
                start = [end] * self.ranks
            for r in range(self.ranks):
                step_end = op(r, s, "opt", start[r] + 10 * US, us(self.Opt * fac.get("opt", 1.0)) * US) + 30 * US
                step_row(rows, r, s, t0[r], step_end - t0[r])
                t0[r] = step_end
        return rows.frame()

    def kineto(self) -> dict[int, dict[str, Any]]:
        return to_kineto(self.events(), self.ranks)


@dataclass(frozen=True)
class NoisyPipeline:
    """A GPipe pipeline (:class:`~ddprof.synth.scenarios.Pipeline`'s schedule: P stages, M micro-batches, each step L = (M+P−1)(tf+tb)
    long on every stage) whose kernels fill a noisy share of their slots: a forward on stage p runs
    ``tf · fill_p · n`` (n lognormal, sd ``noise``, capped at the slot), with ``fill_p`` = ``fill`` but
    ``thin`` on ``thin_stage``. The bubble of stage p per step is 1 − M(tf+tb)·fill_p·n̄ / L: about
    1 − 6·0.9/9 = 40 % with the defaults, 1 − 6·0.6/9 = 60 % on a stage thinned to 0.6 (in every device
    step but the last, which ends with the stage's last kernel). The steps follow each other with no gap."""

    stages: int = 4
    micro: int = 6
    steps: int = 12
    tf: int = 300
    tb: int = 600
    fill: float = 0.9
    thin_stage: int | None = None
    thin: float = 0.6
    noise: float = 0.02
    nbytes: int = 4 << 20
    seed: int = 0
    base: int = 1_700_000_000_000_000 * US

    def events(self) -> pl.DataFrame:
        rng = random.Random(f"noisy-pipeline-{self.seed}")
        rows = Rows()
        P, M = self.stages, self.micro
        L = (M + P - 1) * (self.tf + self.tb)

        def dur(slot: int, p: int) -> int:
            fill = self.thin if p == self.thin_stage else self.fill
            return min(slot, max(1, round(slot * fill * math.exp(rng.gauss(0, self.noise))))) * US

        def p2p(s: int, src: int, dst: int, t: int) -> None:
            p2p_rows(rows, s, src, dst, t, 2 * US, self.nbytes, P)

        for s in range(self.steps):
            t0 = self.base + s * L * US  # back to back, as a training loop's steps
            for p in range(P):
                step_row(rows, p, s, t0, L * US)
                for m in range(M):
                    f = t0 + (m + p) * self.tf * US
                    rows.kernel(p, s, "compute", "fwd_kernel", f, dur(self.tf, p), 7, None)
                    if p + 1 < P:
                        p2p(s, p, p + 1, f + self.tf * US)
                for j in range(M):
                    b = t0 + ((M + P - 1) * self.tf + (j + P - 1 - p) * self.tb) * US
                    rows.kernel(p, s, "compute", "bwd_kernel", b, dur(self.tb, p), 7, None)
                    if p > 0:
                        p2p(s, p, p - 1, b + self.tb * US)
        return rows.frame()

    def kineto(self) -> dict[int, dict[str, Any]]:
        return to_kineto(self.events(), self.stages)
