"""Stragglers: which ranks make the others wait at collectives, named only when it is real (docs/DESIGN.md §3).

**Figures.** Per collective instance seen on two or more ranks (:func:`collectives.arrivals`; point-to-point
transfers are left out: a receiver waiting for its sender is a pipeline dependency, measured by
:mod:`analyses.bubbles`, not a straggler), the last arriver X (unique latest arrival) made each other
rank r wait over ``[arrival_r, latest arrival)``. Per rank X:

* ``times_last``: instances it arrived last at;
* ``wait_caused_us``: the total wall-clock wait it caused, ``Σ_r |U_r(X)|`` over the other ranks r, where
  U_r(X) is the union of r's wait intervals ``[arrival_r, latest arrival)`` at the instances X was last
  at. Waits that overlap in time (DDP buckets, collectives of several groups or streams in flight at
  once) count once per waiting rank, so a rank's share of it never exceeds the time it was traced;
* ``waiting_ranks``: how many other ranks waited for it (U_r(X) not empty); the mean wait per waiting
  rank is ``wait_caused_us / waiting_ranks``;
* ``step_us``: its mean ``ProfilerStep`` duration (null without steps).

Example: rank 3 is last at two all-reduces of two groups in flight together: rank 0 enters them at 0 and
2 ms, rank 3 at 10 and 11 ms. Rank 0 waited [0, 10) ∪ [2, 11) = [0, 11): 11 ms, not 10 + 9 = 19 ms.

**Pipelines: what the schedule implies.** A rank of a pipeline waits for its neighbour stages by design
(a later stage for activations, an earlier one for gradients); a rank held up that way arrives late at its
data-parallel collective through no fault of its own. Each rank's *blocked* time is the time it had a
point-to-point transfer in flight and no compute (``|U(p2p) − U(compute)|``, :func:`p2p_blocked`); at an
instance, ``excused_r`` = r's blocked time since its previous instance of the same group (since its first
event for the first), and its adjusted arrival is ``arrival_r − excused_r``. The wait X caused r there
*beyond the schedule* is ``min(wait, adjusted_X − adjusted_r)`` (none when negative), summed as above
(``wait_beyond_schedule_us``). Without point-to-point transfers nothing is excused and it equals
``wait_caused_us``. Example: stage 1's rank 29 waits 3 ms longer than its data-parallel peers for the
activations of a slow stage-0 rank, then reaches the all-reduce 3 ms after them: adjusted, it arrives with
them and its 3 ms of wait caused are the schedule's, not its own.

**Significant**: the last arrival does not merely rotate among the ranks by chance. Units: each step's
instances of one process group (a slow moment makes a rank last at all the step's buckets: that counts
once); where the ranks have one step or none, each instance is its own unit. Per (rank, unit), its
*lateness* = the mean over the unit's instances of ``adjusted_r − median adjusted arrival of the
instance``. Two one-sided tests, against the run's own variability:

* lateness: ``t = mean_r / (s / √n_r)`` over r's n_r units, s the spread of every rank's unit lateness
  about its own mean (pooled; ``dof = Σ_r (n_r − 1) · (R̄ − 1) / R̄``, R̄ the mean ranks per instance: with
  two ranks one's lateness is the other's negated), p from Student's t (s = 0: p = 0 when mean > 0);
* last arrivals: the units at which r's lateness is the largest, against the share chance gives
  (``1/R_u`` at a unit of R_u ranks): p = P(K ≥ k), K Poisson-binomial over r's units.

``p_value = min(1, K · min(p_t, p_last))`` (Bonferroni over the K tests made: the lateness test of each of
the m ranks tested, and the last-arrival test of each rank whose units could give it a p of at most
``alpha / 2m`` (Tarone): with 2 ranks and 2 steps, being last at both has p 0.25 at best, so that test
cannot name anyone and does not dilute the other; there, K = m and p_last is not used): the chance that a
run where the last arrival only rotates shows some rank this consistently late.
Significant when ``p_value ≤ alpha`` (:data:`ALPHA`, 0.05).

**Material**: ``wait_share_pct`` = the wait beyond the schedule per waiting rank, as a share of the run's
time (the median rank's steps added up; its trace span without steps), i.e. per step as a share of the
mean step: at least :data:`MIN_SHARE_PCT` (2 %). A rank that costs the others less is not where a step's
time goes, however consistently late it is.

A rank is a straggler when it is both. Example: 4 ranks, 3 steps of 10 ms, rank 2 arrives 400 µs after
the others at every step (none late otherwise): lateness 400 µs at every unit, s = 0 -> p_t = 0,
significant; each other rank waits 400 µs per step, 4 % of a step ≥ 2 % -> rank 2 is named. Two ranks
taking turns to be last (rank 0's lateness +1.2, −0.8, +0.4 ms over 3 steps, half the gap between them)
-> s = 1.42 ms with 2 dof, t = 0.32, p_t = 0.39 (the last-arrival test, 0.125 at best, is not made):
p_value = min(1, 2 · 0.39) = 0.78, not named, whatever the wait.
"""

