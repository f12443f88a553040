"""Why a straggler is late: its cause class, told from the trace by comparing the rank with its peers.

A straggler (:mod:`.stragglers`) makes the others wait; this module says where its own time went. Per
rank and profiler step it measures on the host (:func:`cause_steps`, a group of ranks at a time):

* ``lead_ns``: from the step's start to its first compute op outside the data loader: the time spent
  getting the batch (inside a DataLoader's ``enumerate(DataLoader)#...`` span, or any host time before the
  forward, a ``sleep`` included);
* ``compute_ns``: the time of its compute ops: CPU ops that are no collective entry, outside the data
  loader, nested ones counted once (the top-level ones summed), less the host delays before collective
  entries that lie inside them (a DDP communication hook runs inside an autograd op);
* ``precomm_ns``: before each collective entry (``c10d::*``, ``record_param_comms``...), the time since the
  last leaf op of its thread ended: host time spent late in entering a collective (a delayed send, a
  communication hook that waits) rather than computing;
* ``idle_ns``: on the step's thread (the one that ran its first compute op), after that op, the time
  outside any op that precedes an op which is no collective entry: the host doing what the profiler does
  not record (a sleep mid-step, a lock, Python between ops);

and per rank and op name (:func:`cause_ops`) the 25th percentile of its compute ops' durations (their fast
calls), so that the same ops are compared across ranks. On a GPU rank compute is its compute kernels (its CPU ops are not read:
:func:`.rank_groups.read_ranks`), its lead ends at the first one, and ``precomm_ns`` is 0.

The cause of straggler X (:func:`classify`), with the peers' value = the median over the other ranks of
each rank's median over steps, and X's excess = X's median − the peers' value:

1. **stalls**: the wait X caused per step (:func:`step_waits`) is concentrated in a few steps apart from
   the rest: :data:`STALL_MIN` (3) or more steps, and at most half of them, hold more than half of the
   largest step's wait,
   and the shortest of them is at least :data:`STALL_GAP` times the longest other step and any other
   rank's as many longest steps' waits (many ranks on few cores are each last and long now and then), and in them the
   rank's compute exceeds its median step's by less than :data:`STALL_WORK` of their extra wait (every
   k-th step pauses outside any op, the rest run as the others do; one or two long steps are noise, not a
   pattern: a clean 2-rank gloo run had one rank descheduled for 7.6 ms in 2 of 24 steps; waits that
   merely vary are not apart); where the long steps' time is in its ops instead, **contention**
   in bursts (ops stretched in a few steps: a busy neighbour now and then); where the waits are too noisy
   to tell (many ranks on few cores), **stalls** too when its own host idle per step is so concentrated,
   and no other rank's is (:func:`_idle_pauses`; a step's idle less the time its thread waited for a CPU
   beyond its median step's, where the collector's step measures tell: ready to run, it was not pausing);
2. otherwise the largest excess among ``lead_ns`` (**input**), ``precomm_ns`` (**communication**),
   ``idle_ns`` (**host idle**) and ``compute_ns`` names the class, when it is at least :data:`MATERIAL` of
   the wait X causes a waiting rank per step (else **undecided**: no measure explains the wait);
3. compute time is **compute** when the same ops' fast calls are slower too: the op ratio (:func:`op_ratio`,
   the weighted geometric mean over op names of X's 25th percentile duration / the peers') is at least
   :data:`SLOWER_CALLS`, or explains a share :data:`CONTENTION_SHARE` of the extra time (``op ratio − 1 ≥
   share × (compute ratio − 1)``): bigger work stretches every call of an op. Else **contention**: the
   fast calls are as fast as on the others and some are stretched far (a busy CPU takes the core from
   the rank for a time slice now and then; a quarter of the calls at least escape it). On the real jobs
   of the fault matrix the op ratio was 0.84-1.09 under contention and 1.9-3.0 for a 4× batch.
   Compute found so on a CPU rank whose trace recorded input shapes is **contention** still when the rank
   did the others' work (:func:`same_work`): :data:`SAME_WORK` (80 %) or more of its compute op time on
   recorded shapes (half its op time at least) is in calls of an op on input shapes and types a peer also ran. Every call of it slower, on the same
   shapes, is a core its host shares or runs slower (a clean 2-rank gloo run had one rank's every call
   1.19× the other's for the whole run); more work changes the shapes (the 4× batch: its matrix products
   on other shapes). Without recorded shapes more work and a slower core cannot be told apart: compute;
Where the straggler rule names no rank, the rank that cost the others most (at least its material share of
a step) is tested for stalls alone: pauses every k-th step, sparse, rotate with the others' arrivals and are
not beyond chance step by step, yet they are the run's straggling (:func:`cause_verdicts` says so).

4. **pipeline imbalance** (:func:`pipeline_imbalance`; a receiver waiting for its sender is no straggler
   at collectives, :mod:`.bubbles`): the stage whose compute per micro-batch is :data:`IMBALANCE` times the
   median other stage's or more, said whether or not a straggler is named.

A sleep on the host outside any op before the forward is classified *input*: it is host time before the
step's first compute, which is what a slow data loader looks like from the trace (the bundled
``gloo-ddp-4rank-slow-rank`` sample, whose rank 2 sleeps 100 ms before each forward, is classified so);
the same sleep every k-th step anywhere in the step is *stalls*, and right before a collective,
*communication*.

Example (a real 2-rank run of the fault matrix): rank 1 fetching each batch 20 ms late: lead 20.6 ms vs
232 µs, compute 4.3 vs 6.0 ms, pre-communication 84 vs 226 µs -> input, excess 20.4 ms a step; the verdict:
"rank 1 is the straggler (input: 20.6 ms a step on the host before its first compute, data loading,
against 232 µs on the others): ...".
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import polars as pl
from ddprof.analyses.bubbles import pipeline_stages
from ddprof.analyses.collectives import arrivals, comm_rows
from ddprof.analyses.frames.intervals import subtract
from ddprof.analyses.frames.memo import Prepared, collect, derived
from ddprof.analyses.frames.sets import gpu_ranks, kernels, steps
from ddprof.analyses.job import peer_medians

from ddprof.report.schema import PipelineRow, StragglerCause, Stragglers, rows
from ddprof.store.schema import STEP_PREFIX
from ddprof.vocabulary.collective_ops import MARKER_PATTERN
from ddprof.vocabulary.loaders import DATA_LOADER_PATTERN
from ddprof.vocabulary.units import NS_PER_US, fmt_us

#: Stalls: the shortest of the long steps' wait at least this many times the longest other step's.
STALL_GAP = 2.0
#: The fewest long steps that make a pattern of pauses (module doc).
STALL_MIN = 3
#: Stalls: in the long steps the rank computed less than this share of their extra wait beyond its median
#: step's compute (a pause outside ops; ops stretched in a few steps by a busy CPU are contention).
STALL_WORK = 0.5
#: Stalls told from a rank's idle alone (:func:`_idle_pauses`), or of a rank the straggler rule does not
#: name (:func:`straggler_causes`): each pause at least this share of its median step. Clean 2-rank gloo runs had a rank idle 3 ms beyond its usual in 3-6 of 24 steps of about 10 ms
#: (the host's scheduling); the fault matrix's 40 ms pause is two thirds of an 8-rank step.
IDLE_PAUSE = 0.5
#: Compute rather than contention: the same ops' fast calls slower by this factor, or explaining at least
#: ``CONTENTION_SHARE`` of the rank's extra op time (``op ratio − 1 ≥ share × (time ratio − 1)``).
SLOWER_CALLS = 1.5
CONTENTION_SHARE = 0.5
#: On a CPU run, contention whose ops take under this many times the others' time in all is the host's
#: uneven share of its cores, not a straggler (:func:`host_scheduled`).
CONTENTION_MIN = 1.5
#: The same work: a CPU rank whose compute ops ran this share of their time or more on input shapes and
#: types that a peer also ran (:func:`same_work`) did the others' work; slower, it is its host's doing.
SAME_WORK = 0.8
#: ... told only where at least this share of its compute op time recorded its shapes.
SHAPED_MIN = 0.5
#: Pipeline imbalance: a stage's compute per micro-batch this many times the median stage's. A last stage
#: that computes the loss (and a first that embeds) does more by design: a clean 2-stage gloo pipeline of
#: equal layers has its last stage 1.28-1.37x the first's; 1.5x is work to move, not the loss's share.
IMBALANCE = 1.5
#: The deciding excess per step must be at least this share of the wait the straggler causes a waiting rank
#: per step: a cause that explains a tenth of the wait is not the cause.
MATERIAL = 0.25
#: The cause classes, in the order they are tried.
CLASSES = ("stalls", "input", "communication", "host idle", "contention", "compute", "pipeline imbalance")
#: The per-step host measures compared (``cause_steps``' ``<measure>_ns`` columns).
MEASURES = ("lead", "compute", "precomm", "idle")

_STEP_SCHEMA = pl.Schema({"rank": pl.Int32, "step": pl.Int32, "step_ns": pl.Int64, "lead_ns": pl.Int64,
                          "compute_ns": pl.Int64, "precomm_ns": pl.Int64, "idle_ns": pl.Int64})
_SHAPES_SCHEMA = pl.Schema({"rank": pl.Int32, "name": pl.String, "shapes": pl.UInt32, "n": pl.UInt32,
                            "low_ns": pl.Float64, "total_ns": pl.Int64})
_OPS_SCHEMA = pl.Schema({"rank": pl.Int32, "name": pl.String, "n": pl.UInt32, "low_ns": pl.Float64,
                         "total_ns": pl.Int64})


def _host_ops(p: Prepared) -> pl.LazyFrame:
    """The CPU ops and annotations of the CPU ranks within a step, profiler steps left out, each with
    ``leaf`` (it holds no other row of its thread), ``top`` (no CPU op of its thread holds it), ``entry``
    (a collective's), ``loader_span`` and ``in_loader`` (inside the data loader's span)."""
    gpu = device_ranks(p).lazy()
    ops = (
        p.events.filter(pl.col("stream").is_null() & pl.col("kind").is_in(["cpu_op", "annotation"])
                        & pl.col("step").is_not_null() & ~pl.col("name").str.starts_with(STEP_PREFIX))
        .join(gpu, on="rank", how="anti")
        .select("rank", "tid", "step", "name", "kind", "coll_op", "shapes", pl.col("ts_ns").alias("start"),
                (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
        .sort("rank", "tid", "start", pl.col("end"), descending=[False, False, False, True])
    )
    thread = ["rank", "tid"]
    return ops.with_columns(
        # a leaf holds no other op of its thread: the next op (by start) starts at or after its end
        (pl.col("start").shift(-1).over(thread).fill_null(pl.col("end")) >= pl.col("end")).alias("leaf"),
        # top-level among the CPU ops (annotations such as DistributedDataParallel.forward hold ops, do none):
        # no earlier CPU op of the thread ends after its start
        (pl.when(pl.col("kind") == "cpu_op").then(pl.col("end")).otherwise(None).cum_max().forward_fill()
         .shift(1).over(thread).fill_null(pl.col("start")) <= pl.col("start")).alias("top"),
        (pl.col("coll_op").is_not_null() | pl.col("name").str.contains(MARKER_PATTERN)).alias("entry"),
        pl.col("name").str.contains(DATA_LOADER_PATTERN).alias("loader_span"),
    ).with_columns(
        # inside a loader span: the thread's loader spans so far reach past its start
        pl.when(pl.col("loader_span")).then(pl.col("end")).otherwise(None).cum_max().forward_fill().over(thread)
        .fill_null(0).ge(pl.col("end")).alias("in_loader"),
    )


@derived
def cause_steps(p: Prepared) -> pl.DataFrame:
    """Per (rank, step): step_ns, lead_ns, compute_ns, precomm_ns, idle_ns (module doc)."""
    ops = _host_ops(p)
    thread = ["rank", "tid"]
    work = (pl.col("kind") == "cpu_op") & ~pl.col("entry") & ~pl.col("in_loader") & ~pl.col("loader_span")
    # the end of the thread's last leaf op before this op: where an entry's host delay starts
    prev_leaf = pl.when(pl.col("leaf")).then(pl.col("end")).otherwise(None).forward_fill().shift(1).over(thread)
    gap = (pl.col("start") - pl.col("prev_leaf")).clip(0)
    # the step's thread: the one that ran its first compute op; its time outside any op after that, not
    # before a collective entry (that is precomm)
    step = ["rank", "step"]
    first = pl.when(work).then(pl.col("start")).otherwise(None).min().over(step)
    step_tid = pl.when(work & (pl.col("start") == pl.col("__first"))).then(pl.col("tid")).otherwise(None).max().over(step)
    marked = ops.with_columns(prev_leaf.alias("prev_leaf"),
                              (pl.col("start") - pl.col("end").cum_max().shift(1).over(thread)).clip(0).fill_null(0)
                              .alias("__uncovered"),
                              first.alias("__first")).with_columns(step_tid.alias("__tid"))
    cpu = collect(
        marked.group_by(step)
        .agg(pl.col("__first").first().alias("first_compute"),
             (pl.col("end") - pl.col("start")).filter(work & pl.col("top")).sum().alias("__top"),
             gap.filter(pl.col("entry")).sum().alias("precomm_ns"),
             gap.filter(pl.col("entry") & ~pl.col("top")).sum().alias("__inside"))
        .with_columns((pl.col("__top") - pl.col("__inside")).clip(0).alias("compute_ns"))
        .join(_idle(p, marked), on=step, how="left")
        .with_columns(pl.col("idle_ns").fill_null(0))
    )
    gpu = collect(
        kernels(p).lazy().filter((pl.col("kind") == "compute") & pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(pl.col("ts_ns").min().alias("first_compute"), pl.col("dur_ns").sum().alias("compute_ns"),
             pl.lit(0, dtype=pl.Int64).alias("precomm_ns"), pl.lit(0, dtype=pl.Int64).alias("idle_ns"))
    )
    cols = ["rank", "step", "first_compute", "compute_ns", "precomm_ns", "idle_ns"]
    per = pl.concat([cpu.select(cols), gpu.select(cols)], how="vertical_relaxed")
    return collect(
        steps(p).lazy().join(per.lazy(), on=["rank", "step"], how="inner")
        .select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32),
                (pl.col("end") - pl.col("start")).alias("step_ns"),
                (pl.col("first_compute") - pl.col("start")).clip(0).alias("lead_ns"),
                "compute_ns", "precomm_ns", "idle_ns")
        .cast(_STEP_SCHEMA)
        .sort("rank", "step")
    )


def _idle(p: Prepared, marked: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, step) of the CPU ranks, ``idle_ns``: the gaps of the step's thread between ops after its
    first compute (before an op that is no collective entry), less the time a collective of the rank was in
    flight (a gloo rank waits for a late peer outside any op of its own thread: waiting, not idling).

    Example: ops [0,5) [25,30) [70,80) ms, its all-reduce in flight [50,70) -> gaps [5,25) [30,70) less
    [50,70): 20 + 20 = 40 ms."""
    gaps = (marked.filter((pl.col("tid") == pl.col("__tid")) & (pl.col("start") > pl.col("__first"))
                          & ~pl.col("entry") & (pl.col("__uncovered") > 0))
            .select("rank", (pl.col("start") - pl.col("__uncovered")).alias("start"), pl.col("start").alias("end")))
    flight = (comm_rows(p).lazy().filter(pl.col("stream").is_null())  # a CPU rank's collectives
              .select("rank", pl.col("ts_ns").alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end")))
    left = subtract(gaps, flight, ["rank"]).sort("rank", "start")
    windows = steps(p).lazy().select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32),
                                     pl.col("start").alias("__s0")).sort("rank", "__s0")
    return (left.with_columns(pl.col("rank").cast(pl.Int32))
            .join_asof(windows, left_on="start", right_on="__s0", by="rank", strategy="backward",
                       check_sortedness=False)  # both sorted by rank, then time, above
            .group_by("rank", "step").agg((pl.col("end") - pl.col("start")).sum().alias("idle_ns")))


