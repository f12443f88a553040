"""The true metrics of a generated run, from its timeline (true clock), by plain interval arithmetic.

|U(X)| (the time covered by at least one interval of X): sort by start, keep the running maximum of the
ends, and add ``max(0, end_i − max(start_i, reach_{i−1}))`` per interval. Example: [0,4) [2,5) [9,10)
-> 4 + 1 + 1 = 6.

Per rank: ``compute_us = |U(compute kernels)|``, ``comm_us = |U(NCCL kernels)|``, ``overlapped_us =
compute + comm − |U(compute ∪ comm)|``, ``overlap_pct = 100 · overlapped / comm``, ``exposed_comm_us =
comm − overlapped``, ``span_us`` = last kernel end − first kernel start, ``idle_us = span − |U(all)|``,
``non_compute_us = |U(all)| − compute``. Per (rank, step): ``step_us`` (the ``ProfilerStep#N`` span),
the window (the device step: from the step's first kernel to the next step's first kernel, the last one
to the last kernel end), ``bubble_us = window − |U(compute inside the window)|`` and the overlap of the
kernels inside the window, whichever step launched them. :func:`events_truth` computes the same from a scenario's event table (memory copies count as
busy, neither compute nor communication). Per collective instance: arrival skew (latest − earliest arrival), duration (the transfer,
``end − latest arrival``), the last arriver. The pipeline: stages P, micro-batches M and the GPipe/1F1B
bubble ``100 · (P−1)/(M+P−1)``.

**Without the fault** (``without_fault``, a run with slow ranks: one straggler, or every rank of a
pipeline stage; or with a host's slow link; or with poor overlap): the same run simulated again with no rank
or link slow and its all-reduces overlapped (the same kernels, the same noise: each
block's noise is drawn from its own seed), and both runs' **step**: per step, from the earliest start of
its rows on any rank (the launch calls) to the latest end (kernels, transfers, launch calls), averaged
over the steps: the step a what-if projection gives (:mod:`ddprof.analyses.whatif.projections`).
Example: rank 3 of 8 at 1.3x: ``{"fault": "slow ranks 3", "slow_ranks": [3], "poor_overlap": false, "step_us": 3120.4,
"without_fault_step_us": 2610.9}``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import polars as pl

from ddprof.synth.schedule import US, Timeline, block_kernels, groups, simulate
from ddprof.synth.spec import Spec


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """|U| of intervals [starts, ends) (module doc)."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    prev = np.concatenate(([s[0]], reach[:-1]))
    return int(np.maximum(0, e - np.maximum(s, prev)).sum())


#: (start, end, step) of a rank's kernels of one kind, ns.
Intervals = tuple[np.ndarray, np.ndarray, np.ndarray]
_NONE: Intervals = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _intervals(spec: Spec, line: Timeline) -> dict[str, Intervals]:
    """(start, end, step) arrays of the rank's compute and comm kernels."""
    parts = [block_kernels(spec, line.rank, b) + (b.step,) for b in line.blocks]
    cs = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    cd = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    cstep = np.concatenate([np.full(len(p[0]), p[2]) for p in parts]) if parts else np.zeros(0, np.int64)
    ms = np.array([c.arrival for c in line.comms], dtype=np.int64)
    me = np.array([c.end for c in line.comms], dtype=np.int64)
    mstep = np.array([c.step for c in line.comms], dtype=np.int64)
    return {"compute": (cs, cs + cd, cstep), "comm": (ms, me, mstep)}


def _overlap(comp: tuple[np.ndarray, np.ndarray], comm: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    c, m = union_ns(*comp), union_ns(*comm)
    both = union_ns(np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]]))
    over = c + m - both
    return {"compute_ns": c, "comm_ns": m, "busy_ns": both, "overlapped_ns": over}