from __future__ import annotations

import math
from typing import Any, cast

import msgspec
import polars as pl
from ddprof.analyses.alltoall import explained_by_bytes
from ddprof.analyses.chance import last_tail, t_sf
from ddprof.analyses.collectives import arrivals, comm_rows
from ddprof.analyses.frames.intervals import merge, subtract, union_lengths
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived, prepare
from ddprof.analyses.frames.sets import rank_spans, steps, work
from ddprof.analyses.sections import Section
from ddprof.analyses.slow_groups import Placement, slow_groups
from ddprof.analyses.straggler_cause import (
    CONTENTION_MIN,
    cause_clause,
    cause_ops,
    cause_shapes,
    cause_steps,
    cause_verdicts,
    cpu_clause,
    describe,
    device_ranks,
    set_aside,
    with_causes,
)

from ddprof.report.display import Column, Table
from ddprof.report.schema import SlowGroup, StragglerCause, Stragglers
from ddprof.vocabulary.units import NS_PER_US, fmt_pct, fmt_us

_INST = ["group", "src", "dst", "index"]
#: Family-wise significance level of the straggler tests (module doc).
ALPHA = 0.05
#: Least wait beyond the schedule, per waiting rank, as a share of the run's time, that names a straggler (%).
MIN_SHARE_PCT = 2.0


@derived
def multi_rank_arrivals(p: Prepared) -> pl.DataFrame:
    """The arrivals at collective instances seen on two or more ranks, point-to-point left out, and the
    all-to-all instances the bytes explain left out too (:func:`not_load_imbalance`)."""
    multi = arrivals(p).lazy().filter((pl.len().over(_INST) > 1) & (pl.col("match_op") != "sendrecv"))
    return collect(not_load_imbalance(p, multi))


# --- the hook of the all-to-all analysis: load imbalance is not a slow rank ---------------------------------------

def not_load_imbalance(p: Prepared, arrivals_: pl.LazyFrame) -> pl.LazyFrame:
    """``arrivals_`` without the all-to-all instances whose last or longest rank moved the most bytes
    (:func:`ddprof.analyses.alltoall.explained_by_bytes`): an overloaded expert's rank arrives last
    because of its load; the ``alltoall`` section's verdict names it instead."""
    explained = explained_by_bytes(p)
    if explained.height == 0:
        return arrivals_
    explained = explained.with_columns(src=pl.lit(None, pl.Int32), dst=pl.lit(None, pl.Int32))
    schema = arrivals_.collect_schema()
    explained = explained.select(*(pl.col(c).cast(schema[c]) for c in _INST))
    return arrivals_.join(explained.lazy(), on=_INST, how="anti", nulls_equal=True)
# --- end of the hook ---------------------------------------------------------------------------------------------


