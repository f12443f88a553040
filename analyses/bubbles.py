"""Bubbles: the share of each step a rank spends without compute; pipeline stages and GPipe theory.

Per (rank, step): window = :func:`~ddprof.analyses.frames.stepwindows.step_windows` (on a GPU rank the device step:
from the first device activity launched in step N to the first launched in step N+1; on a CPU-only rank
the host step); bubble = window − |U(compute inside the window)|, all compute inside counting, whichever
step launched it.

Pipeline runs (point-to-point send/recv with a known peer): ranks joined by p2p traffic form chains;
each chain is a pipeline of P stages, ordered from the end whose first p2p op is a send (stage 0
sends activations first). M (micro-batches) = the median number of sends per step from a stage to the
next. GPipe and 1F1B both idle ``(P−1)/(M+P−1)`` of a step on each stage, reported beside the measure.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Any

import msgspec
import polars as pl
from ddprof.analyses.collectives import comm_rows
from ddprof.analyses.frames.lengths import window_lengths
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived, prepare
from ddprof.analyses.frames.stepwindows import step_word
from ddprof.analyses.sections import CrossRank, Section
from ddprof.analyses.summaries import json_rows

from ddprof.report.display import Column, Table
from ddprof.report.schema import BubbleRow, BubbleStepSummary, PipelineRow, rows
from ddprof.vocabulary.units import NS_PER_US, fmt_pct, fmt_plain, fmt_ranges, fmt_us


@derived
def bubbles(p: Prepared) -> pl.DataFrame:
    """Per (rank, step): window_us, compute_us, bubble_us = window − compute, bubble_pct, basis (``device``
    or ``host``: the step window's, module doc).

    Example: window [0,100) ms, compute [10,40) and [50,80) ms -> compute 60 ms, bubble 40 ms (40 %).
    """
    return collect(
        window_lengths(p).lazy()
        .with_columns((pl.col("window_ns") - pl.col("compute_ns")).alias("bubble_ns"))
        .select(
            "rank", "step",
            (pl.col("window_ns") / NS_PER_US).alias("window_us"),
            (pl.col("compute_ns") / NS_PER_US).alias("compute_us"),
            (pl.col("bubble_ns") / NS_PER_US).alias("bubble_us"),
            pl.when(pl.col("window_ns") > 0).then(100.0 * pl.col("bubble_ns") / pl.col("window_ns")).alias("bubble_pct"),
            "basis",
        )
        .sort("rank", "step")
    )


def _chains(edges: list[tuple[int, int]], first_send: dict[int, bool]) -> list[list[int]]:
    """Order the ranks of each p2p-connected component along its path; skip components that are not
    paths (rings, trees: no stage order). Loops over ranks, not events."""
    adj: dict[int, set[int]] = {}
    for a, b in edges:
        if a != b:
            adj.setdefault(a, set()).add(b)
            adj.setdefault(b, set()).add(a)
    seen: set[int] = set()
    chains = []
    for start in sorted(adj):
        if start in seen:
            continue
        comp, todo = set(), [start]
        while todo:
            n = todo.pop()
            if n not in comp:
                comp.add(n)
                todo.extend(adj[n] - comp)
        seen |= comp
        ends = sorted(n for n in comp if len(adj[n]) == 1)
        if len(ends) != 2 or any(len(adj[n]) > 2 for n in comp):
            continue
        head = next((e for e in ends if first_send.get(e)), ends[0])
        order, prev = [head], None
        while len(order) < len(comp):
            nxt = next(iter(adj[order[-1]] - {prev} - set(order)))
            prev = order[-1]
            order.append(nxt)
        chains.append(order)
    return chains


@derived
def pipeline_stages(events: Events) -> pl.DataFrame:
    """Per rank of an inferred pipeline: pipeline (its stage-0 rank), stage, stages P, micro_batches M,
    bubble_pct (mean over steps) and theoretical_pct = 100·(P−1)/(M+P−1).

    Example: 4 stages, 8 micro-batches -> theoretical 100 · 3 / 11 = 27.3 %.
    """
    p = prepare(events)
    p2p = comm_rows(p).filter(pl.col("src").is_not_null())
    schema = {"rank": pl.Int32, "pipeline": pl.Int32, "stage": pl.Int32, "stages": pl.Int32,
              "micro_batches": pl.Float64, "bubble_pct": pl.Float64, "theoretical_pct": pl.Float64}
    if p2p.height == 0:
        return pl.DataFrame(schema=schema)
    edges = p2p.select("src", "dst").unique().rows()
    first = p2p.sort("ts_ns").group_by("rank").agg(pl.col("op").first())
    chains = _chains(edges, {r: op == "send" for r, op in first.rows()})
    rows = [(r, chain[0], i, len(chain)) for chain in chains for i, r in enumerate(chain)]
    if not rows:
        return pl.DataFrame(schema=schema)
    stages = pl.DataFrame(rows, schema=["rank", "pipeline", "stage", "stages"], orient="row").cast(pl.Int32)
    nxt = stages.select("pipeline", pl.col("rank").alias("src"), (pl.col("stage") + 1).alias("stage"))
    links = nxt.join(stages.select("pipeline", "stage", pl.col("rank").alias("dst")), on=["pipeline", "stage"])
    sends = (
        p2p.filter(pl.col("op") == "send")
        .join(links.select("src", "dst", "pipeline"), on=["src", "dst"])
        .group_by("pipeline", "src", "step").len()
        .group_by("pipeline").agg(pl.col("len").median().alias("micro_batches"))
    )
    measured = bubbles(p).group_by("rank").agg(pl.col("bubble_pct").mean())
    s, m = pl.col("stages"), pl.col("micro_batches")
    return (
        stages.join(sends, on="pipeline", how="left")
        .join(measured, on="rank", how="left")
        .with_columns((100.0 * (s - 1) / (m + s - 1)).alias("theoretical_pct"))
        .select(list(schema))
        .sort("pipeline", "stage")
    )


def _chain(ranks: list[int]) -> str:
    """A pipeline's ranks in stage order: ``[0, 16, 32, 48]`` -> ``'0→16→32→48'`` (past 8 stages, the first
    three and the last)."""
    shown = ranks if len(ranks) <= 8 else [*ranks[:3], "…", ranks[-1]]
    return "→".join(map(str, shown))


def _pipelines_named(chains: list[list[int]]) -> str:
    """Which ranks a group of pipelines (each its ranks in stage order) covers, stage by stage.

    One pipeline: ``'ranks 0→16→32→48'``; two or three: ``'ranks 0→16→32→48, 1→17→33→49'``; more: the
    ranks of each stage, ``'stage 0 on ranks 0-15; stage 1 on 16-31; ...'`` (past 4 stages, the first two
    and the last, and every rank they cover).
    """
    if len(chains) <= 3:
        return "ranks " + ", ".join(_chain(c) for c in chains)
    stages = max(len(c) for c in chains)
    on = [fmt_ranges([c[i] for c in chains if i < len(c)]) for i in range(stages)]
    named = [f"stage {i} on {'ranks ' if i == 0 else ''}{on[i]}" for i in range(stages)]
    if stages > 4:
        every = fmt_ranges([r for c in chains for r in c])
        named = [*named[:2], "…", named[-1], f"in all ranks {every}"]
    return "; ".join(named)


def bubble_verdicts(report: dict[str, Any]) -> list[str]:
    """Per pipeline, which ranks it covers (stage 0 first), its measured and its theoretical bubble; the
    pipelines whose figures read the same are one line that names all their ranks. Without a pipeline, the
    share of the average step with no compute (not called a bubble), "device step" where every rank was
    measured in device steps.

    Example: 16 pipelines of 4 stages x 8 micro-batches, ranks r, r+16, r+32, r+48 for r in 0-15, measured
    37.1 % on twelve and 37.2 % on four -> "12 pipelines of 4 stages x 8 micro-batches (stage 0 on ranks
    0, 2-12, 14; stage 1 on 16, 18-28, 30; ...): bubble 37.1 % measured, 27.3 % in theory" and one line for
    the four others.
    """
    out = []
    pipelines: dict[int, list[PipelineRow]] = {}
    for row in rows(report.get("pipeline", []), PipelineRow):
        pipelines.setdefault(row.pipeline, []).append(row)
    alike: dict[tuple[int, str, str, str], list[list[int]]] = {}  # (P, M, measured, theory) as said
    for stages in pipelines.values():
        measured = [r.bubble_pct for r in stages if r.bubble_pct is not None]
        m = stages[0].micro_batches
        if measured and m is not None:
            theory = stages[0].theoretical_pct
            key = (stages[0].stages, f"{m:g}", f"{mean(measured):.1f}", "" if theory is None else f"{theory:.1f}")
            alike.setdefault(key, []).append([r.rank for r in sorted(stages, key=lambda r: r.stage)])
    for (nstages, micro, said_measured, said_theory), chains in alike.items():
        shape = f"{nstages} stages x {micro} micro-batches"
        what = (f"pipeline of {shape} ({_pipelines_named(chains)})" if len(chains) == 1
                else f"{len(chains)} pipelines of {shape} ({_pipelines_named(chains)})")
        out.append(f"{what}: bubble {said_measured} % measured"
                   + (f", {said_theory} % in theory" if said_theory else ""))
    bubbles = msgspec.convert(report["bubbles"], BubbleStepSummary).per_rank
    if not out and bubbles:  # no pipeline: say what is measured, not "bubble" (a null share counts as 0)
        idle = sum(b.bubble_pct.total or 0.0 for b in bubbles) / sum(b.steps for b in bubbles)
        word = step_word(b.basis for b in bubbles)
        out.append(f"no compute in {idle:.0f} % of the average {word} (compute fills {100 - idle:.0f} %)")
    return out


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

@dataclass(frozen=True)
class RankBubble:
    """A rank's mean time without compute in a step, and its pipeline stage where pipelines were found."""

    rank: int
    steps: int
    bubble_us: float | None
    bubble_pct: float | None
    stage: int | None
    theoretical_pct: float | None


