"""The live view of a running job, from its always-on step measures (:mod:`ddprof.store.step_measures`):
per rank the last and median step, the wait it caused, the trend, and which rank is slow since when.

Pure functions over a frame of step records (``rank``, ``step``, ``end``, ``wall_ms``, ``coll_ms``,
``arrive``, ... as :func:`ddprof.store.step_measures.read_step_measures` and
:meth:`~ddprof.store.step_measures.MeasureTail.frame` return it); ``ddprof top`` and the launcher's watch
call them once a second on the newest steps.

**Own time** (as DESIGN.md §3 defines it for a comparison, here with the collectives the capture timed):
``own = wall_ms − coll_ms``, the part of the step a rank spends on its own work and not inside a
collective, where it waits for the others. In a synchronous job every rank's step lasts as long as the
slowest rank's, so the step time cannot name the slow rank; its own time can: the slow rank's rises, the
others' falls by what they now wait. Without timed collectives (``coll_ms`` null) own time is the step time.

**The detection rule** (:func:`detect_slow_ranks`), per rank ``r`` and step ``s`` that every rank completed:
``d_r(s) = own_r(s) − median over the other ranks of own_o(s)``. Rank ``r`` is slow at ``s`` when
``d_r(s) > max(floor_ms, rel · median step time, k · σ_r)``, with ``σ_r = 1.4826 · MAD`` of ``d_r`` over
the ``window`` steps before the current run of slow steps (its noise: a rank's own time differs from the
others' by this much when nothing changed), or the same over every rank's differences at those steps when
that is larger (a few steps of one rank can look calmer than they are). It is **named** once it has been slow at
the latest complete steps in a row for ``persist`` steps that last ``settle_s`` together, or for
``persist_max`` steps, whichever comes first, and only with ``min_history`` steps before them to measure the
noise on. Defaults: ``floor_ms = 2``, ``rel = 0.10``, ``k = 4``, ``persist = 2``, ``settle_s = 1``,
``persist_max = 5``, ``window = 50``, ``min_history = 10``. So a step change of one rank is named at the
second step after it when steps last 0.5 s or more, and at the fifth at most when they are short: within 2
steps or about 1.3 s, whichever is longer. A healthy run, whose differences stay within a few σ and below
10 % of the step, raises nothing. (With 1 ms and 5 %, a healthy 2-rank job of 10 ms steps on a loaded 2-core
machine had one rank 1.17 ms behind at two steps in a row, a calm history making σ small: named slow,
wrongly; with 2 ms and 10 %, another had one rank 2.4 ms behind at two steps in a row. Noise that lasts a
few steps of 10 ms is not a slow rank; five in a row, 0.05 s or more, is rarer by orders of magnitude.)
Worked example: 2 ranks with own times 40 ms each (noise σ 0.5 ms); from step 20 rank 1 sleeps 600 ms more:
its own time 640 ms, rank 0's 40 ms (it waits 600 ms in the all-reduce); ``d_1 = 600 ms > max(2, 0.10 ·
640, 4 · 0.5) = 64 ms`` at steps 20 and 21, which last 1.3 s together: named at step 21 as slow since step
20. Had it slept 60 ms more, its steps of 100 ms would be named at the fifth, step 24. *Since when*: the
first step of that run of slow steps from which its difference holds at least half the run's median
(:func:`_lead_in`): a step that the machine made 2.5 ms slow just before a 60 ms slowdown began is noise
before the change, not its start.

**Wait caused** (DESIGN.md §3's straggler, one collective per step: the step's last): per step, the rank
that arrived last at its last collective (``arrive``, wall clock) made each other rank wait
``max arrival − arrival_o``; its wait caused is their sum. Arrivals of ranks on different hosts are compared
on their hosts' clocks, uncorrected.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class DetectionRule:
    """The slow-rank rule's parameters (module doc)."""

    floor_ms: float = 2.0
    rel: float = 0.10
    k: float = 4.0
    persist: int = 2
    settle_s: float = 1.0
    persist_max: int = 5
    window: int = 50
    min_history: int = 10
    merge_gap: int = 5  # the straggler history: stretches of one rank this many steps apart or fewer are one


@dataclass(frozen=True)
class SlowRank:
    """A rank named slow: since ``since_step`` (its end at ``since_wall``, epoch s), for ``steps`` steps
    up to ``last_step``; ``excess_ms`` its own time over the others' median, the median over those steps;
    ``threshold_ms`` what the rule required."""

    rank: int
    since_step: int
    since_wall: float | None
    last_step: int
    steps: int
    excess_ms: float
    threshold_ms: float

    def describe(self) -> str:
        return (f"rank {self.rank} is slow since step {self.since_step} ({self.steps} steps): its own time per step "
                f"is {self.excess_ms:.1f} ms over the other ranks' median (rule: > {self.threshold_ms:.1f} ms for "
                f"{self.steps} steps in a row)")