@derived
def p2p_blocked(p: Prepared) -> pl.DataFrame:
    """Per rank, the disjoint intervals it had a point-to-point transfer (send/recv with a known peer) in
    flight and no compute running, ``U(p2p) − U(compute)``: rank, start, end, and ``before_ns``, the
    rank's blocked time before the interval. Example: recv [0, 10) with compute [4, 6) -> [0, 4) and
    [6, 10), before_ns 0 and 4."""
    p2p = comm_rows(p).lazy().filter((pl.col("match_op") == "sendrecv") & pl.col("src").is_not_null())
    spans = p2p.select("rank", pl.col("ts_ns").alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
    if collect(spans.select(pl.len())).item() == 0:
        return pl.DataFrame(schema={"rank": pl.Int32(), "start": pl.Int64(), "end": pl.Int64(), "before_ns": pl.Int64()})
    ranks = collect(spans.select(pl.col("rank").unique()))
    compute = work(p).lazy().filter(pl.col("role") == "compute").join(ranks.lazy(), on="rank").select("rank", "start", "end")
    return collect(
        subtract(merge(spans, ["rank"]), compute, ["rank"])
        .sort("rank", "start")
        .with_columns((pl.col("end") - pl.col("start")).cum_sum().shift(1, fill_value=0).over("rank").alias("before_ns"))
    )


def _blocked_before(at: pl.LazyFrame, blocked: pl.DataFrame, column: str) -> pl.LazyFrame:
    """``at`` with ``__b_<column>``: each rank's blocked time before the instant in ``column``."""
    b = blocked.lazy().select("rank", pl.col("start").alias("__bs"), pl.col("end").alias("__be"), "before_ns")
    out = f"__b_{column}"
    return (
        at.sort(column).join_asof(b.sort("__bs"), left_on=column, right_on="__bs", by="rank", strategy="backward",
                   check_sortedness=False)
        .with_columns(pl.when(pl.col("__bs").is_null()).then(0)
                      .otherwise(pl.col("before_ns") + pl.min_horizontal(pl.col(column), pl.col("__be")) - pl.col("__bs"))
                      .alias(out))
        .drop("__bs", "__be", "before_ns")
    )


@derived
def adjusted_arrivals(p: Prepared) -> pl.DataFrame:
    """:func:`multi_rank_arrivals` with, per (instance, rank): ``excused_ns`` (blocked time since the rank's
    previous instance of the group: module doc), ``adjusted_ns = arrival_ns − excused_ns``, ``lateness_ns``
    = adjusted_ns − the instance's median adjusted arrival, and ``unit``: the step its ranks were in (the
    earliest, where they differ), or null (the instance is its own unit)."""
    multi = multi_rank_arrivals(p).lazy()
    first = rank_spans(p).lazy().select("rank", pl.col("first_ns").alias("__from"))
    at = (
        multi.sort("arrival_ns")
        .with_columns(pl.col("end_ns").shift(1).over(["group", "rank"]).alias("__prev"))
        .join(first, on="rank", how="left")
        .with_columns(pl.coalesce("__prev", "__from", "arrival_ns").alias("__from"))
        .with_columns(pl.min_horizontal("__from", "arrival_ns").alias("__from"))
        .drop("__prev")
    )
    blocked = p2p_blocked(p)
    if blocked.height:
        at = _blocked_before(_blocked_before(at, blocked, "arrival_ns"), blocked, "__from").with_columns(
            (pl.col("__b_arrival_ns") - pl.col("__b___from")).alias("excused_ns")).drop("__b_arrival_ns", "__b___from")
    else:
        at = at.with_columns(pl.lit(0, dtype=pl.Int64).alias("excused_ns"))
    st = steps(p).lazy().select("rank", pl.col("start").alias("__ss"), pl.col("end").alias("__se"), pl.col("step").alias("__step"))
    return collect(
        at.drop("__from").sort("arrival_ns")
        .join_asof(st.sort("__ss"), left_on="arrival_ns", right_on="__ss", by="rank", strategy="backward",
                   check_sortedness=False)
        .with_columns(pl.when(pl.col("arrival_ns") < pl.col("__se")).then(pl.col("__step")).alias("__step"))
        .with_columns(pl.col("__step").min().over(_INST).cast(pl.Int64).alias("unit"),
                      (pl.col("arrival_ns") - pl.col("excused_ns")).alias("adjusted_ns"))
        .with_columns((pl.col("adjusted_ns") - pl.col("adjusted_ns").median().over(_INST)).alias("lateness_ns"))
        .drop("__ss", "__se", "__step")
        .sort(*_INST, "rank", nulls_last=True)
    )


def _waits_caused(p: Prepared) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rank, times_last) per last arriver, and (rank, wait_caused_us, waiting_ranks,
    wait_beyond_schedule_us) from the union of each waiting rank's wait intervals (module doc)."""
    multi = adjusted_arrivals(p).lazy()
    last = collect(
        multi.group_by(_INST)
        .agg(pl.col("rank").filter(pl.col("wait_ns") == 0).alias("__lasts"),
             pl.col("arrival_ns").max().alias("__latest"),
             pl.col("adjusted_ns").filter(pl.col("wait_ns") == 0).first().alias("__latest_adj"))
        .filter(pl.col("__lasts").list.len() == 1)
        .with_columns(pl.col("__lasts").list.first().alias("last"))
        .drop("__lasts")
    ).lazy()
    times = collect(last.group_by(pl.col("last").alias("rank")).agg(pl.len().cast(pl.Int64).alias("times_last")))
    intervals = collect(
        multi.join(last, on=_INST, nulls_equal=True)
        .filter(pl.col("rank") != pl.col("last"))
        .select("last", "rank", pl.col("arrival_ns").alias("start"), pl.col("__latest").alias("end"),
                (pl.col("arrival_ns") + pl.max_horizontal(0, pl.min_horizontal(
                    pl.col("__latest") - pl.col("arrival_ns"), pl.col("__latest_adj") - pl.col("adjusted_ns"))))
                .alias("__beyond_end"))
    )
    per_waiter = union_lengths(intervals, ["last", "rank"], {"wait_ns": pl.lit(True)})
    beyond = union_lengths(intervals.drop("end").rename({"__beyond_end": "end"}), ["last", "rank"],
                           {"beyond_ns": pl.lit(True)})
    caused = collect(
        per_waiter.lazy().group_by(pl.col("last").alias("rank"))
        .agg((pl.col("wait_ns").sum() / NS_PER_US).alias("wait_caused_us"),
             (pl.col("wait_ns") > 0).sum().cast(pl.Int64).alias("waiting_ranks"))
        .join(beyond.lazy().group_by(pl.col("last").alias("rank"))
              .agg((pl.col("beyond_ns").sum() / NS_PER_US).alias("wait_beyond_schedule_us")), on="rank", how="left")
    )
    return times, caused


