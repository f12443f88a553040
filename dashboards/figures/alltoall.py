"""The all-to-all panel from the report: bytes sent by rank pair as a heat map, over every traced instance or
in one step (a menu on the figure picks which: it works the same in the dashboard and the HTML report)."""

from __future__ import annotations

from typing import Any

import msgspec
import plotly.graph_objects as go
from ddprof.analyses.alltoall import EMPTY, AllToAll
from ddprof.dashboards.figures.style import empty, finish

#: The steps the menu offers, the first of the report's per-step matrices.
MENU_STEPS = 50


def alltoall_figure(report: dict[str, Any]) -> go.Figure:
    """Ranks × ranks: row = the sending rank, column = the receiving rank, colour = bytes. The first heat map
    is the ``alltoall`` section's matrix summed over the traced instances (the column sums are what each
    rank's experts received); one more per traced step (``step_matrices``, the first :data:`MENU_STEPS`),
    hidden until the menu picks it. Customdata: the receiving rank."""
    s = msgspec.convert(report.get("alltoall") or EMPTY, AllToAll)
    if not s.instances:
        return empty("All-to-all bytes", "no all-to-all in this run")
    if not s.matrix:
        return empty("All-to-all bytes", f"{len(s.ranks)} ranks: the matrix is not kept above 256")
    names = [str(r) for r in s.ranks]
    steps = s.step_matrices[:MENU_STEPS]

    def heat(z: list[list[int]], visible: bool) -> go.Heatmap:
        return go.Heatmap(z=z, x=names, y=names, colorscale="Reds", colorbar={"title": "bytes"}, visible=visible,
                          customdata=[list(s.ranks) for _ in s.ranks],
                          hovertemplate="rank %{y} → rank %{x}<br>%{z:,} B<extra></extra>")

    fig = go.Figure([heat(s.matrix, True), *(heat(m.matrix, False) for m in steps)])
    fig.update_xaxes(title="to rank", type="category")
    fig.update_yaxes(title="from rank", type="category", autorange="reversed")
    whole = f"All-to-all bytes by rank pair<br><sup>{s.instances} instances"
    if s.recv_imbalance is not None:
        whole += f" · receive imbalance {s.recv_imbalance:.2g}×"
    whole += "</sup>"
    if steps:
        n = 1 + len(steps)
        views = [("every traced instance", whole)] + [
            (f"step {m.step} ({m.instances} instances)",
             f"All-to-all bytes by rank pair<br><sup>step {m.step}: {m.instances} instances</sup>") for m in steps]
        if s.step_matrices_left_out or len(s.step_matrices) > len(steps):
            views[-1] = (views[-1][0] + f" (the first {len(steps)} steps)", views[-1][1])
        fig.update_layout(updatemenus=[{
            "type": "dropdown", "x": 0.0, "xanchor": "left", "y": 1.02, "yanchor": "bottom", "showactive": True,
            "buttons": [{"label": label, "method": "update",
                         "args": [{"visible": [i == k for i in range(n)]}, {"title.text": title}]}
                        for k, (label, title) in enumerate(views)]}])
    fig = finish(fig, whole, height=380 if steps else 340)
    if steps:  # the menu on a line of its own between the title and the plot, clear of plotly's toolbar
        fig.update_layout(margin={"t": 95}, title={"y": 0.95, "yref": "container", "yanchor": "top"})
    return fig