@dataclass(frozen=True)
class RankLive:
    """One rank's line of the live view."""

    rank: int
    last_step: int
    last_ms: float
    median_ms: float
    own_ms: float | None  # median own time over the view's steps
    coll_ms: float | None  # median time in collectives
    wait_caused_ms: float  # mean per step over the view's steps
    last_count: int  # steps at which it arrived last
    trend_pct: float | None  # median of the last 10 steps vs the steps before, %
    data_ms: float | None
    cpu_pct: float | None  # the process's CPU time over its wall time, last step
    cpu_wait_ms: float | None  # median time its training thread waited for a CPU a step (the run-queue delay)
    rss_mb: float | None
    host_cpu_pct: float | None
    host_mem_pct: float | None
    last_end: float | None


def own_matrix(frame: pl.DataFrame) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """The steps every rank completed (ascending), and for them (steps × ranks): own time, wall time, the
    end's wall clock. Ranks in ascending order. A rank's step with ``coll_ms`` null, where the rank timed its
    collectives at other steps, does not count as completed."""
    ranks = sorted(frame.get_column("rank").unique().to_list()) if frame.height else []
    if not ranks:
        empty = np.zeros((0, 0))
        return [], empty, empty, empty
    # a step whose collectives are unknown on a rank that timed them at other steps (a DDP job's last step:
    # DDP reports an iteration's times at the next forward) is left out, not read as a step without waiting
    frame = frame.filter(pl.col("coll_ms").is_not_null() | pl.col("coll_ms").is_null().all().over("rank"))
    df = frame.select("rank", "step", "wall_ms", "end",
                      (pl.col("wall_ms") - pl.col("coll_ms").fill_null(0.0)).clip(lower_bound=0.0).alias("own"))
    df = df.unique(["rank", "step"], keep="last")
    complete = df.group_by("step").agg(pl.len().alias("n")).filter(pl.col("n") == len(ranks)).get_column("step")
    df = df.filter(pl.col("step").is_in(complete.implode())).sort("step", "rank")
    steps = df.get_column("step").unique(maintain_order=True).to_list()
    shape = (len(steps), len(ranks))
    own = df.get_column("own").to_numpy().reshape(shape)
    wall = df.get_column("wall_ms").to_numpy().reshape(shape)
    end = df.get_column("end").fill_null(np.nan).to_numpy().astype(float).reshape(shape)
    return steps, own, wall, end


def _mad_sigma(x: np.ndarray) -> float:
    if x.size == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def _differences(own: np.ndarray, wall: np.ndarray, rule: DetectionRule) -> tuple[np.ndarray, float]:
    """The rule's ``d_r(s)`` (steps × ranks: own time less the other ranks' median) and its floor
    ``max(floor_ms, rel · median step time)`` (module doc)."""
    diffs = np.stack([own[:, r] - np.median(np.delete(own, r, axis=1), axis=1) for r in range(own.shape[1])],
                     axis=1)
    return diffs, max(rule.floor_ms, rule.rel * float(np.median(wall)))


def _to_name(walls: np.ndarray, rule: DetectionRule) -> int:
    """How many slow steps in a row, from the first of ``walls`` (a run's step times, ms), name a rank: the
    fewest from ``persist`` on that last ``settle_s`` together, ``persist_max`` at most; more than the run
    has when even its whole length falls short (it is not named yet)."""
    total = np.cumsum(np.nan_to_num(walls[:rule.persist_max], nan=0.0))
    for n in range(rule.persist, rule.persist_max):
        if n <= total.size and total[n - 1] >= rule.settle_s * 1e3:
            return n
    return rule.persist_max


def _threshold(diffs: np.ndarray, r: int, start: int, base: float, rule: DetectionRule) -> float | None:
    """What rank ``r``'s difference must exceed in a run of steps from index ``start`` on: the floor, or
    ``k`` robust sigmas of the ``window`` steps before it (its own, or every rank's where larger); None
    with fewer than ``min_history`` steps before it."""
    before = slice(max(0, start - rule.window), start)
    if start - before.start < rule.min_history:
        return None
    return max(base, rule.k * max(_mad_sigma(diffs[before, r]), _mad_sigma(diffs[before].ravel())))