@derived
def per_rank(p: Prepared) -> pl.DataFrame:
    """Per rank: times_last, wait_caused_us, waiting_ranks, instances, step_us, wait_beyond_schedule_us,
    and the run's time basis (``__steps_total_us``, ``__span_ns``) the straggler rule reads."""
    times, caused = _waits_caused(p)
    seen = multi_rank_arrivals(p).lazy().group_by("rank").agg(pl.len().alias("instances"))
    step_times = (
        steps(p).lazy()
        .group_by("rank")
        .agg(((pl.col("end") - pl.col("start")).mean() / NS_PER_US).alias("step_us"),
             ((pl.col("end") - pl.col("start")).sum() / NS_PER_US).alias("__steps_total_us"))
    )
    spans = rank_spans(p).lazy().select("rank", (pl.col("last_ns") - pl.col("first_ns")).alias("__span_ns"))
    return collect(
        spans.join(times.lazy(), on="rank", how="left").join(caused.lazy(), on="rank", how="left")
        .join(seen, on="rank", how="left").join(step_times, on="rank", how="left")
        .select("rank", "times_last", "wait_caused_us", "waiting_ranks", "instances", "step_us",
                "wait_beyond_schedule_us", "__steps_total_us", "__span_ns")
        .with_columns(pl.col("times_last", "waiting_ranks", "instances").fill_null(0),
                      pl.col("wait_caused_us", "wait_beyond_schedule_us").fill_null(0.0))
        .sort("rank")
    )


# --- the tests (module doc) ---------------------------------------------------------------------------------

@derived
def unit_lateness(p: Prepared) -> pl.DataFrame:
    """Per (unit, rank): ``late``, the rank's mean lateness over the unit's instances (ns), ``n_ranks`` at the
    unit and ``is_last`` (its lateness alone the largest); ``__unit`` is a struct (group, step, instance):
    the step's instances of a process group, or an instance alone where the ranks have one step or none
    (module doc). Units of one rank are left out."""
    adj = adjusted_arrivals(p)
    by_step = collect(adj.lazy().group_by("rank").agg(pl.col("unit").drop_nulls().n_unique())).get_column("unit").max()
    unit = pl.col("unit") if int(cast(int, by_step or 0)) > 1 else pl.lit(None, dtype=pl.Int64)
    keyed = adj.lazy().with_columns(
        pl.when(unit.is_not_null()).then(pl.struct(pl.col("group"), unit.alias("u"), pl.lit(None, dtype=pl.Int64).alias("i")))
        .otherwise(pl.struct(pl.col("group"), pl.lit(None, dtype=pl.Int64).alias("u"), pl.col("index").alias("i")))
        .alias("__unit"))
    return collect(
        keyed.group_by("__unit", "rank").agg(pl.col("lateness_ns").mean().alias("late"))
        .with_columns(pl.len().over("__unit").alias("n_ranks"),
                      (pl.col("late") == pl.col("late").max().over("__unit")).alias("__max"))
        .with_columns((pl.col("__max") & (pl.col("__max").sum().over("__unit") == 1)
                       & (pl.col("n_ranks") > 1)).alias("is_last"))
        .filter(pl.col("n_ranks") > 1)
        .drop("__max")
    )