@derived
def _cpu_compute(p: Prepared) -> pl.DataFrame:
    """The CPU ranks' compute ops (CPU ops that are no collective entry, outside the data loader): rank, name,
    shapes, dur_ns; what :func:`cause_ops` and :func:`cause_shapes` group, read once."""
    return collect(_host_ops(p).filter((pl.col("kind") == "cpu_op") & ~pl.col("entry") & ~pl.col("in_loader"))
                   .select("rank", "name", "shapes", (pl.col("end") - pl.col("start")).alias("dur_ns")))


@derived
def cause_ops(p: Prepared) -> pl.DataFrame:
    """Per (rank, name) of compute ops (CPU ops that are no collective entry, outside the data loader; GPU:
    compute kernels): n, low_ns (the 25th percentile of the durations), total_ns."""
    dur = pl.col("dur_ns")
    cpu = _cpu_compute(p).lazy().group_by("rank", "name").agg(pl.len().alias("n"), dur.quantile(0.25).alias("low_ns"),
                                                              dur.sum().alias("total_ns"))
    gpu = (kernels(p).lazy().filter(pl.col("kind") == "compute")
           .group_by("rank", "name").agg(pl.len().alias("n"), pl.col("dur_ns").quantile(0.25).alias("low_ns"),
                                         pl.col("dur_ns").sum().alias("total_ns")))
    return collect(pl.concat([cpu.cast(_OPS_SCHEMA), gpu.cast(_OPS_SCHEMA)]).sort("rank", "name"))


