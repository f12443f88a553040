"""Scenarios with known answers, built event by event: store frames (and the same runs as Kineto traces).

Where :class:`~ddprof.synth.spec.Spec` simulates a whole training job, a scenario places each event by
hand, so that its answers follow from its parameters by arithmetic a reader can check. Three scenarios, each a frozen dataclass with ``events()`` (a conformed event table), ``kineto()``
(one Kineto trace dict per rank, for checks through ingest or HTA) and ``truth()`` (the answers,
derived from the parameters by hand, not by the code under test; :mod:`.noisy` holds two more, for
``ddprof check``). All times are whole microseconds
(multiples of 1,000 ns), so Kineto's microsecond timestamps carry them exactly.

``DataParallel``, per step s and rank r, with d = the rank's delay at step s (slow rank + jitter, or
``delays[s][r]``)::

    stream 7   K1 [a0, a0+F)  K1b [a0+F+KW, +Fb+d)          K2 [e+OG, +G)
    stream 20                          comm [K1b_end−X, e)        (e = a0+F+KW+Fb+max d−X+T on all ranks)
    stream 22                                                      memcpy [e+OG+G+20µs, +M)

  The comm kernel overlaps K1b by X; the slowest rank's comm takes exactly T (the transfer), the
  others wait max d − d more. On CPU (``device="cpu"``) K1, K1b, K2 are cpu_ops on the main thread and
  the comm is a ``gloo:all_reduce`` row on a gloo thread; no memcpy.
  ``lag``: the device runs ``lag`` ns behind the host: every kernel above starts ``lag`` later, while the
  host's ``ProfilerStep#s`` and launches stay where they were (a lag of 1.5 steps: the host launches step
  s+2's kernels while the device still runs step s's). The device steps (from step s's first kernel, K1, to
  step s+1's) move with the device, so bubbles and the idle time per step do not change; a gap after
  which the launch came before the previous kernel ended is no longer host wait.
``CollectiveBench``: comm kernels only, every rank enters together, known op, size and time.
``Pipeline``: a GPipe schedule with P stages (any rank order) and M micro-batches.

:func:`~ddprof.synth.write.write_kineto` writes a scenario's traces as files (``rank<N>.pt.trace.json``),
and :func:`~ddprof.synth.write.ingest_generated` ingests them into a run dir: the one way a scenario
becomes a run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import polars as pl

from ddprof.store.schema import conform
from ddprof.synth.kineto import NCCL_KERNEL, to_kineto
from ddprof.synth.schedule import US

COMM_NAMES = {
    "nccl": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "nccl_dev": NCCL_KERNEL["allreduce"],
    "rccl": "ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)",
    "multimem": "void multimem_all_reduce_kernel<float>(float*, unsigned long)",
}
BUSBW = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
         "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
         "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}


class Rows:
    """Accumulates event rows; hands out correlation ids for launches."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.corr = 1000

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def kernel(self, rank: int, step: int | None, kind: str, name: str, ts: int, dur: int, stream: int,
               launch: int | None, **meta: Any) -> None:
        self.corr += 1
        self.add(rank=rank, ts_ns=ts, dur_ns=dur, pid=0, tid=stream, device=0, stream=stream, kind=kind,
                 cat={"memcpy": "gpu_memcpy"}.get(kind, "kernel"), name=name, step=step,
                 correlation=self.corr, external_id=self.corr, **meta)
        if launch is not None:
            self.add(rank=rank, ts_ns=launch, dur_ns=4 * US, pid=100, tid=1, kind="runtime", cat="cuda_runtime",
                     name="cudaMemcpyAsync" if kind == "memcpy" else "cudaLaunchKernel", step=step,
                     correlation=self.corr, external_id=self.corr)

    def frame(self) -> pl.DataFrame:
        return conform(pl.DataFrame(self.rows, infer_schema_length=None)).sort("rank", "ts_ns")


def step_row(rows: Rows, rank: int, step: int, t0: int, length: int) -> None:
    """The ``ProfilerStep#<step>`` annotation of ``rank``: [t0, t0 + length) on the main thread."""
    rows.add(rank=rank, ts_ns=t0, dur_ns=length, pid=100, tid=1, kind="annotation", cat="user_annotation",
             name=f"ProfilerStep#{step}", step=step)


