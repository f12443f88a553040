"""The edit "the gradient all-reduces overlapped with the backward pass": a run whose data-parallel
reductions wait for the whole backward (an all-reduce after ``loss.backward()``, DDP with one bucket,
buckets held back) projected as if each had started once its gradients existed, as DDP's buckets do.

Unlike the edits of :mod:`analyses.whatif.edits` (new durations, transfers and delays on the same graph),
this one changes what the reductions wait for, so it is replayed on a model of its own
(:class:`~analyses.whatif.edits.Edit` ``model``): the recorded op table with other dependency edges.

Which ops, per rank and step (device ranks; not on a pipeline, whose gradients are final only after its
last micro-batch: a run with point-to-point transfers is left as it is):

* the **tail**: the all-reduces and reduce-scatters on a device stream that start once every compute
  kernel that began before the last of them has ended (``T``, the end of the backward as recorded). On a
  run that overlaps, that is the last bucket alone, which no edit can move: the edit changes nothing;
* the **backward**: the compute kernels that began before the tail, the last :data:`BACKWARD_SHARE` of
  their time (a backward pass costs about twice its forward: each matmul's gradient takes two of the
  forward's);
* the step's **gradient reductions**: those of the tail's process groups that start from the backward's
  start on, the tail and any that already overlap the backward (DDP's earlier buckets), in order of
  start; op i holds its share of their bytes (bytes as recorded; equal shares where one has none): with
  ``s_i`` their bytes up to and including op i over their total, a tail op waits for the end of the
  backward kernel by which ``s_i`` of the backward's compute time has run, instead of the end of the
  backward. The last keeps waiting for the end; a run that overlaps all but its last two buckets moves
  those two little (their shares are near 1).

Each tail op keeps its recorded delay after what it waits for, its transfer, its launch (it still
starts no earlier than its launch call) and its order on its stream; the other ranks' ops are edited
alike, so an instance still completes at its latest arrival plus its transfer.

Example: a step whose backward is 8 kernels of 1 ms (after a 4 ms forward) with two all-reduces of equal
size issued after it, 1.5 ms each: recorded, they run at 12–13.5 and 13.5–15 ms. Edited, the first waits
for the backward's 4th kernel (half of its time), 8–9.5 ms, overlapping it; the second for the 8th: 12–13.5
ms. The step: 15 → 13.5 ms.

What it cannot see: the slowdown of compute that shares the device with the transfers it now overlaps
(memory bandwidth, SMs taken by NCCL), which the run without overlap never had.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from ddprof.analyses.whatif.edits import Edit
from ddprof.analyses.whatif.model import Model, build
from ddprof.analyses.whatif.replay import CycleError, plan

from ddprof.vocabulary.collective_ops import P2P

#: The share of the compute before the tail that is the backward pass (module doc).
BACKWARD_SHARE = 2 / 3
#: Reductions whose gradients DDP-style overlap produces.
REDUCTIONS = ("all_reduce", "reduce_scatter")
#: How much earlier than the end of the backward a tail op may start and still count as waiting for it (s).
SLACK_S = 1e-6
NAME, SAYS = "grad_overlap", "all-reduces overlapped with the backward"


def _tails(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (worker, step) with a tail of two ops or more: each tail op (``dst_op``) and the backward kernel
    it would wait for (``src_op``)."""
    none = pl.DataFrame(schema={"src_op": pl.Int64, "dst_op": pl.Int64})
    cols = ["worker", "step", "start", "end", "op", "optype", "is_comm", *(["bytes"] if "bytes" in ops.columns else [])]
    device = ops.lazy().filter(pl.col("lane") >= 0).select(*cols, pl.col("instance")).collect()
    red = device.filter(pl.col("is_comm") & pl.col("optype").is_in(REDUCTIONS)).with_columns(
        pl.col("instance").str.split("/").list.first().alias("__g"),  # the process group (store.op_rows)
        (pl.col("bytes").cast(pl.Float64) if "bytes" in cols else pl.lit(None, pl.Float64)).fill_null(0.0).alias("__b"))
    comp = device.filter(pl.col("optype") == "compute")
    if red.is_empty() or comp.is_empty():
        return none
    last = red.group_by("worker", "step").agg(pl.col("start").max().alias("__last"))
    # T: the latest end of the compute that began before the last reduction.
    t_end = (comp.join(last, on=["worker", "step"]).filter(pl.col("start") < pl.col("__last"))
             .group_by("worker", "step").agg(pl.col("end").max().alias("__T")))
    tail = (red.join(t_end, on=["worker", "step"]).filter(pl.col("start") >= pl.col("__T") - SLACK_S)
            .filter(pl.len().over("worker", "step") >= 2))
    if tail.is_empty():
        return none
    first = tail.group_by("worker", "step").agg(pl.col("start").min().alias("__t0"), pl.col("__g").unique().alias("__gs"))
    bwd = (comp.join(first, on=["worker", "step"]).filter(pl.col("start") < pl.col("__t0"))
           .sort("worker", "step", "start", "op")
           .with_columns((pl.col("end") - pl.col("start")).alias("__d"))
           .with_columns(pl.col("__d").cum_sum().over("worker", "step").alias("__c"),
                         pl.col("__d").sum().over("worker", "step").alias("__D"))
           # the last BACKWARD_SHARE of the compute: cumulative time past (1 - share) of the total
           .filter(pl.col("__c") > (1 - BACKWARD_SHARE) * pl.col("__D"))
           .with_columns((pl.col("__c") - (1 - BACKWARD_SHARE) * pl.col("__D")).alias("__done"),
                         (BACKWARD_SHARE * pl.col("__D")).alias("__B")))
    if bwd.is_empty():
        return none
    # The step's gradients: its group's reductions from the backward's start on (the tail and those that
    # already overlap it); each op holds its share of their bytes (of their count where one has none).
    b0 = bwd.group_by("worker", "step").agg(pl.col("start").min().alias("__b0"))
    grads = (red.join(first, on=["worker", "step"]).join(b0, on=["worker", "step"])
             .filter(pl.col("__gs").list.contains(pl.col("__g")) & (pl.col("start") >= pl.col("__b0")))
             .sort("worker", "step", "start", "op")
             .with_columns(pl.when((pl.col("__b") > 0).all().over("worker", "step"))
                           .then(pl.col("__b").cum_sum().over("worker", "step") / pl.col("__b").sum().over("worker", "step"))
                           .otherwise(pl.int_range(1, pl.len() + 1).over("worker", "step") / pl.len().over("worker", "step"))
                           .alias("__s")))
    shares = tail.select("worker", "step", "op").join(grads.select("op", "__s"), on="op")
    # The first backward kernel by whose end the op's share of the backward has run.
    done = bwd.select("worker", "step", pl.col("op").alias("src_op"), (pl.col("__done") / pl.col("__B")).alias("__s"))
    hit = shares.select("worker", "step", pl.col("op").alias("dst_op"), pl.col("__s") - 1e-9).sort("__s").join_asof(
        done.sort("__s"), on="__s", by=["worker", "step"], strategy="forward", check_sortedness=False)
    return hit.drop_nulls("src_op").select(pl.col("src_op").cast(pl.Int64), pl.col("dst_op").cast(pl.Int64))