def rank_bubbles(report: dict[str, Any]) -> list[RankBubble]:
    """One row per rank of ``bubbles``' summary, joined with its ``pipeline`` row, in rank order."""
    stage = {p.rank: p for p in rows(report.get("pipeline", []), PipelineRow)}
    out = []
    for b in sorted(msgspec.convert(report["bubbles"], BubbleStepSummary).per_rank, key=lambda b: b.rank):
        p = stage.get(b.rank)
        out.append(RankBubble(b.rank, b.steps, b.bubble_us.mean, b.bubble_pct.mean, p.stage if p else None,
                              p.theoretical_pct if p else None))
    return out


def _steps_measured(report: dict[str, Any]) -> str:
    """``device step`` where every rank's per-step numbers were measured in device steps, else ``step``."""
    return step_word(b.basis for b in msgspec.convert(report["bubbles"], BubbleStepSummary).per_rank)


_BUBBLE_COLUMNS = (Column("rank", "rank"), Column("steps", "steps"))
#: "bubble" is pipeline vocabulary: said only where pipeline stages were found.
PIPELINE_BUBBLES_TABLE = Table(
    lambda r: "Pipeline bubbles (mean over device steps)" if _steps_measured(r) == "device step"
    else "Pipeline bubbles (mean over steps)",
    (*_BUBBLE_COLUMNS, Column("bubble", "bubble_us", fmt_us), Column("bubble %", "bubble_pct", fmt_pct),
     Column("stage", "stage", fmt_plain), Column("theory", "theoretical_pct", fmt_pct)),
    rows=rank_bubbles, when=lambda r: bool(r.get("pipeline")), at=50)
