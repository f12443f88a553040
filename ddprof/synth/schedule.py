"""The timeline of a generated run: every rank's GPU work, simulated on the true clock, in integer ns.

Each rank runs a program (:func:`program`): profiler steps, blocks of compute kernels on stream 7, and
collectives on their own streams. A collective instance ends for all its members at
``max(arrival) + transfer`` (``transfer = bytes / bus_gbps``): every member waits for the last one, as
NCCL does. Arrival = when the rank's collective kernel could start: after its host launched it
(``+ launch_latency``), after the previous kernel of its stream, and after the compute it depends on.
A blocking collective (tensor-parallel all-reduce, receive) holds the compute stream until it ends.

:func:`simulate` runs all ranks' programs together (a rank stalls where it needs a collective that is not
complete yet) and returns one :class:`Timeline` per rank; a block keeps its kernel count and the seed of
its durations (:func:`block_kernels` draws them again), so the timeline of a thousand ranks stays small.

Example, 2 ranks, one all-reduce of 100 µs transfer: rank 0 arrives at 10 ms, rank 1 at 12 ms -> both
end at 12.1 ms; rank 0's kernel lasts 2.1 ms, rank 1's 0.1 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ddprof.errors import UsageError
from ddprof.synth.spec import Spec
from ddprof.vocabulary.units import NS_PER_US

COMPUTE_STREAM = 7
DP_STREAM = 20
TP_STREAM = 24
#: p2p streams: (kind of transfer, direction) -> stream
P2P_STREAMS = {("act", "send"): 26, ("act", "recv"): 28, ("grad", "send"): 30, ("grad", "recv"): 32}
US = NS_PER_US


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]


def groups(spec: Spec) -> list[Group]:
    """The process groups: ``"0"`` (every rank), then tensor-, data- and pipeline-parallel groups."""
    out = [Group("0", "default_pg", tuple(range(spec.ranks)))]
    tp = [tuple(spec.rank_at(s, d, t) for t in range(spec.tp)) for s in range(spec.pp) for d in range(spec.dp)]
    dp = [tuple(spec.rank_at(s, d, t) for d in range(spec.dp)) for s in range(spec.pp) for t in range(spec.tp)]
    pp = [tuple(spec.rank_at(s, d, t) for s in range(spec.pp)) for d in range(spec.dp) for t in range(spec.tp)]
    for desc, members, size in (("tp", tp, spec.tp), ("dp", dp, spec.dp), ("pp", pp, spec.pp)):
        if size > 1:
            out += [Group(str(len(out) + i), desc, m) for i, m in enumerate(members)]
    return out


@dataclass
class Block:
    """``n`` compute kernels back to back on the compute stream from ``start`` (durations: :func:`block_kernels`)."""

    step: int
    start: int
    n: int
    seed: tuple[int, ...]
    launch: int
    end: int = 0
    phase: str = "fwd"


@dataclass
class Comm:
    """One collective kernel of one rank."""

    step: int
    group: Group
    op: str  # allreduce | send | recv
    nbytes: int
    stream: int
    launch: int
    arrival: int
    end: int = 0
    peer: int | None = None  # rank within the group, send/recv only
    index: int = 0


@dataclass
class Timeline:
    rank: int
    blocks: list[Block] = field(default_factory=list)
    comms: list[Comm] = field(default_factory=list)
    steps: list[tuple[int, int, int]] = field(default_factory=list)  # (step, start, end) of ProfilerStep#


def block_kernels(spec: Spec, rank: int, block: Block) -> tuple[np.ndarray, np.ndarray]:
    """(starts, durations) in ns of a block's kernels: ``kernel_us · (1 + noise · u)`` with u uniform in
    [−1, 1) drawn from the block's seed, times the rank's slow factor; ``kernel_gap_us`` apart."""
    u = np.random.default_rng(list(block.seed)).uniform(-1.0, 1.0, block.n)
    durs = np.rint(spec.kernel_us * US * (1.0 + spec.noise * u) * spec.slow.get(rank, 1.0)).astype(np.int64)
    gap = int(round(spec.kernel_gap_us * US))
    starts = block.start + np.concatenate(([0], np.cumsum(durs[:-1] + gap))).astype(np.int64)
    return starts, durs


# --- programs -----------------------------------------------------------------------------------------

Op = tuple[Any, ...]


def _split(n: int, parts: int) -> list[int]:
    q, r = divmod(n, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def program(spec: Spec, rank: int, step: int, by_desc: dict[tuple[str, int], Group]) -> list[Op]:
    """The ops of one rank in one step: ("step",), ("compute", n, phase), ("coll", group, op, bytes,
    stream, blocking, peer, link), ("sync",)."""
    stage, d, t = spec.coords(rank)
    ops: list[Op] = [("step",)]
    dp_group = by_desc.get(("dp", rank))
    tp_group = by_desc.get(("tp", rank))
    pp_group = by_desc.get(("pp", rank))

    def allreduce(group: Group, nbytes: int, stream: int, blocking: bool) -> Op:
        return ("coll", group, "allreduce", nbytes, stream, blocking, None, group.name)

    if spec.pp == 1:
        fwd = spec.kernels // 3
        for n in _split(fwd, spec.layers):
            ops.append(("compute", n, "fwd"))
            if tp_group is not None:
                ops.append(allreduce(tp_group, spec.tp_bytes, TP_STREAM, True))
        for n in _split(spec.kernels - fwd, spec.buckets):
            ops.append(("compute", n, "bwd"))
            if dp_group is not None and not spec.poor_overlap:
                ops.append(allreduce(dp_group, spec.bucket_bytes, DP_STREAM, False))
        if dp_group is not None and spec.poor_overlap:  # every bucket after the whole backward
            ops += [allreduce(dp_group, spec.bucket_bytes, DP_STREAM, False) for _ in range(spec.buckets)]
    else:
        assert pp_group is not None
        M, P = spec.micro_batches, spec.pp
        per = _split(spec.kernels, 2 * M)
        nf, nb = per[:M], per[M:]

        def p2p(kind: str, direction: str, other_stage: int) -> Op:
            src, dst = (stage, other_stage) if direction == "send" else (other_stage, stage)
            return ("coll", pp_group, direction, spec.p2p_bytes, P2P_STREAMS[(kind, direction)], direction == "recv",
                    other_stage, (pp_group.name, kind, src, dst))

        def forward(m: int) -> list[Op]:
            out = [p2p("act", "recv", stage - 1)] if stage > 0 else []
            out.append(("compute", nf[m], "fwd"))
            return out + ([p2p("act", "send", stage + 1)] if stage < P - 1 else [])

        def backward(m: int) -> list[Op]:
            out = [p2p("grad", "recv", stage + 1)] if stage < P - 1 else []
            out.append(("compute", nb[m], "bwd"))
            return out + ([p2p("grad", "send", stage - 1)] if stage > 0 else [])

        if spec.schedule == "gpipe":
            order = [("f", m) for m in range(M)] + [("b", m) for m in range(M)]
        else:  # 1F1B: warm-up forwards, then one forward one backward, then the remaining backwards
            warm = min(P - stage - 1, M)
            order = [("f", m) for m in range(warm)]
            for i in range(M - warm):
                order += [("f", warm + i), ("b", i)]
            order += [("b", m) for m in range(M - warm, M)]
        for kind, m in order:
            ops += forward(m) if kind == "f" else backward(m)
        if dp_group is not None:
            for _ in range(spec.buckets):
                ops.append(allreduce(dp_group, spec.bucket_bytes, DP_STREAM, False))
    ops.append(("sync",))
    return ops


# --- simulation ---------------------------------------------------------------------------------------

@dataclass
class _State:
    pc: int = 0
    cpu: int = 0
    ready: dict[int, int | None] = field(default_factory=dict)
    step: int = -1
    step_start: int = 0
    block: int = 0
    counters: dict[Any, int] = field(default_factory=dict)


def transfer_ns(spec: Spec, nbytes: int) -> int:
    """Transfer time of a collective: bytes / bus_gbps (1 GB/s = 1 byte/ns), at least 1 µs."""
    return max(US, int(round(nbytes / spec.bus_gbps)))


def simulate(spec: Spec) -> list[Timeline]:
    """Run every rank's programs for every step (module doc)."""
    gs = groups(spec)
    by_desc = {(g.desc, r): g for g in gs[1:] for r in g.ranks}
    progs = [[op for s in range(spec.steps) for op in program(spec, r, s, by_desc)] for r in range(spec.ranks)]
    lines = [Timeline(r) for r in range(spec.ranks)]
    states = [_State(cpu=int(spec.base_us * US), ready={COMPUTE_STREAM: int(spec.base_us * US)})
              for _ in range(spec.ranks)]
    posted: dict[Any, dict[int, Comm]] = {}
    latency, cpu_ns = int(round(spec.launch_latency_us * US)), int(round(spec.cpu_us * US))
    remaining = sum(len(p) for p in progs)
    while remaining:
        moved = 0
        for r in range(spec.ranks):
            st, prog, line = states[r], progs[r], lines[r]
            while st.pc < len(prog):
                op = prog[st.pc]
                if op[0] == "step":
                    st.step += 1
                    st.block = 0
                    st.step_start = st.cpu
                elif op[0] == "compute":
                    ready = st.ready[COMPUTE_STREAM]
                    if ready is None:
                        break
                    blk = Block(st.step, max(ready, st.cpu + latency), op[1], (spec.seed, r, st.step, st.block),
                                st.cpu, phase=op[2])
                    starts, durs = block_kernels(spec, r, blk)
                    blk.end = int(starts[-1] + durs[-1])
                    st.ready[COMPUTE_STREAM] = blk.end
                    st.block += 1
                    st.cpu += op[1] * cpu_ns
                    line.blocks.append(blk)
                elif op[0] == "coll":
                    _, group, kind, nbytes, stream, blocking, peer, link = op
                    compute, own = st.ready[COMPUTE_STREAM], st.ready.get(stream, 0)
                    if compute is None or own is None:
                        break
                    index = st.counters.get(link, 0)
                    st.counters[link] = index + 1
                    c = Comm(st.step, group, kind, nbytes, stream, st.cpu, max(compute, own, st.cpu + latency),
                             peer=None if peer is None else peer, index=index)
                    st.ready[stream] = None
                    if blocking:
                        st.ready[COMPUTE_STREAM] = None
                    st.cpu += cpu_ns
                    line.comms.append(c)
                    key = (link, index)
                    members = posted.setdefault(key, {})
                    members[r] = c
                    need = 2 if kind in ("send", "recv") else len(group.ranks)
                    if len(members) == need:
                        _complete(spec, posted.pop(key), states, blocking_of=_blocking)
                else:  # sync: the host waits for the GPU, then closes the step
                    if any(v is None for v in st.ready.values()):
                        break
                    gpu_end = max(v for v in st.ready.values() if v is not None)
                    st.cpu = max(st.cpu, gpu_end) + 10 * US
                    line.steps.append((st.step, st.step_start, st.cpu))
                    st.cpu += int(round(spec.step_gap_us * US))
                st.pc += 1
                moved += 1
        if not moved:
            stuck = [r for r in range(spec.ranks) if states[r].pc < len(progs[r])]
            raise UsageError(f"synth: the schedule deadlocks (ranks {stuck[:8]} wait for each other); "
                             "this combination of parameters cannot run")
        remaining -= moved
    return lines


def _blocking(c: Comm) -> bool:
    return c.op == "recv" or (c.op == "allreduce" and c.stream == TP_STREAM)


def link_factor(spec: Spec, ranks: Any) -> float:
    """How many times longer a transfer between ``ranks`` takes: the host's slow-link factor where they all
    sit on one host that has one (:class:`~ddprof.synth.spec.Spec`), else 1."""
    hosts = {spec.host_of(r) for r in ranks}
    return spec.slow_link.get(next(iter(hosts)), 1.0) if len(hosts) == 1 else 1.0


def _complete(spec: Spec, members: dict[int, Comm], states: list[_State], blocking_of: Any) -> None:
    xfer = transfer_ns(spec, next(iter(members.values())).nbytes)
    end = max(c.arrival for c in members.values()) + int(round(xfer * link_factor(spec, members)))
    for r, c in members.items():
        c.end = end
        st = states[r]
        st.ready[c.stream] = end
        if blocking_of(c):
            st.ready[COMPUTE_STREAM] = end
