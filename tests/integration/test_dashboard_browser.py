"""The dashboard and the HTML report in a real headless Chromium (selenium over Debian's chromium and
chromium-driver): the app runs on loopback on a free port in a thread, the browser loads it, zooms,
clicks a rank, and a screenshot of each view is saved (tests/support/browser.py says where).

Sources: the bundled 8-rank DLRM sample, the two captured gloo runs, a generated 64-rank run with a
known slow rank, and a real Flight Recorder hang."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium, chromium_missing, graph_meta, screenshot, severe_console, wait_for
from tests.support.paths import FLIGHT_RECORDER, REPO

pytest.importorskip("dash")
pytestmark = pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")

from ddprof.dashboards.app.server import create_app, start_in_thread  # noqa: E402
from ddprof.dashboards.app.state import DashboardState  # noqa: E402
from ddprof.dashboards.timeline.lod import DEFAULT_BINS, ROW_CAP  # noqa: E402

from ddprof.inputs.sources import open_source  # noqa: E402

FR_HANG = FLIGHT_RECORDER / "megatron-16rank-gpu_error_1st"
BUDGET = max(ROW_CAP, DEFAULT_BINS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as d:
        yield d


@pytest.fixture
def driver(browser: Any) -> Any:
    """The module's browser on a blank page with its console read: the page of the test before, whose
    server that test stopped, may still have had a callback in flight (a resize for its screenshot), and
    its failure is not this test's."""
    browser.get("about:blank")
    browser.get_log("browser")
    return browser


@contextmanager
def served(sources: list[Path], cache: Path, title: str) -> Iterator[tuple[str, DashboardState]]:
    with open_source(sources, cache=cache) as src:
        state = DashboardState.open(src.run, src.dumps, title)
        assert state.wait(300), "the report was not built"
        server, url = start_in_thread(create_app(state))
        try:
            yield url, state
        finally:
            server.shutdown()


def load_page(driver: Any, url: str, timeline: bool = True) -> dict[str, Any] | None:
    driver.get(url)
    wait_for(lambda: driver.find_elements("id", "status"), what="the report's header")
    if not timeline:
        return None
    return wait_for(lambda: graph_meta(driver), what="the timeline")


def zoom(driver: Any, lo_ms: float, hi_ms: float) -> dict[str, Any]:
    """Zoom the timeline as a drag would (plotly relayout), wait for the server's answer for that window.
    The zoom is made again when no answer came within a few seconds: the timeline drawn afresh meanwhile
    (the report's panels arriving under load) loses a zoom made on the figure it replaced."""
    deadline = time.monotonic() + 90
    while True:
        driver.execute_script("const g = document.querySelector('#timeline .js-plotly-plot');"
                              "Plotly.relayout(g, {'xaxis.range[0]': arguments[0], 'xaxis.range[1]': arguments[1]});",
                              lo_ms, hi_ms)
        try:
            return wait_for(lambda: (m := graph_meta(driver)) and abs(m["t0_ns"] - lo_ms * 1e6) < 2e3 and m,
                            timeout=10, what="the zoomed timeline")
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def click_until(driver: Any, selector: str, index: int, done: Any, what: str) -> Any:
    """Click the ``index``-th element matching ``selector`` until ``done()`` holds: the element is found
    afresh each time (a panel redrawn under load replaces it), and the click is repeated only when the
    page has not answered within a few seconds. Waits on the page, never a fixed time alone."""
    from selenium.webdriver.common.action_chains import ActionChains

    def attempt() -> Any:
        el = wait_for(lambda: (found := driver.find_elements("css selector", selector)) and len(found) > index
                      and found[index], what=f"{selector} in the page")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
        ActionChains(driver).move_to_element(el).click().perform()
        return wait_for(done, timeout=15, what=what)

    return wait_for(lambda: attempt(), timeout=120, what=what)