def significance(p: Prepared) -> pl.DataFrame:
    """Per rank with units: units, last_units, chance_last_pct, lateness_us, p_t, p_last, and p_last_min,
    the least p_last its units allow (last at every one) (module doc)."""
    adj = adjusted_arrivals(p)
    schema = {"rank": pl.Int32(), "units": pl.Int64(), "last_units": pl.Int64(), "chance_last_pct": pl.Float64(),
              "lateness_us": pl.Float64(), "p_t": pl.Float64(), "p_last": pl.Float64(), "p_last_min": pl.Float64()}
    if adj.height == 0:
        return pl.DataFrame(schema=schema)
    units = unit_lateness(p)
    per = collect(
        units.lazy().with_columns((pl.col("late") - pl.col("late").mean().over("rank")).alias("__res"))
        .group_by("rank").agg(
            pl.len().alias("units"), pl.col("is_last").sum().cast(pl.Int64).alias("last_units"),
            (100.0 / pl.col("n_ranks")).mean().alias("chance_last_pct"),
            (pl.col("late").mean() / NS_PER_US).alias("lateness_us"),
            (pl.col("__res") ** 2).sum().alias("__ss"),
            pl.col("n_ranks").value_counts().alias("__sizes"))
        .sort("rank")
    )
    ranks_per_instance = float(collect(adj.lazy().group_by(_INST).len().select(pl.col("len").mean())).item())
    dof = float((per["units"] - 1).sum()) * (ranks_per_instance - 1) / ranks_per_instance
    s = math.sqrt(float(per["__ss"].sum()) / dof) / NS_PER_US if dof > 0 else None
    p_t, p_last, floor = [], [], []
    for row in per.iter_rows(named=True):
        mean, n = row["lateness_us"], row["units"]
        if s is None or n < 1:
            p_t.append(1.0)
        elif s == 0:
            p_t.append(0.0 if mean > 0 else 1.0)
        else:
            p_t.append(t_sf(mean / (s / math.sqrt(n)), dof))
        counts = tuple(sorted((int(v["n_ranks"]), int(v["count"])) for v in row["__sizes"]))
        tail = last_tail(counts)
        p_last.append(float(tail[row["last_units"]]))
        floor.append(float(tail[-1]))
    return per.drop("__ss", "__sizes").with_columns(pl.Series("p_t", p_t, pl.Float64()),
                                                    pl.Series("p_last", p_last, pl.Float64()),
                                                    pl.Series("p_last_min", floor, pl.Float64())).cast(pl.Schema(schema))


def _number(value: object, what: str) -> float:
    """``float(value)`` for a Series aggregate (``median()`` etc.), which Polars types as any Python scalar;
    anything but a number (None: only nulls were aggregated) is a bug upstream."""
    if not isinstance(value, (int, float)):
        raise TypeError(f"stragglers: {what} is {value!r}; expected a number")
    return float(value)


def straggler_table(events: Events, alpha: float = ALPHA, min_share_pct: float = MIN_SHARE_PCT) -> pl.DataFrame:
    """Per rank: times_last, wait_caused_us, waiting_ranks, instances, step_us, wait_beyond_schedule_us,
    units, last_units, chance_last_pct, lateness_us, p_value, wait_share_pct, significant, material,
    is_straggler (rule in the module doc).

    Example: 4 ranks, 3 steps of 10 ms; rank 3 arrives 900 µs after the others at each step's one
    all-reduce -> lateness 900 µs at 3 of 3 units with no spread: p_value 0; each of 3 others waited
    900 µs a step, 9 % of a step: named. With 2 ranks last in turn, p_value 1: nobody is named.
    """
    p = prepare(events)
    t = per_rank(p)
    cols = ["units", "last_units", "chance_last_pct", "lateness_us", "p_value", "wait_share_pct", "significant",
            "material", "is_straggler"]
    if t.height == 0:
        return t.with_columns(pl.lit(0).alias("units"), pl.lit(0).alias("last_units"),
                              *(pl.lit(None, dtype=pl.Float64).alias(c) for c in cols[2:6]),
                              *(pl.lit(False).alias(c) for c in cols[6:])).drop("__steps_total_us", "__span_ns")
    steps_total = t["__steps_total_us"].drop_nulls()
    basis = (_number(steps_total.median(), "the median rank's step total") if steps_total.len()
             else _number(t["__span_ns"].median() or 0, "the median rank's trace span") / NS_PER_US)
    sig = significance(p)
    m = int(sig.filter(pl.col("units") > 0).height)
    # Tarone: a last-arrival test that could not reach alpha even at its least p is left out of the family
    counted = (pl.col("p_last_min") * 2 * m <= alpha).fill_null(False)
    family = m + int(sig.select(counted.sum()).item() or 0) if m else 0
    return (
        t.join(sig, on="rank", how="left")
        .with_columns(pl.col("units", "last_units").fill_null(0),
                      pl.when(pl.col("p_t").is_not_null())
                      .then(pl.min_horizontal(pl.lit(1.0), family * pl.when(counted)
                                              .then(pl.min_horizontal("p_t", "p_last")).otherwise(pl.col("p_t"))))
                      .alias("p_value"),
                      pl.when((pl.col("waiting_ranks") > 0) & (basis > 0))
                      .then(100.0 * pl.col("wait_beyond_schedule_us") / pl.col("waiting_ranks") / basis)
                      .otherwise(0.0).alias("wait_share_pct"))
        .with_columns((pl.col("p_value") <= alpha).fill_null(False).alias("significant"),
                      (pl.col("wait_share_pct") >= min_share_pct).alias("material"))
        .with_columns((pl.col("significant") & pl.col("material")).alias("is_straggler"))
        .drop("__steps_total_us", "__span_ns", "p_t", "p_last", "p_last_min")
    )