def detect_slow_ranks(frame: pl.DataFrame, rule: DetectionRule = DetectionRule()) -> list[SlowRank]:
    """The ranks slow at the latest ``rule.persist`` complete steps (module doc), the slowest first. A rank
    slow at every step of ``frame`` is named since the frame's first step: give the steps since the change
    (``ddprof top`` reads the newest 1,000 and remembers when it first named a rank)."""
    steps, own, wall, end = own_matrix(frame)
    n_steps, n_ranks = own.shape
    if n_ranks < 2 or n_steps < rule.persist:
        return []
    diffs, base = _differences(own, wall, rule)
    found = []
    for r in range(n_ranks):
        d = diffs[:, r]
        streak = _trailing(d > base)
        threshold = _threshold(diffs, r, n_steps - streak, base, rule)
        if threshold is None:
            continue
        streak = _trailing(d > threshold)
        if streak >= _to_name(wall[n_steps - streak:, r], rule):
            streak -= _lead_in(d[n_steps - streak:])
            first = n_steps - streak
            since_wall = float(end[first, r]) if np.isfinite(end[first, r]) else None
            found.append(SlowRank(rank=int(frame_ranks(frame)[r]), since_step=int(steps[first]), since_wall=since_wall,
                                  last_step=int(steps[-1]), steps=streak, excess_ms=float(np.median(d[first:])),
                                  threshold_ms=threshold))
    return sorted(found, key=lambda s: -s.excess_ms)


@dataclass(frozen=True)
class SlowEpisode:
    """A stretch of steps at which the detection rule named ``rank`` slow, replayed over a whole job
    (:func:`slow_episodes`): from ``first_step`` to ``last_step`` (``steps`` of them), named at
    ``named_step`` (the ``persist``-th), ``excess_ms`` its own time over the others' median (the median over
    the stretch), ``threshold_ms`` what the rule required there."""

    rank: int
    first_step: int
    last_step: int
    steps: int
    named_step: int
    excess_ms: float
    threshold_ms: float


def slow_episodes(frame: pl.DataFrame, rule: DetectionRule = DetectionRule()) -> list[SlowEpisode]:
    """Every stretch at which :func:`detect_slow_ranks` would have named a rank, had it run at every step
    of the job (the straggler history), in step order.

    The same rule, replayed: at step i a rank's run of steps over ``base`` (the rule's floor, here of the
    whole job's median step) ends at i; its noise is measured on the ``window`` steps before that run; it is
    named while the latest ``persist`` steps or more exceed the threshold. Within one run over ``base`` the
    history, so the threshold, is fixed, so each run is measured once: the stretches where it exceeds the
    threshold for ``persist`` steps in a row are the episodes, and two of one rank at most ``merge_gap``
    steps apart are one (8 ms more on a 40 ms step with 3 % noise dips under the threshold now and then). Example: own times equal but for rank 1's,
    8 ms more at steps 40-59 of a 10 ms job with 0.3 ms of noise: one episode, rank 1, steps 40-59, named at
    step 41, excess 8 ms."""
    steps, own, wall, _ = own_matrix(frame)
    n_steps, n_ranks = own.shape
    if n_ranks < 2 or n_steps < rule.persist:
        return []
    ranks = frame_ranks(frame)
    diffs, base = _differences(own, wall, rule)
    found = []
    for r in range(n_ranks):
        d = diffs[:, r]
        for a, b in _runs(d > base):
            threshold = _threshold(diffs, r, a, base, rule)
            if threshold is None:
                continue
            for x, y in _runs(d[a:b] > threshold):
                need = _to_name(wall[a + x:a + y, r], rule)
                if y - x >= need:
                    named = a + x + need - 1
                    x += min(_lead_in(d[a + x:a + y]), need - 1)  # from the level it holds on, named after
                    found.append(SlowEpisode(rank=int(ranks[r]), first_step=int(steps[a + x]),
                                             last_step=int(steps[a + y - 1]), steps=y - x,
                                             named_step=int(steps[named]),
                                             excess_ms=float(np.median(d[a + x:a + y])), threshold_ms=threshold))
    return _merged(sorted(found, key=lambda e: (e.rank, e.first_step)), steps, diffs, ranks, rule.merge_gap)