def click_rank(driver: Any, rank_index: int) -> dict[str, Any]:
    """Click the rank's bar in the per-rank time panel; the timeline expands that rank into lanes."""
    return click_until(driver, "#breakdown .barlayer .trace:first-child .point path", rank_index,
                       lambda: (m := graph_meta(driver)) and any(r.startswith("↳") for r in m["rows"]) and m,
                       "the focused rank's lanes")


def click_collective(driver: Any, state: DashboardState) -> None:
    """Click the first instance in the collective (skew) panel: the timeline's window moves onto it."""
    assert state.report is not None and state.data is not None
    before = graph_meta(driver)
    point = driver.execute_script(
        "const g = document.querySelector('#skew .js-plotly-plot');"
        "return g.data[0].customdata[0][0];")
    inst = state.report.table("collectives").row(int(point), named=True)
    start = inst["start_us"] * 1e3 - state.data.t0_ns
    end = start + (max(inst.get("arrival_us") or [0]) + (inst.get("duration_us") or 0)) * 1e3
    meta = click_until(driver, "#skew .scatterlayer .trace:first-child .points path", 0,
                       lambda: (m := graph_meta(driver)) and m != before and m["t0_ns"] <= start and m, "the focus")
    assert meta["t0_ns"] <= start and end <= meta["t1_ns"] + 1e3, (meta, start, end)
    assert (before or {}).get("t1_ns", 0) - (before or {}).get("t0_ns", 0) > meta["t1_ns"] - meta["t0_ns"]
    assert "last rank" in wait_for(lambda: driver.find_element("css selector", "#instance .gtitle").text,
                                   what="the instance's title")


def check_timeline(driver: Any, ranks: list[int], name: str, zoom_ms: tuple[float, float]) -> None:
    meta = graph_meta(driver)
    assert meta is not None
    assert [r for r in meta["rows"] if r.startswith("rank ")] == [f"rank {r}" for r in ranks]
    assert meta["shapes_per_row"] <= BUDGET
    screenshot(driver, f"{name}-overview")
    zoomed = zoom(driver, *zoom_ms)
    assert zoomed["shapes_per_row"] <= BUDGET, zoomed
    assert zoomed["t1_ns"] <= zoom_ms[1] * 1e6 + 2e3
    screenshot(driver, f"{name}-zoomed")
    focused = click_rank(driver, 1)
    rows = focused["rows"]
    i = rows.index(f"rank {ranks[1]}")
    assert not rows[i + 1].startswith("rank "), rows  # its streams/threads right below it
    assert driver.execute_script("return document.querySelector('#expand').innerText").strip() == f"rank {ranks[1]}"
    screenshot(driver, f"{name}-focused")
    assert severe_console(driver) == []


def test_dlrm_sample(driver: Any, tmp_path: Path) -> None:
    with served([REPO / "sample_traces/dlrm-8xV100-nccl"], tmp_path / "run", "dlrm-8xV100-nccl") as (url, state):
        meta = load_page(driver, url)
        assert meta is not None and meta["mode"] == "events"  # 2,244 drawn events: real events at once
        assert "rank 7" in driver.find_element("id", "verdicts").text
        check_timeline(driver, list(range(8)), "dlrm", (5.0, 6.0))
        click_collective(driver, state)
        screenshot(driver, "dlrm-collective")
        assert state.report is not None and state.report["health"]  # rounded timestamps on every rank
        rows = wait_for(lambda: driver.find_elements("css selector", "#health-table tbody tr"), what="health")
        assert len(rows) == len(state.report["health"])
        assert "rounded_timestamps" in rows[0].text
        driver.execute_script("document.getElementById('health-title').scrollIntoView();")
        screenshot(driver, "dlrm-health")


def test_gloo_slow_rank(driver: Any, tmp_path: Path) -> None:
    with served([REPO / "sample_traces/gloo-ddp-4rank-slow-rank"], tmp_path / "run", "gloo-ddp") as (url, state):
        load_page(driver, url)
        title = wait_for(lambda: driver.find_element("css selector", "#stragglers .gtitle").text, what="title")
        assert title == "Stragglers: rank 2"
        check_timeline(driver, [0, 1, 2, 3], "gloo-ddp", (100.0, 140.0))


