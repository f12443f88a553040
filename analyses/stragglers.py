"""Stragglers: which ranks make the others wait at collectives (docs/DESIGN.md §3).

Per collective instance seen on two or more ranks (:func:`collectives.arrivals`; point-to-point
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

Rule naming the stragglers (robust and quiet on balanced runs): rank r is one when

* ``wait_caused_r > median(others) + k · 1.4826 · MAD(others)`` (the other ranks' values, k = 3), and,
  where that spread says little (fewer than 3 other ranks, or MAD = 0), also
  ``wait_caused_r ≥ margin · median(others)`` (margin = 2: with 2 ranks, the one that caused twice the
  other's wait, not merely more);
* its mean wait per waiting rank ``≥ max(min_wait_us, min_share · basis)``, where basis is the run's time
  (sum of the median rank's step durations, else the median rank's trace span);
* ``wait_caused_r ≥ rel_to_worst · max_r' wait_caused_r'``.

With k = 3, margin 2, 50 µs, 2 % and 0.5, a perfectly balanced run names nobody, neither does jitter
that costs under 2 % of the run, two ranks that take turns being last are not named, and a rank that was
last now and then is not named beside one that caused more than twice its wait.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import polars as pl
from ddprof.analyses.collectives import arrivals
from ddprof.analyses.frames.intervals import union_lengths
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived
from ddprof.analyses.frames.sets import rank_spans, steps
from ddprof.analyses.sections import Section

from ddprof.report.display import Column, Table
from ddprof.report.schema import Stragglers
from ddprof.vocabulary.units import NS_PER_US, fmt_ranks, fmt_us

_INST = ["group", "src", "dst", "index"]


@derived
def multi_rank_arrivals(p: Prepared) -> pl.DataFrame:
    """The arrivals at collective instances seen on two or more ranks, point-to-point left out."""
    return collect(arrivals(p).lazy().filter((pl.len().over(_INST) > 1) & (pl.col("match_op") != "sendrecv")))


def _waits_caused(p: Prepared) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rank, times_last) per last arriver, and (rank, wait_caused_us, waiting_ranks) from the union of
    each waiting rank's wait intervals (module doc)."""
    multi = multi_rank_arrivals(p).lazy()
    last = collect(
        multi.group_by(_INST)
        .agg(pl.col("rank").filter(pl.col("wait_ns") == 0).alias("__lasts"),
             pl.col("arrival_ns").max().alias("__latest"))
        .filter(pl.col("__lasts").list.len() == 1)
        .with_columns(pl.col("__lasts").list.first().alias("last"))
        .drop("__lasts")
    ).lazy()
    times = collect(last.group_by(pl.col("last").alias("rank")).agg(pl.len().cast(pl.Int64).alias("times_last")))
    intervals = collect(
        multi.join(last, on=_INST, nulls_equal=True)
        .filter(pl.col("rank") != pl.col("last"))
        .select("last", "rank", pl.col("arrival_ns").alias("start"), pl.col("__latest").alias("end"))
    )
    per_waiter = union_lengths(intervals, ["last", "rank"], {"wait_ns": pl.lit(True)})
    caused = collect(
        per_waiter.lazy().group_by(pl.col("last").alias("rank"))
        .agg((pl.col("wait_ns").sum() / NS_PER_US).alias("wait_caused_us"),
             (pl.col("wait_ns") > 0).sum().cast(pl.Int64).alias("waiting_ranks"))
    )
    return times, caused


@derived
def per_rank(p: Prepared) -> pl.DataFrame:
    """Per rank: times_last, wait_caused_us, waiting_ranks, instances, step_us, and the run's time basis
    (``__steps_total_us``, ``__span_ns``) the straggler rule reads."""
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
                "__steps_total_us", "__span_ns")
        .with_columns(pl.col("times_last", "waiting_ranks", "instances").fill_null(0),
                      pl.col("wait_caused_us").fill_null(0.0))
        .sort("rank")
    )


def _number(value: object, what: str) -> float:
    """``float(value)`` for a Series aggregate (``median()`` etc.), which Polars types as any Python scalar;
    anything but a number (None: only nulls were aggregated) is a bug upstream."""
    if not isinstance(value, (int, float)):
        raise TypeError(f"stragglers: {what} is {value!r}; expected a number")
    return float(value)


