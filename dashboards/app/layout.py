"""The page: a header (status, verdicts, warnings, failed inputs), the timeline with its controls, and
the linked panels in a grid. Component ids are the contract with :mod:`.callbacks` and the browser tests."""

from __future__ import annotations

from typing import Any

import msgspec
from dash import dcc, html
from ddprof.analyses.verdicts import badge
from ddprof.dashboards.app.state import DashboardState
from ddprof.dashboards.figures.hang import hang_rows
from ddprof.dashboards.panels import panel_ids

from ddprof.report.schema import Hang, HealthFinding, RunSection, rows
from ddprof.vocabulary.units import fmt_ranges, fmt_rank_count

CARD = {"border": "1px solid #ddd", "borderRadius": "6px", "padding": "6px", "background": "white"}
#: The badge's colour by kind (:func:`ddprof.analyses.verdicts.badge`): green only when nothing is named.
STATUS_COLOURS = {"ok": "#2e7d32", "attention": "#b26a00", "problem": "#c62828", "partial": "#ef6c00"}


def table(rows: list[dict[str, Any]], table_id: str) -> html.Table:
    cols = list(rows[0]) if rows else []
    cell = {"border": "1px solid #ddd", "padding": "3px 8px", "fontSize": "13px", "textAlign": "left"}
    return html.Table(id=table_id, style={"borderCollapse": "collapse", "width": "100%"}, children=[
        html.Thead(html.Tr([html.Th(c, style={**cell, "background": "#f5f5f5"}) for c in cols])),
        html.Tbody([html.Tr([html.Td(str(r.get(c, "")), style=cell) for c in cols]) for r in rows])])


def header(state: DashboardState) -> list[Any]:
    """Status, verdicts, warnings and failed inputs of the report (or that it is still being built)."""
    if state.error:
        return [html.Div(state.error, id="report-error", style={"color": "#c62828", "fontWeight": "bold"})]
    report = state.report
    if report is None:
        return [html.Div("analysing the run… the panels appear when the report is ready", id="report-pending",
                         style={"color": "#666"})]
    shown = badge(report)  # not a green OK beside a verdict that names a problem
    run = msgspec.convert(report["run"], RunSection)
    out: list[Any] = [html.Span(shown.label, id="status", className=f"status {shown.kind}",
                                title="; ".join(shown.why) or None, style={
        "background": STATUS_COLOURS.get(shown.kind, "#555"), "color": "white", "padding": "2px 10px",
        "borderRadius": "4px", "fontWeight": "bold", "marginRight": "10px"}),
        html.Span(f"{fmt_rank_count(len(run.ranks), run.world_size)} · {run.backend or '?'} · {run.device}"
                  f" · steps {fmt_ranges(run.steps) or 'none'}")]
    out.append(html.Ul(id="verdicts", children=[html.Li(v) for v in report.get("verdicts") or []],
                       style={"margin": "6px 0", "fontSize": "15px"}))
    failed = run.failed
    if failed:
        out.append(html.Div(id="failed", style={"color": "#c62828"}, children=[
            html.B(f"{len(failed)} input(s) failed; the other ranks are shown:"),
            html.Ul([html.Li(f.error or f"rank {f.rank}: failed") for f in failed])]))
    warnings = run.warnings
    if warnings:
        out.append(html.Details(id="warnings", children=[html.Summary(f"{len(warnings)} warning(s)"),
                                                          html.Ul([html.Li(w) for w in warnings])]))
    return out


def extra_tables(state: DashboardState) -> list[Any]:
    """The health findings and the hang's per-group table, when the report has them."""
    report = state.report or {}
    out: list[Any] = []
    health = rows(report.get("health") or [], HealthFinding)
    if health:
        found = [{"finding": h.finding, "rank": "run" if h.rank is None else h.rank, "count": h.count,
                  "example": str(h.example or "")[:80], "affects": h.affects, "headline": "yes" if h.headline else ""}
                 for h in health]
        out += [html.H3("Health: what the traces cannot tell", id="health-title"), table(found, "health-table")]
    hang = msgspec.convert(report.get("hang") or {}, Hang)
    if hang.collectives:
        out += [html.H3(f"Hang: suspect ranks {', '.join(map(str, hang.suspect_ranks)) or 'none'}",
                        id="hang-suspects"),
                html.P(hang.verdict or ""), table(hang_rows(report), "hang-table")]
    return out


def page(state: DashboardState) -> html.Div:
    data = state.data
    ranks = data.ranks if data is not None else []
    timeline: list[Any]
    if data is None:
        timeline = [html.P("No traces in this source (Flight Recorder dumps only): no timeline.", id="no-timeline")]
    else:
        timeline = [
            html.Div(style={"display": "flex", "gap": "12px", "alignItems": "center"}, children=[
                html.Label("expand rank into streams/threads:"),
                dcc.Dropdown(id="expand", options=[{"label": f"rank {r}", "value": r} for r in ranks], value=None,
                             placeholder="none", style={"width": "180px"}, clearable=True),
                html.Button("whole run", id="reset", n_clicks=0),
                html.Span(id="timeline-info", style={"color": "#666", "fontSize": "13px"}),
                html.Span("click a rank, step or instance in a panel below to focus the timeline on it",
                          id="click-hint", style={"color": "#666", "fontSize": "13px", "marginLeft": "auto"})]),
            dcc.Graph(id="timeline", config={"displaylogo": False, "scrollZoom": True}),
        ]
    grid = {"display": "grid", "gridTemplateColumns": "repeat(auto-fit, minmax(520px, 1fr))", "gap": "10px"}
    return html.Div(style={"fontFamily": "system-ui, sans-serif", "padding": "10px 16px", "background": "#fafafa"},
                    children=[
        html.H2(f"ddprof · {state.title}", style={"margin": "4px 0"}),
        html.Div(id="header", children=header(state), style={**CARD, "marginBottom": "10px"}),
        html.Div(timeline, style={**CARD, "marginBottom": "10px"}),
        html.Div(id="panels", style=grid, children=[
            html.Div(dcc.Graph(id=p, config={"displaylogo": False}), style=CARD)
            for p in (panel_ids() if data is not None else ("hang", *(p for p in panel_ids() if p != "hang")))]),  # dumps alone: the hang first
        html.Div(id="tables", children=extra_tables(state)),
        dcc.Store(id="window"), dcc.Store(id="focus"),
        dcc.Interval(id="poll", interval=700, n_intervals=0, disabled=state.ready),
    ])
