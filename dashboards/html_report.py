"""The report as one self-contained HTML file: verdicts, tables and figures, plotly's script inlined once,
no server and nothing fetched from the network (for sharing and as a CI artifact).

The per-rank timeline of the whole run is drawn at the level of detail that fits
(:func:`ddprof.dashboards.timeline.lod.view`): the real events when few enough, else occupancy bins.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
from ddprof.dashboards.figures.hang import hang_rows
from ddprof.dashboards.panels import panel_figures
from ddprof.dashboards.timeline.data import load
from ddprof.dashboards.timeline.figure import timeline_figure
from ddprof.dashboards.timeline.lod import view
from plotly.offline import get_plotlyjs

from ddprof.store.rundir import Run

CSS = """body{font-family:system-ui,sans-serif;margin:16px 24px;background:#fafafa;color:#222}
h1{margin:0 0 8px}.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:10px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f5f5f5}.status{color:#fff;padding:2px 10px;border-radius:4px;font-weight:bold}
.ok{background:#2e7d32}.problem{background:#c62828}.partial{background:#ef6c00}.failed{color:#c62828}"""

TABLE_LIMIT = 200
COLLECTIVE_COLUMNS = ["pg", "op", "index", "bytes", "n", "arrival_skew_us", "duration_us", "last_rank",
                      "missing_ranks", "algbw_gbps", "busbw_gbps"]


def _table(rows: list[dict[str, Any]], columns: list[str] | None = None, limit: int = TABLE_LIMIT) -> str:
    if not rows:
        return "<p>none</p>"
    cols = columns or list(rows[0])

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        if isinstance(v, list):
            v = ", ".join(map(str, v[:16])) + (" …" if len(v) > 16 else "")
        return html.escape("" if v is None else str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows[:limit])
    more = f"<p>{len(rows) - limit} more rows in the JSON report</p>" if len(rows) > limit else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def _figure(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, default_width="100%",
                       config={"displaylogo": False, "responsive": True})


def figures(report: dict[str, Any], run: Run | None) -> dict[str, go.Figure]:
    """Every figure of the report, by id: the timeline (only when there is a run with ranks), then every panel
    of :data:`ddprof.dashboards.panels.PANELS`, as the Dash app draws them."""
    out: dict[str, go.Figure] = {}
    if run is not None and run.ranks:
        v = view(load(run), bins=600)
        out["timeline"] = timeline_figure(v, title=f"Per-rank timeline ({v.mode})")
    out.update(panel_figures(report))
    return out


def render_html(report: dict[str, Any], run: Run | None = None, title: str = "ddprof report") -> str:
    """The whole page (module doc)."""
    r = report.get("run", {})
    status = str(report.get("status", "ok"))
    figs = figures(report, run)
    parts = [f"<h1>{html.escape(title)}</h1><div class='card'><span class='status {html.escape(status)}'>"
             f"{html.escape(status.upper())}</span> {r.get('world_size') or '?'} ranks · "
             f"{html.escape(str(r.get('backend')))} · {html.escape(str(r.get('device')))}"
             "<ul id='verdicts'>" + "".join(f"<li>{html.escape(v)}</li>" for v in report.get("verdicts") or [])
             + "</ul>"]
    if r.get("failed"):
        parts.append("<div class='failed'><b>failed inputs</b><ul>" + "".join(
            f"<li>{html.escape(str(f.get('error')))}</li>" for f in r["failed"]) + "</ul></div>")
    if r.get("warnings"):
        parts.append(f"<details><summary>{len(r['warnings'])} warning(s)</summary><ul>"
                     + "".join(f"<li>{html.escape(str(w))}</li>" for w in r["warnings"]) + "</ul></details>")
    parts.append("</div>")
    if "timeline" in figs:
        parts.append(f"<div class='card'>{_figure(figs.pop('timeline'), 'timeline')}</div>")
    parts.append("<div class='grid'>" + "".join(f"<div class='card'>{_figure(f, k)}</div>" for k, f in figs.items())
                 + "</div>")
    sections = [("Overlap", report.get("overlap")), ("Breakdown", report.get("breakdown")),
                ("Stragglers", (report.get("stragglers") or {}).get("per_rank")),
                ("Collectives, largest arrival skew first", [{k: c.get(k) for k in COLLECTIVE_COLUMNS}
                                                             for c in (report.get("collectives") or {}).get("worst") or []]),
                ("Bandwidth", report.get("bandwidth")),
                ("Pipeline", report.get("pipeline")), ("Health", report.get("health")),
                ("Hang", hang_rows(report))]
    for name, rows in sections:
        if rows:
            parts.append(f"<div class='card'><h3>{name}</h3>{_table(list(rows))}</div>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{CSS}</style>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            + "".join(parts) + "</body></html>")
