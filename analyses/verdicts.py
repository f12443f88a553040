"""Short sentences that say what the report's numbers mean, most important first.

Pure: reads the report sections as their declared records (:mod:`ddprof.report.schema`: each section it
reads is converted, so a field's name is written once, there), returns a list of strings. Each rule names
its threshold; a rule whose section is empty says nothing.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

import msgspec

from ddprof.report.schema import (
    BandwidthRow,
    BreakdownRow,
    BreakdownStepSummary,
    BubbleStepSummary,
    HealthFinding,
    IdleRow,
    OverlapRow,
    OverlapStepSummary,
    PipelineRow,
    Stragglers,
    rows,
)
from ddprof.vocabulary.units import fmt_bytes, fmt_us

IDLE_WORTH_MENTIONING_PCT = 5.0
CAUSES = {
    "host_wait": "the CPU does not launch work fast enough",
    "kernel_wait": "launch gaps between back-to-back kernels",
    "other": "kernels wait for other streams or events (often communication)",
}


def _stragglers(report: dict[str, Any], nsteps: int) -> list[str]:
    """Per straggler X: the wall-clock time each other rank spent waiting for X at collectives, on average
    over the ranks that waited (``wait_caused_us / waiting_ranks``), per step when the run has steps.
    Each rank's wait is a union of time intervals, so the figure per step never exceeds a step's length.
    Example: 3 other ranks waited 300, 300 and 290 ms for rank 2 over 3 steps -> 98.9 ms per step."""
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


def _communication(report: dict[str, Any]) -> list[str]:
    """Exposed communication as a share of time, one basis for every rank: when every rank with
    communication has steps, the exposed communication inside its steps (``overlap_by_step``'s total) over
    its step time (``breakdown_by_step``'s total span), labelled "step time"; else the whole trace's
    (``overlap``) over the traced span (``breakdown``), labelled "the traced time".
    Example: 40 µs exposed in two 100 µs steps -> "20 % of step time", even if 20 µs more lie
    outside the steps."""
    ov = [o for o in rows(report["overlap"], OverlapRow) if o.comm_us > 0]
    if not ov:
        return []
    step_span: dict[int, float] = {}
    if "breakdown_by_step" in report:
        for b in msgspec.convert(report["breakdown_by_step"], BreakdownStepSummary).per_rank:
            step_span[b.rank] = b.span_us.total or 0.0
    if all(step_span.get(o.rank) for o in ov):
        word, basis = "step time", step_span
        exposed = {row.rank: row.exposed_comm_us.total or 0.0
                   for row in msgspec.convert(report["overlap_by_step"], OverlapStepSummary).per_rank}
    else:
        word = "the traced time"
        basis = {b.rank: b.span_us for b in rows(report["breakdown"], BreakdownRow)}
        exposed = {o.rank: o.exposed_comm_us for o in ov}
    shares = {o.rank: 100 * exposed.get(o.rank, 0.0) / basis[o.rank] for o in ov if basis.get(o.rank)}
    if not shares:
        return []
    worst = max(shares, key=lambda r: shares[r])
    text = f"exposed communication is {mean(shares.values()):.0f} % of {word}"
    if len(shares) > 1:
        text += f" (worst: rank {worst}, {shares[worst]:.0f} %)"
    return [text + f"; {mean(o.overlap_pct or 0.0 for o in ov):.0f} % of communication overlaps compute"]


def _idle(report: dict[str, Any]) -> list[str]:
    breakdown = rows(report["breakdown"], BreakdownRow)
    if not breakdown:
        return []
    idle = mean(b.idle_pct or 0.0 for b in breakdown)
    if idle < IDLE_WORTH_MENTIONING_PCT:
        return []
    device = "GPUs" if any(o.device == "gpu" for o in rows(report["overlap"], OverlapRow)) else "CPUs"
    text = f"the {device} are idle {idle:.0f} % of the traced time"
    totals: dict[str, float] = {}
    for row in rows(report["idle"], IdleRow):
        totals[row.category] = totals.get(row.category, 0.0) + row.idle_us
    if sum(totals.values()) > 0:
        top = max(totals, key=lambda c: totals[c])
        share = 100 * totals[top] / sum(totals.values())
        text += f"; {share:.0f} % of the gaps are {top.replace('_', ' ')}: {CAUSES[top]}"
    return [text]


def _bubbles(report: dict[str, Any]) -> list[str]:
    out = []
    pipelines: dict[int, list[PipelineRow]] = {}
    for row in rows(report.get("pipeline", []), PipelineRow):
        pipelines.setdefault(row.pipeline, []).append(row)
    for stages in pipelines.values():
        measured = [r.bubble_pct for r in stages if r.bubble_pct is not None]
        m = stages[0].micro_batches
        if measured and m is not None:
            out.append(f"pipeline of {stages[0].stages} stages x {m:g} micro-batches: bubble "
                       f"{mean(measured):.1f} % measured, {stages[0].theoretical_pct:.1f} % in theory")
    bubbles = msgspec.convert(report["bubbles"], BubbleStepSummary).per_rank
    if not out and bubbles:  # no pipeline: say what is measured, not "bubble" (a null share counts as 0)
        idle = sum(b.bubble_pct.total or 0.0 for b in bubbles) / sum(b.steps for b in bubbles)
        out.append(f"no compute in {idle:.0f} % of the average step (compute fills {100 - idle:.0f} %)")
    return out


def _bandwidth(report: dict[str, Any]) -> list[str]:
    best: dict[str, BandwidthRow] = {}
    for row in rows(report["bandwidth"], BandwidthRow):
        if row.busbw_gbps is not None and (row.op not in best or row.bytes >= best[row.op].bytes):
            best[row.op] = row
    top = sorted(best.values(), key=lambda r: -r.bytes)[:3]
    return [f"largest {r.op} ({fmt_bytes(r.bytes)}) reaches {r.busbw_gbps:.3g} GB/s bus bandwidth" for r in top]


def _ranks_text(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8])) + (f" ... ({len(ranks)} in all)" if len(ranks) > 8 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def _health(report: dict[str, Any]) -> list[str]:
    """The trace-health findings that change a headline number (``headline``), one sentence per finding
    over all its ranks. Example: "rank 0: 120 GPU launches recorded but no GPU activity: the GPU side was
    not captured; the numbers describe its CPU threads only"."""
    by: dict[str, list[HealthFinding]] = {}
    for row in rows(report.get("health") or [], HealthFinding):
        if row.headline:
            by.setdefault(row.finding, []).append(row)
    out = []
    for finding, found in by.items():
        ranks = sorted({r for row in found for r in row.ranks})
        count = sum(row.count for row in found)
        if finding == "gpu_not_captured":
            out.append(f"{_ranks_text(ranks)}: {count} GPU launches recorded but no GPU activity: the GPU side was "
                       "not captured; the numbers describe the CPU threads only")
        elif finding == "events_lost":
            out.append(f"{_ranks_text(ranks)}: the profiler reports lost events (\"{found[0].example}\"): work "
                       "missing from the trace reads as idle time")
        elif finding == "missing_ranks":
            out.append(f"{found[0].example}: collectives and stragglers compare the traced ranks only")
        else:
            out.append(f"{_ranks_text(ranks)}: {finding.replace('_', ' ')} ({count}): {found[0].affects}")
    return out


def verdicts(report: dict[str, Any]) -> list[str]:
    """The verdicts in their final order: a hang first, then what the trace cannot tell that changes a
    headline number (:mod:`.health`), stragglers, communication, idle time, steps
    (pipeline bubbles where there is a pipeline), bandwidth, the warnings count, and "no hang found" last
    where Flight Recorder dumps showed none. Example: ["rank 7 is the straggler: each of the 7 other ranks spent 5.08 ms per step on average
    waiting for it at collectives (wall-clock; last at 5 of 8 collectives)", "exposed communication is 35 % of step time (worst: rank 1, 56 %); 5 % of
    communication overlaps compute", ...]."""
    nsteps = len(report["run"].get("steps") or [])
    out = _health(report) + _stragglers(report, nsteps) + _communication(report) + _idle(report) + _bubbles(report)
    out += _bandwidth(report)
    nwarn = len(report["run"].get("warnings") or [])
    if nwarn:
        out.append(f"{nwarn} warning(s) about the input: see the warnings below")
    hang = report["hang"].get("verdict")
    if hang and report["hang"].get("collectives"):
        out.insert(0, hang)  # a hang comes first
    elif hang:
        out.append(hang)  # "no hang found" (a healthy capture's dumps) is worth a line, last
    return out
