"""The app's behaviour: the timeline answers zooms from the server's level of detail; a click on a rank,
a step or a collective focuses the timeline; the panels fill in once the report is built.

Every input is a number from a figure or a control; none names a file."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, ctx, no_update
from ddprof.dashboards.app.layout import extra_tables, header
from ddprof.dashboards.app.state import DashboardState
from ddprof.dashboards.figures.collectives import instance_figure
from ddprof.dashboards.figures.style import empty
from ddprof.dashboards.panels import clickable, panel_figures, panel_ids
from ddprof.dashboards.timeline.figure import MS, timeline_figure
from ddprof.dashboards.timeline.lod import view

from ddprof.report.tables import detail_rows


def window_of_relayout(relayout: dict[str, Any] | None) -> tuple[float, float] | None | bool:
    """(t0, t1) ns from a zoom, False for a reset (autorange), None when the x axis did not change."""
    if not relayout:
        return None
    if relayout.get("xaxis.autorange"):
        return False
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        return float(relayout["xaxis.range[0]"]) * MS, float(relayout["xaxis.range[1]"]) * MS
    rng = relayout.get("xaxis.range")
    if isinstance(rng, list) and len(rng) == 2:
        return float(rng[0]) * MS, float(rng[1]) * MS
    return None


def register(app: dash.Dash, state: DashboardState) -> None:
    data = state.data

    @app.callback([Output("header", "children"), Output("tables", "children"), Output("poll", "disabled"),
                   *[Output(p, "figure") for p in panel_ids()]], Input("poll", "n_intervals"))
    def fill(_: int) -> list[Any]:
        if state.report is None:
            waiting = empty("", "analysing…" if not state.error else "no report")
            return [header(state), [], state.ready, *[waiting] * len(panel_ids())]
        return [header(state), extra_tables(state), True, *panel_figures(state.report).values()]

    if data is None:
        return

    @app.callback(Output("focus", "data"), Output("expand", "value"),
                  Output("instance", "figure", allow_duplicate=True),
                  [Input(p, "clickData") for p in (*clickable("rank"), *clickable("step"), *clickable("instance"))],
                  prevent_initial_call=True)
    def clicked(*_: Any) -> tuple[Any, Any, Any]:
        trigger = ctx.triggered_id
        point = (ctx.triggered[0]["value"] or {}).get("points", [{}])[0] if ctx.triggered else {}
        custom = point.get("customdata")
        key = custom[0] if isinstance(custom, list) and custom else custom
        if key is None or not isinstance(key, (int, float)):
            return no_update, no_update, no_update
        key = int(key)
        if trigger in clickable("step"):
            rows = data.steps.filter(data.steps["step"] == key)
            if not rows.height:
                return no_update, no_update, no_update
            lo, hi = int(rows["start"].min()), int(rows["end"].max())  # type: ignore[arg-type]
            return {"window": [lo, hi], "rank": None}, no_update, no_update
        if trigger in clickable("instance") and state.report is not None:
            colls = detail_rows(state.report, "collectives")
            if not 0 <= key < len(colls):
                return no_update, no_update, no_update
            c = colls[key]
            arrivals = c.get("arrival_us") or [0]
            start = (c.get("start_us") or 0) * 1e3 - data.t0_ns
            length = (max(arrivals) + (c.get("duration_us") or 0)) * 1e3
            pad = max(length * 0.15, 5e3)
            last = c.get("last_rank")
            focus = {"window": [start - pad, start + length + pad], "rank": last}
            return focus, no_update, instance_figure(state.report, key)
        if key in data.lanes:
            return {"window": None, "rank": key}, key, no_update
        return no_update, no_update, no_update

    @app.callback(Output("timeline", "figure"), Output("window", "data"), Output("timeline-info", "children"),
                  Input("timeline", "relayoutData"), Input("expand", "value"), Input("focus", "data"),
                  Input("reset", "n_clicks"), State("window", "data"), State("focus", "data"))
    def draw(relayout: Any, expand: Any, focus: Any, _reset: Any, window: Any, focus_state: Any) -> tuple[Any, Any, Any]:
        trigger = ctx.triggered_id
        win = window
        if trigger == "timeline":
            got = window_of_relayout(relayout)
            if got is None:
                return no_update, no_update, no_update
            win = None if got is False else list(got)
        elif trigger == "reset":
            win = None
        elif trigger == "focus" and focus and focus.get("window"):
            win = focus["window"]
        rank = (focus_state or {}).get("rank")
        exp = int(expand) if isinstance(expand, (int, float)) else None
        v = view(data, *(win or (None, None)), expand=exp)
        fig = timeline_figure(v, focus=rank if rank is not None else exp,
                              title=f"Per-rank timeline ({v.mode}: {v.shapes_per_row} shapes on the fullest row)")
        info = f"{(v.t1 - v.t0) / MS:.3f} ms shown · {v.mode}"
        return fig, win, info
