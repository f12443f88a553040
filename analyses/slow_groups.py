"""Ranks slower together: a group of ranks placed alike that the others wait for, named only when it is real.

One busy CPU slows every rank bound to it, one slow host every rank on it. Each of them is then last now
and then: the last arrival rotates among them, and the test of one rank at a time (:mod:`.stragglers`)
names none of them, or one by luck. A group is tested as one.

**Candidates** come from where the ranks ran, never from their arrivals (a group picked for being late
would pass any test on the same arrivals): the ranks of each host, when the run has two hosts or more,
and the ranks bound to one set of CPUs of a host (the collector records each rank's affinity), when that
splits the ranks further. A candidate holds 2 ranks or more and at most half the ranks traced.

**Figures**, over the straggler test's units (each step's instances of a process group,
:func:`.stragglers.unit_lateness`) that hold members and other ranks: at unit u, ``d_u`` = the members' mean
lateness less the others' (lateness: a rank's arrival less the median arrival, after what a pipeline's
schedule excuses), and whether a member alone arrived last (chance: members / ranks at the unit).

**Significant**: ``p_value = min(1, 2K · min(p_t, p_last))`` ≤ alpha, K the candidates (Bonferroni over
both tests of each), p_t the one-sided t-test of mean d_u > 0 (n − 1 dof), p_last P(a member last at as
many units or more) by chance (Poisson-binomial). **Material**: the members' shares of a step the others
waited for them (``wait_share_pct``), added up, at least the stragglers' least share, and the members' mean
lateness beyond the others' (mean d_u) at least :data:`MIN_LATE_PCT` of the median step: on real 8-rank gloo
runs on 2 CPUs with every rank bound to CPU ``rank mod 2`` and no fault, the host's uneven load made one CPU's
ranks late by 3.1 % and 4.7 % of a step in 2 of 10 runs (in a third by 10 %: named, as the trace cannot
tell it from a busy thread), and a busy thread on one CPU by 5.7-13 % in 10 of 10. **Broad**: more
than half of the members are later on average than every rank outside the group: one slow rank makes its
host's group late too, and is named alone.

Example (a real 8-rank gloo run on 2 CPUs, every rank bound to CPU ``rank mod 2``, a busy thread on CPU
1): ranks 1, 3, 5 and 7 share CPU 1; a member was last at 22 of 24 steps (12 by chance), d 7.7 ms with
p_t < 0.001; each of them later on average than every even rank: "ranks 1, 3, 5, 7 (CPUs 1) are slower
together". On the same job unbound (every rank may run on both CPUs), no candidate: one set of CPUs.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import polars as pl
from ddprof.analyses.chance import at_least, t_sf
from ddprof.analyses.frames.memo import Prepared
from ddprof.analyses.straggler_cause import cause_ops, cause_shapes, cause_steps, classify, finite, step_waits

Placement = dict[int, tuple[str | None, str | None]]

#: Least mean lateness of a group beyond the other ranks', % of the median step (module doc).
MIN_LATE_PCT = 5.0


def placement_groups(placement: Placement, ranks: list[int]) -> list[tuple[str, list[int]]]:
    """The candidate groups (module doc): (what they share, their ranks), largest first then by rank.

    Example: ranks 0-3 on host a, 4-7 on host b, all unbound -> [("host a", [0..3]), ("host b", [4..7])];
    ranks 0-3 on one host bound to CPU rank mod 2 -> [("CPUs 0", [0, 2]), ("CPUs 1", [1, 3])]."""
    where = {r: placement.get(r, (None, None)) for r in ranks}
    out: dict[tuple[int, ...], str] = {}
    hosts = {r: h for r, (h, _) in where.items()}
    many_hosts = None not in hosts.values() and len(set(hosts.values())) > 1
    if many_hosts:
        for h in sorted(set(hosts.values()), key=str):
            out.setdefault(tuple(r for r in ranks if hosts[r] == h), f"host {h}")
    if all(c is not None for _, c in where.values()) and len(set(where.values())) > max(1, len(set(hosts.values()))):
        for key in sorted(set(where.values()), key=str):
            members = tuple(r for r in ranks if where[r] == key)
            out.setdefault(members, f"CPUs {key[1]}" + (f" of host {key[0]}" if many_hosts else ""))
    return sorted(((label, list(m)) for m, label in out.items() if 2 <= len(m) <= len(ranks) // 2),
                  key=lambda g: (-len(g[1]), g[1]))


def group_test(units: pl.DataFrame, members: list[int]) -> dict[str, Any] | None:
    """The figures of one candidate over ``units`` (:func:`.stragglers.unit_lateness`): units, last_units,
    chance_last, lateness_us, p_t, p_last, and ``broad`` (module doc); None with fewer than 3 units."""
    if units.height == 0:
        return None
    inside = pl.col("rank").is_in(members)
    per = (units.group_by("__unit")
           .agg(pl.col("late").filter(inside).mean().alias("g"), pl.col("late").filter(~inside).mean().alias("o"),
                inside.sum().alias("m"), pl.len().alias("n"),
                (pl.col("is_last") & inside).any().alias("g_last"), pl.col("is_last").any().alias("any_last"))
           .filter((pl.col("m") > 0) & (pl.col("m") < pl.col("n"))))
    if per.height < 3:
        return None
    d = (per["g"] - per["o"]).to_numpy().astype(float)
    n = d.size
    sd = float(d.std(ddof=1))
    p_t = t_sf(float(d.mean()) / (sd / math.sqrt(n)), n - 1) if sd > 0 else (0.0 if d.mean() > 0 else 1.0)
    decided = per.filter(pl.col("any_last"))
    probs = (decided["m"] / decided["n"]).to_list()
    k = int(decided["g_last"].sum())
    mean_late = dict(units.group_by("rank").agg(pl.col("late").mean()).iter_rows())
    outside = max((v for r, v in mean_late.items() if r not in members), default=-math.inf)
    later = sum(1 for r in members if mean_late.get(r, -math.inf) > outside)
    return {"units": n, "last_units": k, "chance_last": float(np.sum(probs)), "lateness_us": float(d.mean()) / 1e3,
            "p_t": p_t, "p_last": at_least(k, probs), "broad": later > len(members) / 2}


def _group_cause(p: Prepared, members: list[int], outside: frozenset[int], rows: dict[int, dict[str, Any]],
                 wait_us: dict[int, float]) -> dict[str, Any]:
    """The group's cause: each member's told against the ranks outside the group
    (:func:`.straggler_cause.classify`); the class most members share (one member may pause as well), shown by
    its latest member."""
    cs, ops, waits, shaped = cause_steps(p), cause_ops(p), step_waits(p), cause_shapes(p)
    by_late = sorted(members, key=lambda r: (-(rows[r].get("lateness_us") or 0.0), r))
    causes = [classify(r, cs, ops, waits, wait_us[r], outside, shaped) for r in by_late]
    votes = Counter(c["cause"] for c in causes if c["cause"] != "undecided")
    if not votes:
        return causes[0]
    best = max(votes.values())
    return next(c for c in causes if votes.get(c["cause"]) == best)


def slow_groups(p: Prepared, section: dict[str, Any], units: pl.DataFrame, placement: Placement,
                nsteps: int) -> list[dict[str, Any]]:
    """The groups slower together (module doc), as :class:`~ddprof.report.schema.SlowGroup` dicts, each with
    the cause most of its members share, told against the ranks outside the group (:func:`_group_cause`).
    ``section``: the stragglers section (its per-rank rows, alpha and least share); ``nsteps``: the run's
    steps (the wait per step)."""
    rows = {row["rank"]: row for row in section.get("per_rank", [])}
    candidates = placement_groups(placement, sorted(rows))
    if not candidates or units.height == 0:
        return []
    alpha, least = section.get("alpha", 0.05), section.get("min_share_pct", 2.0)
    step_us = sorted(row["step_us"] for row in rows.values() if row.get("step_us"))
    step = step_us[len(step_us) // 2] if step_us else None
    found = []
    for label, members in candidates:
        t = group_test(units, members)
        if t is None:
            continue
        p_value = min(1.0, 2 * len(candidates) * min(t["p_t"], t["p_last"]))
        share = sum(rows[r].get("wait_share_pct") or 0.0 for r in members)
        late_pct = 100.0 * t["lateness_us"] / step if step else None
        if not (p_value <= alpha and share >= least and t["broad"]
                and (late_pct is None or late_pct >= MIN_LATE_PCT)):
            continue
        waited = {r: (rows[r].get("wait_caused_us") or 0.0) / max(1, rows[r].get("waiting_ranks") or 1) for r in members}
        outside = frozenset(r for r in rows if r not in members)
        cause = _group_cause(p, members, outside, rows, {r: w / max(nsteps, 1) for r, w in waited.items()})
        found.append({"ranks": members, "placement": label, "units": t["units"], "last_units": t["last_units"],
                      "chance_last": t["chance_last"], "lateness_us": t["lateness_us"], "lateness_pct": late_pct,
                      "p_value": p_value,
                      "wait_share_pct": share, "wait_us": sum(waited.values()) / max(nsteps, 1),
                      "cause": finite(cause)})
    return found