def test_gloo_pipeline(driver: Any, tmp_path: Path) -> None:
    with served([REPO / "sample_traces/gloo-pipeline-4stage"], tmp_path / "run", "gloo-pipeline") as (url, state):
        load_page(driver, url)
        title = wait_for(lambda: driver.find_element("css selector", "#pipeline .gtitle").text, what="title")
        assert title.startswith("Pipeline bubble: 4 stages")
        check_timeline(driver, [0, 1, 2, 3], "gloo-pipeline", (10.0, 30.0))


def test_generated_64_ranks(driver: Any, tmp_path: Path) -> None:
    from ddprof.synth import Spec, generate

    generate(Spec(ranks=64, steps=3, kernels=60, slow={37: 1.6}, seed=3), tmp_path / "traces", with_truth=False)
    with served([tmp_path / "traces"], tmp_path / "run", "generated 64 ranks") as (url, state):
        meta = load_page(driver, url)
        assert meta is not None
        assert state.report is not None and 37 in state.report["stragglers"]["ranks"]
        span_ms = state.data.span_ns / 1e6 if state.data else 0
        check_timeline(driver, list(range(64)), "generated-64", (span_ms * 0.4, span_ms * 0.45))


def test_alltoall_heat_map(driver: Any, tmp_path: Path) -> None:
    """A generated mixture-of-experts run: the all-to-all panel draws its ranks × ranks heat map."""
    from ddprof.synth import MoE, write_kineto

    sc = MoE(ranks=8, steps=2, hot_rank=5)
    write_kineto(sc, tmp_path / "traces")
    with served([tmp_path / "traces"], tmp_path / "run", "generated MoE") as (url, state):
        load_page(driver, url)
        title = wait_for(lambda: driver.find_element("css selector", "#alltoall .gtitle").text, what="title")
        assert title.startswith("All-to-all bytes by rank pair") and "4 instances · receive imbalance" in title
        cells = wait_for(lambda: driver.find_elements("css selector", "#alltoall .heatmaplayer image"), what="heat map")
        assert cells and cells[0].size["width"] > 100 and cells[0].size["height"] > 100
        ticks = driver.execute_script(
            "return [...document.querySelectorAll('#alltoall .xtick text')].map(t => t.textContent)")
        assert ticks == [str(r) for r in range(8)]
        driver.execute_script("document.getElementById('alltoall').scrollIntoView();")
        screenshot(driver, "alltoall-heat-map")
        # the menu picks one step: its own heat map and title (2 instances a step: a dispatch and a combine)
        driver.find_element("css selector", "#alltoall .updatemenu-header").click()
        steps = wait_for(lambda: driver.find_elements("css selector", "#alltoall g.updatemenu-dropdown-button"),
                         what="menu")
        assert len(steps) == 3  # every traced instance, step 0, step 1
        driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}));", steps[2])
        def step_title() -> str | None:
            text = driver.find_element("css selector", "#alltoall .gtitle").text
            return text if "step 1" in text else None

        title = wait_for(step_title, what="the step's title")
        assert title.endswith("step 1: 2 instances")
        screenshot(driver, "alltoall-heat-map-step")
        assert severe_console(driver) == []


def test_flight_recorder_hang(driver: Any, tmp_path: Path) -> None:
    with served([FR_HANG], tmp_path / "run", "flight-recorder hang") as (url, state):
        load_page(driver, url, timeline=False)
        suspects = wait_for(lambda: driver.find_element("id", "hang-suspects").text, what="suspect ranks")
        assert suspects == "Hang: suspect ranks 12"
        # The figure is drawn by plotly after the callback that fills the suspects line: wait for it too.
        title = wait_for(lambda: driver.find_element("css selector", "#hang .gtitle").text, what="the hang's title")
        assert title == "Hang started at rank 12"
        rows = driver.find_elements("css selector", "#hang-table tbody tr")
        assert len(rows) == len(state.report["hang"]["collectives"]) if state.report else False
        assert "no timeline" in driver.find_element("id", "no-timeline").text
        screenshot(driver, "flight-recorder-hang")
        assert severe_console(driver) == []


