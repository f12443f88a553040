"""A run's store (Kineto traces, any rank count) as an op table of the dependency model
(:mod:`analyses.whatif.model`), and how well replaying it reproduces the measured step times.

Which rows, per rank and step (rows without a step are left out):

* **GPU rank** (it has kernels): every device row (kernels, communication kernels, memcpy, memset) on
  its stream's lane, the host's runtime calls (``cudaLaunchKernel``, ``cudaMemcpyAsync``...) on their
  thread's lane, and the data loader's outermost spans that hold no runtime call
  (:data:`ddprof.vocabulary.loaders.DATA_LOADER_PATTERN`: the host drawing the step's batch launches
  nothing meanwhile; left out, a step of ``num_workers=0`` would begin after its batch was drawn). A device row waits for the start of the runtime call that launched it (same
  ``correlation``): the launch dependency. The time between two runtime calls of a thread (Python,
  framework) is kept as a measured host delay.
* **CPU rank** (gloo, no kernels): its communication rows (``gloo:*``) and the outermost CPU ops and data
  loader spans of each thread that contain none, each thread one lane.
* **Waits on another lane** (inferred: Kineto records neither ``cudaStreamWaitEvent`` targets nor
  ``work.wait()``): a row that starts within :data:`WAIT_SLACK_S` after a row of another lane of its
  rank ended, with its own lane free since, waited for it: an ``end`` edge. On a device lane the source
  is any device row (a kernel after the collective whose output it reads); on a host lane, a
  communication row (the main thread after an asynchronous gloo all-reduce). The nearest such row is
  taken; a coincidence closer than the slack is taken for a wait too. A host thread that stopped for
  :data:`HANDOFF_MIN_S` or more while a collective of its rank ran on a host thread (gloo's) and resumed
  after it ended waited for it however late it resumed (``work.wait()`` in DDP's last bucket: a thread
  woken on a loaded machine resumes milliseconds after the collective's row ends, and one bucket's row
  may close after the thread resumed): the latest such row that ended in the stop; the time from its
  end to the resumption stays a measured delay.
* **Hand-offs between host threads**: a thread that stops for a millisecond or more while another thread of
  its rank runs, the other beginning right after the stop and ending right before the resumption (within
  5 % of the stop), handed it work and waited (the main thread and the autograd thread's backward): the
  other thread's first row waits for the stopped thread's last, and the resumed row for the other's last
  (:func:`_handoffs`).
* **Issued collectives** (CPU ranks): a communication row on a thread that did not issue it (gloo runs
  asynchronous collectives on its worker threads) waits for the op-table row of the issuing thread that
  holds the issuing ``c10d::*`` call (:func:`_issued`).
* **Host gaps**: per host row, ``gap`` is the part of its wait on its lane (from the previous row's end
  to its start) that no CPU op or runtime call of its thread covers: idle time (Python, the data loader,
  a sleep), as opposed to CPU work outside the modelled rows. The "host gaps removed" edit takes it off.

Communication instances are the matched collectives of :func:`analyses.collectives.comm_rows` (the k-th
of one process group on each rank; point-to-point per sender/receiver pair): an instance completes for
each member at the latest arrival plus its transfer; a send that returned before its receive began
arrives without waiting (the model's rule 4).

Not modelled: a host call that waits for the device (``cudaStreamSynchronize``, a blocking copy) keeps
its recorded duration, wait included; a wait on another lane that began later than the slack stays in
the measured delay.

Times are seconds from the run's first event. Each step is replayed on its own (from the earliest start
of the step on any rank): a launch, a wait or a collective whose rows fall in two steps binds nothing. Labels for edits and attributions: ``rank``, ``kind``,
``name``, ``optype`` (the collective op, else the event kind), ``stream``, and ``key``: the name and its
occurrence on the rank's host or device side within the step (``cudaLaunchKernel#41``) where every rank
ran that name as often in the step (the same op on every rank of an SPMD run, so "its typical value
across the other ranks" compares like with like), else the name alone.

Clocks: a collective instance some member of which ended before another member arrived contradicts the
model (an instance completes for everyone after the last arrival): beyond :data:`MAX_CONTRADICTED` of
the instances the ranks' clocks disagree, or the matching (the k-th collective of a group on each rank)
pairs different collectives, and the run is not explained (``ddprof analyze`` takes the hosts' offsets
off first where the run names its hosts: :mod:`analyses.clocks`).

Replay check (:func:`replay_check`): the model replayed with its recorded delays, durations and
transfers gives each (rank, step) span (first start to last end of its rows); the error is the largest
difference from the recorded span, over the run's mean measured step time (``ProfilerStep#N``).
Example: measured steps of 10 ms, a rank's step replayed as 10.1 ms against 10.0 ms recorded: 1 %.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

import numpy as np
import polars as pl
from ddprof.analyses.collectives import comm_rows
from ddprof.analyses.frames.memo import Events, collect, prepare
from ddprof.analyses.frames.sets import gpu_ranks, steps
from ddprof.analyses.whatif.model import Model, build, sort_ops
from ddprof.analyses.whatif.replay import CycleError, Plan, Replay, plan, replay

from ddprof.vocabulary.collective_ops import P2P
from ddprof.vocabulary.loaders import DATA_LOADER_PATTERN

#: Replay error (share of the mean measured step time) above which the model does not explain the run.
MAX_REPLAY_ERROR = 0.02
#: Share of collective instances that may contradict the clocks (a member ended before another arrived).
MAX_CONTRADICTED = 0.05
#: How much earlier than another member's arrival a member may end before the clocks are doubted (s).
CLOCK_SLACK_S = 2e-6
#: A host row this soon after a communication row of its rank ended waited for it (seconds).
WAIT_SLACK_S = 200e-6
#: A host thread that stops this long while another thread of its rank runs may have handed it work
#: (:func:`_handoffs`), seconds; the other thread must begin and end within this share of the stop.
HANDOFF_MIN_S = 1e-3
HANDOFF_SLACK = 0.05

_DEVICE_KINDS = ("compute", "comm", "memcpy", "memset")
_KEY = ["rank", "tid", "stream", "ts_ns", "dur_ns", "name"]


def _outermost(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Rows no earlier row of the same (rank, tid) contains (starts before and ends at or after)."""
    return (rows.sort("rank", "tid", "ts_ns", pl.col("dur_ns"), descending=[False, False, False, True])
            .with_columns((pl.col("ts_ns") + pl.col("dur_ns")).alias("__end"))
            .with_columns(pl.col("__end").cum_max().shift(1).over("rank", "tid").alias("__reach"))
            .filter(pl.col("__reach").is_null() | (pl.col("ts_ns") >= pl.col("__reach")))
            .drop("__end", "__reach"))