@derived
def cause_shapes(p: Prepared) -> pl.DataFrame:
    """Per (rank, name, shapes) of the CPU ranks' compute ops (as :func:`cause_ops`) whose trace recorded
    their input shapes and types (the store's ``shapes``): n, low_ns, total_ns."""
    dur = pl.col("dur_ns")
    return collect(_cpu_compute(p).lazy().filter(pl.col("shapes").is_not_null()).group_by("rank", "name", "shapes")
                   .agg(pl.len().alias("n"), dur.quantile(0.25).alias("low_ns"), dur.sum().alias("total_ns"))
                   .cast(_SHAPES_SCHEMA).sort("rank", "name", "shapes"))


def same_work(shaped: pl.DataFrame, ops: pl.DataFrame, rank: int,
              peers: frozenset[int] | None = None) -> tuple[float, float | None] | None:
    """Whether CPU rank ``rank`` did the others' work, from the input shapes its trace recorded
    (:func:`cause_shapes`): (share, ratio). ``share``: of its compute ops' time on recorded shapes, the share
    in calls of an op name and shapes that a peer (``peers``: these only) also ran; ``ratio``: its fast calls
    of those over the peers' (:func:`op_ratio` by name and shapes). None where less than
    :data:`SHAPED_MIN` of its compute ops' time (:func:`cause_ops`) recorded shapes (ops such as autograd's
    ``evaluate_function`` wrappers record none).

    Example: rank 0 of a clean DDP run whose core its host shared: every op on the shapes the other ran,
    share 1.0, ratio 1.19 -> the same work done 1.19x slower; a rank given a 4x batch ran its matrix products
    on other shapes: share 0.1."""
    mine = shaped.filter(pl.col("rank") == rank)
    total = float(ops.filter(pl.col("rank") == rank)["total_ns"].sum())
    recorded = float(mine["total_ns"].sum())
    if total <= 0 or recorded < SHAPED_MIN * total:
        return None
    others = pl.col("rank") != rank if peers is None else pl.col("rank").is_in(list(peers))
    theirs = shaped.filter(others).select("name", "shapes").unique()
    matched = float(mine.join(theirs, on=["name", "shapes"])["total_ns"].sum())
    return matched / recorded, op_ratio(shaped, rank, peers, key=("name", "shapes"))


_INST = ["group", "src", "dst", "index"]


def _collective_arrivals(p: Prepared) -> pl.LazyFrame:
    """Each rank's arrival at each collective instance seen on two ranks or more (point-to-point left out),
    with the step it ran in (:func:`.collectives.arrivals` joined to :func:`.collectives.comm_rows`)."""
    arr = arrivals(p).lazy().filter((pl.len().over(_INST) > 1) & (pl.col("match_op") != "sendrecv"))
    step = comm_rows(p).lazy().select(*_INST, "rank", "step")
    return arr.join(step, on=[*_INST, "rank"], how="left", nulls_equal=True)


