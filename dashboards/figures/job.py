"""The whole-job panel, from the report's ``job`` section (the step measures of every step): the job's
step time along its steps (median and longest per bucket of steps), the traced steps shaded, and each
stretch at which a rank was slow (the straggler history) marked with its rank."""

from __future__ import annotations

from typing import Any

import msgspec
import plotly.graph_objects as go
from ddprof.dashboards.figures.style import NORMAL, STRAGGLER, empty, finish

from ddprof.report.schema import Job


def job_figure(report: dict[str, Any]) -> go.Figure:
    """Step time (ms) against the step, for the whole job; empty without step measures (with why)."""
    j = msgspec.convert(report.get("job") or {}, Job)
    if not j.measured or not j.timeline:
        return empty("Whole job", "no step measures: captured with ddprof launch or ddprof.profile, every "
                                  "rank writes them")
    x = [(p.first_step + p.last_step) / 2 for p in j.timeline]
    span = [[p.first_step, p.last_step] for p in j.timeline]
    fig = go.Figure()
    for name, ys, line in (("longest", [p.max_ms for p in j.timeline], {"color": STRAGGLER, "width": 1}),
                           ("median", [p.median_ms for p in j.timeline], {"color": NORMAL, "width": 2})):
        fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines", line=line, customdata=span,
                                 hovertemplate="steps %{customdata[0]}-%{customdata[1]}<br>" + name
                                 + " %{y:.1f} ms<extra></extra>"))
    if j.traced_first is not None and j.traced_last is not None:
        fig.add_vrect(x0=j.traced_first - 0.5, x1=j.traced_last + 0.5, fillcolor="#4C78A8", opacity=0.12,
                      line_width=0, annotation_text="traced", annotation_position="top left")
    for e in j.episodes:
        fig.add_vrect(x0=e.first_step - 0.5, x1=e.last_step + 0.5, fillcolor=STRAGGLER, opacity=0.15, line_width=0,
                      annotation_text=f"rank {e.rank}", annotation_position="bottom left")
    fig.update_xaxes(title="step")
    title = f"Whole job: {j.steps} steps, {len(j.episodes)} slow stretch{'es' if len(j.episodes) != 1 else ''}"
    return finish(fig, title, yaxis_title="step time (ms)")