def rank_metrics(head: dict[str, Any], compute: Intervals, comm: Intervals, steps: list[tuple[int, int, int]],
                 other: Intervals = _NONE) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The per-rank row (``head``'s fields first: ``rank``, ...) and the per-step rows of one rank (module
    doc), from its compute, comm and ``other`` GPU work (memory copies: busy, neither compute nor comm)
    and its ``(step, start, end)`` spans."""
    (cs, ce, cstep), (ms, me, mstep), (xs, xe, xstep) = compute, comm, other
    o = _overlap((cs, ce), (ms, me))
    all_s, all_e = np.concatenate([cs, ms, xs]), np.concatenate([ce, me, xe])
    busy = union_ns(all_s, all_e) if len(xs) else o["busy_ns"]
    span = int(all_e.max() - all_s.min())
    per_rank = {
        **head,
        "compute_us": o["compute_ns"] / US, "comm_us": o["comm_ns"] / US, "overlapped_us": o["overlapped_ns"] / US,
        "overlap_pct": 100.0 * o["overlapped_ns"] / o["comm_ns"] if o["comm_ns"] else None,
        "exposed_comm_us": (o["comm_ns"] - o["overlapped_ns"]) / US,
        "span_us": span / US, "idle_us": (span - busy) / US,
        "non_compute_us": (busy - o["compute_ns"]) / US,
        "step_us": float(np.mean([(e - s) / US for _, s, e in steps])),
    }
    rows = []
    firsts = {}
    for step, _, _ in steps:
        mine = np.concatenate([cs[cstep == step], ms[mstep == step], xs[xstep == step]])
        if len(mine):
            firsts[step] = int(mine.min())
    launched = sorted(firsts)
    for i, step in enumerate(launched):  # device steps: the generated runs have one profiling window
        w0 = max(firsts[s] for s in launched[: i + 1])
        if i + 1 < len(launched):
            w1 = max(firsts[s] for s in launched[: i + 2])
        else:
            done = np.isin(cstep, launched), np.isin(mstep, launched), np.isin(xstep, launched)
            w1 = int(max(ce[done[0]].max(initial=0), me[done[1]].max(initial=0), xe[done[2]].max(initial=0)))
        e0s = [(s0, e0) for s, s0, e0 in steps if s == step][0]

        def cut(a: np.ndarray, b: np.ndarray, w0: int = w0, w1: int = w1) -> tuple[np.ndarray, np.ndarray]:
            a2, b2 = np.maximum(a, w0), np.minimum(b, w1)
            keep = b2 > a2
            return a2[keep], b2[keep]

        so = _overlap(cut(cs, ce), cut(ms, me))
        window = w1 - w0
        rows.append({
            "rank": head["rank"], "step": step, "step_us": (e0s[1] - e0s[0]) / US, "window_us": window / US,
            "compute_us": so["compute_ns"] / US, "bubble_us": (window - so["compute_ns"]) / US,
            "bubble_pct": 100.0 * (window - so["compute_ns"]) / window,
            "overlap_pct": 100.0 * so["overlapped_ns"] / so["comm_ns"] if so["comm_ns"] else None,
            "exposed_comm_us": (so["comm_ns"] - so["overlapped_ns"]) / US,
        })
    return per_rank, rows


def rank_truth(spec: Spec, line: Timeline) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    iv = _intervals(spec, line)
    head = {"rank": line.rank, "host": spec.host_of(line.rank), "stage": spec.coords(line.rank)[0]}
    return rank_metrics(head, iv["compute"], iv["comm"], line.steps)


def events_truth(frame: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """``per_rank`` and ``per_step`` (as in :func:`truth`) of a generated event table (:mod:`.scenarios`):
    its GPU kernels (``compute``, ``comm``; memory copies and sets as other busy time) in the steps its
    ``ProfilerStep#N`` annotations span."""
    per_rank, per_step = [], []
    gpu = frame.filter(pl.col("stream").is_not_null())
    marks = frame.filter(pl.col("kind") == "annotation", pl.col("name").str.starts_with("ProfilerStep#"))
    for rank in sorted(gpu["rank"].unique().to_list()):
        mine = gpu.filter(pl.col("rank") == rank)

        def of(*kinds: str, mine: pl.DataFrame = mine) -> Intervals:
            k = mine.filter(pl.col("kind").is_in(kinds))
            ts = k["ts_ns"].to_numpy().astype(np.int64)
            return ts, ts + k["dur_ns"].to_numpy().astype(np.int64), k["step"].fill_null(-1).to_numpy().astype(np.int64)

        steps = [(s, t, t + d) for s, t, d in marks.filter(pl.col("rank") == rank)
                 .sort("ts_ns").select("step", "ts_ns", "dur_ns").iter_rows()]
        r, s = rank_metrics({"rank": rank}, of("compute"), of("comm"), steps, of("memcpy", "memset"))
        per_rank.append(r)
        per_step.extend(s)
    return {"per_rank": per_rank, "per_step": per_step}


