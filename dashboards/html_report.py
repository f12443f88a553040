"""The report as one self-contained HTML file: verdicts, tables and figures, plotly's script inlined once,
no server and nothing fetched from the network (for sharing and as a CI artifact).

The tables are the sections' declared ones (:data:`ddprof.analyses.sections.SECTIONS`), drawn as the text
report draws them (:func:`ddprof.report.display.draw`: the same titles, headings and formatted numbers);
the trace's health findings are the text report's sentences.

The per-rank timeline of the whole run is drawn at the level of detail that fits
(:func:`ddprof.dashboards.timeline.lod.view`): the real events when few enough, else occupancy bins.
"""

from __future__ import annotations

import html
from typing import Any

import msgspec
import plotly.graph_objects as go
from ddprof.analyses.sections import tables
from ddprof.analyses.verdicts import badge
from ddprof.dashboards.panels import panel_figures
from ddprof.dashboards.timeline.data import load
from ddprof.dashboards.timeline.figure import timeline_figure
from ddprof.dashboards.timeline.lod import view
from plotly.offline import get_plotlyjs

from ddprof.render.text import HEALTH_TITLE, health_findings
from ddprof.report.display import Drawn, draw
from ddprof.report.schema import HealthFinding, RunSection, rows
from ddprof.store.rundir import Run
from ddprof.vocabulary.units import fmt_rank_count

CSS = """body{font-family:system-ui,sans-serif;margin:16px 24px;background:#fafafa;color:#222}
h1{margin:0 0 8px}.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:10px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f5f5f5}.status{color:#fff;padding:2px 10px;border-radius:4px;font-weight:bold}
.ok{background:#2e7d32}.attention{background:#b26a00}.problem{background:#c62828}.partial{background:#ef6c00}.failed{color:#c62828}"""

#: Each figure is drawn by its own script as the page is parsed, at the width its card has then; the grid's
#: columns are fixed by the page's width alone (``auto-fill``: a first card alone does not span the row),
#: and once the page is loaded every figure is fitted to its card again (a card that changed width after its
#: figure was drawn would clip it: the first panel of a 1,400 px page showed ranks 0-3 of 8).
FIT = ("window.addEventListener('load',function(){document.querySelectorAll('.js-plotly-plot')"
       ".forEach(function(g){Plotly.Plots.resize(g);});});")

TABLE_LIMIT = 200


def _table(d: Drawn, limit: int = TABLE_LIMIT) -> str:
    """A declared table, drawn (:func:`ddprof.report.display.draw`): the text report's title, headings
    and formatted cells."""
    note = f"<p>{html.escape(d.note)}</p>" if d.note is not None else ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in d.headings)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in d.cells[:limit])
    shown = min(len(d.cells), limit)
    more = f"<p>{d.total - shown} more rows in {html.escape(d.where)}</p>" if d.total > shown else ""
    return f"<h3>{html.escape(d.title)}</h3>{note}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


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
    r = msgspec.convert(report["run"], RunSection)
    shown = badge(report)  # not a green OK beside a verdict that names a problem
    figs = figures(report, run)
    parts = [f"<h1>{html.escape(title)}</h1><div class='card'><span id='status' class='status "
             f"{html.escape(shown.kind)}' title='{html.escape('; '.join(shown.why))}'>"
             f"{html.escape(shown.label)}</span> {fmt_rank_count(len(r.ranks), r.world_size)} · "
             f"{html.escape(str(r.backend or '?'))} · {html.escape(str(r.device))}"
             "<ul id='verdicts'>" + "".join(f"<li>{html.escape(v)}</li>" for v in report.get("verdicts") or [])
             + "</ul>"]
    if r.failed:
        parts.append("<div class='failed'><b>failed inputs</b><ul>" + "".join(
            f"<li>{html.escape(str(f.error))}</li>" for f in r.failed) + "</ul></div>")
    if r.warnings:
        parts.append(f"<details><summary>{len(r.warnings)} warning(s)</summary><ul>"
                     + "".join(f"<li>{html.escape(str(w))}</li>" for w in r.warnings) + "</ul></details>")
    parts.append("</div>")
    if "timeline" in figs:
        parts.append(f"<div class='card'>{_figure(figs.pop('timeline'), 'timeline')}</div>")
    parts.append("<div class='grid'>" + "".join(f"<div class='card'>{_figure(f, k)}</div>" for k, f in figs.items())
                 + "</div>")
    health = health_findings(rows(report.get("health") or [], HealthFinding))
    if health:
        parts.append(f"<div class='card'><h3>{html.escape(HEALTH_TITLE)}</h3><ul>"
                     + "".join(f"<li>{html.escape(h)}</li>" for h in health) + "</ul></div>")
    for declared in tables():
        drawn = draw(declared, report)
        if drawn is not None:
            parts.append(f"<div class='card'>{_table(drawn)}</div>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{CSS}</style>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            + "".join(parts) + f"<script type='text/javascript'>{FIT}</script></body></html>")
