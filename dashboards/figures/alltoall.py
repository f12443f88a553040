"""The all-to-all panel from the report: bytes sent by rank pair, over every traced instance, as a heat map."""

from __future__ import annotations

from typing import Any

import msgspec
import plotly.graph_objects as go
from ddprof.analyses.alltoall import EMPTY, AllToAll
from ddprof.dashboards.figures.style import empty, finish


def alltoall_figure(report: dict[str, Any]) -> go.Figure:
    """Ranks × ranks: row = the sending rank, column = the receiving rank, colour = bytes (the
    ``alltoall`` section's matrix, summed over the traced instances); the column sums are what each rank's
    experts received. Customdata: the receiving rank."""
    s = msgspec.convert(report.get("alltoall") or EMPTY, AllToAll)
    if not s.instances:
        return empty("All-to-all bytes", "no all-to-all in this run")
    if not s.matrix:
        return empty("All-to-all bytes", f"{len(s.ranks)} ranks: the matrix is not kept above 256")
    names = [str(r) for r in s.ranks]
    fig = go.Figure(go.Heatmap(
        z=s.matrix, x=names, y=names, colorscale="Reds", colorbar={"title": "bytes"},
        customdata=[[r for r in s.ranks] for _ in s.ranks],
        hovertemplate="rank %{y} → rank %{x}<br>%{z:,} B<extra></extra>"))
    fig.update_xaxes(title="to rank", type="category")
    fig.update_yaxes(title="from rank", type="category", autorange="reversed")
    title = f"All-to-all bytes by rank pair<br><sup>{s.instances} instances"
    if s.recv_imbalance is not None:
        title += f" · receive imbalance {s.recv_imbalance:.2g}×"
    return finish(fig, title + "</sup>", height=340)
