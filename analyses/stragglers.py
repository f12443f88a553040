"""Stragglers: which ranks make the others wait at collectives (DESIGN.md §3).

Per collective instance seen on two or more ranks (:func:`collectives.arrivals`; point-to-point
transfers are left out: a receiver waiting for its sender is a pipeline dependency, measured by
:mod:`analyses.bubbles`, not a straggler), the last arriver
(unique latest arrival) made each other rank r wait ``latest arrival − arrival_r``. Per rank:

* ``times_last``: instances it arrived last at;
* ``wait_caused_us``: over those instances, the sum of the others' mean wait;
* ``step_us``: its mean ``ProfilerStep`` duration (null without steps).

Rule naming the stragglers (robust and quiet on balanced runs): rank r is one when
``wait_caused_r > median(others) + k · 1.4826 · MAD(others)`` (the other ranks' values, k = 3) **and**
``wait_caused_r ≥ max(min_wait_us, min_share · basis, rel_to_worst · max_r' wait_caused_r')``, where
basis is the run's time (sum of the median rank's step durations, else the median rank's trace span).
With k = 3, 50 µs, 2 % and 0.5, a perfectly balanced run names nobody, neither does jitter that costs
under 2 % of the run, and a rank that was last now and then is not named beside one that caused
more than twice its wait.
"""

from __future__ import annotations

import polars as pl
from ddprof.analyses.collectives import arrivals
from ddprof.analyses.frames import rank_spans, steps_frame
from ddprof.analyses.prepared import Events, Prepared, collect, prepare

_US = 1000.0


def _per_rank(p: Prepared) -> pl.DataFrame:
    arr = arrivals(p).lazy()
    inst = ["group", "src", "dst", "index"]
    multi = arr.filter((pl.len().over(inst) > 1) & (pl.col("match_op") != "sendrecv"))
    last = (
        multi.group_by(inst)
        .agg(
            pl.col("rank").filter(pl.col("wait_ns") == 0).alias("__lasts"),
            (pl.col("wait_ns").sum() / (pl.len() - 1)).alias("__mean_wait"),
        )
        .filter(pl.col("__lasts").list.len() == 1)
        .select(pl.col("__lasts").list.first().alias("rank"), "__mean_wait")
        .group_by("rank")
        .agg(pl.len().alias("times_last"), (pl.col("__mean_wait").sum() / _US).alias("wait_caused_us"))
    )
    seen = multi.group_by("rank").agg(pl.len().alias("instances"))
    steps = (
        p.get(steps_frame).lazy()
        .group_by("rank")
        .agg(((pl.col("end") - pl.col("start")).mean() / _US).alias("step_us"),
             ((pl.col("end") - pl.col("start")).sum() / _US).alias("__steps_total_us"))
    )
    spans = p.get(rank_spans).lazy().select("rank", (pl.col("last_ns") - pl.col("first_ns")).alias("__span_ns"))
    return collect(
        spans.join(last, on="rank", how="left").join(seen, on="rank", how="left")
        .join(steps, on="rank", how="left")
        .select("rank", "times_last", "wait_caused_us", "instances", "step_us", "__steps_total_us", "__span_ns")
        .with_columns(pl.col("times_last", "instances").fill_null(0), pl.col("wait_caused_us").fill_null(0.0))
        .sort("rank")
    )


def straggler_table(events: Events, k: float = 3.0, min_wait_us: float = 50.0,
                    min_share: float = 0.02, rel_to_worst: float = 0.5) -> pl.DataFrame:
    """Per rank: times_last, wait_caused_us, step_us, instances, is_straggler (rule in the module doc).

    Example: 4 ranks, wait caused 0, 0, 0 and 900 µs over a 10 ms run -> rank 3 exceeds
    median(others) + 3·MAD(others) = 0 and the floor max(50, 0.02 · 10,000, 0.5 · 900) = 450 µs.
    """
    t = prepare(events).get(_per_rank)
    if t.height == 0:
        return t.with_columns(pl.lit(False).alias("is_straggler")).drop("__steps_total_us", "__span_ns")
    steps_total = t["__steps_total_us"].drop_nulls()
    basis = float(steps_total.median()) if steps_total.len() else float(t["__span_ns"].median() or 0) / _US
    x = t["wait_caused_us"].to_list()
    floor = max(min_wait_us, min_share * basis, rel_to_worst * max(x))
    flags = []
    for i, xi in enumerate(x):
        others = pl.Series([v for j, v in enumerate(x) if j != i], dtype=pl.Float64)
        if others.len() == 0:
            flags.append(False)
            continue
        med = float(others.median())
        mad = float((others - med).abs().median())
        flags.append(xi > med + k * 1.4826 * mad and xi >= floor)
    return t.with_columns(pl.Series("is_straggler", flags)).drop("__steps_total_us", "__span_ns")


def stragglers(events: Events, **rule: float) -> dict[str, object]:
    """The report section: ``{ranks: [...], per_rank: [{rank, times_last, wait_caused_us, step_us, ...}]}``."""
    t = straggler_table(events, **rule)
    return {
        "ranks": t.filter(pl.col("is_straggler"))["rank"].to_list(),
        "per_rank": t.drop("is_straggler").to_dicts(),
    }
