"""The critical path of each step: the chain of work and waits that sets the step's time, read off the
recorded replay of the run's dependency model (:mod:`analyses.whatif.replay`, which keeps, per node, the
edge that set its value: its *binding* predecessor).

Per step: start at the op whose end is the step's last (any rank), follow binding edges back to the step's
origin. Every edge on the way carries one op's parameter (:mod:`analyses.whatif.model`): its delay (the
wait before it starts that nothing in the model explains), its duration, or its transfer (after the last
member of its instance arrived); a waiting edge (an arrival, a launch group over) carries nothing. The
path's weights add up to the step's replayed end, from its origin: with the replay exact (the replay
check), that is the step as recorded.

Each weight is attributed to the op's rank, lane (``stream``: a device stream, or ``host`` for a host
thread), op name and **kind**:

* ``compute``: a device kernel's (or copy's) duration; on a CPU rank, a CPU op's duration;
* ``communication``: a transfer, or the duration of communication that waited for nobody;
* ``host launch``: a runtime call's duration (``cudaLaunchKernel``...) and a host delay that the thread
  spent busy (framework and Python time between calls);
* ``data loading``: a host op named like a data loader (:data:`ddprof.vocabulary.loaders.DATA_LOADER_PATTERN`);
* ``idle``: the idle part of a host delay (the thread ran nothing: ``gap``; all of it before a thread's
  first op of the step, which waited for something the model does not see), and a device op's delay (the
  device waited with nothing modelled: after its launch, after the previous op of its stream).

Worked example (the model docstring's two workers): the step's last end is E(ar0) = E(ar1) = 9; E(ar1)
is set by A + xfer (1, communication), A by S(ar1) (the latest arrival: zero), S(ar1) by E(f1) plus
delay 0, E(f1) by S(f1) + 8 (compute), S(f1) is worker 1's first op at 0: the path is 8 of compute on
rank 1 and 1 of communication, 9 in all, the step's time.

Beside HTA's critical path (``CriticalPathAnalysis``, ``benchmarks/critical_path_vs_hta.py``) on the
one single-rank trace it accepts here (hta/v100-2rank-rank1-large, rank 1): both find the steps bound by
the host (HTA 100 % cpu_bound; here 99.9 % host launch and host idle); the lengths differ: this path spans
the step (341 ms against a 346 ms ProfilerStep#2), HTA's covers 239 ms of it (its graph holds the CPU ops
that start in the step's annotation and their kernels, and does not reach the whole span).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from ddprof.analyses.whatif.model import P_DELAY, P_XFER, Model
from ddprof.analyses.whatif.replay import Replay, edge_weights

from ddprof.vocabulary.loaders import DATA_LOADER_PATTERN

KINDS = ("compute", "communication", "host launch", "data loading", "idle")


def _sums(links: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``s`` summed per ``keys``, each group's links added in their order (a parallel group-by adds them in
    an order that varies from run to run: the last digits of a report would too)."""
    if links.is_empty():
        return links.select(*keys, "s").clear()
    ordered = links.select(*keys, "s").with_row_index("__i").sort(*keys, "__i", nulls_last=True)
    first = np.flatnonzero(ordered.select(pl.any_horizontal(
        [pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys]).fill_null(True)).to_series().to_numpy())
    return ordered[first].select(*keys).with_columns(
        pl.Series("s", np.add.reduceat(ordered["s"].to_numpy(), first)))