NO_COMPUTE_TABLE = Table(
    lambda r: "Time without compute per device step (mean over device steps)" if _steps_measured(r) == "device step"
    else "Time without compute in a step (mean over steps)",
    (*_BUBBLE_COLUMNS, Column("no compute", "bubble_us", fmt_us), Column("no compute %", "bubble_pct", fmt_pct)),
    rows=rank_bubbles, when=lambda r: not r.get("pipeline"), at=50)

def bubble_table(cross: CrossRank) -> pl.DataFrame:
    """The ``bubbles`` detail table: each rank's per-step rows (computed per group), with its pipeline stage
    and the schedule's theoretical bubble where pipelines were found."""
    stages = pipeline_stages(cross.p)
    if not stages.height:
        return cross.frames["bubbles"]
    return cross.frames["bubbles"].join(
        stages.select("rank", "stage", "stages", "micro_batches", "theoretical_pct"), on="rank", how="left")


SECTIONS = (
    Section("bubbles", {"per_rank": [], "worst": []}, summary=(("rank",), ("bubble_us", "bubble_pct"), "bubble_pct"),
            tables=(PIPELINE_BUBBLES_TABLE, NO_COMPUTE_TABLE), verdict=bubble_verdicts, verdict_at=50,
            record=BubbleStepSummary, detail=BubbleRow, order=50, cross_table=bubble_table),
    Section("pipeline", record=list[PipelineRow], when_absent=[], order=180,
            cross=lambda cross: json_rows(pipeline_stages(cross.p))),
)