def grad_overlap(model: Model, deps: pl.DataFrame) -> Edit | None:
    """The edit (module doc) on ``model``, built from its op table and ``deps`` (the extra edges it was
    built with, :func:`analyses.whatif.store.op_rows`); None where it would change nothing (no rank has
    a tail of two reductions or more; a pipeline; its graph has a cycle)."""
    ops = model.ops
    if ops.filter(pl.col("optype").is_in(list(P2P))).height:
        return None
    moved = _tails(ops)
    if moved.is_empty():
        return None
    dst = moved["dst_op"].to_numpy()
    tail = np.isin(np.arange(ops.height), dst)
    # What a tail op waited for on another lane that is not communication (the end of the backward) goes.
    src = deps["src_op"].to_numpy()
    drop = tail[deps["dst_op"].to_numpy()] & (deps["on"] == "end").to_numpy() & ~ops["is_comm"].to_numpy()[src]
    kept = deps.filter(pl.Series(~drop))
    new_deps = pl.concat([kept, moved.with_columns(pl.lit("end").alias("on"))])
    edited = build(ops.drop("op", "is_comm", "delay", "dur", "xfer", "group"), new_deps)
    try:
        order = plan(edited)
    except CycleError:
        return None
    # Each tail op waits as long after what it now waits for as it did after what it waited for.
    delay = np.where(tail, model.delay, edited.delay)
    return Edit(NAME, SAYS, delay, edited.dur, edited.xfer, model=edited, order=order)