@dataclass
class CriticalPath:
    """Per step and link of its critical path (``links``: step, rank, lane, name, kind, seconds) and
    per step its length (``steps``: step, length in seconds)."""

    links: pl.DataFrame
    steps: pl.DataFrame

    def by_kind(self) -> pl.DataFrame:
        """Mean seconds per step on the path, and share of the path, by kind (every kind, 0 where none)."""
        n = max(self.steps.height, 1)
        total = float(self.steps["length"].sum()) or 1.0
        got = _sums(self.links, ["kind"])
        s = dict(zip(got["kind"].to_list(), got["s"].to_list()))
        return pl.DataFrame({"kind": list(KINDS), "s": [s.get(k, 0.0) / n for k in KINDS],
                             "share": [s.get(k, 0.0) / total for k in KINDS]})

    def top_ops(self, k: int = 10) -> pl.DataFrame:
        """The ``k`` ops (rank, lane, name, kind) with the most time on the path, mean seconds per step."""
        n = max(self.steps.height, 1)
        total = float(self.steps["length"].sum()) or 1.0
        return (_sums(self.links, ["rank", "lane", "name", "kind"])
                .with_columns((pl.col("s") / total).alias("share"), pl.col("s") / n)
                .sort("s", "rank", "name", descending=[True, False, False]).head(k))


def loader_ops(model: Model) -> np.ndarray:
    """Per op, whether it is a data loader's span: a host row named like one (no name: none is)."""
    ops = model.ops
    if "name" not in ops.columns:
        return np.zeros(ops.height, dtype=bool)
    named = ops["name"].cast(pl.String).fill_null("").str.contains(DATA_LOADER_PATTERN).to_numpy()
    return named & (ops["lane"] < 0).to_numpy()


def _kinds(model: Model) -> tuple[np.ndarray, np.ndarray]:
    """Per op, the kind of its duration and of its delay's busy part (module doc), as indices in KINDS."""
    ops = model.ops
    kind = ops["kind"].cast(pl.String).fill_null("") if "kind" in ops.columns else pl.Series([""] * ops.height)
    kind = kind.to_numpy()
    loader = loader_ops(model)
    comm = ops["is_comm"].to_numpy() | (kind == "comm") | ops["instance"].is_not_null().to_numpy()
    dur_kind = np.where(comm, 1, np.where(kind == "runtime", 2, 0))
    dur_kind = np.where(loader, 3, dur_kind)
    delay_kind = np.where(loader, 3, 2)
    return dur_kind, delay_kind


def _net_overlaps(we: np.ndarray, e_step: np.ndarray) -> np.ndarray:
    """The path's link weights (walked back from each step's end) with each negative one, a delay where an
    op started before the op it follows on its lane ended (rows of one thread that overlap: two asynchronous
    collectives on a gloo thread), taken off the links before it on the path: the time the two overlapped
    is on the path once, through the later op. The step's sum is unchanged; no link is negative unless
    the overlap is longer than everything before it in the step.

    Example: A [0, 10) then B [8, 12) on one lane: walked back, B's duration 4, B's delay -2, A's duration
    10 -> 4, 0, 8 (A until B started, then B)."""
    out = we.astype(np.float64, copy=True)
    for i in np.flatnonzero(out < 0):
        j = i + 1
        while out[i] < 0 and j < len(out) and e_step[j] == e_step[i]:
            take = min(max(out[j], 0.0), -out[i])
            out[j] -= take
            out[i] += take
            j += 1
    return out