def _merged(found: list[SlowEpisode], steps: list[int], diffs: np.ndarray, ranks: list[int],
            gap: int) -> list[SlowEpisode]:
    """Stretches of one rank at most ``gap`` steps apart joined (a slow rank whose difference dips under
    the threshold for a step or two is one stretch, as ``ddprof top`` shows it), in step order."""
    index = {s: i for i, s in enumerate(steps)}
    out: list[SlowEpisode] = []
    for e in found:
        last = out[-1] if out else None
        if last is not None and last.rank == e.rank and index[e.first_step] - index[last.last_step] - 1 <= gap:
            a, b = index[last.first_step], index[e.last_step] + 1
            d = diffs[a:b, ranks.index(e.rank)]
            out[-1] = SlowEpisode(rank=e.rank, first_step=last.first_step, last_step=e.last_step, steps=b - a,
                                  named_step=last.named_step, excess_ms=float(np.median(d)),
                                  threshold_ms=min(last.threshold_ms, e.threshold_ms))
        else:
            out.append(e)
    return sorted(out, key=lambda e: (e.first_step, e.rank))


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of True, as [start, end) index pairs."""
    padded = np.concatenate(([False], flags.astype(bool), [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def frame_ranks(frame: pl.DataFrame) -> list[int]:
    return sorted(frame.get_column("rank").unique().to_list()) if frame.height else []


#: A run of slow steps starts where its difference first reaches this share of the run's median (module doc).
ONSET_SHARE = 0.5


def _lead_in(d: np.ndarray) -> int:
    """How many of the first differences of a run of slow steps stay under :data:`ONSET_SHARE` of the run's
    median: noise just before the change, over the threshold by chance, not its start."""
    level = ONSET_SHARE * float(np.median(d))
    n = 0
    while n < len(d) - 1 and d[n] < level:
        n += 1
    return n


def _trailing(flags: np.ndarray) -> int:
    """How many of the last entries are True, in a row."""
    n = 0
    for f in flags[::-1]:
        if not f:
            break
        n += 1
    return n


def wait_caused(frame: pl.DataFrame) -> dict[int, tuple[float, int, int]]:
    """Per rank: the wait it caused summed over the steps (ms), the steps it arrived last at, and the steps
    compared (those with every rank's arrival) (module doc)."""
    ranks = frame_ranks(frame)
    out = {r: (0.0, 0, 0) for r in ranks}
    if len(ranks) < 2:
        return out
    arr = (frame.filter(pl.col("arrive").is_not_null()).unique(["rank", "step"], keep="last")
           .select("rank", "step", "arrive"))
    counts = arr.group_by("step").agg(pl.len().alias("n")).filter(pl.col("n") == len(ranks)).get_column("step")
    arr = arr.filter(pl.col("step").is_in(counts.implode()))
    if not arr.height:
        return out
    per_step = (arr.with_columns(pl.col("arrive").max().over("step").alias("last"))
                .with_columns(((pl.col("last") - pl.col("arrive")) * 1e3).alias("waited_ms"))
                .group_by("step").agg(pl.col("waited_ms").sum(), pl.col("rank").sort_by("arrive").last().alias("last_rank")))
    n = per_step.height
    agg = per_step.group_by("last_rank").agg(pl.col("waited_ms").sum(), pl.len().alias("times"))
    for row in agg.iter_rows(named=True):
        out[int(row["last_rank"])] = (float(row["waited_ms"]), int(row["times"]), n)
    for r in ranks:
        if out[r][2] == 0:
            out[r] = (out[r][0], out[r][1], n)
    return out


def rank_rows(frame: pl.DataFrame, recent: int = 10) -> list[RankLive]:
    """One line per rank over the frame's steps (module doc); ``recent``: the steps the trend compares."""
    if not frame.height:
        return []
    waits = wait_caused(frame)
    rows = []
    for (rank,), part in frame.sort("step").partition_by("rank", as_dict=True, maintain_order=True).items():
        wall = part.get_column("wall_ms").to_numpy().astype(float)
        coll = part.get_column("coll_ms")
        has_coll = coll.null_count() < part.height
        own = (part.get_column("wall_ms") - coll.fill_null(0.0)).to_numpy() if has_coll else wall
        trend = None
        if wall.size >= 2 * recent:
            before = float(np.median(wall[:-recent]))
            trend = 100.0 * (float(np.median(wall[-recent:])) / before - 1) if before > 0 else None
        last = part.row(part.height - 1, named=True)
        cpu_pct = 100.0 * last["cpu_ms"] / last["wall_ms"] if last.get("cpu_ms") is not None and last["wall_ms"] else None
        waited, times, n = waits.get(int(rank), (0.0, 0, 0))
        data = part.get_column("data_ms").drop_nulls() if "data_ms" in part.columns else pl.Series([], dtype=pl.Float64)
        waits_cpu = part.get_column("wait_ms").drop_nulls() if "wait_ms" in part.columns else pl.Series([], dtype=pl.Float64)
        rows.append(RankLive(
            rank=int(rank), last_step=int(last["step"]), last_ms=float(last["wall_ms"]), median_ms=float(np.median(wall)),
            own_ms=float(np.median(own)) if has_coll else None,
            coll_ms=float(coll.drop_nulls().median()) if has_coll else None,  # type: ignore[arg-type]
            wait_caused_ms=waited / n if n else 0.0, last_count=times, trend_pct=trend,
            data_ms=float(data.median()) if data.len() else None,  # type: ignore[arg-type]
            cpu_pct=cpu_pct, cpu_wait_ms=float(waits_cpu.median()) if waits_cpu.len() else None,  # type: ignore[arg-type]
            rss_mb=last.get("rss_mb"), host_cpu_pct=last.get("host_cpu_pct"),
            host_mem_pct=last.get("host_mem_pct"), last_end=last.get("end")))
    return sorted(rows, key=lambda r: r.rank)