def p2p_rows(rows: Rows, step: int, src: int, dst: int, t: int, dur: int, nbytes: int, group_size: int) -> None:
    """One transfer of group ``"0"`` at ``t``: the send kernel on ``src`` and the receive on ``dst`` (stream 20)."""
    meta = dict(pg="0", group_size=group_size, bytes=nbytes, dtype="Float")
    rows.kernel(src, step, "comm", "ncclKernel_SendRecv", t, dur, 20, None, coll_op="send", peer=dst, **meta)
    rows.kernel(dst, step, "comm", "ncclKernel_SendRecv", t, dur, 20, None, coll_op="recv", peer=src, **meta)


@dataclass(frozen=True)
class DataParallel:
    ranks: int = 4
    steps: int = 3
    slow_rank: int | None = 2
    delay: int = 400 * US
    jitter: int = 0
    device: str = "gpu"
    naming: str = "nccl"
    op: str = "all_reduce"
    nbytes: int = 64 << 20
    a0: int = 100 * US
    F: int = 1000 * US
    KW: int = 5 * US
    Fb: int = 2000 * US
    X: int = 500 * US
    T: int = 800 * US
    OG: int = 50 * US
    G: int = 1500 * US
    M: int = 100 * US
    step_ns: int = 10_000 * US
    base: int = 1_700_000_000_000_000 * US
    seed: int = 0
    delays: tuple[tuple[int, ...], ...] | None = None
    lag: int = 0

    def __post_init__(self) -> None:
        if self.lag and self.device != "gpu":
            raise ValueError("lag: a CPU-only run has no device to lag its host")
        if self.lag < 0:
            raise ValueError("lag: the device cannot run ahead of the host that launches its work")
        if any(self.last_end(s) >= self.step_ns + self.a0 for s in range(self.steps)):
            raise ValueError("a step's device work must end before the next step's first kernel starts")

    def d(self, r: int, s: int) -> int:
        """Delay of rank r at step s: ``delays[s][r]`` when given, else the slow rank's delay plus
        whole-µs jitter (seeded)."""
        if self.delays is not None:
            return self.delays[s][r]
        j = random.Random(f"{self.seed}-{r}-{s}").randint(0, self.jitter // US) * US if self.jitter else 0
        return j + (self.delay if r == self.slow_rank else 0)

    def dmax(self, s: int) -> int:
        return max(self.d(r, s) for r in range(self.ranks))

    def e_rel(self, s: int) -> int:
        """When step s's collective ends on every rank, from the step's host start (before the lag)."""
        return self.a0 + self.F + self.KW + self.Fb + self.dmax(s) - self.X + self.T

    def last_end(self, s: int) -> int:
        """When step s's last device work ends (the memcpy on GPU, K2 on CPU), from its host start (before the lag)."""
        return self.e_rel(s) + self.OG + self.G + ((20 * US + self.M) if self.device == "gpu" else 0)

    def events(self) -> pl.DataFrame:
        rows = Rows()
        gpu = self.device == "gpu"
        for r in range(self.ranks):
            for s in range(self.steps):
                h0, d = self.base + s * self.step_ns, self.d(r, s)
                step_row(rows, r, s, h0, self.step_ns)
                t0 = h0 + self.lag  # the device's time for the step (launches stay at the host's h0)
                k1b = t0 + self.a0 + self.F + self.KW
                e = k1b + self.Fb + self.dmax(s) - self.X + self.T
                arrive = k1b + self.Fb + d - self.X
                coll = dict(coll_op=self.op, pg="0", group_size=self.ranks, bytes=self.nbytes,
                            in_bytes=self.nbytes, out_bytes=self.nbytes, dtype="Float")
                comp = [("gemm_fwd_kernel", t0 + self.a0, self.F, 50),
                        ("elementwise_kernel", k1b, self.Fb + d, 60),
                        ("gemm_bwd_kernel", e + self.OG, self.G, 80)]
                if gpu:
                    for name, ts, dur, launch in comp:
                        rows.kernel(r, s, "compute", name, ts, dur, 7, h0 + launch * US)
                    rows.kernel(r, s, "comm", COMM_NAMES[self.naming], arrive, e - arrive, 20, h0 + 70 * US, **coll)
                    rows.kernel(r, s, "memcpy", "Memcpy DtoH (Device -> Pinned)",
                                e + self.OG + self.G + 20 * US, self.M, 22, h0 + 90 * US)
                    rows.add(rank=r, ts_ns=h0 + 65 * US, dur_ns=3 * US, pid=100, tid=1, kind="cpu_op", cat="cpu_op",
                             name="c10d::allreduce_", step=s, **coll)
                else:
                    for name, ts, dur, _ in comp:
                        rows.add(rank=r, ts_ns=ts, dur_ns=dur, pid=100, tid=1, kind="cpu_op", cat="cpu_op",
                                 name=f"aten::{name}", step=s)
                    rows.add(rank=r, ts_ns=arrive, dur_ns=e - arrive, pid=100, tid=2, kind="comm",
                             cat="user_annotation", name="gloo:all_reduce", step=s, **coll)
                    rows.add(rank=r, ts_ns=arrive - 2 * US, dur_ns=US, pid=100, tid=3, kind="cpu_op", cat="cpu_op",
                             name="c10d::allreduce_", step=s, **coll)
        return rows.frame()

    def truth(self) -> dict[str, Any]:
        S, n = range(self.steps), self.ranks
        gpu = self.device == "gpu"
        out: dict[str, Any] = {"overlap": {}, "breakdown": {}, "idle": {}, "bubble": {}, "step_overlap": {},
                               "window": {}, "step_idle": {}}
        e_rel, last_end = self.e_rel, self.last_end
        last = self.steps - 1
        # A GPU rank's device step s runs from its first kernel (K1, at a0 after the step's device start) to
        # step s+1's, step_ns later; the last one ends with its last kernel. A CPU rank's host step is its
        # ProfilerStep span, which holds all its work.
        window = [self.step_ns if s < last or not gpu else last_end(s) - self.a0 for s in S]
        kw = 30 * US  # the idle analysis' kernel-wait threshold

        def cause(launch: int, prev_end: int, gap: int) -> str:
            """A gap's category (ddprof.analyses.idle): the launch (host time) after the previous kernel's end
            (device time, ``lag`` later) is host wait; else a gap under 30 µs is kernel wait, any other other."""
            return "host_wait" if launch > prev_end + self.lag else "kernel_wait" if gap < kw else "other"

        for r in range(n):
            comm = [self.T + self.dmax(s) - self.d(r, s) for s in S]
            out["overlap"][r] = {"overlap_pct": 100 * self.X * len(comm) / sum(comm),
                                 "comm_us": sum(comm) / US, "exposed_comm_us": (sum(comm) - self.X * len(comm)) / US}
            out["step_overlap"][r] = {s: 100 * self.X / comm[s] for s in S}
            busy = [e_rel(s) - (self.a0 + self.KW) + self.G + (self.M if gpu else 0) for s in S]
            compute = [self.F + self.Fb + self.d(r, s) + self.G for s in S]
            span = (self.steps - 1) * self.step_ns + last_end(self.steps - 1) - self.a0
            out["breakdown"][r] = {"span_us": span / US, "idle_us": (span - sum(busy)) / US,
                                   "compute_us": sum(compute) / US, "non_compute_us": (sum(busy) - sum(compute)) / US}
            out["window"][r] = {s: window[s] / US for s in S}
            out["bubble"][r] = {s: (window[s] - compute[s]) / US for s in S}
            if gpu:
                # Per stream and step s: the gaps that end in it, (category, length) -- each ends at one of
                # step s's kernels, inside its device step. Times from the host start of step s (h0).
                gaps: dict[tuple[int, int], list[tuple[str, int]]] = {}
                for s in S:
                    k1b_end = self.a0 + self.F + self.KW + self.Fb + self.d(r, s)
                    own = [(7, cause(60 * US, self.a0 + self.F, self.KW), self.KW),
                           (7, cause(80 * US, k1b_end, e_rel(s) + self.OG - k1b_end), e_rel(s) + self.OG - k1b_end)]
                    if s > 0:  # from the previous step's last kernel on the stream (step_ns earlier)
                        prev_k2 = e_rel(s - 1) + self.OG + self.G - self.step_ns
                        prev_comm = e_rel(s - 1) - self.step_ns
                        prev_copy = last_end(s - 1) - self.step_ns
                        arrive = k1b_end - self.X
                        copy = e_rel(s) + self.OG + self.G + 20 * US
                        own += [(7, cause(50 * US, prev_k2, self.a0 - prev_k2), self.a0 - prev_k2),
                                (20, cause(70 * US, prev_comm, arrive - prev_comm), arrive - prev_comm),
                                (22, cause(90 * US, prev_copy, copy - prev_copy), copy - prev_copy)]
                    for stream, category, gap in own:
                        gaps.setdefault((stream, s), []).append((category, gap))
                out["step_idle"][r] = {key: sum(g for _, g in found) / US for key, found in gaps.items()}
                whole: dict[tuple[int, str], float] = {(st, c): 0.0 for st in (7, 20, 22)
                                                       for c in ("host_wait", "kernel_wait", "other")}
                for (stream, _), found in gaps.items():
                    for category, gap in found:
                        whole[(stream, category)] += gap / US
                out["idle"][r] = whole
        lasts = {s: [r for r in range(n) if self.d(r, s) == self.dmax(s)] for s in S}
        waits: dict[int, float] = {r: 0 for r in range(n)}
        times_last = {r: 0 for r in range(n)}
        for s in S:
            if len(lasts[s]) == 1:
                times_last[lasts[s][0]] += 1
                # one collective per step, steps apart: the union of each rank's waits is their sum
                waits[lasts[s][0]] += sum(self.dmax(s) - self.d(r, s) for r in range(n)) / US
        out["collectives"] = [{"index": s, "op": self.op, "bytes": self.nbytes, "arrival_skew_us":
                               (self.dmax(s) - min(self.d(r, s) for r in range(n))) / US, "duration_us": self.T / US,
                               "algbw_gbps": self.nbytes / self.T, "busbw_gbps": self.nbytes / self.T * BUSBW[self.op](n),
                               "last_rank": lasts[s][0] if len(lasts[s]) == 1 else None} for s in S]
        out["stragglers"] = {"times_last": times_last, "wait_caused_us": waits, "step_us": self.step_ns / US}
        return out

    def kineto(self) -> dict[int, dict[str, Any]]:
        return to_kineto(self.events(), self.ranks, backend="nccl" if self.device == "gpu" else "gloo")


@dataclass(frozen=True)
class CollectiveBench:
    """Back-to-back collectives, every rank entering together: (op, bytes, transfer µs) repeated."""

    ranks: int = 8
    ops: tuple[tuple[str, int, int], ...] = (("all_reduce", 1 << 20, 50), ("all_reduce", 64 << 20, 700),
                                             ("all_gather", 8 << 20, 120), ("all_to_all", 4 << 20, 90),
                                             ("broadcast", 2 << 20, 40))
    repeats: int = 3
    base: int = 1_000_000 * US

    def events(self) -> pl.DataFrame:
        rows = Rows()
        for r in range(self.ranks):
            t = self.base
            for _ in range(self.repeats):
                for op, nbytes, t_us in self.ops:
                    rows.kernel(r, None, "comm", f"ncclKernel_{op}", t, t_us * US, 20, t - 10 * US, coll_op=op,
                                pg="0", group_size=self.ranks, bytes=nbytes, dtype="Float")
                    t += (t_us + 30) * US
        return rows.frame()

    def kineto(self) -> dict[int, dict[str, Any]]:
        return to_kineto(self.events(), self.ranks)

    def truth(self) -> dict[tuple[str, int], dict[str, float]]:
        n = self.ranks
        return {(op, b): {"count": self.repeats, "algbw_gbps": b / (t * US), "busbw_gbps": b / (t * US) * BUSBW[op](n)}
                for op, b, t in self.ops}


@dataclass(frozen=True)
class Pipeline:
    """GPipe: forward of micro-batch m on stage p in [(m+p)·tf, +tf); backward j (micro-batch M−1−j) on
    stage p at (M+P−1)·tf + (j+P−1−p)·tb. Each step lasts L = (M+P−1)(tf+tb) on every stage, of which
    each stage computes M(tf+tb): bubble (P−1)/(M+P−1). ``order[p]`` is the rank at stage p. The steps
    follow each other with no gap, as a training loop's ProfilerSteps do.

    Measured per device step (from the stage's first kernel of the step, at p·tf, to the next step's), a
    step but the last lasts L, so its bubble is the theory's; the last ends with the stage's last kernel
    (its last backward, then the send of its gradients, eps, on a stage p > 0), so it lasts
    (M+P−1−p)(tf+tb) (+ eps): the wait for the first activations of that step lies before it began.
    ``truth()["device_bubble_pct"]`` is the mean over the steps per rank."""

    order: tuple[int, ...] = (2, 0, 3, 1)
    micro: int = 6
    tf: int = 300 * US
    tb: int = 600 * US
    steps: int = 2
    eps: int = 2 * US
    nbytes: int = 4 << 20
    base: int = 5_000_000 * US

    def events(self) -> pl.DataFrame:
        rows = Rows()
        P, M = len(self.order), self.micro
        L = (M + P - 1) * (self.tf + self.tb)
        for s in range(self.steps):
            t0 = self.base + s * L
            for p, r in enumerate(self.order):
                step_row(rows, r, s, t0, L)
                for m in range(M):
                    f = t0 + (m + p) * self.tf
                    rows.kernel(r, s, "compute", "fwd_kernel", f, self.tf, 7, None)
                    if p + 1 < P:
                        self._p2p(rows, s, r, self.order[p + 1], f + self.tf)
                for j in range(M):
                    b = t0 + (M + P - 1) * self.tf + (j + P - 1 - p) * self.tb
                    rows.kernel(r, s, "compute", "bwd_kernel", b, self.tb, 7, None)
                    if p > 0:
                        self._p2p(rows, s, r, self.order[p - 1], b + self.tb)
        return rows.frame()

    def _p2p(self, rows: Rows, s: int, src: int, dst: int, t: int) -> None:
        p2p_rows(rows, s, src, dst, t, self.eps, self.nbytes, len(self.order))

    def kineto(self) -> dict[int, dict[str, Any]]:
        return to_kineto(self.events(), len(self.order))

    def truth(self) -> dict[str, Any]:
        P, M = len(self.order), self.micro
        L, busy = (M + P - 1) * (self.tf + self.tb), M * (self.tf + self.tb)

        def measured(p: int) -> float:
            last = (M + P - 1 - p) * (self.tf + self.tb) + (self.eps if p > 0 else 0)
            windows = [L] * (self.steps - 1) + [last]
            return sum(100 * (w - busy) / w for w in windows) / len(windows)

        return {"stages": P, "micro_batches": M, "stage_of": {r: p for p, r in enumerate(self.order)},
                "bubble_pct": 100 * (P - 1) / (M + P - 1),
                "device_bubble_pct": {r: measured(p) for p, r in enumerate(self.order)}}


def moe_splits(ranks: int, tokens: int, hot_rank: int, hot_share: float) -> list[int]:
    """Tokens one rank routes to each rank's expert: ``round(hot_share · tokens)`` to ``hot_rank``, the rest
    evenly to the others (the remainder to the first of them)."""
    hot = round(tokens * hot_share)
    others = [r for r in range(ranks) if r != hot_rank]
    each, extra = divmod(tokens - hot, len(others)) if others else (0, 0)
    splits = [each] * ranks
    splits[hot_rank] = hot
    if others:
        splits[others[0]] += extra
    return splits


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts layer per step, an expert per rank, on GPUs (``gpus_per_host`` ranks a host,
    ``device_name`` in the traces' device properties). Per step s, every rank r::

        stream 7    gate [t0+A, +G)                        expert [e1+GAP, +E·tokens_r)
        stream 20                 dispatch [t0+A+G, e1)                                 combine [x_r, e2)

    Every rank routes ``hot_share`` of its ``tokens`` to ``hot_rank`` and the rest evenly (:func:`moe_splits`),
    ``row_bytes`` a token: the dispatch all-to-all's matrix is ``M[s, d] = splits[d] · row_bytes`` for every
    sender s, the combine's its transpose. The dispatch takes ``Td`` on every rank (e1 = t0+A+G+Td); the
    expert of rank r computes ``E`` per token it received (``tokens_r = ranks · splits[r]``), so the hot rank
    enters the combine last, at ``x_hot``, and the others wait for it; the combine ends at e2 = max x + Tc.
    """

    ranks: int = 8
    steps: int = 3
    tokens: int = 1024
    hot_rank: int = 5
    hot_share: float = 0.4
    row_bytes: int = 4096
    gpus_per_host: int = 8
    device_name: str = "NVIDIA H100 80GB HBM3"
    A: int = 20 * US
    G: int = 100 * US
    Td: int = 300 * US
    GAP: int = 5 * US
    E_ns: int = 500  # expert time per token received
    Tc: int = 300 * US
    step_ns: int = 10_000 * US
    base: int = 1_700_000_000_000_000 * US

    def splits(self) -> list[int]:
        return moe_splits(self.ranks, self.tokens, self.hot_rank, self.hot_share)

    def host_of(self, rank: int) -> int:
        return rank // self.gpus_per_host

    def received(self, r: int) -> int:
        return self.ranks * self.splits()[r]

    def events(self) -> pl.DataFrame:
        rows = Rows()
        splits = self.splits()
        n = self.ranks
        expert = [self.E_ns * self.received(r) for r in range(n)]
        for s in range(self.steps):
            t0 = self.base + s * self.step_ns
            e1 = t0 + self.A + self.G + self.Td
            x = [e1 + self.GAP + expert[r] for r in range(n)]
            e2 = max(x) + self.Tc
            for r in range(n):
                step_row(rows, r, s, t0, self.step_ns)
                rows.kernel(r, s, "compute", "moe_gate_gemm_kernel", t0 + self.A, self.G, 7, t0 + 5 * US)
                send = [b * self.row_bytes for b in splits]
                recv = [splits[r] * self.row_bytes] * n
                meta = dict(coll_op="all_to_all", pg="0", group_size=n, dtype="Float")
                rows.kernel(r, s, "comm", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
                            t0 + self.A + self.G, self.Td, 20, t0 + 10 * US, bytes=sum(send), in_bytes=sum(send),
                            out_bytes=sum(recv), send_splits=send, recv_splits=recv, **meta)
                rows.kernel(r, s, "compute", "moe_expert_gemm_kernel", e1 + self.GAP, expert[r], 7, t0 + 15 * US)
                rows.kernel(r, s, "comm", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
                            x[r], e2 - x[r], 20, t0 + 20 * US, bytes=sum(recv), in_bytes=sum(recv),
                            out_bytes=sum(send), send_splits=recv, recv_splits=send, **meta)
        return rows.frame()

    def kineto(self) -> dict[int, dict[str, Any]]:
        traces = to_kineto(self.events(), self.ranks)
        for t in traces.values():
            t["deviceProperties"] = [{"id": 0, "name": self.device_name}]
        return traces

    def truth(self) -> dict[str, Any]:
        """The answers by hand: per instance (dispatch, combine of each step) the bytes by rank pair and
        the imbalance; the run's matrix; the hot rank's load explains the combine's wait."""
        n, splits, row = self.ranks, self.splits(), self.row_bytes
        dispatch = [[splits[d] * row for d in range(n)] for _ in range(n)]
        combine = [[dispatch[d][s] for d in range(n)] for s in range(n)]
        mean = self.tokens * row  # every rank sends its tokens: the mean a rank receives
        recv_max = n * max(splits) * row
        summed = [[self.steps * (dispatch[s][d] + combine[s][d]) for d in range(n)] for s in range(n)]
        return {"instances": 2 * self.steps, "dispatch": dispatch, "combine": combine, "matrix": summed,
                "dispatch_recv_imbalance": recv_max / mean, "dispatch_send_imbalance": 1.0,
                "combine_send_imbalance": recv_max / mean, "combine_recv_imbalance": 1.0,
                "hot_rank": self.hot_rank, "stragglers": [],
                "hosts": {r: self.host_of(r) for r in range(n)}}
