"""The cross-rank dependency model of a run: what each recorded operation waited for.

A run is given as an **op table** (one row per operation, any source: the OSDI'25 adapter
:mod:`analyses.whatif.osdi`, the store adapter :mod:`analyses.whatif.store`), with the columns

* ``step``: the step the op belongs to (each step is replayed on its own, from its own origin 0);
* ``worker``: the rank (or worker) that ran it; ``lane``: its serial resource on that worker (a device
  stream, a host thread; 0 where a source has one lane per worker);
* ``start``/``end``: the recorded times (seconds, any origin);
* ``instance``: the communication it takes part in (a collective instance or one send/recv pair: every op
  of one instance has the same id; null for compute and for communication without peers);
* any label columns (``optype``, ``stage``, ``dp_rank``...) that edits and attributions group by.

Rules (each op i; "ready" is when everything it depends on has completed):

1. **Order on a lane.** Ops of one lane run one launch group after another; a *launch group* is the ops of
   a lane that start at the same recorded instant (a batched send+recv). An op is ready when every op of
   the previous launch group of its lane has ended, and after the sources of its extra dependency edges
   (``deps``): a ``start`` edge waits for the source to start (a kernel after its launch call began), an
   ``end`` edge for it to end (a wait on another stream).
2. **Host delay.** ``delay_i = start_i − ready_i`` as recorded: the gap nothing in the model explains (a
   launch gap, Python time) is kept as a measured delay. The first op of a lane in a step is ready at the
   step's origin (the earliest recorded start of that step).
3. **Compute** ends ``dur_i = end_i − start_i`` after it starts.
4. **Communication.** Every op of an instance *arrives* when it starts; the instance completes for op i at
   the latest arrival plus op i's transfer ``xfer_i = end_i − max_j start_j`` (j over the instance; a
   point-to-point pair is an instance of two: the receive completes after its matched send arrived).
   An op that ended before the latest arrival did not wait for it (a buffered send that returns before
   its receive starts, or clocks that disagree): it *arrives* but ends on its own, ``dur_i`` after its
   start, like compute; such ops are counted in ``Model.inconsistent``.

Replaying the model with the recorded delays, durations and transfers gives back every recorded start and
end (:func:`analyses.whatif.replay.replay`); replaying it with edited values answers "what if".

As a graph (max-plus, longest path): nodes S_i (start), E_i (end), one node per launch group of several
ops (H, the group is over; a group of one is over at its op's E) and per instance (A, everyone has arrived); ``S_i = max(ready edges) + delay_i``,
``E_i = S_i + dur_i`` or ``E_i = A_c + xfer_i``, ``A_c = max S_j``, ``H_g = max E_i``.

Worked example (two workers, one step): worker 0 computes f0 [0, 3) then all-reduces ar0 [3.5, 9);
worker 1 computes f1 [0, 8) then all-reduces ar1 [8, 9). f0: ready 0, delay 0, dur 3. ar0: ready 3
(after f0), delay 0.5. ar1: ready 8, delay 0. The instance {ar0, ar1}: latest arrival 8, so
xfer = 9 − 8 = 1 for both. Replay: ar0 arrives 3.5, ar1 at 8, both end at 8 + 1 = 9: the step takes 9.
With f1 as fast as f0 (dur 3): ar1 arrives at 3, the latest arrival is 3.5, both end at 4.5.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

#: Columns an op table must have (``instance`` may be all null; ``lane`` defaults to 0).
REQUIRED = ("step", "worker", "start", "end")

# Parameter columns an edge's weight is read from (see Model.weights).
P_ZERO, P_DELAY, P_DUR, P_XFER = 0, 1, 2, 3


@dataclass
class Model:
    """The dependency graph of an op table, and the recorded values that replay it.

    ``ops`` is the op table sorted by (step, worker, lane, start), with the added columns ``op`` (row
    index), ``group`` (launch group id), ``is_comm`` (waits for its instance: ends at its latest arrival plus
    its transfer), ``delay``, ``dur`` and
    ``xfer`` (module doc). Edges are ``(src, dst, param, op)``: ``value[dst] ≥ value[src] + w`` where
    ``w`` is parameter ``param`` of op ``op`` (zero, delay, duration or transfer)."""

    ops: pl.DataFrame
    n_nodes: int
    src: np.ndarray
    dst: np.ndarray
    param: np.ndarray
    param_op: np.ndarray
    #: Per op: the node its start is and the node its end is.
    start_node: np.ndarray
    end_node: np.ndarray
    #: Ops with no ready edge start at their delay after the step origin (0).
    first: np.ndarray
    step_of_op: np.ndarray
    steps: np.ndarray
    origin: np.ndarray
    inconsistent: int = 0
    _codes: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _by_param: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def edges_of(self, param: int) -> tuple[np.ndarray, np.ndarray]:
        """The edges whose weight is parameter ``param`` (:data:`P_DELAY`, :data:`P_DUR`, :data:`P_XFER`) and
        the op each one reads it from, computed once: every replay weighs the edges again."""
        if param not in self._by_param:
            at = np.flatnonzero(self.param == param)
            self._by_param[param] = at, self.param_op[at]
        return self._by_param[param]

    def codes(self, label: str) -> np.ndarray:
        """The label column ``label`` of the ops as dense integer codes (-1 where null), computed once: what
        edits group by (a string column hashed again for every edit cost more than the replay)."""
        if label not in self._codes:
            col = self.ops[label]
            values = col.unique().drop_nulls()  # hashed, not sorted; a Categorical's codes are process-wide
            codes = col.replace_strict(values, pl.int_range(len(values), eager=True, dtype=pl.Int64), default=-1)
            self._codes[label] = codes.fill_null(-1).to_numpy()
        return self._codes[label]

    @property
    def delay(self) -> np.ndarray:
        return self.ops["delay"].to_numpy()

    @property
    def dur(self) -> np.ndarray:
        return self.ops["dur"].to_numpy()

    @property
    def xfer(self) -> np.ndarray:
        return self.ops["xfer"].to_numpy()


def _new_lane() -> pl.Expr:
    """True on the first row of each (step, worker, lane) of the sorted table."""
    return pl.any_horizontal([pl.col(k) != pl.col(k).shift(1) for k in ("step", "worker", "lane")]).fill_null(True)


def _launch_groups(ops: pl.DataFrame) -> pl.DataFrame:
    """Launch group ids: consecutive ops of one (step, worker, lane) with the same recorded start."""
    new = ((pl.col("start") != pl.col("start").shift(1)) | _new_lane()).fill_null(True)
    return ops.with_columns(new.cum_sum().cast(pl.Int64).sub(1).alias("group"))


def build(ops: pl.DataFrame, deps: pl.DataFrame | None = None) -> Model:
    """The model of an op table (module doc); ``deps`` (columns ``src_op``, ``dst_op``: row indices of the
    sorted table, see :func:`sort_ops`; ``on``: ``"start"`` or ``"end"``, the default) adds ready edges."""
    missing = [c for c in REQUIRED if c not in ops.columns]
    if missing:
        raise ValueError(f"op table lacks {missing}")
    ops = sort_ops(ops)
    ops = _launch_groups(ops)
    n = ops.height
    start = ops["start"].to_numpy().astype(np.float64)
    end = ops["end"].to_numpy().astype(np.float64)
    group = ops["group"].to_numpy()
    n_groups = int(group.max()) + 1 if n else 0

    # Instances: dense ids, latest arrival, transfer per op.
    inst_raw = ops["instance"]
    is_comm = inst_raw.is_not_null().to_numpy()
    inst = np.full(n, -1, dtype=np.int64)
    if is_comm.any():
        codes = ops.select(pl.col("instance").rank("dense").cast(pl.Int64) - 1)["instance"].to_numpy()
        inst[is_comm] = codes[is_comm]
    n_inst = int(inst.max()) + 1 if is_comm.any() else 0
    latest = np.full(n_inst, -np.inf)
    np.maximum.at(latest, inst[is_comm], start[is_comm])
    xfer = np.zeros(n)
    xfer[is_comm] = end[is_comm] - latest[inst[is_comm]]
    own = is_comm & (xfer < -1e-12)  # ended before the latest arrival: arrives, ends on its own
    inconsistent = int(own.sum())
    xfer = np.maximum(xfer, 0.0)
    waits = is_comm & ~own
    dur = np.where(waits, 0.0, end - start)

    # Ready times as recorded: previous launch group of the lane over (max end), else the step origin.
    # The table is sorted by step, and a launch group's ops are consecutive: segment reductions.
    steps_col = ops["step"].to_numpy()
    new_step = np.r_[True, steps_col[1:] != steps_col[:-1]] if n else np.zeros(0, bool)
    step_first = np.flatnonzero(new_step)
    steps, step_idx = steps_col[step_first], np.cumsum(new_step) - 1
    origin = np.minimum.reduceat(start, step_first) if n else np.zeros(0)
    group_first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if n else np.zeros(0, np.int64)
    group_end = np.maximum.reduceat(end, group_first) if n else np.zeros(0)
    lane_key = ops.select(_new_lane().cum_sum().alias("k"))["k"].to_numpy()
    first_of_group = np.r_[True, group[1:] != group[:-1]] if n else np.zeros(0, bool)
    g_lane = lane_key[first_of_group]  # per group, its lane
    prev_group = np.full(n_groups, -1, dtype=np.int64)
    same_lane = np.r_[False, g_lane[1:] == g_lane[:-1]] if n_groups else np.zeros(0, bool)
    prev_group[same_lane] = np.arange(n_groups)[same_lane] - 1
    pg = prev_group[group]
    ready = np.where(pg >= 0, group_end[np.maximum(pg, 0)], origin[step_idx])

    dep_src = dep_dst = np.zeros(0, dtype=np.int64)
    on_start = np.zeros(0, dtype=bool)
    if deps is not None and deps.height:
        dep_src = deps["src_op"].to_numpy().astype(np.int64)
        dep_dst = deps["dst_op"].to_numpy().astype(np.int64)
        on_start = (deps["on"] == "start").to_numpy() if "on" in deps.columns else np.zeros(len(dep_src), bool)
        np.maximum.at(ready, dep_dst, np.where(on_start, start[dep_src], end[dep_src]))
    delay = start - ready

    # Nodes: S_i = i, E_i = n + i, H_g = 2n + g, A_c = 2n + G + c.
    idx = np.arange(n, dtype=np.int64)
    S, E = idx, n + idx
    H0, A0 = 2 * n, 2 * n + n_groups
    srcs, dsts, params, pops = [], [], [], []

    def add(s: np.ndarray, d: np.ndarray, p: int, o: np.ndarray) -> None:
        srcs.append(s)
        dsts.append(d)
        params.append(np.full(len(s), p, np.int8))
        pops.append(o)

    # A launch group of one op is over when that op ends: its E node stands for H (one level less).
    size = np.bincount(group, minlength=n_groups)
    first_op = np.flatnonzero(first_of_group)
    gnode = np.where(size == 1, E[first_op], H0 + np.arange(n_groups))
    has_prev = pg >= 0
    add(gnode[pg[has_prev]], S[has_prev], P_DELAY, idx[has_prev])
    add(np.where(on_start, S[dep_src], E[dep_src]), S[dep_dst], P_DELAY, dep_dst)
    add(S[~waits], E[~waits], P_DUR, idx[~waits])
    add(S[is_comm], A0 + inst[is_comm], P_ZERO, idx[is_comm])
    add(A0 + inst[waits], E[waits], P_XFER, idx[waits])
    multi = size[group] > 1
    add(E[multi], H0 + group[multi], P_ZERO, idx[multi])
    first = ~has_prev
    if len(dep_dst):
        first[dep_dst] = False

    ops = ops.with_columns(
        pl.Series("op", idx), pl.Series("is_comm", waits), pl.Series("delay", delay),
        pl.Series("dur", dur), pl.Series("xfer", xfer),
    )
    # Node and op indices as int32 where they fit: the edge arrays are the model's bulk.
    ix = np.int32 if A0 + n_inst < 2**31 - 1 else np.int64
    return Model(
        ops=ops, n_nodes=A0 + n_inst,
        src=np.concatenate(srcs).astype(ix, copy=False), dst=np.concatenate(dsts).astype(ix, copy=False),
        param=np.concatenate(params), param_op=np.concatenate(pops).astype(ix, copy=False),
        start_node=S, end_node=E, first=first,
        step_of_op=step_idx, steps=steps, origin=origin, inconsistent=inconsistent,
    )


def sort_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """The op table in the model's order: (step, worker, lane, start), a ``lane`` of 0 and a null
    ``instance`` added where missing."""
    if "lane" not in ops.columns:
        ops = ops.with_columns(pl.lit(0, pl.Int64).alias("lane"))
    if "instance" not in ops.columns:
        ops = ops.with_columns(pl.lit(None, pl.Int64).alias("instance"))
    ops = ops.with_columns(pl.col("start").cast(pl.Float64), pl.col("end").cast(pl.Float64))
    keys = ("step", "worker", "lane", "start")
    return ops if _sorted_by(ops, keys) else ops.sort(*keys, maintain_order=True)


def _sorted_by(frame: pl.DataFrame, keys: tuple[str, ...]) -> bool:
    """Whether ``frame`` is already in the (stable) order of ``keys`` (no nulls in them): a table the op
    table's reader sorted need not be sorted again (the same rows, the same order)."""
    if frame.height < 2 or any(frame[k].null_count() for k in keys):
        return frame.height < 2
    cols = [frame[k].to_numpy() for k in keys]
    undecided = np.ones(frame.height - 1, dtype=bool)  # pairs whose earlier keys are equal
    for c in cols:
        if c.dtype.kind == "f" and np.isnan(c).any():  # a sort puts NaN last: let it
            return False
        a, b = c[:-1], c[1:]
        if (undecided & (a > b)).any():
            return False
        undecided &= a == b
    return True
