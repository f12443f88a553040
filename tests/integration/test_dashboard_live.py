"""``ddprof dashboard RUN --live`` in real headless Chromium over step measure files written by the test as a
job would (a rank slowed down at step 30): the page names the straggler, draws the ranks × steps heat map and
the ranks' table, and follows the files as they grow; the heat map figure on its own, as a plain function."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.support.browser import chromium, chromium_missing, screenshot, wait_for

pytest.importorskip("dash")

from ddprof.dashboards.app.live import create_live_app  # noqa: E402
from ddprof.dashboards.app.server import make  # noqa: E402
from ddprof.dashboards.figures.live import heatmap_figure  # noqa: E402

from ddprof.store.step_measures import measures_path, read_step_measures  # noqa: E402


def write_steps(run_dir: Path, steps: range, slow_from: int = 30) -> None:
    """Two ranks in lockstep, 40 ms of own work; rank 1 works 60 ms more from ``slow_from``, rank 0 waits."""
    for rank in (0, 1):
        path = measures_path(run_dir, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            if steps.start == 0:
                f.write(json.dumps({"kind": "header", "version": 1, "rank": rank, "world_size": 2}) + "\n")
            for s in steps:
                own = 40.0 + (0.3 * ((s * 7 + rank * 3) % 5)) + (60.0 if rank == 1 and s >= slow_from else 0.0)
                wall = 105.0 if s >= slow_from else 45.0
                f.write(json.dumps({"step": s, "end": 1.7e9 + s * 0.1, "wall_ms": wall, "coll_ms": wall - own,
                                    "arrive": 1.7e9 + s * 0.1 - (wall - own) / 1e3, "rss_mb": 100.0}) + "\n")


def test_heatmap_is_ranks_by_steps(tmp_path: Path) -> None:
    write_steps(tmp_path, range(0, 40))
    fig = heatmap_figure(read_step_measures(tmp_path))
    heat = fig.data[0]
    assert list(heat.y) == [0, 1] and list(heat.x) == list(range(40))
    assert heat.z[1][35] > 95 and heat.z[0][35] < 45  # the slow rank's own time, the waiting rank's
    assert "no step measured yet" in str(heatmap_figure(read_step_measures(tmp_path / "none")).layout.annotations)


@pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")
def test_live_page_names_the_straggler_and_follows_the_files(tmp_path: Path) -> None:
    write_steps(tmp_path, range(0, 40))
    server = make(create_live_app(tmp_path, interval_ms=500), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with chromium() as driver:
            driver.get(f"http://127.0.0.1:{server.server_port}/")
            wait_for(lambda: "straggler: rank 1, slow since step 30" in driver.find_element("id", "live-straggler").text,
                     what="the straggler line")
            wait_for(lambda: driver.find_elements("css selector", "#live-heatmap .heatmaplayer, #live-heatmap .hm"),
                     what="the heat map")
            wait_for(lambda: "39" in driver.find_element("id", "live-rank-table").text, what="the ranks' table")
            write_steps(tmp_path, range(40, 45))  # the job goes on
            wait_for(lambda: "44" in driver.find_element("id", "live-rank-table").text, what="the new steps")
            assert "straggler: rank 1, slow since step 30" in driver.find_element("id", "live-straggler").text
            screenshot(driver, "dashboard-live")
    finally:
        server.shutdown()