@derived
def step_waits(p: Prepared) -> pl.DataFrame:
    """Per (rank X, step): how long the others waited for X in that step, µs: at the collective instances
    (seen on two or more ranks, point-to-point left out) X alone arrived last at, each other rank's longest
    wait in the step (collectives in flight together wait at once: their waits overlap), averaged over
    the ranks that waited.

    Example: two DDP buckets a step, rank 1 late by 40 ms for both: rank 0 waited 40.2 and 39.8 ms -> 40.2 ms."""
    rows = _collective_arrivals(p)
    lasts = (rows.group_by(_INST)
             .agg(pl.col("rank").filter(pl.col("wait_ns") == 0).alias("__lasts"),
                  pl.col("step").filter(pl.col("wait_ns") == 0).first().alias("__step"))
             .filter((pl.col("__lasts").list.len() == 1) & pl.col("__step").is_not_null())
             .select(*_INST, pl.col("__lasts").list.first().alias("__last"), "__step"))
    return collect(
        rows.join(lasts, on=_INST, nulls_equal=True)
        .filter(pl.col("rank") != pl.col("__last"))
        .group_by("__last", "__step", "rank").agg(pl.col("wait_ns").max())
        .group_by(pl.col("__last").alias("rank"), pl.col("__step").alias("step"))
        .agg((pl.col("wait_ns").mean() / NS_PER_US).alias("wait_us"))
        .sort("rank", "step")
    )


def _median(values: list[float]) -> float | None:
    v = sorted(x for x in values if x is not None and not math.isnan(x))
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _evidence(measure: str, mine: float, peers: float | None) -> dict[str, Any]:
    """One measure of the straggler against its peers (µs, or a count), and their ratio."""
    return {"measure": measure, "rank_value": mine, "peers_value": peers, "ratio": _ratio(mine, peers)}


def op_ratio(ops: pl.DataFrame, rank: int, peers: frozenset[int] | None = None,
             key: tuple[str, ...] = ("name",)) -> float | None:
    """How much longer ``rank``'s fast calls of its compute ops take than the same ops' (by name, or by
    ``key``'s columns) on the other ranks (``peers``: these only): the geometric mean over op names seen 3
    times or more on it and on a peer, of its 25th percentile duration over the peers' median of theirs,
    weighted by the peers' time in that op. None without a shared op.

    Example: aten::mm 900 µs vs 220 µs (weight 80 %), aten::view 2 vs 2 µs (weight 1 %) -> about 4.0."""
    shared = ops.filter(pl.col("n") >= 3)
    mine = shared.filter(pl.col("rank") == rank).select(*key, pl.col("low_ns").alias("mine"))
    others = pl.col("rank") != rank if peers is None else pl.col("rank").is_in(list(peers))
    peers_ = (shared.filter(others).group_by(*key)
             .agg(pl.col("low_ns").median().alias("peers"), pl.col("total_ns").median().alias("weight")))
    both = mine.join(peers_, on=list(key)).filter((pl.col("mine") > 0) & (pl.col("peers") > 0) & (pl.col("weight") > 0))
    if both.height == 0:
        return None
    w = both["weight"].to_numpy().astype(float)
    logs = (both["mine"] / both["peers"]).log().to_numpy()
    return float(math.exp(float((w * logs).sum() / w.sum())))


def _per_rank_medians(cs: pl.DataFrame) -> dict[int, dict[str, float]]:
    med = cs.group_by("rank").agg(*(pl.col(f"{m}_ns").median() / NS_PER_US for m in MEASURES))
    return {row[0]: dict(zip(MEASURES, row[1:])) for row in med.iter_rows()}


def classify(rank: int, cs: pl.DataFrame, ops: pl.DataFrame, waits: pl.DataFrame,
             wait_us: float = 0.0, among: frozenset[int] | None = None,
             shaped: pl.DataFrame | None = None, waited: Waited | None = None) -> dict[str, Any]:
    """The cause of straggler ``rank`` (module doc), as a :class:`~ddprof.report.schema.StragglerCause` dict;
    ``wait_us``: the mean wait it caused a waiting rank per step, which the deciding excess must be a
    material share of (:data:`MATERIAL`); ``among``: the ranks it is compared with (default: every other;
    a member of a group slower together is compared with the ranks outside it, :mod:`.slow_groups`);
    ``shaped``: the CPU ranks' ops by recorded input shapes (:func:`cause_shapes`), which tell the same work
    done slower from more work; ``waited``: the ranks' waits for a CPU by step (:func:`cpu_waits`)."""
    med = _per_rank_medians(cs)
    if among is not None:  # the measures against these; pauses still apart from every other rank's
        med = {r: v for r, v in med.items() if r == rank or r in among}
    mine_w = waits.filter(pl.col("rank") == rank)
    w = mine_w["wait_us"].to_list()
    if med.get(rank) is None or len(med) < 2:
        return {"rank": rank, "cause": "undecided", "excess_us": None, "evidence": []}
    peers = {m: _median([v[m] for r, v in med.items() if r != rank]) for m in MEASURES}
    mine = med[rank]
    ev = {m: _evidence(m, mine[m], peers[m]) for m in MEASURES}
    nsteps = cs.filter(pl.col("rank") == rank).height
    w = sorted(w + [0.0] * max(0, nsteps - len(w)))  # steps where it was never last caused no wait
    # apart from the other ranks' as many longest steps too: a machine whose ranks share few cores makes
    # each of them last, and long, now and then
    high = _apart(w, [sorted(part["wait_us"].to_list() + [0.0] * max(0, nsteps - part.height))
                      for (r,), part in waits.group_by(["rank"]) if r != rank])
    if high is not None:
        peak, typical = w[-1], _median(w) or 0.0
        # the long steps' extra wait, and how much more the rank computed in them: a pause, not work
        long_steps = mine_w.filter(pl.col("wait_us") > peak / 2)["step"].to_list()
        own = cs.filter(pl.col("rank") == rank)
        extra_compute = ((_median((own.filter(pl.col("step").is_in(long_steps))["compute_ns"] / NS_PER_US).to_list())
                          or 0.0) - mine["compute"])
        steps_ev = {"measure": "stall_steps", "rank_value": float(high), "peers_value": float(len(w)),
                    "ratio": high / len(w)}
        if extra_compute < STALL_WORK * ((_median(w[-high:]) or 0.0) - typical):
            return {"rank": rank, "cause": "stalls", "excess_us": peak - typical,
                    "evidence": [_evidence("stall_peak", peak, typical), steps_ev, *ev.values()]}
        # the long steps' time is in its ops: a busy CPU now and then
        return {"rank": rank, "cause": "contention", "excess_us": extra_compute,
                "evidence": [_evidence("burst_compute", mine["compute"] + extra_compute, mine["compute"]),
                             steps_ev, _evidence("stall_peak", peak, typical), *ev.values()]}
    pauses = _idle_pauses(rank, cs, wait_us, waited)
    if pauses is not None:
        high, n, idle_high, idle_typical = pauses
        return {"rank": rank, "cause": "stalls", "excess_us": idle_high - idle_typical,
                "evidence": [_evidence("stall_peak", w[-1], _median(w) or 0.0),
                             {"measure": "stall_steps", "rank_value": float(high), "peers_value": float(n),
                              "ratio": high / n}, _evidence("stall_idle", idle_high, idle_typical), *ev.values()]}
    excess = {m: mine[m] - (peers[m] or 0.0) for m in MEASURES}
    best = max(excess, key=lambda m: excess[m])
    if excess[best] <= 0 or excess[best] < MATERIAL * wait_us:
        return {"rank": rank, "cause": "undecided", "excess_us": None, "evidence": list(ev.values())}
    order = [best, *(m for m in ev if m != best)]
    evidence = [ev[m] for m in order]
    if best == "lead":
        return {"rank": rank, "cause": "input", "excess_us": excess[best], "evidence": evidence}
    if best == "precomm":
        return {"rank": rank, "cause": "communication", "excess_us": excess[best], "evidence": evidence}
    if best == "idle":
        return {"rank": rank, "cause": "host idle", "excess_us": excess[best], "evidence": evidence}
    same_ops = op_ratio(ops, rank, among)
    work_ratio = _ratio(mine["compute"], peers["compute"]) or 1.0
    if same_ops is not None:
        evidence.insert(1, _evidence("op_ratio", same_ops, 1.0))
    # the same ops' medians explain at least half of the extra time: bigger work; else a tail of stretched
    # ops. No op shared with a peer: the work is longer, and no more can be said
    compute = same_ops is None or same_ops >= SLOWER_CALLS or same_ops - 1 >= CONTENTION_SHARE * (work_ratio - 1)
    work = same_work(shaped, ops, rank, among) if compute and shaped is not None else None
    if work is not None and work[0] >= SAME_WORK and work[1] is not None:
        # its calls ran on the shapes the others ran: the same work, done slower; a CPU rank's host (its core
        # shared or slower), not more work
        evidence.insert(1, {"measure": "same_shapes", "rank_value": work[1], "peers_value": 1.0, "ratio": work[1]})
        evidence.insert(2, {"measure": "shapes_share", "rank_value": work[0], "peers_value": None, "ratio": None})
        compute = False
    return {"rank": rank, "cause": "compute" if compute else "contention", "excess_us": excess[best],
            "evidence": evidence}