def collective_truth(spec: Spec, lines: list[Timeline]) -> list[dict[str, Any]]:
    """One row per instance: pg, op, index, src/dst (global ranks, send/recv), ranks, arrival skew,
    duration, bytes, last rank (null on a tie)."""
    inst: dict[tuple[Any, ...], list[tuple[int, Any]]] = defaultdict(list)
    for line in lines:
        for c in line.comms:
            if c.op in ("send", "recv"):
                me, other = line.rank, c.group.ranks[c.peer] if c.peer is not None else None
                src, dst = (me, other) if c.op == "send" else (other, me)
                inst[(c.group.name, src, dst, c.index)].append((line.rank, c))
            else:
                inst[(c.group.name, None, None, c.index)].append((line.rank, c))
    out = []
    for (pg, src, dst, index), members in sorted(inst.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1,
                                                                               kv[0][2] or -1, kv[0][3])):
        arr = [c.arrival for _, c in members]
        latest = max(arr)
        lasts = [r for r, c in members if c.arrival == latest]
        c0 = members[0][1]
        out.append({"pg": pg, "op": "sendrecv" if src is not None else "all_reduce", "index": index, "src": src,
                    "dst": dst, "step": c0.step, "ranks": sorted(r for r, _ in members), "bytes": c0.nbytes,
                    "arrival_skew_us": (latest - min(arr)) / US, "duration_us": (c0.end - latest) / US,
                    "last_rank": lasts[0] if len(lasts) == 1 else None})
    return out


def row_steps_us(spec: Spec, lines: list[Timeline]) -> list[float]:
    """Per step, the span of its rows over every rank, µs (module doc: the launch calls as the trace
    writer places them, the kernels and the collectives), on the true clock."""
    cpu = int(round(spec.cpu_us * US))
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}

    def see(step: int, a: int, b: int) -> None:
        lo[step], hi[step] = min(lo.get(step, a), a), max(hi.get(step, b), b)

    for line in lines:
        for b in line.blocks:
            starts, durs = block_kernels(spec, line.rank, b)
            see(b.step, b.launch + 1000, int(starts[-1] + durs[-1]))
            see(b.step, b.launch + 1000, b.launch + (b.n - 1) * cpu + cpu - 2000)
        for c in line.comms:
            see(c.step, c.launch + 1500, max(c.end, c.launch + 4000))
    return [(hi[s] - lo[s]) / US for s in sorted(lo)]


def without_fault(spec: Spec, lines: list[Timeline]) -> dict[str, Any] | None:
    """The run's step and the same run's without its slow ranks and slow links (module doc); None for a run
    without either."""
    if not spec.slow and not spec.slow_link and not spec.poor_overlap:
        return None
    from dataclasses import replace

    clean = replace(spec, slow={}, slow_link={}, poor_overlap=False)
    faulty, fixed = row_steps_us(spec, lines), row_steps_us(clean, simulate(clean))
    ranks, hosts = sorted(spec.slow), sorted(spec.slow_link)
    fault = "; ".join([*(["slow ranks " + ",".join(map(str, ranks))] if ranks else []),
                       *(["slow links of hosts " + ",".join(map(str, hosts))] if hosts else []),
                       *(["all-reduces after the backward"] if spec.poor_overlap else [])])
    return {"fault": fault, "slow_ranks": ranks, "slow_link_hosts": hosts, "poor_overlap": spec.poor_overlap,
            "step_us": sum(faulty) / len(faulty), "without_fault_step_us": sum(fixed) / len(fixed)}


def truth(spec: Spec, lines: list[Timeline]) -> dict[str, Any]:
    """Everything the run's analysis should find (module doc), as plain JSON values."""
    per_rank, per_step = [], []
    for line in lines:
        r, s = rank_truth(spec, line)
        per_rank.append(r)
        per_step.extend(s)
    colls = collective_truth(spec, lines)
    times_last: dict[int, int] = defaultdict(int)
    for c in colls:
        if c["src"] is None and c["last_rank"] is not None and len(c["ranks"]) > 1:
            times_last[c["last_rank"]] += 1
    P, M = spec.pp, spec.micro_batches
    return {
        "spec": {k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()})
                 for k, v in spec.__dict__.items()},
        "world_size": spec.ranks, "dp": spec.dp, "tp": spec.tp, "pp": spec.pp,
        "hosts": {str(r): spec.host_of(r) for r in range(spec.ranks)},
        "clock_offsets_us": {str(h): spec.clock_offset_us.get(h, 0.0) for h in range(spec.hosts)},
        "process_groups": [{"pg": g.name, "desc": g.desc, "ranks": list(g.ranks)} for g in groups(spec)],
        "per_rank": per_rank,
        "per_step": per_step,
        "collectives": colls,
        "stragglers": {"slow_ranks": sorted(spec.slow), "times_last": {str(k): v for k, v in sorted(times_last.items())}},
        "pipeline": ({"stages": P, "micro_batches": M, "schedule": spec.schedule,
                      "theoretical_bubble_pct": 100.0 * (P - 1) / (M + P - 1),
                      "stage_of": {str(r): spec.coords(r)[0] for r in range(spec.ranks)}} if P > 1 else None),
        "without_fault": without_fault(spec, lines),
    }