def stragglers(events: Events, alpha: float = ALPHA, min_share_pct: float = MIN_SHARE_PCT) -> dict[str, object]:
    """The report section: ``{ranks: [...], alpha, min_share_pct, unit, per_rank: [{rank, times_last,
    wait_caused_us, waiting_ranks, instances, step_us, wait_beyond_schedule_us, units, last_units,
    chance_last_pct, lateness_us, p_value, wait_share_pct, significant, material}]}``."""
    p = prepare(events)
    t = straggler_table(p, alpha, min_share_pct)
    adj = adjusted_arrivals(p)
    per_step = not adj.height or collect(adj.lazy().group_by("rank").agg(pl.col("unit").drop_nulls().n_unique())
                                      .select(pl.col("unit").max())).item() > 1
    return {
        "ranks": t.filter(pl.col("is_straggler"))["rank"].to_list(),
        "alpha": alpha,
        "min_share_pct": min_share_pct,
        "unit": "step" if per_step else "instance",
        "per_rank": t.drop("is_straggler").to_dicts(),
    }


def with_groups(section: dict[str, Any], p: Prepared, placement: Placement) -> dict[str, Any]:
    """The stragglers ``section`` with its ``groups``: ranks placed alike that are slower together
    (:func:`.slow_groups.slow_groups`)."""
    if not section.get("per_rank") or adjusted_arrivals(p).height == 0:
        return {**section, "groups": []}
    counts = cause_steps(p).group_by("rank").len().get_column("len")
    nsteps = int(_number(counts.max(), "the most steps of a rank")) if counts.len() else 0
    return {**section, "groups": slow_groups(p, section, unit_lateness(p), placement, nsteps)}


def _group_verdict(g: SlowGroup, when: str, nsteps: int) -> str:
    """The verdict of one group slower together. Example: "ranks 1, 3, 5, 7 (CPUs 1) are slower together (rank 1
    of them: CPU contention: ...): one of them arrives last at 22 of 24 steps, 12 by chance ..."."""
    latest = (f" (rank {g.cause.rank} of them: {describe(g.cause)})"
              if g.cause is not None and g.cause.cause != "undecided" else "")
    return (f"{_named(g.ranks)} ({g.placement}) are slower together{latest}: one of them arrives last at "
            f"{g.last_units} of {g.units} {'steps' if nsteps and g.units <= nsteps else 'units'}, {g.chance_last:.0f} by chance ({_p_is(g.p_value)}); each other rank "
            f"waited {fmt_us(g.wait_us)} {when} for them at collectives (wall-clock)")


def _compute_ratio(cause: Any) -> float:
    return next((e.ratio for e in cause.evidence if e.measure == "compute" and e.ratio is not None), 1.0)


def _share(x: float) -> str:
    return f"{x:.1f} %" if x < 10 else f"{x:.0f} %"


def _p_is(x: float | None) -> str:
    text = fmt_p(x)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def fmt_p(x: float | None) -> str:
    """A straggler test's p-value, as the verdicts and the table say it: "< 0.001", "0.0197", "1", "-"."""
    return "-" if x is None else ("< 0.001" if x < 0.001 else f"{x:.3g}")


