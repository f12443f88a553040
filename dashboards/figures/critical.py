"""The critical path panel, from the report's ``whatif`` section (``critical_path``): the ops with most
time on the steps' critical paths, one bar each (rank, lane, op), coloured by kind (compute,
communication, host launch, data loading, idle), the path's length in the title and each kind's share of it
in the legend (a long title runs under the plot's toolbar at the report's width)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from ddprof.dashboards.figures.style import COMM, COMPUTE, IDLE, WAIT, empty, finish

KIND_COLOURS = {"compute": COMPUTE, "communication": COMM, "host launch": WAIT, "data loading": "#72B7B2",
                "idle": IDLE}


def critical_path_figure(report: dict[str, Any]) -> go.Figure:
    """Mean µs per step on the critical path of each of the section's top ops (y: rank, lane, op), a
    click naming the rank; empty where the section was not computed (with its reason)."""
    w = report.get("whatif") or {}
    cp = w.get("critical_path") or {}
    ops = cp.get("top_ops") or []
    if not w.get("computed") or not ops:
        return empty("Critical path", w.get("reason") or "no critical path: the what-if model was not computed")
    fig = go.Figure()
    labels = [f"rank {o['rank']} {o['lane']}: {str(o['name'])[:48]}" for o in ops]
    shares = {k["kind"]: k["pct"] for k in cp.get("by_kind") or []}
    for kind, colour in KIND_COLOURS.items():
        rows = [(o, label) for o, label in zip(ops, labels) if o["kind"] == kind]
        if rows:
            name = f"{kind} {shares[kind]:.0f} %" if kind in shares else kind
            fig.add_trace(go.Bar(
                x=[o["us"] for o, _ in rows], y=[label for _, label in rows], orientation="h", name=name,
                marker={"color": colour}, customdata=[[o["rank"]] for o, _ in rows],
                hovertemplate="%{y}<br>%{x:.1f} µs a step on the path (" + kind + ")<extra></extra>"))
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=list(reversed(labels)))
    fig.update_xaxes(title="µs per step on the critical path")
    title = f"Critical path: {cp['length_us'] / 1e3:,.2f} ms a step"
    return finish(fig, title, height=max(280, 24 * len(ops) + 140))
