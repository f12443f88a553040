"""A panel is declared once (:mod:`ddprof.dashboards.panels`) and drawn by both the Dash app and the HTML
report, in the same order; a panel added to the declarations appears in both with no other change."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

pytest.importorskip("dash")

from ddprof.dashboards import html_report, panels  # noqa: E402
from ddprof.dashboards.app.server import create_app  # noqa: E402
from ddprof.dashboards.app.state import DashboardState  # noqa: E402

import ddprof  # noqa: E402
from tests.support.paths import SAMPLES  # noqa: E402


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    run = ddprof.ingest([SAMPLES / "gloo-ddp-4rank-slow-rank"], tmp_path_factory.mktemp("gloo") / "run")
    return DashboardState.open(run, None, "gloo", background=False)


def _graph_ids(component) -> list[str]:
    """The ids of every dcc.Graph in a Dash layout, in document order."""
    out = []
    if type(component).__name__ == "Graph":
        out.append(component.id)
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children] if children is not None else []:
        out.extend(_graph_ids(child))
    return out


def test_the_app_and_the_html_report_draw_the_declared_panels_in_order(state):
    app = create_app(state)
    assert [g for g in _graph_ids(app.layout) if g != "timeline"] == list(panels.panel_ids())
    figs = html_report.figures(state.report, state.run)
    assert list(figs) == ["timeline", *panels.panel_ids()]
    page = html_report.render_html(state.report, state.run)
    assert all(f"id=\"{p}\"" in page or f"id='{p}'" in page for p in panels.panel_ids())


def test_a_new_panel_is_one_declaration(state, monkeypatch):
    extra = panels.Panel("ranks_count", lambda report: go.Figure(layout={"title": {"text": "ranks counted"}}),
                         click="rank")
    monkeypatch.setattr(panels, "PANELS", (*panels.PANELS, extra))
    assert "ranks_count" in _graph_ids(create_app(state).layout)
    assert "ranks counted" in html_report.render_html(state.report, state.run)
    assert "ranks_count" in panels.clickable("rank")


def test_the_headers_count_the_ranks_there_are(state):
    """The HTML report's and the dashboard's header: the traced ranks, and the job's world size only where the
    traces record a larger one (a trace without distributedInfo printed '? ranks')."""
    from ddprof.vocabulary.units import fmt_rank_count

    assert [fmt_rank_count(1, None), fmt_rank_count(8, 8), fmt_rank_count(6, 8), fmt_rank_count(2, None)] == [
        "1 rank", "8 ranks", "6 of 8 ranks", "2 ranks"]
    want = fmt_rank_count(len(state.run.ranks), state.run.world_size)
    assert f"</span> {want} · " in html_report.render_html(state.report, state.run)
    assert f"{want} · " in str(create_app(state).layout)
