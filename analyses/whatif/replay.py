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
from ddprof.analyses.whatif.model import Model


class CycleError(ValueError):
    """The model's dependencies form a cycle: it cannot be replayed."""


@dataclass
class Plan:
    """A model's edges in level order (``order``: edge indices by the level of their destination, then
    the destination; ``src``: their sources in that order), and per level the slice of that order, the
    distinct destinations and where each one's edges begin within the slice."""

    order: np.ndarray
    src: np.ndarray
    levels: list[tuple[int, int, np.ndarray, np.ndarray]]


def plan(model: Model) -> Plan:
    """The level order of a model's graph (module doc); raises :class:`CycleError` on a cycle."""
    n, src, dst = model.n_nodes, model.src, model.dst
    dst_by_src = dst[np.argsort(src, kind="stable")]
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=offs[1:])
    outdeg = np.diff(offs)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    level = np.zeros(n, dtype=np.int64)
    frontier = np.flatnonzero(indeg == 0)
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
    if done < n:
        raise CycleError(f"the dependencies form a cycle: {n - done} of {n} nodes can never be reached")
    e_level = level[dst]
    by = np.lexsort((dst, e_level))
    bounds = np.searchsorted(e_level[by], np.arange(1, lvl + 2))
    d_all = dst[by]
    # Where each destination's edges begin, over all levels at once (a level begins a new one too).
    new = np.ones(len(d_all), dtype=bool)
    new[1:] = d_all[1:] != d_all[:-1]
    new[bounds[:-1][bounds[:-1] < len(d_all)]] = True
    first = np.flatnonzero(new)
    cut = np.searchsorted(first, bounds)
    levels = [(int(a), int(b), d_all[first[i:j]], first[i:j] - a)
              for a, b, i, j in zip(bounds[:-1], bounds[1:], cut[:-1], cut[1:])]
    return Plan(by, src[by], levels)


@dataclass
class Replay:
    """One simulation: per op its start and end (from its step's origin), per step its time."""

    start: np.ndarray
    end: np.ndarray
    steps: np.ndarray
    step_time: np.ndarray

    @property
    def mean_step(self) -> float:
        return float(self.step_time.mean()) if len(self.step_time) else float("nan")


def replay(model: Model, delay: np.ndarray | None = None, dur: np.ndarray | None = None,
           xfer: np.ndarray | None = None, order: Plan | None = None) -> Replay:
    """Simulate ``model`` with per-op ``delay``, ``dur`` and ``xfer`` (the recorded ones where not
    given); ``order`` is the model's :func:`plan`, computed once and passed again to replay many edits."""
    order = order or plan(model)
    n = model.ops.height
    delay = model.delay if delay is None else delay
    dur = model.dur if dur is None else dur
    xfer = model.xfer if xfer is None else xfer
    table = np.stack([np.zeros(n), delay, dur, xfer])
    w = table[model.param[order.order], model.param_op[order.order]]  # in level order: slices, not gathers
    value = np.full(model.n_nodes, -np.inf)
    value[model.start_node[model.first]] = delay[model.first]
    src = order.src
    for a, b, d, starts in order.levels:
        cand = value[src[a:b]] + w[a:b]
        value[d] = np.maximum(value[d], np.maximum.reduceat(cand, starts))
    start, end = value[model.start_node], value[model.end_node]
    step_time = np.full(len(model.steps), -np.inf)
    np.maximum.at(step_time, model.step_of_op, end)
    return Replay(start=start, end=end, steps=model.steps, step_time=step_time)


def recorded_step_times(model: Model) -> np.ndarray:
    """Each step's measured time: latest recorded end minus the step's origin."""
    end = model.ops["end"].to_numpy()
    out = np.full(len(model.steps), -np.inf)
    np.maximum.at(out, model.step_of_op, end - model.origin[model.step_of_op])
    return out