#: Where a row of a span's thread lies for the span to hold it (:func:`_holding_none`; ``__c0``/``__c1`` the
#: row's start and end): wholly inside it, or starting inside it.
_WHOLLY_IN = (pl.col("__c0") >= pl.col("ts_ns")) & (pl.col("__c1") <= pl.col("ts_ns") + pl.col("dur_ns"))
_STARTS_IN = (pl.col("__c0") >= pl.col("ts_ns")) & (pl.col("__c0") < pl.col("ts_ns") + pl.col("dur_ns"))


def _holding_none(spans: pl.LazyFrame, inner: pl.LazyFrame, held: pl.Expr) -> pl.LazyFrame:
    """The ``spans`` that hold no row of ``inner`` on their thread (rank, tid), ``held`` saying where a row must
    lie to be held (:data:`_WHOLLY_IN`, :data:`_STARTS_IN`)."""
    rows = inner.select("rank", "tid", pl.col("ts_ns").alias("__c0"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("__c1"))
    holding = spans.join(rows, on=["rank", "tid"]).filter(held).select(_KEY).unique()
    return spans.join(holding, on=_KEY, how="anti", nulls_equal=True)


def op_rows(events: Events) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The op table (module doc) and its launch edges (``src_op``, ``dst_op``, ``on``)."""
    p = prepare(events)
    # A row the model cannot place (no step; a host row without its thread) is left out.
    ev = p.events.filter(pl.col("step").is_not_null() & (pl.col("stream").is_not_null() | pl.col("tid").is_not_null()))
    gpu = gpu_ranks(p).lazy()
    device = ev.filter(pl.col("stream").is_not_null() & pl.col("kind").is_in(_DEVICE_KINDS))
    host_gpu = ev.filter(pl.col("stream").is_null() & (pl.col("kind") == "runtime")).join(gpu, on="rank",
                                                                                            how="semi")
    # The data loader's spans (a CPU op or an annotation: ``enumerate(DataLoader)#...``), on every rank.
    is_loader = pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("name").str.contains(DATA_LOADER_PATTERN)
    # Its outermost spans on a GPU rank's threads that hold no runtime call of theirs (the host launches
    # nothing while it loads: the step's first wait).
    loader = _outermost(ev.filter(pl.col("stream").is_null() & is_loader).join(gpu, on="rank", how="semi"))
    loader = _holding_none(loader, host_gpu, _STARTS_IN)
    cpu = ev.filter(pl.col("stream").is_null()).join(gpu, on="rank", how="anti")
    cpu_comm = cpu.filter(pl.col("kind") == "comm")
    # A CPU rank's work: its CPU ops and its data loader's spans, the outermost: a batch drawn is one op, the
    # loader's wait and the ops that made the batch.
    cpu_ops = cpu.filter((pl.col("kind") == "cpu_op") | is_loader)
    # Outermost CPU ops that contain no communication row of their thread.
    cpu_work = _holding_none(_outermost(cpu_ops), cpu_comm, _WHOLLY_IN)
    cols = ["rank", "step", "tid", "stream", "ts_ns", "dur_ns", "kind", "name", "correlation", "coll_op", "bytes"]
    rows = collect(pl.concat([f.select(cols) for f in (device, host_gpu, loader, cpu_comm, cpu_work)]))
    if rows.is_empty():
        return rows, pl.DataFrame()
    inst = comm_rows(p).select(*_KEY, pl.concat_str(
        [pl.col("group"), pl.col("src").cast(pl.String), pl.col("dst").cast(pl.String), pl.col("index").cast(pl.String)],
        separator="/", ignore_nulls=True).alias("instance"))
    t0 = rows["ts_ns"].min()
    # Only communication rows can be an instance's (comm_rows): the join reads those alone, and the rows
    # keep their order (ties in the model's sort keep it).
    comm = (pl.col("kind") == "comm").fill_null(False)
    rows = rows.with_row_index("__r")
    rows = pl.concat([rows.filter(comm).join(inst, on=_KEY, how="left", nulls_equal=True),
                      rows.filter(~comm).with_columns(pl.lit(None, pl.String).alias("instance"))]).sort("__r").drop("__r")
    rows = (
        rows
        .with_columns(
            pl.col("rank").cast(pl.Int64).alias("worker"),
            pl.col("step").cast(pl.Int64),
            pl.col("step").cast(pl.Int64).alias("profiler_step"),
            # Device lanes are streams (>= 0); host lanes are threads (negative).
            pl.when(pl.col("stream").is_not_null()).then(pl.col("stream"))
            .otherwise(-1 - pl.col("tid").rank("dense").over("rank").cast(pl.Int64)).alias("lane"),
            ((pl.col("ts_ns") - t0) / 1e9).alias("start"),
            ((pl.col("ts_ns") + pl.col("dur_ns") - t0) / 1e9).alias("end"),
            pl.coalesce(pl.col("coll_op"), pl.col("kind").cast(pl.String)).alias("optype"),
            pl.col("kind").cast(pl.String),
        )
        # A communication row no other rank matched synchronises nothing; nor does an instance whose
        # rows fall in different steps (each step is replayed on its own).
        .with_columns(pl.when((pl.len().over("instance") > 1) & (pl.col("step").n_unique().over("instance") == 1))
                      .then(pl.col("instance")).alias("instance"))
    )
    rows = sort_ops(rows).with_row_index("__op").with_columns(
        pl.col("end").shift(1).over("step", "worker", "lane").alias("__prev_end"),
        pl.int_range(pl.len()).over("worker", "step", pl.col("lane") < 0, "name").alias("__k"),
        pl.len().over("worker", "step", pl.col("lane") < 0, "name").alias("__n"))
    # The k-th op of a name is the same op on every rank only where every rank ran that name as often.
    rows = rows.with_columns(
        pl.when(pl.col("__n").n_unique().over("step", pl.col("lane") < 0, "name") == 1)
        .then(pl.format("{}#{}", pl.col("name"), pl.col("__k"))).otherwise(pl.col("name")).alias("key")
    ).drop("__k", "__n")
    launch = rows.filter(pl.col("kind") == "runtime").select("rank", "correlation", pl.col("__op").alias("src_op"))
    targets = rows.filter(pl.col("stream").is_not_null()).select("rank", "correlation", pl.col("__op").alias("dst_op"))
    deps = (launch.drop_nulls("correlation").join(targets.drop_nulls("correlation"), on=["rank", "correlation"])
            .select(pl.col("src_op").cast(pl.Int64), pl.col("dst_op").cast(pl.Int64), pl.lit("start").alias("on")))
    issuers = collect(_outermost(cpu_ops.filter(pl.col("coll_op").is_not_null()))
                      .select(pl.col("rank").cast(pl.Int64).alias("worker"), pl.col("step").cast(pl.Int64), "tid",
                              ((pl.col("ts_ns") - t0) / 1e9).alias("start"),
                              ((pl.col("ts_ns") + pl.col("dur_ns") - t0) / 1e9).alias("end")))
    deps = pl.concat([deps, _waits(rows), _handoffs(rows), _issued(rows, issuers)])
    step = rows["step"].to_numpy()
    deps = deps.filter(pl.Series(step[deps["src_op"].to_numpy()] == step[deps["dst_op"].to_numpy()]))
    busy = ev.filter(pl.col("stream").is_null() & pl.col("kind").is_in(["cpu_op", "runtime", "comm"]))
    rows = rows.with_columns(pl.Series("gap", _idle_gaps(rows, collect(busy.select("rank", "tid", "ts_ns", "dur_ns")),
                                                         int(cast(int, t0)))))
    return rows.drop("__op", "__prev_end"), deps


def _waits(rows: pl.DataFrame) -> pl.DataFrame:
    """``end`` edges to the rows that waited for a row of another lane of their rank (module doc): on a
    host lane, for a communication row; on a device lane, for any device row."""
    out = []
    # The few columns read, once (filtering every column of every row per lane copied them all).
    rows = rows.select("worker", "lane", "start", "end", "__prev_end", "__op", pl.col("instance").is_not_null())
    for lane in rows["lane"].unique().to_list():
        dst = (rows.filter(pl.col("lane") == lane)
               .select("worker", "start", "__prev_end", pl.col("__op").alias("dst_op")).sort("start"))
        other = rows.filter(pl.col("lane") != lane)
        src = other.filter(pl.col("instance")) if lane < 0 else other.filter(pl.col("lane") >= 0)
        src = src.select("worker", pl.col("end").alias("__src_end"), pl.col("__op").alias("src_op"),
                         (pl.col("lane") < 0).alias("__host")).sort("__src_end")
        hit = dst.join_asof(src, left_on="start", right_on="__src_end", by="worker", strategy="backward",
                            check_sortedness=False)  # both sorted on the time column
        stopped = pl.col("start") - pl.col("__prev_end") >= HANDOFF_MIN_S  # a blocked thread (module doc)
        soon = (pl.col("start") - pl.col("__src_end") <= WAIT_SLACK_S) | (stopped & pl.col("__host"))
        out.append(hit.filter(pl.col("src_op").is_not_null() & soon
                              & (pl.col("__prev_end").is_null() | (pl.col("__src_end") >= pl.col("__prev_end"))))
                   .select(pl.col("src_op").cast(pl.Int64), pl.col("dst_op").cast(pl.Int64), pl.lit("end").alias("on")))
    return pl.concat(out) if out else pl.DataFrame(schema={"src_op": pl.Int64, "dst_op": pl.Int64, "on": pl.String})


def _issued(rows: pl.DataFrame, issuers: pl.DataFrame) -> pl.DataFrame:
    """Edges from the op that issued each asynchronous collective of a CPU rank to its row on the
    communication thread that ran it (module doc). ``issuers``: the rank's outermost CPU ops with a
    collective (``c10d::allreduce_``, ``record_param_comms``): worker, step, tid, start, end (seconds, the op
    table's origin). The communication rows of a host lane that no issuer of their own thread holds are
    asynchronous (gloo runs them on its worker threads; a blocking send runs inside its caller); the k-th
    of them in a (rank, step) was issued by the k-th issuer of another thread that started before it (the
    latest such issuer where the counts differ). The edge leaves the op-table row holding the issuer: an
    ``end`` edge where the collective began after that row ended, else a ``start`` edge.

    Example (a DDP step of a gloo rank): the autograd thread's ``AccumulateGrad`` [10.0, 10.4) ms holds
    ``c10d::allreduce_`` at 10.3 ms; gloo's thread runs ``gloo:all_reduce`` from 10.45 ms: an end edge from
    the ``AccumulateGrad`` row, so the critical path goes from the all-reduce back to the backward that
    produced its bucket, not to an idle worker thread."""
    none = pl.DataFrame(schema={"src_op": pl.Int64, "dst_op": pl.Int64, "on": pl.String})
    host = rows.filter(pl.col("lane") < 0).select("worker", "step", "tid", "lane", "start", "end", "__op",
                                                  (pl.col("kind") == "comm").fill_null(False).alias("__comm"))
    comm = host.filter(pl.col("__comm"))
    if comm.is_empty() or issuers.is_empty():
        return none
    thread = ["worker", "tid"]
    # a communication row inside an issuer of its own thread is that issuer's blocking call, not a hand-off
    inside = (comm.join(issuers.select(*thread, pl.col("start").alias("__i0"), pl.col("end").alias("__i1")), on=thread)
              .filter((pl.col("__i0") <= pl.col("start")) & (pl.col("start") < pl.col("__i1"))).select("__op").unique())
    comm = comm.join(inside, on="__op", how="anti")
    own = comm.select(*thread).unique()
    issuers = issuers.join(own, on=thread, how="anti")  # an issuer on a communication thread issues nothing here
    if comm.is_empty() or issuers.is_empty():
        return none
    comm = comm.sort("start").with_columns(pl.int_range(pl.len()).over("worker", "step").alias("__k"),
                                           pl.len().over("worker", "step").alias("__n"))
    issuers = issuers.sort("start").with_columns(pl.int_range(pl.len()).over("worker", "step").alias("__k"),
                                                 pl.len().over("worker", "step").alias("__n"))
    same = comm.join(issuers.select("worker", "step", "__k", "__n", pl.col("tid").alias("__i_tid"),
                                    pl.col("start").alias("__i_start")), on=["worker", "step", "__k", "__n"])
    rest = comm.join(same.select("__op"), on="__op", how="anti").sort("start").join_asof(
        issuers.select("worker", "step", pl.col("tid").alias("__i_tid"), pl.col("start").alias("__i_start"))
        .sort("__i_start"), left_on="start", right_on="__i_start", by=["worker", "step"], strategy="backward",
        check_sortedness=False)
    pairs = pl.concat([same.select("worker", "start", "__op", "__i_tid", "__i_start"),
                       rest.select("worker", "start", "__op", "__i_tid", "__i_start")])
    pairs = pairs.filter(pl.col("__i_start").is_not_null() & (pl.col("__i_start") <= pl.col("start")))
    # the op-table row of the issuer's thread that holds the issuer
    holders = host.select("worker", pl.col("tid").alias("__i_tid"), pl.col("start").alias("__h_start"),
                          pl.col("end").alias("__h_end"), pl.col("__op").alias("src_op")).sort("__h_start")
    hit = pairs.sort("__i_start").join_asof(holders, left_on="__i_start", right_on="__h_start",
                                            by=["worker", "__i_tid"], strategy="backward", check_sortedness=False)
    hit = hit.filter(pl.col("src_op").is_not_null() & (pl.col("__h_end") >= pl.col("__i_start")))
    return hit.select(pl.col("src_op").cast(pl.Int64), pl.col("__op").cast(pl.Int64).alias("dst_op"),
                      pl.when(pl.col("start") >= pl.col("__h_end")).then(pl.lit("end")).otherwise(pl.lit("start"))
                      .alias("on"))


def _handoffs(rows: pl.DataFrame) -> pl.DataFrame:
    """``end`` edges of a host thread that hands work to another thread of its rank and waits for it (module
    doc): where a host lane stops for :data:`HANDOFF_MIN_S` or more (gap g from its previous row's end to its
    next row's start) and another host lane of the rank runs meanwhile, beginning within ``max(WAIT_SLACK_S,
    HANDOFF_SLACK · g)`` after the stop and ending as soon before the resumption, its rows spanning at least
    half the gap, the other lane's first row in the gap waits for the stopped lane's last row (the fork) and,
    where the other lane also ends within that slack before the resumption, the resumed row for the other
    lane's last row in the gap (the join). A fork without its join: the stopped thread went on with
    something the trace does not show before it resumed (a real ResNet-50 step: the backward's launches
    end 0.71 ms before the main thread resumes, 36 ms after it stopped).

    Example (a real V100 step): the main thread launches its last kernel of the forward at 426 ms, then
    launches nothing for 268 ms; the autograd thread launches the backward's kernels from 426.5 ms to
    693.3 ms; the main thread resumes at 694.5 ms (1.2 ms after, 0.5 % of the gap): two edges, and the
    step's critical path runs through the backward's launches instead of 268 ms of the main thread's idle."""
    none = pl.DataFrame(schema={"src_op": pl.Int64, "dst_op": pl.Int64, "on": pl.String})
    host = rows.filter(pl.col("lane") < 0).with_columns(
        pl.col("__op").shift(1).over("step", "worker", "lane").alias("__prev_op"))
    stops = host.filter((pl.col("start") - pl.col("__prev_end")) >= HANDOFF_MIN_S).select(
        "worker", "step", "lane", "__prev_end", "__prev_op", "start", pl.col("__op").alias("dst_op"),
        pl.max_horizontal(pl.lit(WAIT_SLACK_S), HANDOFF_SLACK * (pl.col("start") - pl.col("__prev_end"))).alias("__slack"))
    if stops.is_empty():
        return none
    out = []
    for lane in stops["lane"].unique().to_list():
        mine = stops.filter(pl.col("lane") == lane)
        other = host.filter(pl.col("lane") != lane).select("worker", "step", pl.col("lane").alias("__other"),
                                                           "start", "end", "__op")
        # the other lane's first row at or after the stop, and its last row ending by the resumption
        first = mine.sort("__prev_end").join_asof(
            other.select("worker", "step", "__other", pl.col("start").alias("__f_start"), pl.col("__op").alias("__f_op"))
            .sort("__f_start"), left_on="__prev_end", right_on="__f_start", by=["worker", "step"], strategy="forward",
            check_sortedness=False)
        both = first.sort("start").join_asof(
            other.select("worker", "step", pl.col("__other").alias("__other_l"), pl.col("end").alias("__l_end"),
                         pl.col("__op").alias("__l_op")).sort("__l_end"),
            left_on="start", right_on="__l_end", by=["worker", "step"], strategy="backward", check_sortedness=False)
        fork = both.filter(
            pl.col("__f_op").is_not_null() & pl.col("__l_op").is_not_null() & (pl.col("__other") == pl.col("__other_l"))
            & (pl.col("__f_start") - pl.col("__prev_end") <= pl.col("__slack"))
            & (pl.col("__l_end") - pl.col("__f_start") >= 0.5 * (pl.col("start") - pl.col("__prev_end"))))
        join = fork.filter(pl.col("start") - pl.col("__l_end") <= pl.col("__slack"))
        out.append(fork.select(pl.col("__prev_op").cast(pl.Int64).alias("src_op"),
                               pl.col("__f_op").cast(pl.Int64).alias("dst_op"), pl.lit("end").alias("on")))
        out.append(join.select(pl.col("__l_op").cast(pl.Int64).alias("src_op"), pl.col("dst_op").cast(pl.Int64),
                               pl.lit("end").alias("on")))
    return pl.concat(out) if out else none


def _idle_gaps(rows: pl.DataFrame, busy_rows: pl.DataFrame, t0: int) -> np.ndarray:
    """Per row, the idle time of its thread between the previous row of its lane and its start: the part
    of that interval no CPU op, runtime call or communication row of the thread covers (0 on device
    lanes)."""
    gap = np.zeros(rows.height)
    host = (rows.with_row_index("__i").filter((pl.col("lane") < 0) & pl.col("__prev_end").is_not_null())
            .select("__i", "rank", "tid", "__prev_end", "start"))
    if host.is_empty() or busy_rows.is_empty():
        return gap
    busy = (busy_rows.select("rank", "tid", ((pl.col("ts_ns") - t0) / 1e9).alias("s"),
                             ((pl.col("ts_ns") + pl.col("dur_ns") - t0) / 1e9).alias("e"))
            .sort("rank", "tid", "s"))
    # One pass to split the host rows by thread (a filter per thread would read them all per thread).
    by_thread = host.partition_by(["rank", "tid"], as_dict=True, maintain_order=False)
    for (rank, tid), b in busy.group_by(["rank", "tid"], maintain_order=True):
        h = by_thread.get((rank, tid))
        if h is None:
            continue
        s, e = b["s"].to_numpy(), b["e"].to_numpy()
        # Merge into disjoint busy intervals, then the busy time before t is a cumulative sum.
        reach = np.maximum.accumulate(e)
        new = np.r_[True, s[1:] > reach[:-1]]
        starts, ends = s[new], np.maximum.reduceat(e, np.flatnonzero(new))
        cum = np.r_[0.0, np.cumsum(ends - starts)]

        def busy_before(t: np.ndarray, starts: np.ndarray = starts, ends: np.ndarray = ends,
                        cum: np.ndarray = cum) -> np.ndarray:
            k = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
            inside = np.where(k > 0, np.minimum(t, ends[np.maximum(k - 1, 0)]) - starts[np.maximum(k - 1, 0)], 0.0)
            return cum[k - 1 + (k == 0)] * (k > 0) + np.maximum(inside, 0.0)

        a, z = h["__prev_end"].to_numpy(), h["start"].to_numpy()
        gap[h["__i"].to_numpy()] = np.maximum((z - a) - (busy_before(z) - busy_before(a)), 0.0)
    return gap


@dataclass
class ReplayCheck:
    """How well the model reproduces a run: per (rank, step) the recorded and replayed spans."""

    model: Model | None
    spans: pl.DataFrame
    measured_step_s: float
    error: float
    reason: str | None
    #: The model's replay plan (computed once: projections replay edits on it).
    order: Plan | None = None
    #: The recorded replay (with each node's binding edge: the critical path's links).
    replayed: Replay | None = None
    #: The extra edges the model was built with (launches, waits, hand-offs: :func:`op_rows`).
    deps: pl.DataFrame | None = None

    @property
    def explained(self) -> bool:
        return self.reason is None


def _spans(model: Model, start: np.ndarray, end: np.ndarray) -> pl.DataFrame:
    return (model.ops.select("worker", pl.col("profiler_step").alias("step"))
            .with_columns(pl.Series("s", start), pl.Series("e", end))
            .group_by("worker", "step").agg((pl.col("e").max() - pl.col("s").min()).alias("span")))


def step_times(model: Model, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per step (in order), the run's step time: the latest end of its rows on any rank minus the
    earliest start."""
    lo, hi = np.full(len(model.steps), np.inf), np.full(len(model.steps), -np.inf)
    np.minimum.at(lo, model.step_of_op, start)
    np.maximum.at(hi, model.step_of_op, end)
    return hi - lo


def _contradicted(model: Model) -> tuple[int, int]:
    """(collective instances some member of which ended more than :data:`CLOCK_SLACK_S` before another
    arrived, collective instances): a collective completes for everyone after the last arrival, so such an
    instance says the clocks disagree. Point-to-point pairs are left out: a buffered send may return before
    its receive starts."""
    per = (model.ops.filter(pl.col("instance").is_not_null() & ~pl.col("optype").is_in(list(P2P)))
           .group_by("instance").agg((pl.col("end").min() < pl.col("start").max() - CLOCK_SLACK_S).alias("bad")))
    return int(per["bad"].sum()), per.height


def replay_check(events: Events, deadline: float | None = None) -> ReplayCheck:
    """Build the run's model and replay it as recorded (module doc); ``reason`` says why the model does
    not explain the run (no steps, a cycle, an error above :data:`MAX_REPLAY_ERROR`), else None.
    ``deadline``: a ``time.process_time`` past which it stops after the phase under way (the op table,
    the graph, its plan), ``reason`` saying so."""
    t0 = time.process_time()

    def late(what: str) -> str | None:
        if deadline is None or time.process_time() <= deadline:
            return None
        return (f"{what} took {time.process_time() - t0:.2f} s of CPU, past the {deadline - t0:.2f} s the report "
                f"allows the section: run ddprof whatif")
    p = prepare(events)
    st = steps(p)
    measured = float(((st["end"] - st["start"]).mean() or 0) / 1e9) if st.height else 0.0
    ops, deps = op_rows(p)
    empty = pl.DataFrame(schema={"worker": pl.Int64, "step": pl.Int64, "recorded": pl.Float64,
                                 "replayed": pl.Float64})
    if ops.is_empty() or not measured:
        return ReplayCheck(None, empty, measured, float("nan"), "the trace has no steps (ProfilerStep#N) to replay")
    if (why := late("reading the run's op table")) is not None:
        return ReplayCheck(None, empty, measured, float("nan"), why)
    model = build(ops, deps)
    if (why := late("building the dependency model")) is not None:
        return ReplayCheck(model, empty, measured, float("nan"), why)
    contradicted, instances = _contradicted(model)
    if instances and contradicted > MAX_CONTRADICTED * instances:
        return ReplayCheck(model, empty, measured, float("nan"), (
            f"{contradicted:,} of {instances:,} collective instances end on some rank before another rank "
            f"arrived: the ranks' clocks disagree (give each rank's host, so that ddprof analyze can estimate "
            f"and apply the hosts' offsets), or the k-th collective of a group is not the same one on every "
            f"rank (the ranks issue them in another order, or with peers that were not traced); the model "
            f"does not explain this run"))
    try:
        order = plan(model)
    except CycleError as exc:
        return ReplayCheck(model, empty, measured, float("nan"), f"the recorded order contradicts the matched "
                                                                 f"collectives ({exc})")
    if (why := late("planning the dependency model's replay")) is not None:
        return ReplayCheck(model, empty, measured, float("nan"), why)
    r = replay(model, order=order, binding=True)
    rel_start = model.ops["start"].to_numpy() - model.origin[model.step_of_op]
    rel_end = model.ops["end"].to_numpy() - model.origin[model.step_of_op]
    spans = (_spans(model, rel_start, rel_end).rename({"span": "recorded"})
             .join(_spans(model, r.start, r.end).rename({"span": "replayed"}), on=["worker", "step"])
             .sort("worker", "step"))
    error = float((spans["replayed"] - spans["recorded"]).abs().max() / measured)
    reason = None
    if error > MAX_REPLAY_ERROR:
        reason = (f"replaying the recorded durations misses a measured step span by {100 * error:.1f} % of the "
                  f"mean step time (above {100 * MAX_REPLAY_ERROR:.0f} %): the model does not explain this run")
    return ReplayCheck(model, spans, measured, error, reason, order, r, deps)
