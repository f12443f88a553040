"""Per-rank panels from the report: time breakdown (compute, non-compute, idle), overlap and exposed
communication, and the stragglers (wait each rank caused at collectives)."""

from __future__ import annotations

from typing import Any

import msgspec
import plotly.graph_objects as go
from ddprof.dashboards.figures.style import COMM, COMPUTE, IDLE, NORMAL, STRAGGLER, empty, finish

from ddprof.report.schema import BreakdownRow, OverlapRow, StepTimeRow, Stragglers, rows
from ddprof.report.tables import detail_rows


def _rank_axis(fig: go.Figure, ranks: list[int]) -> None:
    few = len(ranks) <= 32
    fig.update_xaxes(title="rank", tickmode="array" if few else "auto", tickvals=ranks if few else None,
                     type="linear")


def breakdown_figure(report: dict[str, Any]) -> go.Figure:
    """Stacked bars per rank: compute, non-compute (communication and copies not under compute) and idle
    µs over the traced span (``breakdown``): the bar's height is the rank's span."""
    breakdown = rows(report.get("breakdown") or [], BreakdownRow)
    if not breakdown:
        return empty("Time per rank", "no breakdown: the run has no work events")
    ranks = [r.rank for r in breakdown]
    fig = go.Figure()
    for key, name, colour in (("compute_us", "compute", COMPUTE), ("non_compute_us", "non-compute", COMM),
                              ("idle_us", "idle", IDLE)):
        fig.add_trace(go.Bar(x=ranks, y=[(getattr(r, key) or 0) / 1e3 for r in breakdown], name=name,
                             marker_color=colour,
                             customdata=[[r] for r in ranks],
                             hovertemplate="rank %{x}<br>" + name + " %{y:.2f} ms<extra></extra>"))
    _rank_axis(fig, ranks)
    return finish(fig, "Time per rank", barmode="stack",
                  yaxis_title="ms over the traced span")


def overlap_figure(report: dict[str, Any]) -> go.Figure:
    """Exposed communication per rank (µs of communication with no compute under it) as bars, and the
    overlap % (``overlap``: 100 · overlapped / communication) as points on a second axis."""
    overlap = rows(report.get("overlap") or [], OverlapRow)
    if not overlap:
        return empty("Overlap", "no communication in this run")
    ranks = [r.rank for r in overlap]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=ranks, y=[(r.exposed_comm_us or 0) / 1e3 for r in overlap], name="exposed comm (ms)",
                         marker_color=COMM, customdata=[[r] for r in ranks],
                         hovertemplate="rank %{x}<br>exposed %{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=ranks, y=[r.overlap_pct for r in overlap], name="overlap %", yaxis="y2",
                             mode="markers", marker={"color": COMPUTE, "size": 9, "symbol": "diamond"},
                             customdata=[[r] for r in ranks],
                             hovertemplate="rank %{x}<br>overlap %{y:.1f} %<extra></extra>"))
    _rank_axis(fig, ranks)
    return finish(fig, "Exposed communication and overlap", yaxis_title="exposed comm (ms)",
                  yaxis2={"title": "overlap %", "overlaying": "y", "side": "right", "range": [0, 100],
                          "showgrid": False})


def stragglers_figure(report: dict[str, Any]) -> go.Figure:
    """Wait caused per rank (µs others spent waiting for it at collectives, ``stragglers.per_rank``), the
    named straggler ranks in red, with times last and step time on hover."""
    section = msgspec.convert(report.get("stragglers") or {}, Stragglers)
    per_rank = section.per_rank
    if not per_rank:
        return empty("Stragglers", "no collective instances to compare ranks at")
    named = set(section.ranks)
    ranks = [r.rank for r in per_rank]
    fig = go.Figure(go.Bar(
        x=ranks, y=[(r.wait_caused_us or 0) / 1e3 for r in per_rank], name="wait caused",
        marker_color=[STRAGGLER if r in named else NORMAL for r in ranks], customdata=[
            [r.rank, r.times_last, (r.step_us or 0) / 1e3] for r in per_rank],
        hovertemplate="rank %{x}<br>others waited %{y:.2f} ms for it<br>last at %{customdata[1]} collectives"
                      "<br>step %{customdata[2]:.2f} ms<extra></extra>"))
    _rank_axis(fig, ranks)
    title = "Stragglers: " + (", ".join(f"rank {r}" for r in sorted(named)) if named else "none stands out")
    return finish(fig, title, yaxis_title="wait caused (ms)")


def step_time_figure(report: dict[str, Any]) -> go.Figure:
    """Step time per step and rank (the ``step_times`` detail table: the host's ProfilerStep span, the
    iteration time; a GPU rank's device steps, in which its per-step numbers are measured, can lag it), one
    line per rank when there are at most 16 ranks, else the median and the slowest rank per step."""
    per_step = rows(detail_rows(report, "step_times"), StepTimeRow)
    if not per_step:
        return empty("Step time", "no ProfilerStep marks in this run")
    fig = go.Figure()
    steps = sorted({r.step for r in per_step})
    ranks = sorted({r.rank for r in per_step})
    by = {(r.rank, r.step): r.step_us / 1e3 for r in per_step}
    if len(ranks) <= 16:
        for rank in ranks:
            fig.add_trace(go.Scatter(x=steps, y=[by.get((rank, s)) for s in steps], mode="lines+markers",
                                     name=f"rank {rank}", customdata=[[s] for s in steps],
                                     hovertemplate=f"rank {rank}<br>step %{{x}}: %{{y:.2f}} ms<extra></extra>"))
    else:
        import statistics

        med = [statistics.median([by[(r, s)] for r in ranks if (r, s) in by]) for s in steps]
        top = [max([by[(r, s)] for r in ranks if (r, s) in by]) for s in steps]
        fig.add_trace(go.Scatter(x=steps, y=med, name="median", mode="lines+markers", customdata=[[s] for s in steps]))
        fig.add_trace(go.Scatter(x=steps, y=top, name="slowest rank", mode="lines+markers",
                                 customdata=[[s] for s in steps]))
    fig.update_xaxes(title="step (click one to zoom the timeline to it)", tickvals=steps if len(steps) <= 40 else None)
    finish(fig, "Step time", yaxis_title="ms")
    return fig.update_layout(legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"})