#: Per rank, per step: how much longer its training thread waited for a CPU than in its median step, µs.
Waited = dict[int, dict[int, float]]


def cpu_waits(cpu: dict[int, dict[str, Any]] | None) -> Waited:
    """The ranks' longest waits for a CPU beyond their median step's, by step (:data:`Waited`), from the
    collector's step measures (the report's ``job.cpu`` rows, their ``wait_peaks``); empty without them."""
    return {int(r): {int(s): max(float(ms) - row["wait_ms"], 0.0) * 1e3 for s, ms in row.get("wait_peaks") or []}
            for r, row in (cpu or {}).items() if row.get("wait_ms") is not None}


def _idle_pauses(rank: int, cs: pl.DataFrame, wait_us: float,
                 waited: Waited | None = None) -> tuple[int, int, float, float] | None:
    """Pauses told by the rank's own step thread where the waits it causes are too noisy to tell them (many
    ranks sharing few cores make every step's waits long): its host idle per step (``idle_ns``) is
    concentrated in :data:`STALL_MIN` or more steps and at most half, each above half its largest, the
    shortest of them :data:`STALL_GAP` times both its longest other step's idle and any other rank's idle
    in as many of its own longest steps (a busy machine pauses every rank), and their median excess over
    its median step's idle at least :data:`MATERIAL` of the wait it causes a waiting rank per step and
    :data:`IDLE_PAUSE` of its median step.
    A step's idle counts less the time its thread waited for a CPU beyond its median step's (``waited``,
    :func:`cpu_waits`): ready to run, it was not pausing (the same real run, another try: rank 7 idle 22.7 ms
    in a step where it waited 24.8 ms for a CPU, against 40.6-44.2 ms in its six pauses).
    Returns (long steps, steps, their median idle, the median step's idle) in µs, or None.

    Example (a real 8-rank gloo run on 2 CPUs, rank 7 sleeping 40 ms every 4th step): idle 40.7-47.2 ms
    in 6 of 24 steps, at most 12.6 ms in the others, at most 5.6 ms in any other rank's 6th longest -> pauses;
    its waits caused were 30-50 ms in those steps and 9-17 ms in five others (not 2x apart)."""
    waited = waited or {}
    per = {r: sorted(max(v / NS_PER_US - waited.get(r, {}).get(st, 0.0), 0.0)
                     for st, v in zip(part["step"].to_list(), part["idle_ns"].to_list()))
           for (r,), part in cs.group_by(["rank"], maintain_order=True)}
    idle = per.get(rank) or []
    high = _apart(idle, [v for r, v in per.items() if r != rank])
    if high is None:
        return None
    typical = _median(idle) or 0.0
    long_ = _median(idle[-high:]) or 0.0
    step = _median((cs.filter(pl.col("rank") == rank)["step_ns"] / NS_PER_US).to_list()) or 0.0
    if long_ - typical >= max(MATERIAL * wait_us, IDLE_PAUSE * step):
        return high, len(idle), long_, typical
    return None


def _apart(values: list[float], others: list[list[float]]) -> int | None:
    """How many of the largest of ``values`` (sorted, one per step) stand apart as pauses: those above half
    the largest, :data:`STALL_MIN` or more and at most half the steps, the smallest of them
    :data:`STALL_GAP` times both the largest other value and any of ``others``' (each sorted) as many
    largest; None when they do not. Example: waits 0, 0, 1, 2, 30, 40, 50 against another rank's 0, 1, 2,
    3, 3, 4, 5 -> 3."""
    if len(values) < 4 or values[-1] <= 0:
        return None
    high = sum(x > values[-1] / 2 for x in values)
    if not STALL_MIN <= high <= len(values) // 2:
        return None
    peers = max((v[-high] for v in others if len(v) >= high), default=0.0)
    return high if values[-high] >= STALL_GAP * max(values[-high - 1], peers) else None


def pipeline_imbalance(cs: pl.DataFrame, stages: pl.DataFrame) -> list[dict[str, Any]]:
    """Per pipeline, its slowest stage when its compute per micro-batch is :data:`IMBALANCE` times the
    median stage's or more (module doc)."""
    if stages.height == 0:
        return []
    med = _per_rank_medians(cs)
    out = []
    for (_pipe,), part in stages.group_by(["pipeline"], maintain_order=True):
        per = {r: med[r]["compute"] / (m or 1.0) for r, m in zip(part["rank"], part["micro_batches"]) if r in med}
        if len(per) < 2:
            continue
        slow = max(per, key=lambda r: per[r])
        others = _median([v for r, v in per.items() if r != slow])
        if others and per[slow] >= IMBALANCE * others:
            out.append({"rank": slow, "cause": "pipeline imbalance", "excess_us": per[slow] - others,
                        "evidence": [_evidence("compute_per_microbatch", per[slow], others)]})
    return out