def test_html_report_renders(driver: Any, tmp_path: Path) -> None:
    from ddprof.analyses.report import build_report
    from ddprof.dashboards.html_report import render_html
    from ddprof.dashboards.panels import PANELS

    with open_source([REPO / "sample_traces/dlrm-8xV100-nccl"], cache=tmp_path / "run") as src:
        page = render_html(build_report(src.run, dumps=src.dumps), src.run, title="dlrm report")
    out = tmp_path / "report.html"
    out.write_text(page)
    driver.get(out.as_uri())
    plots = wait_for(lambda: (p := driver.find_elements("css selector", ".js-plotly-plot .main-svg")) and
                     len(p) >= 11 and p, what="the figures")
    assert len(driver.find_elements("css selector", ".js-plotly-plot")) == 1 + len(PANELS)  # the timeline too
    assert plots
    assert driver.execute_script("return document.querySelectorAll('#timeline .barlayer .point').length") > 2000
    screenshot(driver, "html-report-dlrm")
    assert severe_console(driver) == []


def test_html_report_at_1400_px_shows_every_rank_of_every_panel(tmp_path: Path) -> None:
    """The HTML report in a 1,400 px wide window, as first drawn (no resize): each figure fits its card, so
    the first panel ("Time per rank") shows all 8 ranks of the DLRM sample and its title stays in its card
    (drawn as the page was parsed, it once took the whole row's width and showed ranks 0-3, its title under
    the next panel); the tables are headed and formatted as the text report is."""
    from ddprof.analyses.report import build_report
    from ddprof.dashboards.html_report import render_html

    from tests.support.browser import artifacts_dir

    with open_source([REPO / "sample_traces/dlrm-8xV100-nccl"], cache=tmp_path / "run") as src:
        page = render_html(build_report(src.run, dumps=src.dumps), src.run, title="dlrm report")
    out = tmp_path / "report.html"
    out.write_text(page)
    with chromium(width=1400, height=900) as d:
        d.get(out.as_uri())
        wait_for(lambda: d.execute_script("return document.readyState") == "complete"
                 and len(d.find_elements("css selector", ".grid .js-plotly-plot .main-svg")) >= 9, what="the panels")
        time.sleep(0.5)  # the resize after load is plotly's own, synchronous; let it paint
        fit = d.execute_script("""
            return [...document.querySelectorAll('.grid .card')].map(card => {
              const g = card.querySelector('.js-plotly-plot'), c = card.getBoundingClientRect();
              const svg = g.querySelector('.main-svg').getBoundingClientRect();
              const title = g.querySelector('.gtitle').getBoundingClientRect();
              return {id: g.id, card_left: c.left, card_right: c.right, card_height: c.height,
                      svg_width: svg.width, svg_height: svg.height, title_right: title.right,
                      ticks: [...g.querySelectorAll('.xtick text')].map(t => {
                        const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.right]; })};
            });""")
        d.execute_script("document.getElementById('breakdown').scrollIntoView();")
        d.save_screenshot(str(artifacts_dir() / "html-report-dlrm-1400px.png"))
        headings = d.execute_script("return [...document.querySelectorAll('th')].map(t => t.textContent)")
        assert severe_console(d) == []
    assert [p["id"] for p in fit][:2] == ["breakdown", "overlap"]
    for panel in fit:
        assert panel["svg_width"] <= panel["card_right"] - panel["card_left"], panel["id"]
        assert panel["title_right"] <= panel["card_right"], panel["id"]
        assert panel["svg_height"] < panel["card_height"], panel["id"]
    breakdown = fit[0]
    assert [t[0] for t in breakdown["ticks"]] == [str(r) for r in range(8)]
    assert all(breakdown["card_left"] <= left and right <= breakdown["card_right"] for _, left, right in breakdown["ticks"])
    assert "overlap" in headings and "exposed comm" in headings
    assert not [h for h in headings if "_" in h]  # headings, not the JSON's keys (overlap_pct, comm_us)