def host_paused_verdict(cause: StragglerCause) -> str:
    """Why a rank that pauses now and then is no straggler: the host's scheduling explains its pauses
    (:func:`~ddprof.analyses.straggler_cause.host_pauses`). Example: "no straggler: rank 1 pauses now and
    then (stalls: in 5 of 24 steps it makes the others wait up to 10.1 ms, …) but the host's scheduling
    explains 20.3 ms of the 29.3 ms …"."""
    host = next(e for e in cause.evidence if e.measure == "stall_host")
    return (f"no straggler: rank {cause.rank} pauses now and then ({describe(cause)}) but the host's scheduling "
            f"explains {fmt_us(host.rank_value)} of the {fmt_us(host.peers_value or 0.0)} the others waited for it "
            "beyond its median step: before those steps it left its collectives after the others had left them "
            "(its communication thread not running) or its training thread waited for a CPU. A CPU rank shares "
            "its host's cores: the machine's doing, not the rank's")


def straggler_verdicts(report: dict[str, Any]) -> list[str]:
    """Per straggler X: the wall-clock time each other rank spent waiting for X at collectives, on average
    over the ranks that waited (``wait_caused_us / waiting_ranks``), per step when the run has steps, and the
    part beyond the pipeline schedule where that is less. Each rank's wait is a union of time intervals, so
    the figure per step never exceeds a step's length. Example: 3 other ranks waited 300, 300 and 290 ms for
    rank 2 over 3 steps -> 98.9 ms per step.

    Without a straggler, why not: nobody waited; or the last arrival rotates (the ranks last most often,
    with their share of the units, and the p-value); or the most consistent late-comer costs too little
    (its share of a step against :data:`MIN_SHARE_PCT`). Example: "no straggler: the last arrival rotates
    (rank 0 last at 67 %, rank 1 at 33 % of 3 steps; p = 0.982, named at ≤ 0.05); the most waited for, rank 0,
    cost 27 % of a step"."""
    nsteps = len(report["run"].get("steps") or [])
    st = msgspec.convert(report["stragglers"], Stragglers)
    per = {p.rank: p for p in st.per_rank}
    if not any(p.instances for p in per.values()):
        return []
    when = "per step" if nsteps else "in total"
    out = [_group_verdict(g, when, nsteps) for g in st.groups]
    grouped = {r for g in st.groups for r in g.ranks}
    for r in (r for r in st.ranks if r not in grouped):
        p = per[r]
        waiters = p.waiting_ranks or 1
        wait = p.wait_caused_us / waiters / max(nsteps, 1)
        who = "the other rank" if waiters == 1 else f"each of the {waiters} other ranks"
        line = (f"rank {r} is the straggler{cause_clause(report, r)}: {who} spent {fmt_us(wait)} {when} on average waiting for it "
                f"at collectives (wall-clock; last at {p.times_last} of {p.instances} collectives)")
        if p.wait_beyond_schedule_us < 0.99 * p.wait_caused_us:
            line += (f"; {fmt_us(p.wait_beyond_schedule_us / waiters / max(nsteps, 1))} of it beyond what "
                     "the pipeline schedule implies")
        out.append(line)
    if out:
        return out
    waited = [p for p in per.values() if p.wait_caused_us > 0]
    if not waited:
        return ["no straggler: no rank keeps the others waiting at collectives"]
    n = max((p.units for p in per.values()), default=0)
    units = ("collectives" if st.unit != "step" else "steps" if not nsteps or n <= nsteps
             else "(step, process group) units")
    most = max(waited, key=lambda p: (p.wait_share_pct or 0.0, p.rank))
    cost = f"cost the others {_share(most.wait_share_pct or 0.0)} of a step"
    host = {r: c for r, c in set_aside(st).items() if r in per}
    if host:  # named by arrival order, the host's doing (straggler_cause.host_scheduled)
        late = max((per[r] for r in host), key=lambda p: (p.wait_share_pct or 0.0, p.rank))
        cause = host[late.rank]
        if cause.cause == "stalls":
            return [host_paused_verdict(cause)]
        shaped = next((e for e in cause.evidence if e.measure == "same_shapes"), None)
        why = ("nothing of its own explains it: its data loading, compute, collective entry and idle time match "
               "the others'" if cause.cause == "undecided" else
               f"its ops ran on the others' input shapes and took {_compute_ratio(cause):.2g}× their time in all: "
               f"the same work done slower, under the {CONTENTION_MIN:g}× that names one" if shaped is not None else
               f"its ops take only {_compute_ratio(cause):.2g}× the others' in all, their fast calls as fast: "
               f"CPU contention under the {CONTENTION_MIN:g}× that names one")
        if cause.cause == "contention":
            why += cpu_clause(report, late.rank)
        return [f"no straggler: rank {late.rank} arrives late consistently (lateness {fmt_us(late.lateness_us)}, "
                f"last at {late.last_units} of {late.units} {units}; {_p_is(late.p_value)}; it cost the others "
                f"{_share(late.wait_share_pct or 0.0)} of a step) but {why}. A CPU rank shares its host's "
                "cores, which a host shares unevenly: the machine's doing, not the rank's"]
    significant = [p for p in per.values() if p.significant]
    if significant:
        late = max(significant, key=lambda p: (p.wait_share_pct or 0.0, p.rank))
        return [f"no straggler: rank {late.rank} arrives late consistently (lateness {fmt_us(late.lateness_us)}, "
                f"last at {late.last_units} of {late.units} {units}; {_p_is(late.p_value)}) but its wait "
                f"{'beyond the pipeline schedule ' if late.wait_beyond_schedule_us < 0.99 * late.wait_caused_us else ''}"
                f"costs the others {_share(late.wait_share_pct or 0.0)} of a step, under the "
                f"{st.min_share_pct:g} % that names a straggler"]
    lasts = sorted((p for p in per.values() if p.last_units), key=lambda p: (-p.last_units, p.rank))
    shown = ", ".join(f"rank {p.rank}" + (" last" if i == 0 else "") + f" at {100 * p.last_units / max(p.units, 1):.0f} %"
                      for i, p in enumerate(lasts[:4])) + (", ..." if len(lasts) > 4 else "")
    best = min((p.p_value for p in per.values() if p.p_value is not None), default=None)
    top = lasts[0] if lasts else None
    rotates = (f"the last arrival rotates ({shown} of {n} {units}" if top and top.last_units < top.units
               else f"no rank is late beyond chance ({shown + ' of ' if top else ''}{n} {units}")
    return [f"no straggler: {rotates}; {_p_is(best)}, named at ≤ {st.alpha:g}); the most waited for, "
            f"rank {most.rank}, {cost}"]


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