def straggler_causes(p: Prepared, section: dict[str, Any], stages: pl.DataFrame,
                     cpu_wait: Waited | None = None) -> list[dict[str, Any]]:
    """The ``causes`` of the stragglers ``section``: per named straggler its cause (:func:`classify`), then
    per pipeline its slowest stage where the stages are imbalanced (:func:`pipeline_imbalance`). Reads the
    per-rank summaries :func:`cause_steps` and :func:`cause_ops` (computed a group of ranks at a time);
    ``cpu_wait``: the ranks' waits for a CPU by step (:func:`cpu_waits`)."""
    cs, ops, shaped = cause_steps(p), cause_ops(p), cause_shapes(p)
    per = {row["rank"]: row for row in section.get("per_rank", [])}
    out = []
    for r in section.get("ranks", []):
        row, nsteps = per.get(r, {}), max(1, cs.filter(pl.col("rank") == r).height)
        wait = (row.get("wait_caused_us") or 0.0) / max(1, row.get("waiting_ranks") or 1) / nsteps
        out.append(classify(r, cs, ops, step_waits(p), wait, shaped=shaped, waited=cpu_wait))
    named = {c["rank"] for c in out}
    # not named by arrival order, but pausing now and then: its waits, sparse, rotate with the others'
    # (the straggler rule tests lateness against chance step by step); a material share of a step only,
    # and pauses of :data:`IDLE_PAUSE` of its median step at least: a CPU rank among more ranks than its
    # cores loses the CPU for a time slice now and then (real 8-rank gloo runs on 2 CPUs, no fault: a rank
    # made the others wait 10-12 ms in 6-8 of 24 steps of 36-38 ms; the fault matrix's pause is 40 ms)
    waited = [row for row in per.values() if not named and (row.get("wait_share_pct") or 0.0)
              >= section.get("min_share_pct", 2.0)]
    if waited:
        most = max(waited, key=lambda row: (row.get("wait_share_pct") or 0.0, -row["rank"]))
        found = classify(most["rank"], cs, ops, step_waits(p), shaped=shaped, waited=cpu_wait)
        step = _median((cs.filter(pl.col("rank") == most["rank"])["step_ns"] / NS_PER_US).to_list()) or 0.0
        if found["cause"] == "stalls" and (found["excess_us"] or 0.0) >= IDLE_PAUSE * step:
            out.append(found)
            named.add(most["rank"])
    out += [c for c in pipeline_imbalance(cs, stages) if c["rank"] not in named]
    return [finite(c) for c in out]


def finite(cause: dict[str, Any]) -> dict[str, Any]:
    """A cause with its evidence's NaN (a ratio of nothing) as null, as JSON holds it."""
    return {**cause, "evidence": [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in e.items()}
                                  for e in cause["evidence"]]}