def critical_path(model: Model, r: Replay) -> CriticalPath:
    """The critical path of each step of a recorded replay kept with its binding edges (module doc)."""
    if r.binding is None or r.value is None:
        raise ValueError("the replay was not kept with its binding edges (replay(..., binding=True))")
    w = edge_weights(model, model.delay, model.dur, model.xfer)
    dur_kind, delay_kind = _kinds(model)
    n_ops = model.ops.height
    gap = model.ops["gap"].to_numpy() if "gap" in model.ops.columns else np.zeros(n_ops)
    host = (model.ops["lane"] < 0).to_numpy()
    # A host lane's first op of the step waited from the origin for something the model does not see (the
    # thread ran nothing of its own): idle.
    first_of_lane = model.ops.select(pl.any_horizontal(
        [pl.col(k) != pl.col(k).shift(1) for k in ("step", "worker", "lane")]).fill_null(True))[:, 0].to_numpy()
    gap = np.where(host & first_of_lane, np.maximum(model.delay, 0.0), gap)
    bind = r.binding
    # Each node's binding source (-1: none); the walk back is a tight loop over plain lists.
    back = np.where(bind >= 0, model.src[np.maximum(bind, 0)], -1).tolist()
    bind_l = bind.tolist()
    end = r.end
    edges: list[int] = []
    firsts: list[int] = []
    owner: list[int] = []
    lengths: list[float] = []
    step_ids: list[int] = []
    order = np.argsort(model.step_of_op, kind="stable")
    cuts = np.searchsorted(model.step_of_op[order], np.arange(len(model.steps) + 1))
    for si in range(len(model.steps)):
        in_step = order[cuts[si]:cuts[si + 1]]
        if not in_step.size:
            continue
        last = int(in_step[np.argmax(end[in_step])])
        k = len(step_ids)
        lengths.append(float(end[last]))
        step_ids.append(int(model.steps[si]))
        v = int(model.end_node[last])
        before = len(edges)
        while bind_l[v] >= 0:
            edges.append(bind_l[v])
            v = back[v]
        owner.extend([k] * (len(edges) - before))
        firsts.append(v if v < n_ops else -1)  # a step's first op: its delay after the origin
    e = np.asarray(edges, dtype=np.int64)
    e_step = np.asarray(owner, dtype=np.int64)
    op, p, we = model.param_op[e], model.param[e], _net_overlaps(w[e], e_step)
    # The first ops' delays are links too (the walk ends at their start).
    f = np.asarray(firsts, dtype=np.int64)
    has = f >= 0
    f_op, f_step = f[has], np.flatnonzero(has)
    op = np.concatenate([op, f_op])
    p = np.concatenate([p, np.full(len(f_op), P_DELAY, dtype=p.dtype)])
    we = np.concatenate([we, model.delay[f_op]])
    e_step = np.concatenate([e_step, f_step])
    # Kinds: a duration by its op's kind, a transfer communication, a delay split (module doc).
    kind = np.where(p == P_XFER, 1, dur_kind[op])
    is_delay = p == P_DELAY
    on_host = host[op]
    idle = np.where(is_delay & on_host, np.clip(gap[op], 0.0, np.maximum(we, 0.0)), 0.0)
    kind = np.where(is_delay & on_host, delay_kind[op], kind)
    kind = np.where(is_delay & ~on_host, 4, kind)
    busy = we - idle
    keep = (p != 0) & (busy != 0)
    keep_idle = idle != 0
    idx = np.concatenate([op[keep], op[keep_idle]])
    kinds = np.concatenate([kind[keep], np.full(int(keep_idle.sum()), 4)])
    secs = np.concatenate([busy[keep], idle[keep_idle]])
    steps = np.concatenate([e_step[keep], e_step[keep_idle]])
    ops = model.ops
    lane = ops["lane"].to_numpy()[idx]
    names = ops["name"] if "name" in ops.columns else ops["optype"]
    links = pl.DataFrame({
        "step": np.asarray(step_ids, dtype=np.int64)[steps] if len(steps) else np.zeros(0, np.int64),
        "rank": ops["worker"].to_numpy()[idx],
        "lane": pl.Series(lane).cast(pl.String),
        "name": names.cast(pl.String).gather(idx) if len(idx) else pl.Series([], dtype=pl.String),
        "kind": np.asarray(KINDS, dtype=object)[kinds] if len(kinds) else np.zeros(0, dtype=object),
        "s": secs,
    }, schema_overrides={"kind": pl.String}).with_columns(
        pl.when(pl.Series(lane) < 0).then(pl.lit("host")).otherwise(pl.format("stream {}", pl.col("lane")))
        .alias("lane"))
    steps_f = pl.DataFrame({"step": np.asarray(step_ids, dtype=np.int64), "length": np.asarray(lengths)})
    return CriticalPath(links, steps_f)


