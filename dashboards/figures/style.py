"""The look every figure shares: colours per kind and status, and a compact layout."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

COMPUTE, COMM, MEMCPY, IDLE = "#4C78A8", "#E45756", "#54A24B", "#BBBBBB"
STRAGGLER, NORMAL, WAIT = "#D62728", "#4C78A8", "#F2B447"


def empty(title: str, why: str) -> go.Figure:
    """A figure that says why it has nothing to show (a section that does not apply)."""
    fig = go.Figure()
    fig.add_annotation(text=why, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 13})
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False}, height=220,
                      margin={"l": 40, "r": 20, "t": 50, "b": 30})
    return fig


def finish(fig: go.Figure, title: str, height: int = 300, **layout: Any) -> go.Figure:
    fig.update_layout(title=title, height=height, margin={"l": 60, "r": 20, "t": 50, "b": 45},
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
                      plot_bgcolor="white", **layout)
    fig.update_xaxes(showline=True, linecolor="#999")
    fig.update_yaxes(gridcolor="#e5e5e5")
    return fig