def with_causes(section: dict[str, Any], p: Prepared, cpu: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The stragglers ``section`` with its ``causes`` (:func:`straggler_causes`; the pipeline stages are
    :func:`.bubbles.pipeline_stages` of the same summaries; compute told from contention by the step
    measures where the run has them, ``cpu``: :func:`by_cpu`), less the CPU ranks whose lateness nothing of
    their own explains (:func:`host_scheduled`)."""
    gpu = set(device_ranks(p).get_column("rank").to_list())  # a device rank's arrivals are its kernels'
    causes = [c if c["rank"] in gpu else host_pauses(p, c, cpu)
              for c in straggler_causes(p, section, pipeline_stages(p), cpu_waits(cpu))]
    if cpu:
        shaped, ops = cause_shapes(p), cause_ops(p)
        causes = [by_cpu(c, cpu, same_work(shaped, ops, c["rank"]) if c["cause"] == "contention" else None)
                  for c in causes]  # the same work matters only to a contention that would turn compute
    unexplained = host_scheduled(p, causes)
    return {**section, "ranks": [r for r in section.get("ranks", []) if r not in unexplained], "causes": causes}


#: Compute or contention by the step measures (:func:`by_cpu`): the share of the rank's extra op time that
#: its training thread ran itself, or waited for a CPU, that decides.
RAN_SHARE = 0.5


def by_cpu(cause: dict[str, Any], cpu: dict[int, dict[str, Any]],
           work: tuple[float, float | None] | None = None) -> dict[str, Any]:
    """A compute or contention cause (not in bursts) decided again by the collector's step measures, where
    the run has them for the rank and a peer (``cpu``: rank -> the report's ``job.cpu`` row): the rank's
    extra op time a step over its peers' (its ``compute`` evidence) is **compute** when its training thread
    ran :data:`RAN_SHARE` of it or more itself (more work: its CPU time is the time) while it waited for a
    CPU under half that; **contention** when it waited for a CPU that share of it or more while it ran
    under half that (a busy core). Not compute where the rank did the others' work (``work``:
    :func:`same_work`, :data:`SAME_WORK` of it or more on the shapes a peer ran): the same work needing more
    CPU is a slower core (a clean pinned 2-rank run: its thread 8.6 ms against 5.7 ms on the same shapes).
    Otherwise, or without the figures, the cause stands as the ops' fast calls told it (:func:`classify`).
    Its evidence gains ``thread_cpu`` and ``cpu_wait`` (µs a step).

    Example (the fault matrix's 4x batch, its fast calls 1.9x on one run, read as contention): ops 9.01 ms
    a step against 4.63 ms, its thread's CPU 8.9 ms against 4.5 ms, CPU wait 0.3 against 0.3 ms -> compute."""
    ev = {e["measure"]: e for e in cause["evidence"]}
    mine, peers = cpu.get(cause["rank"]), peer_medians(cpu, cause["rank"])
    if cause["cause"] not in ("compute", "contention") or "burst_compute" in ev or "compute" not in ev \
            or mine is None or peers is None:
        return cause
    extra = ev["compute"]["rank_value"] - (ev["compute"]["peers_value"] or 0.0)
    thread_peers, wait_peers = peers["thread_cpu_ms"] * 1e3, peers["wait_ms"] * 1e3
    ran, waited = mine["thread_cpu_ms"] * 1e3 - thread_peers, mine["wait_ms"] * 1e3 - wait_peers
    told = cause["cause"]
    same = work is not None and work[0] >= SAME_WORK
    if extra > 0 and ran >= RAN_SHARE * extra and waited < RAN_SHARE * ran and not same:
        told = "compute"
    elif extra > 0 and waited >= RAN_SHARE * extra and ran < RAN_SHARE * waited:
        told = "contention"
    measured = [_evidence("thread_cpu", mine["thread_cpu_ms"] * 1e3, thread_peers),
                _evidence("cpu_wait", mine["wait_ms"] * 1e3, wait_peers)]
    lead = ([ev["compute"]] if told != cause["cause"] else [])
    rest = [e for e in cause["evidence"] if not (lead and e is ev["compute"])]
    return {**cause, "cause": told, "evidence": [*lead, *rest, *measured]}


#: Stalls that are the host's (:func:`host_pauses`): the pauses its scheduling explains, summed, at least this
#: share of the pauses.
HOST_PAUSES = 0.5


def host_pauses(p: Prepared, cause: dict[str, Any], cpu: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A stalls cause with how much of its pauses the host's scheduling explains, as evidence ``stall_host``
    (µs, summed over its long steps: those where the others waited for it over half its longest such wait,
    :func:`step_waits`; against the pauses, the others' wait for it beyond its median step's). A long step's
    pause is explained, up to its size, by the larger of

    * **its collectives left late**: in the step before, the largest lag of the rank's end of a collective
      instance behind the earliest other rank's end of it (it left the step after the others had: its
      communication thread was not running), and
    * **its wait for a CPU**: its training thread's run-queue delay in the step before and in that step beyond
      its median step's (the collector's step measures: ``cpu``, the report's ``job.cpu`` rows, their
      ``wait_peaks``; none without them).

    A pause of the rank's own (a sleep, a full collection) waits for no CPU and leaves its collectives ending
    with the others'. Where the host explains :data:`HOST_PAUSES` of the pauses or more, on a CPU rank they
    are the host's (:func:`host_scheduled`). Other causes, and device ranks' (:func:`with_causes`), as they are.

    Example (a clean 2-rank gloo DDP run on a 2-CPU machine, rank 1 named for pauses of up to 10.1 ms in 5 of
    24 steps): before two of them its all-reduces ended 5.6-6.4 ms after rank 0's (its gloo thread ran 10.5 ms
    for rank 0's 2.5 ms), before another its training thread waited 6.5 ms for a CPU."""
    if cause["cause"] != "stalls":
        return cause
    rank = cause["rank"]
    waits = step_waits(p).filter(pl.col("rank") == rank)
    caused = dict(zip(waits["step"].to_list(), waits["wait_us"].to_list()))
    peak = max(caused.values(), default=0.0)
    typical = next((e["peers_value"] for e in cause["evidence"] if e["measure"] == "stall_peak"), None) or 0.0
    long_steps = [s for s, v in caused.items() if v > peak / 2]
    pauses = {s: caused[s] - typical for s in long_steps}
    paused = sum(pauses.values())
    if paused <= 0:
        return cause
    lags = collect(
        _collective_arrivals(p)
        .with_columns((pl.col("end_ns") - pl.col("end_ns").filter(pl.col("rank") != rank).min().over(_INST))
                      .alias("__lag"))
        .filter((pl.col("rank") == rank) & pl.col("step").is_in([s - 1 for s in long_steps]))
        .group_by("step").agg(pl.col("__lag").max())
    )
    left_late = {s + 1: max(v or 0, 0) / NS_PER_US for s, v in zip(lags["step"].to_list(), lags["__lag"].to_list())}
    waited = cpu_waits(cpu).get(rank, {})
    host = sum(min(pause, max(left_late.get(s, 0.0), waited.get(s - 1, 0.0) + waited.get(s, 0.0)))
               for s, pause in pauses.items() if pause > 0)
    return {**cause, "evidence": [*cause["evidence"], {"measure": "stall_host", "rank_value": host,
                                                       "peers_value": paused, "ratio": host / paused}]}


def host_paused(cause: dict[str, Any] | StragglerCause) -> bool:
    """Whether a stalls cause's pauses are the host's (:func:`host_pauses`)."""
    ev = cause["evidence"] if isinstance(cause, dict) else [msgspec.to_builtins(e) for e in cause.evidence]
    return any(e["measure"] == "stall_host" and (e["ratio"] or 0.0) >= HOST_PAUSES for e in ev)


def host_scheduled(p: Prepared, causes: list[dict[str, Any]]) -> set[int]:
    """The CPU ranks (no device work) named by arrival order that are the host's, not their own: late
    beyond chance and at a cost, yet

    * undecided: their data loading, compute, collective entry and idle time match the others'
      (:func:`classify`), or
    * contention under :data:`CONTENTION_MIN`: their ops take a little longer in all, their fast calls
      as fast (:func:`mild_contention`), or
    * stalls that the host's scheduling explains (:func:`host_pauses`).

    A CPU rank runs on a core the host shares, and a host shares its cores unevenly: on real 2-rank gloo
    runs with no fault on a 2-CPU machine, 2 of 26 had a rank late at most steps by 1.7-2.2 ms with its
    measures within 0.2 ms of the other's, and 4 of 36 had one rank's ops 1.2-1.5x the other's for the
    whole run (a busy thread on a rank's own core makes them 1.55-2.4x). Such a rank is not named a
    straggler (:func:`.stragglers.straggler_verdicts` says why). A device rank stays named: its kernels,
    not the host's scheduling, set its arrivals."""
    host = {c["rank"] for c in causes if c["cause"] == "undecided" or mild_contention(c) or host_paused(c)}
    if not host:
        return set()
    gpu = set(device_ranks(p).get_column("rank").to_list())
    return {r for r in host if r not in gpu}


def set_aside(st: Stragglers) -> dict[int, StragglerCause]:
    """The ranks of a stragglers section that :func:`host_scheduled` left out, by rank, with their causes:
    late by arrival order, undecided, in contention or pausing for the host, and not named."""
    return {c.rank: c for c in st.causes if c.rank not in st.ranks and (
        c.cause in ("undecided", "contention") or host_paused(c))}


def mild_contention(cause: dict[str, Any]) -> bool:
    """A contention cause (not in bursts) whose ops take under :data:`CONTENTION_MIN` times the others'
    time in all."""
    if cause["cause"] != "contention":
        return False
    ev = {e["measure"]: e for e in cause["evidence"]}
    ratio = (ev.get("compute") or {}).get("ratio")
    return "burst_compute" not in ev and ratio is not None and ratio < CONTENTION_MIN


@derived
def device_ranks(p: Prepared) -> pl.DataFrame:
    """The ranks with device work (one column, ``rank``): a summary each group of ranks keeps, so that the
    cross-rank section, which reads no event, knows them."""
    return gpu_ranks(p).sort("rank")


def cause_clause(report: dict[str, Any], rank: int) -> str:
    """What the straggler verdict says of ``rank``'s cause, in parentheses, or "" without one.

    Example: " (compute: the same ops take 3.9× the others' even in their fast calls, ...)"."""
    st = msgspec.convert(report["stragglers"], Stragglers)
    cause = next((c for c in st.causes if c.rank == rank), None)
    if cause is None or cause.cause == "undecided":
        return ""
    return f" ({describe(cause)}{cpu_clause(report, rank) if cause.cause == 'contention' else ''})"


def cpu_clause(report: dict[str, Any], rank: int) -> str:
    """Whose CPU a rank in contention lost, from the collector's step measures (the report's ``job.cpu``,
    :mod:`.job`): its training thread's wait for a CPU, its process's other threads' CPU and its training
    thread's own CPU a step, against the other ranks' medians; "" where the run has no such figures.

    Its extra op time a step (the cause's ``compute`` evidence; else its step) is split three ways: the extra
    wait for a CPU that its own other threads' extra CPU covers (**its own process took it**), the rest of
    that wait (**other processes on its host took it, the machine's load**), and its thread's extra CPU time
    for the others' work (**a slower core**: a contention cause is the same ops on the same shapes, so the
    CPU did the same work slower, a core shared below the operating system or a slower one, the machine's
    doing). The largest part is said where it is at least :data:`MATERIAL` of that extra time.

    Example: "; its training thread waited for a CPU 5.21 ms a step (the others 270 µs), its own other
    threads ran 7.7 ms (the others 1.7 ms): its own process took it". A clean pinned 2-rank gloo run: ops 8.06
    ms a step against 4.27, its thread's CPU 8.61 ms against 5.75, its wait 1.37 ms against 0.29, its other
    threads 1.64 against 1.47 ms: the slower core (2.86 ms) outweighs the load (0.91 ms)."""
    cpu = {c["rank"]: c for c in (report.get("job") or {}).get("cpu") or []}  # said over any steps: it decides nothing
    peers = peer_medians(cpu, rank)
    if rank not in cpu or peers is None:
        return ""
    mine = cpu[rank]
    wait, others, thread = (peers[k] * 1e3 for k in ("wait_ms", "other_threads_ms", "thread_cpu_ms"))
    extra = max(mine["wait_ms"] * 1e3 - wait, 0.0)
    own = min(max(mine["other_threads_ms"] * 1e3 - others, 0.0), extra)
    parts = {"own": own, "load": extra - own,
             "core": max(mine["thread_cpu_ms"] * 1e3 - thread, 0.0) if thread > 0 else 0.0}
    whose = max(parts, key=lambda k: parts[k])
    said = (f"; its training thread waited for a CPU {fmt_us(mine['wait_ms'] * 1e3)} a step (the others "
            f"{fmt_us(wait)}), its own other threads ran {fmt_us(mine['other_threads_ms'] * 1e3)} (the others "
            f"{fmt_us(others)})")
    if parts[whose] <= 0 or parts[whose] < MATERIAL * _extra_ops_us(report, rank, mine["step_ms"] * 1e3):
        return said
    if whose == "core":
        return (f"; its training thread needed {fmt_us(mine['thread_cpu_ms'] * 1e3)} of CPU a step for the "
                f"others' work (the others {fmt_us(thread)}: {mine['thread_cpu_ms'] * 1e3 / thread:.2g}×) and "
                f"waited for one {fmt_us(mine['wait_ms'] * 1e3)} (the others {fmt_us(wait)}): a slower core, "
                f"or one shared below the operating system, the machine's doing")
    return said + (": its own process took it" if whose == "own" else
                   ": other processes on its host took it, the machine's load")


def _extra_ops_us(report: dict[str, Any], rank: int, step_us: float) -> float:
    """The rank's op time a step over its peers' (its cause's ``compute`` evidence), µs; ``step_us`` without it."""
    for c in (report.get("stragglers") or {}).get("causes") or []:
        if c.get("rank") == rank:
            for e in c.get("evidence") or []:
                if e.get("measure") == "compute" and e.get("peers_value") is not None:
                    return max(e["rank_value"] - e["peers_value"], 0.0)
    return step_us


def describe(c: StragglerCause) -> str:
    """One cause and its deciding evidence, in words."""
    ev = {e.measure: e for e in c.evidence}
    ratio = ev[c.evidence[0].measure].ratio if c.evidence else None
    times = f"{ratio:.1f}×" if ratio is not None else "more than"
    if c.cause == "stalls":
        e = ev["stall_peak"]
        n = ev["stall_steps"]
        return (f"stalls: in {n.rank_value:.0f} of {n.peers_value:.0f} steps it makes the others wait up to "
                f"{fmt_us(e.rank_value)}, in its median step {fmt_us(e.peers_value or 0.0)}")
    if c.cause == "input":
        e = ev["lead"]
        return (f"input: {fmt_us(e.rank_value)} a step on the host before its first compute, data loading, "
                f"against {fmt_us(e.peers_value or 0.0)} on the others")
    if c.cause == "communication":
        e = ev["precomm"]
        return (f"communication: it enters its collectives {fmt_us(e.rank_value)} a step after its last op, "
                f"against {fmt_us(e.peers_value or 0.0)} on the others, its compute normal")
    if c.cause == "host idle":
        e = ev["idle"]
        return (f"host idle: its step's thread is outside any op {fmt_us(e.rank_value)} a step after its first "
                f"compute, against {fmt_us(e.peers_value or 0.0)} on the others (a sleep, a lock, a wait or Python "
                f"work the profiler does not record)")
    if c.cause == "compute" and "thread_cpu" in ev and (o := ev.get("op_ratio")) is not None \
            and o.rank_value < SLOWER_CALLS and "same_shapes" not in ev:
        e, t = ev["compute"], ev["thread_cpu"]
        return (f"compute: its training thread ran {fmt_us(t.rank_value)} of CPU a step against "
                f"{fmt_us(t.peers_value or 0.0)} on the others, its ops {fmt_us(e.rank_value)} against "
                f"{fmt_us(e.peers_value or 0.0)}: more work of its own, not a busy CPU (the step measures)")
    if c.cause == "compute":
        e, o = ev["compute"], ev.get("op_ratio")
        same = f"the same ops take {o.rank_value:.1f}× the others' even in their fast calls, " if o else ""
        return f"compute: {same}{fmt_us(e.rank_value)} of compute a step against {fmt_us(e.peers_value or 0.0)}"
    if c.cause == "contention" and "burst_compute" in ev:
        e, n = ev["burst_compute"], ev["stall_steps"]
        return (f"CPU contention: in {n.rank_value:.0f} of {n.peers_value:.0f} steps its ops took "
                f"{fmt_us(e.rank_value)} against {fmt_us(e.peers_value or 0.0)} in its median step, the same ops "
                f"stretched in bursts, as a busy CPU does")
    if c.cause == "contention" and "same_shapes" in ev:
        e, o = ev["compute"], ev["same_shapes"]
        return (f"CPU contention: its ops ran on the others' input shapes and took {times} their time in all "
                f"({fmt_us(e.rank_value)} a step against {fmt_us(e.peers_value or 0.0)}), {o.rank_value:.2f}× even "
                f"in their fast calls: the same work done slower, as on a core its host shares or runs slower")
    if c.cause == "contention":
        e, o = ev["compute"], ev["op_ratio"]
        return (f"CPU contention: its ops take {times} the others' time in all ({fmt_us(e.rank_value)} a step "
                f"against {fmt_us(e.peers_value or 0.0)}) while the same ops' fast calls take "
                f"{o.rank_value:.1f}× theirs: some calls stretched far, as a busy CPU does")
    if c.cause == "pipeline imbalance":
        e = ev["compute_per_microbatch"]
        return (f"pipeline imbalance: its stage computes {fmt_us(e.rank_value)} per micro-batch, {times} the "
                f"other stages' {fmt_us(e.peers_value or 0.0)}")
    return c.cause


def cause_verdicts(report: dict[str, Any]) -> list[str]:
    """The causes found for a rank the straggler rule did not name (said with the straggler verdicts,
    first): the stage that holds a pipeline back, and a rank that pauses now and then, whose sparse waits
    the rule does not tell from chance (:func:`straggler_causes`)."""
    st = msgspec.convert(report["stragglers"], Stragglers)
    stage = {r.rank: r for r in rows(report.get("pipeline", []), PipelineRow)}
    out = []
    for c in st.causes:
        if c.rank in st.ranks:
            continue
        if c.cause == "pipeline imbalance" and c.rank in stage:
            out.append(f"rank {c.rank} (pipeline stage {stage[c.rank].stage} of {stage[c.rank].stages}) holds the "
                       f"pipeline back ({describe(c)})")
        elif c.cause == "stalls" and not host_paused(c):
            out.append(f"rank {c.rank} pauses now and then ({describe(c)}): not a straggler by arrival order, "
                       f"which rotates in its other steps")
    return out
