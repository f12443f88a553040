"""Replay: simulate a dependency model (:mod:`analyses.whatif.model`) with given delays, durations and
transfers, and read off every op's start and end and each step's time.

The model is a directed acyclic graph in max-plus form: ``value[v] = max(init[v], max over edges u→v of
value[u] + w(u→v))``, which is the longest path from the step origin. It is solved in topological
*levels* (Kahn's algorithm by waves: a node's level is the length of the longest edge chain that reaches
it), computed once per model; each replay then walks the levels, each one a handful of vectorised NumPy
operations over all of its edges at once (gather, add, a segmented max with ``np.maximum.reduceat``),
so the Python loop runs once per level, not once per event: a few hundred to a few thousand levels for a
step of tens of thousands of events on each of a thousand ranks.

A step's simulated time is its latest end, from its origin 0 (every op is placed relative to its step's
origin, the earliest recorded start of that step).

Worked example (the model docstring's two workers): levels are S(f0), S(f1) at 0; E(f0), E(f1) at 1;
S(ar0), S(ar1) at 2; A at 3; E(ar0), E(ar1) at 4. With the recorded values: S(f0)=S(f1)=0,
E(f0)=3, E(f1)=8, S(ar0)=3+0.5, S(ar1)=8, A=8, E=9: the step takes 9, as recorded.

A cycle (two workers each waiting for the other: a matching the recorded order contradicts) is reported
by :class:`CycleError` naming how many nodes it blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ddprof.analyses.whatif.model import P_DELAY, P_DUR, P_XFER, Model


class CycleError(ValueError):
    """The model's dependencies form a cycle: it cannot be replayed."""


@dataclass
class Plan:
    """A model's graph contracted and in level order.

    **Chains**: a node with exactly one incoming edge (a kernel's end after its start, a host call after
    the previous one) is ``value[parent] + w`` of that edge: it is no level of its own. Following parents
    up to a node with none or several incoming edges (a *core* node: an op after two things, an instance's
    arrival, a step's first op) gives each chain node its ``root`` and its offset from it (the sum of the
    chain's weights). Only core nodes are levelled: each edge into a core node is read from its source's
    root plus the source's offset.

    The offsets come by **segments**: the chain nodes in the model's op order (``seq``: S_i then E_i, op
    by op: a lane's nodes one after another), cut wherever a node's parent is not the node before it; a
    segment's offsets are one cumulative sum, plus its head's parent's offset where that parent is a chain
    node itself (a branch, a chain crossing lanes): those are resolved over the segments by pointer
    jumping (``seg_jumps`` doublings), far fewer than the nodes.

    ``order``: the edges into core nodes by the level of their destination, then the destination;
    ``src``: their sources' roots in that order; per level the slice of that order, the distinct
    destinations and where each one's edges begin within the slice. ``chain``: the chain nodes,
    ``in_edge``: the edge into each."""

    order: np.ndarray
    src: np.ndarray
    levels: list[tuple[int, int, np.ndarray, np.ndarray]]
    chain: np.ndarray
    in_edge: np.ndarray
    root: np.ndarray
    #: The chain nodes in segment order, the edge into each, each one's segment and its segment's first
    #: index in ``seq``.
    seq: np.ndarray
    seq_edge: np.ndarray
    seg: np.ndarray
    seg_first: np.ndarray
    #: Per segment: the position in ``seq`` of its head's parent (-1: a core node), that position's
    #: segment (itself where -1), and the doublings that resolve them.
    seg_parent_pos: np.ndarray
    seg_parent: np.ndarray
    seg_jumps: int