def _stragglers(report: dict[str, Any]) -> Stragglers:
    return msgspec.convert(report["stragglers"], Stragglers)


def _named(ranks: list[int]) -> str:
    """"rank 0", "ranks 0, 3" or "none": a bare number would read like a count of stragglers."""
    if not ranks:
        return "none"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(map(str, ranks[:6])) + (", ..." if len(ranks) > 6 else "")
    return f"ranks {shown}" if len(ranks) <= 6 else f"{len(ranks)} ranks: {shown}"


STRAGGLERS_TABLE = Table(
    lambda r: f"Stragglers: {_named(_stragglers(r).ranks)}",
    (Column("rank", "rank"), Column("times last", "times_last"), Column("collectives", "instances"),
     Column("wait caused", "wait_caused_us", fmt_us), Column("mean step", "step_us", fmt_us),
     Column("lateness", "lateness_us", fmt_us), Column("p", "p_value", fmt_p),
     Column("% of step", "wait_share_pct", fmt_pct)),
    rows=lambda r: [p for p in _stragglers(r).per_rank if p.instances], at=40)

def _members(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


GROUPS_TABLE = Table(
    "Ranks slower together (placed alike, late as a group)",
    (Column("ranks", "ranks", _members), Column("sharing", "placement"), Column("last at", "last_units"),
     Column("by chance", "chance_last", lambda x: f"{x:.1f}"), Column("lateness", "lateness_us", fmt_us),
     Column("% of step", "lateness_pct", fmt_pct), Column("p", "p_value", fmt_p),
     Column("wait a step", "wait_us", fmt_us)),
    rows=lambda r: _stragglers(r).groups, left=2, at=41)

SECTIONS = (
    Section("stragglers", {"ranks": [], "per_rank": [], "causes": [], "groups": []},
            tables=(STRAGGLERS_TABLE, GROUPS_TABLE),
            # why each straggler is late, the pipeline stage that holds a pipeline back, a rank that pauses
            # (analyses/straggler_cause.py): its verdict first, then the stragglers', naming their causes
            verdict=lambda r: [*cause_verdicts(r), *straggler_verdicts(r)],
            verdict_at=20, record=Stragglers, order=60,
            cross=lambda cross: with_groups(with_causes(stragglers(cross.p), cross.p, cross.cpu), cross.p,
                                            cross.placement),
            keeps=(p2p_blocked, cause_steps, cause_ops, cause_shapes, device_ranks)),
)