def straggler_table(events: Events, k: float = 3.0, margin: float = 2.0, min_wait_us: float = 50.0,
                    min_share: float = 0.02, rel_to_worst: float = 0.5) -> pl.DataFrame:
    """Per rank: times_last, wait_caused_us, waiting_ranks, instances, step_us, is_straggler (rule in the
    module doc).

    Example: 4 ranks, wait caused 0, 0, 0 and 2,700 µs (900 µs to each of 3 ranks) over a 10 ms run ->
    rank 3 exceeds median(others) + 3·MAD(others) = 0 and 2 · median(others) = 0; its 900 µs per waiting
    rank pass max(50, 0.02 · 10,000) = 200 µs, and 2,700 ≥ 0.5 · 2,700. With 2 ranks that caused 5 and
    6 ms, neither is named (6 < 2 · 5).
    """
    t = per_rank(events)
    if t.height == 0:
        return t.with_columns(pl.lit(False).alias("is_straggler")).drop("__steps_total_us", "__span_ns")
    steps_total = t["__steps_total_us"].drop_nulls()
    basis = (_number(steps_total.median(), "the median rank's step total") if steps_total.len()
             else _number(t["__span_ns"].median() or 0, "the median rank's trace span") / NS_PER_US)
    x = t["wait_caused_us"].to_numpy().astype(np.float64)
    waiting = t["waiting_ranks"].to_numpy()
    per_waiter = np.divide(x, waiting, out=np.zeros_like(x), where=waiting > 0)
    floor = max(min_wait_us, min_share * basis)
    worst = x.max()
    flags = []
    for i, xi in enumerate(x):  # NumPy per rank: a Polars call per value would cost more than the work
        others = np.delete(x, i)
        if not len(others):
            flags.append(False)
            continue
        med = float(np.median(others))
        mad = float(np.median(np.abs(others - med)))
        stands_out = xi > med + k * 1.4826 * mad
        if len(others) < 3 or mad == 0:
            stands_out = stands_out and xi >= margin * med
        flags.append(bool(stands_out and per_waiter[i] >= floor and xi >= rel_to_worst * worst))
    return t.with_columns(pl.Series("is_straggler", flags)).drop("__steps_total_us", "__span_ns")


def stragglers(events: Events, **rule: float) -> dict[str, object]:
    """The report section: ``{ranks: [...], per_rank: [{rank, times_last, wait_caused_us, waiting_ranks,
    instances, step_us}]}``."""
    t = straggler_table(events, **rule)
    return {
        "ranks": t.filter(pl.col("is_straggler"))["rank"].to_list(),
        "per_rank": t.drop("is_straggler").to_dicts(),
    }


def straggler_verdicts(report: dict[str, Any]) -> list[str]:
    """Per straggler X: the wall-clock time each other rank spent waiting for X at collectives, on average
    over the ranks that waited (``wait_caused_us / waiting_ranks``), per step when the run has steps.
    Each rank's wait is a union of time intervals, so the figure per step never exceeds a step's length.
    Example: 3 other ranks waited 300, 300 and 290 ms for rank 2 over 3 steps -> 98.9 ms per step."""
    nsteps = len(report["run"].get("steps") or [])
    st = msgspec.convert(report["stragglers"], Stragglers)
    per = {p.rank: p for p in st.per_rank}
    if not any(p.instances for p in per.values()):
        return []
    when = "per step" if nsteps else "in total"
    out = []
    for r in st.ranks:
        p = per[r]
        waiters = p.waiting_ranks or 1
        wait = p.wait_caused_us / waiters / max(nsteps, 1)
        who = "the other rank" if waiters == 1 else f"each of the {waiters} other ranks"
        out.append(f"rank {r} is the straggler: {who} spent {fmt_us(wait)} {when} on average waiting for it "
                   f"at collectives (wall-clock; last at {p.times_last} of {p.instances} collectives)")
    return out or ["no straggler: no rank keeps the others waiting at collectives"]


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

def _stragglers(report: dict[str, Any]) -> Stragglers:
    return msgspec.convert(report["stragglers"], Stragglers)


STRAGGLERS_TABLE = Table(
    lambda r: f"Stragglers: {fmt_ranks(st.ranks) if (st := _stragglers(r)).ranks else 'none'}",
    (Column("rank", "rank"), Column("times last", "times_last"), Column("collectives", "instances"),
     Column("wait caused", "wait_caused_us", fmt_us), Column("mean step", "step_us", fmt_us)),
    rows=lambda r: [p for p in _stragglers(r).per_rank if p.instances], at=40)

SECTIONS = (
    Section("stragglers", {"ranks": [], "per_rank": []}, tables=(STRAGGLERS_TABLE,), verdict=straggler_verdicts,
            verdict_at=20, record=Stragglers, order=60),
)
