"""Collective panels from the report: the instances by arrival skew, one instance rank by rank, and
bandwidth against message size per op."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from ddprof.dashboards.figures.style import COMM, NORMAL, STRAGGLER, WAIT, empty, finish

from ddprof.report.schema import BandwidthRow, CollectiveRow, PipelineRow, rows
from ddprof.report.tables import detail_rows


def _instances(report: dict[str, Any]) -> list[CollectiveRow]:
    """The ``collectives`` detail table's rows, as records."""
    return rows(detail_rows(report, "collectives"), CollectiveRow)


OP_COLOURS = ["#4C78A8", "#E45756", "#54A24B", "#F58518", "#B279A2", "#72B7B2", "#9D755D", "#FF9DA6"]


def skew_figure(report: dict[str, Any]) -> go.Figure:
    """Every collective instance (the ``collectives`` detail table) as a point: its order on the x axis, arrival skew
    (last arrival − first arrival, µs) on the y axis, one colour per op; customdata = its position."""
    inst = _instances(report)
    if not inst:
        return empty("Collectives", "no collective instances in this run")
    fig = go.Figure()
    ops = sorted({r.op for r in inst})
    kind = go.Scatter if len(inst) <= 3000 else go.Scattergl  # SVG points while few: clickable, no WebGL needed
    for k, op in enumerate(ops):
        sel = [i for i, r in enumerate(inst) if r.op == op]
        fig.add_trace(kind(
            x=sel, y=[(inst[i].arrival_skew_us or 0) / 1e3 for i in sel], mode="markers", name=op,
            marker={"color": OP_COLOURS[k % len(OP_COLOURS)], "size": 7}, customdata=[[i] for i in sel],
            hovertext=[f"{op} #{inst[i].index} pg {inst[i].pg}<br>{inst[i].bytes or 0:,} B"
                       f"<br>last: rank {inst[i].last_rank}" for i in sel],
            hovertemplate="%{hovertext}<br>skew %{y:.3f} ms<extra></extra>"))
    fig.update_xaxes(title="instance (click one to see it rank by rank)")
    return finish(fig, "Collective instances by arrival skew", yaxis_title="arrival skew (ms)")


def instance_figure(report: dict[str, Any], position: int | None = None) -> go.Figure:
    """One instance rank by rank: each rank waits (amber) from its arrival to the last arrival, then the
    transfer (``duration_us``, the instance's time without the wait) runs; the last arriver is red and
    labelled. Default: the instance with the largest skew. Times in ms from the first arrival."""
    inst = _instances(report)
    if not inst:
        return empty("Collective instance", "no collective instances in this run")
    if position is None or not 0 <= position < len(inst):
        position = max(range(len(inst)), key=lambda i: inst[i].arrival_skew_us or 0)
    c = inst[position]
    ranks, arrivals = c.ranks_seen, c.arrival_us
    if not ranks or len(arrivals) != len(ranks):
        return empty("Collective instance", "this instance has no per-rank arrivals")
    first = min(arrivals)
    last_at = max(arrivals)
    dur = c.duration_us or 0
    last = c.last_rank
    fig = go.Figure()
    fig.add_trace(go.Bar(orientation="h", y=[f"rank {r}" for r in ranks], base=[(a - first) / 1e3 for a in arrivals],
                         x=[(last_at - a) / 1e3 for a in arrivals], name="waiting for the last rank",
                         marker_color=WAIT, customdata=[[r] for r in ranks],
                         hovertemplate="%{y}: arrived at %{base:.3f} ms, waited %{x:.3f} ms<extra></extra>"))
    fig.add_trace(go.Bar(orientation="h", y=[f"rank {r}" for r in ranks], base=[(last_at - first) / 1e3] * len(ranks),
                         x=[dur / 1e3] * len(ranks), name="transfer",
                         marker_color=[STRAGGLER if r == last else COMM for r in ranks],
                         customdata=[[r] for r in ranks], hovertemplate="%{y}: transfer %{x:.3f} ms<extra></extra>"))
    if last is not None and last in ranks:
        fig.add_annotation(y=f"rank {last}", x=(last_at - first) / 1e3, text="last arriver", showarrow=True,
                           arrowhead=2, ax=-60, ay=0, font={"color": STRAGGLER})
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title="ms since the first rank arrived")
    # Two lines: a long process-group name on one line would run under the legend.
    title = (f"{c.op} #{c.index} (pg {c.pg}, {c.bytes or 0:,} B)<br>"
             f"skew {(c.arrival_skew_us or 0) / 1e3:.3f} ms, last rank {last}")
    fig = finish(fig, title, height=max(280, 22 * len(ranks) + 140), barmode="stack")
    return fig.update_layout(margin={"t": 80})


def bandwidth_figure(report: dict[str, Any]) -> go.Figure:
    """Bus bandwidth (GB/s, nccl-tests definition) against message size per op (``bandwidth``), log-log."""
    known = [r for r in rows(report.get("bandwidth") or [], BandwidthRow) if r.busbw_gbps is not None and r.bytes]
    if not known:
        return empty("Bandwidth", "no collective with a known size and time")
    fig = go.Figure()
    for k, op in enumerate(sorted({r.op for r in known})):
        sel = sorted((r for r in known if r.op == op), key=lambda r: r.bytes)
        fig.add_trace(go.Scatter(x=[r.bytes for r in sel], y=[r.busbw_gbps for r in sel], name=op,
                                 mode="lines+markers", marker={"color": OP_COLOURS[k % len(OP_COLOURS)]},
                                 hovertemplate=op + ": %{x:,} B -> %{y:.3g} GB/s<extra></extra>"))
    fig.update_xaxes(type="log", title="message size (bytes)")
    fig.update_yaxes(type="log", title="bus bandwidth (GB/s)")
    return finish(fig, "Bandwidth vs message size")


def pipeline_figure(report: dict[str, Any]) -> go.Figure:
    """Per pipeline stage, the measured bubble % (``pipeline.bubble_pct``) beside the theoretical GPipe/1F1B
    value (P−1)/(M+P−1) (``theoretical_pct``)."""
    stages = sorted(rows(report.get("pipeline") or [], PipelineRow), key=lambda r: (r.pipeline, r.stage))
    if not stages:
        return empty("Pipeline", "not a pipeline run (no point-to-point stages found)")
    labels = [f"stage {r.stage} (rank {r.rank})" for r in stages]
    fig = go.Figure([
        go.Bar(x=labels, y=[r.bubble_pct for r in stages], name="measured", marker_color=NORMAL,
               customdata=[[r.rank] for r in stages]),
        go.Bar(x=labels, y=[r.theoretical_pct for r in stages], name="theoretical", marker_color="#BBBBBB",
               customdata=[[r.rank] for r in stages])])
    p, m = stages[0].stages, stages[0].micro_batches
    return finish(fig, f"Pipeline bubble: {p} stages x {m:g} micro-batches" if p and m else "Pipeline bubble",
                  barmode="group", yaxis_title="bubble % of the step", yaxis_range=[0, 100])