def _levels(n: int, src: np.ndarray, dst: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, int]:
    """Each of ``nodes``' level (Kahn's waves) in the graph of edges ``src → dst`` among them."""
    dst_by_src = dst[np.argsort(src, kind="stable")]
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=offs[1:])
    outdeg = np.diff(offs)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    level = np.zeros(n, dtype=np.int64)
    is_node = np.zeros(n, dtype=bool)
    is_node[nodes] = True
    frontier = np.flatnonzero(is_node & (indeg == 0))
    done, lvl = frontier.size, 0
    ramp = np.arange(max(len(dst), 1), dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    while frontier.size:
        lo, cnt = offs[frontier], outdeg[frontier]
        ends = np.cumsum(cnt)
        total = int(ends[-1])
        if not total:
            break
        # Indices lo[k] .. lo[k]+cnt[k]-1 for every frontier node k, without a Python loop.
        targets = dst_by_src[np.repeat(lo - (ends - cnt), cnt) + ramp[:total]]
        np.subtract.at(indeg, targets, 1)
        cand = targets[indeg[targets] == 0]
        # A node reached by several edges of this wave is there once: keep the last of its copies.
        stamp[cand] = ramp[:cand.size]
        frontier = cand[stamp[cand] == ramp[:cand.size]]
        lvl += 1
        level[frontier] = lvl
        done += frontier.size
    if done < nodes.size:
        raise CycleError(f"the dependencies form a cycle: {nodes.size - done} of {nodes.size} nodes can never be "
                         f"reached")
    return level, lvl


def plan(model: Model) -> Plan:
    """The contracted graph of a model in level order (class doc); raises :class:`CycleError` on a cycle."""
    n, src, dst = model.n_nodes, model.src, model.dst
    indeg = np.bincount(dst, minlength=n)
    is_chain = indeg == 1
    chain = np.flatnonzero(is_chain)
    into = np.full(n, -1, dtype=np.int64)
    one = is_chain[dst]
    into[dst[one]] = np.flatnonzero(one)
    parent = np.arange(n, dtype=np.int64)
    parent[chain] = src[into[chain]]
    # Chain nodes in op order (S_i, E_i, op by op; other nodes after), by a counting sort.
    n_ops = model.ops.height
    key = np.where(chain < n_ops, 2 * chain, np.where(chain < 2 * n_ops, 2 * (chain - n_ops) + 1, chain + n_ops))
    mark = np.zeros(int(key.max()) + 1 if key.size else 0, dtype=bool)
    mark[key] = True
    k = np.flatnonzero(mark)
    seq = np.where(k < 2 * n_ops, np.where(k % 2 == 0, k // 2, n_ops + k // 2), k - n_ops)
    head = np.ones(seq.size, dtype=bool)
    head[1:] = parent[seq[1:]] != seq[:-1]
    seg = np.cumsum(head) - 1
    seg_first = np.flatnonzero(head)
    pos = np.full(n, -1, dtype=np.int64)
    pos[seq] = np.arange(seq.size)
    hp = parent[seq[seg_first]]
    seg_parent_pos = pos[hp]  # -1: the head hangs off a core node
    seg_parent = np.where(seg_parent_pos >= 0, seg[np.maximum(seg_parent_pos, 0)], np.arange(seg_first.size))
    # Each segment's root (the core node its chain hangs off), and the doublings that reach it.
    top, seg_jumps = seg_parent.copy(), 0
    while True:
        nxt = top[top]
        if np.array_equal(nxt, top):
            break
        top, seg_jumps = nxt, seg_jumps + 1
        if seg_jumps > 64:
            raise CycleError("the dependencies form a cycle: a chain of single dependencies loops")
    root = np.arange(n, dtype=np.int64)
    root[seq] = hp[top][seg]
    core_edge = np.flatnonzero(~one)
    c_src, c_dst = root[src[core_edge]], dst[core_edge]
    # Levels among the core nodes alone, numbered 0..K-1 (a few per instance and lane: far fewer than n).
    core = np.flatnonzero(~is_chain)
    core_id = np.full(n, -1, dtype=np.int64)
    core_id[core] = np.arange(core.size)
    level, lvl = _levels(core.size, core_id[c_src], core_id[c_dst], np.arange(core.size))
    e_level = level[core_id[c_dst]]
    by = np.lexsort((c_dst, e_level))
    bounds = np.searchsorted(e_level[by], np.arange(1, lvl + 2))
    d_all = c_dst[by]
    # Where each destination's edges begin, over all levels at once (a level begins a new one too).
    new = np.ones(len(d_all), dtype=bool)
    new[1:] = d_all[1:] != d_all[:-1]
    new[bounds[:-1][bounds[:-1] < len(d_all)]] = True
    first = np.flatnonzero(new)
    cut = np.searchsorted(first, bounds)
    # Each level's destinations and where their edges begin within its slice: views of two arrays made
    # once (a level is a few edges where chains are long: thousands of levels, each sliced, not gathered).
    lo, hi = int(cut[0]), int(cut[-1])
    dest = d_all[first[lo:hi]]
    rel = first[lo:hi] - np.repeat(bounds[:-1], np.diff(cut))
    levels = [(a, b, dest[i - lo:j - lo], rel[i - lo:j - lo])
              for a, b, i, j in zip(bounds[:-1].tolist(), bounds[1:].tolist(), cut[:-1].tolist(), cut[1:].tolist())]
    return Plan(core_edge[by], c_src[by], levels, chain, into[chain], root, seq, into[seq], seg, seg_first,
                seg_parent_pos, seg_parent, seg_jumps)


def _offsets(order: Plan, w_all: np.ndarray, n: int) -> np.ndarray:
    """Per node, its offset from its root under edge weights ``w_all`` (0 on core nodes; class doc)."""
    off = np.zeros(n)
    if not order.seq.size:
        return off
    w_seq = w_all[order.seq_edge]
    cs = np.cumsum(w_seq)
    local = cs - (cs - w_seq)[order.seg_first][order.seg]
    has = order.seg_parent_pos >= 0
    add = np.where(has, local[np.maximum(order.seg_parent_pos, 0)], 0.0)
    p = order.seg_parent.copy()
    for _ in range(order.seg_jumps + 1):
        add = add + np.where(p != np.arange(p.size), add[p], 0.0)
        p = p[p]
    off[order.seq] = local + add[order.seg]
    return off


@dataclass
class Replay:
    """One simulation: per op its start and end (from its step's origin), per step its time; with
    ``binding`` (asked for), per node the edge that set its value (-1: none, a step's first op)."""

    start: np.ndarray
    end: np.ndarray
    steps: np.ndarray
    step_time: np.ndarray
    value: np.ndarray | None = None
    binding: np.ndarray | None = None

    @property
    def mean_step(self) -> float:
        return float(self.step_time.mean()) if len(self.step_time) else float("nan")


def edge_weights(model: Model, delay: np.ndarray, dur: np.ndarray, xfer: np.ndarray) -> np.ndarray:
    """Per edge of the model, its weight under these values."""
    w = np.zeros(len(model.param))
    for param, values in ((P_DELAY, delay), (P_DUR, dur), (P_XFER, xfer)):
        at, op = model.edges_of(param)
        w[at] = values[op]
    return w


def replay(model: Model, delay: np.ndarray | None = None, dur: np.ndarray | None = None,
           xfer: np.ndarray | None = None, order: Plan | None = None, binding: bool = False) -> Replay:
    """Simulate ``model`` with per-op ``delay``, ``dur`` and ``xfer`` (the recorded ones where not
    given); ``order`` is the model's :func:`plan`, computed once and passed again to replay many edits;
    ``binding``: also keep, per node, the edge that set it (the critical path's links)."""
    order = order or plan(model)
    delay = model.delay if delay is None else delay
    dur = model.dur if dur is None else dur
    xfer = model.xfer if xfer is None else xfer
    w_all = edge_weights(model, delay, dur, xfer)
    n = model.n_nodes
    off = _offsets(order, w_all, n)
    w = w_all[order.order] + off[model.src[order.order]]  # in level order: slices, not gathers
    value = np.full(n, -np.inf)
    value[model.start_node[model.first]] = delay[model.first]
    src = order.src
    for a, b, d, starts in order.levels:
        cand = value[src[a:b]] + w[a:b]
        best = np.maximum.reduceat(cand, starts) if len(starts) < b - a else cand
        value[d] = np.maximum(value[d], best)
    value[order.chain] = value[order.root[order.chain]] + off[order.chain]
    bind = None
    if binding:
        # The edge that set each core node: the first of its edges that reaches its value (one pass).
        bind = np.full(n, -1, dtype=np.int64)
        dst = model.dst[order.order]
        hit = np.flatnonzero(value[src] + w >= value[dst])
        _, firsts = np.unique(dst[hit], return_index=True)
        bind[dst[hit[firsts]]] = order.order[hit[firsts]]
        bind[order.chain] = order.in_edge
    start, end = value[model.start_node], value[model.end_node]
    step_time = np.full(len(model.steps), -np.inf)
    np.maximum.at(step_time, model.step_of_op, end)
    return Replay(start=start, end=end, steps=model.steps, step_time=step_time,
                  value=value if binding else None, binding=bind)


def recorded_step_times(model: Model) -> np.ndarray:
    """Each step's measured time: latest recorded end minus the step's origin."""
    end = model.ops["end"].to_numpy()
    out = np.full(len(model.steps), -np.inf)
    np.maximum.at(out, model.step_of_op, end - model.origin[model.step_of_op])
    return out
