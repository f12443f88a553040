"""``ddprof dashboard RUN --live``: a page over a running job's step measures (``RUN/measures/``), refreshed
every second: the straggler and since when, the per-rank table of ``ddprof top`` and a ranks × steps heat
map (:func:`ddprof.dashboards.figures.live.heatmap_figure`). It needs no ingested run: it reads the measure
files as they grow (:class:`ddprof.store.step_measures.MeasureTail`), the newest :data:`VIEW_STEPS` steps.
Served as the report's dashboard is (:mod:`.server`: loopback by default, a token elsewhere)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import dash
from dash import Input, Output, dcc, html
from ddprof.analyses.live import detect_slow_ranks, rank_rows
from ddprof.dashboards.app.layout import CARD, table
from ddprof.dashboards.app.server import require_token
from ddprof.dashboards.figures.live import MEASURES, heatmap_figure

from ddprof.store.step_measures import MeasureTail

VIEW_STEPS = 300


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


class LiveState:
    """The measures read so far, polled at most once per refresh (thread-safe: callbacks run on threads)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.tail = MeasureTail(run_dir, max_steps=VIEW_STEPS)
        self.named: dict[int, Any] = {}
        self._lock = threading.Lock()

    def read(self) -> tuple[Any, list[Any]]:
        with self._lock:
            self.tail.poll()
            frame = self.tail.frame(last_steps=VIEW_STEPS)
            slow = detect_slow_ranks(frame)
            for s in slow:
                self.named.setdefault(s.rank, s)
            for rank in [r for r in self.named if r not in {s.rank for s in slow}]:
                del self.named[rank]
            return frame, [self.named[s.rank] if self.named[s.rank].since_step < s.since_step else s for s in slow]


def create_live_app(run_dir: Path, token: str | None = None, interval_ms: int = 1000) -> dash.Dash:
    state = LiveState(run_dir)
    app = dash.Dash(__name__, title=f"ddprof live · {run_dir.name}", serve_locally=True, update_title=None)
    if token:
        require_token(app.server, token)
    app.layout = html.Div(style={"fontFamily": "sans-serif", "padding": "8px"}, children=[
        html.H3(f"ddprof live · {run_dir}"),
        dcc.Interval(id="live-tick", interval=interval_ms),
        html.Div(id="live-straggler", style={"fontWeight": "bold", "margin": "6px 0"}),
        dcc.RadioItems(id="live-measure", value="own_ms", inline=True,
                       options=[{"label": text.split(" (")[0], "value": key} for key, text in MEASURES.items()]),
        html.Div(dcc.Graph(id="live-heatmap"), style=CARD),
        html.Div(id="live-ranks", style={**CARD, "marginTop": "8px"}),
        html.Div(id="live-updated", style={"color": "#666", "fontSize": "12px"}),
    ])

    @app.callback(Output("live-straggler", "children"), Output("live-heatmap", "figure"),
                  Output("live-ranks", "children"), Output("live-updated", "children"),
                  Input("live-tick", "n_intervals"), Input("live-measure", "value"))
    def refresh(_n: Any, measure: str) -> tuple[Any, ...]:
        frame, slow = state.read()
        if slow:
            s = slow[0]
            line = (f"straggler: rank {s.rank}, slow since step {s.since_step} ({s.last_step - s.since_step + 1} "
                    f"steps): own time {s.excess_ms:+.1f} ms per step over the other ranks' median")
        else:
            line = "straggler: none" if frame.height else f"no step measures yet in {run_dir / 'measures'}"
        rows = [{"rank": r.rank, "step": r.last_step, "last ms": _num(r.last_ms), "median ms": _num(r.median_ms),
                 "own ms": _num(r.own_ms), "coll ms": _num(r.coll_ms), "wait caused ms/step": _num(r.wait_caused_ms),
                 "last in": r.last_count, "trend %": _num(r.trend_pct, 0), "data ms": _num(r.data_ms),
                 "cpu wait ms": _num(r.cpu_wait_ms), "rss MB": _num(r.rss_mb, 0), "host cpu %": _num(r.host_cpu_pct, 0)} for r in rank_rows(frame)]
        return (line, heatmap_figure(frame, measure), table(rows, "live-rank-table"),
                f"updated {time.strftime('%H:%M:%S')}; the newest {VIEW_STEPS} steps of each rank")

    return app
