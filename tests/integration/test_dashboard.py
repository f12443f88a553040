"""The dashboard without a browser: occupancy arithmetic, the level-of-detail budget, the figures as plain
functions over real reports, the safety defaults, and the CLI's HTML report and lazy imports."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("plotly")

from ddprof.analyses.report import build_report  # noqa: E402
from ddprof.dashboards.app.server import exposure_warning, is_loopback  # noqa: E402
from ddprof.dashboards.figures.collectives import bandwidth_figure, instance_figure, pipeline_figure  # noqa: E402
from ddprof.dashboards.figures.hang import hang_figure, hang_rows  # noqa: E402
from ddprof.dashboards.figures.ranks import breakdown_figure, stragglers_figure  # noqa: E402
from ddprof.dashboards.timeline.data import STARTS, load, occupancy  # noqa: E402
from ddprof.dashboards.timeline.lod import DEFAULT_BINS, ROW_CAP, view  # noqa: E402

from ddprof.inputs.sources import open_source  # noqa: E402
from tests.support.paths import FLIGHT_RECORDER, REPO

FR_HANG = FLIGHT_RECORDER / "megatron-16rank-gpu_error_1st"


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory):
    with open_source([REPO / "sample_traces/dlrm-8xV100-nccl"], cache=tmp_path_factory.mktemp("dlrm")) as src:
        yield src.run, build_report(src.run, dumps=src.dumps)


def test_occupancy_splits_an_event_across_bins():
    """Width 10, event [5, 27) -> 5, 10, 7 (the module's example); a second class stays apart."""
    busy = occupancy(np.array([5, 30]), np.array([27, 34]), np.array([0, 1]), 2, 0.0, 10.0, 4)
    assert np.allclose(busy, [[5, 10, 7, 0], [0, 0, 0, 4]])


def _row_busy(data) -> float:
    """Busy ns of every rank's row lanes, summed from the events read back from the store."""
    read = data.window(data.ranks, 0, data.span_ns, details=False)
    return float(sum(int((e.end - e.start)[e.lane < data.row_lanes[r]].sum()) for r, e in read.items()))


def test_whole_run_bins_keep_every_busy_ns(dlrm):
    run, _ = dlrm
    data = load(run)
    v = view(data, bins=100)
    assert v.mode == "events"  # 2,244 events: the real ones
    assert v.shapes == 2244
    drawn = _row_busy(data)
    assert float(data.busy.sum(dtype=np.float64)) == pytest.approx(drawn, rel=1e-4)  # float32 cells
    assert float(data.grid[:, STARTS].sum()) == 2244  # the count channel: one start per drawn event
    from ddprof.dashboards.timeline import lod

    old = lod.TOTAL_CAP
    lod.TOTAL_CAP = 0
    try:
        b = view(data, bins=100)
        narrow = view(data, 5e6, 5.02e6, bins=100)  # < 100 grid cells: binned from the events read
    finally:
        lod.TOTAL_CAP = old
    assert b.mode == "bins" and b.source == "grid" and b.busy is not None and b.busy.shape[:2] == (8, 4)
    assert float(b.busy.sum(dtype=np.float64)) == pytest.approx(drawn, rel=1e-4)  # every cell of the run
    assert 50 < b.shapes_per_row <= 100  # k whole cells a bin: at most the bins asked for
    assert narrow.mode == "bins" and narrow.source == "store"
    assert (5.02e6 - 5e6) / data.bin_ns < 100
    events = view(data, 5e6, 5.02e6)
    assert events.events is not None
    inside = np.minimum(events.events["end"], 5.02e6) - np.maximum(events.events["start"], 5e6)
    assert narrow.busy is not None
    assert float(narrow.busy.sum(dtype=np.float64)) == pytest.approx(float(inside.sum()), rel=1e-4)


def test_grid_is_kept_beside_the_store_and_rebuilt_when_it_changes(tmp_path):
    with open_source([REPO / "sample_traces/gloo-ddp-4rank-slow-rank"], cache=tmp_path / "c") as src:
        run = src.run
        first = load(run)
        assert first.built and first.path == run.path / "dashboard"
        again = load(run)
        assert not again.built and again.fine_bins == first.fine_bins
        assert np.array_equal(np.asarray(again.grid), np.asarray(first.grid))
        assert sorted(p.name.split("-")[0] for p in first.path.iterdir()) == ["grid", "grid.json", "long", "steps"]
        part = run.path / run.rank_info(0)["parts"][0]
        os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 1_000_000_000))  # the store changed
        rebuilt = load(run)
        assert rebuilt.built
        assert len(list(first.path.glob("grid-*.npy"))) == 1  # the old key's files are gone
        assert np.array_equal(np.asarray(rebuilt.grid), np.asarray(first.grid))


def test_read_only_run_dir_keeps_its_grid_elsewhere(tmp_path):
    with open_source([REPO / "sample_traces/gloo-ddp-4rank-slow-rank"], cache=tmp_path / "c") as src:
        run = src.run
        mode = run.path.stat().st_mode
        run.path.chmod(0o555)
        try:
            data = load(run)
            assert data.path is not None and run.path not in data.path.parents
            assert not (run.path / "dashboard").exists()
            assert not load(run).built
        finally:
            run.path.chmod(mode)


def test_narrow_window_gives_events_with_details(dlrm):
    run, _ = dlrm
    data = load(run)
    v = view(data, 5e6, 6e6, expand=7)
    assert v.mode == "events" and v.shapes_per_row <= max(ROW_CAP, DEFAULT_BINS)
    lanes = data.lanes[7]
    assert [r.label for r in v.rows][8:] == [f"↳ {n}" for n in lanes]
    # a GPU rank expands into its streams, then its CPU threads
    assert lanes[0].startswith("stream") and lanes[-1].startswith("thread") and data.row_lanes[7] == 4
    ev = v.events
    assert ev is not None and len(ev["detail"]) == ev["row"].size > 0
    assert (ev["end"] > 5e6).all() and (ev["start"] < 6e6).all()
    comm = [d for d in ev["detail"] if d["coll_op"]]
    assert comm and all(d["name"].startswith("ncclKernel_") for d in comm)
    three = view(data, 5e6, 6e6, expand=3)  # rank 3 is busy on its CPU threads there
    threads = [i for i, r in enumerate(three.rows) if r.label.startswith("↳ thread")]
    assert three.events is not None and np.isin(three.events["row"], threads).any()  # CPU ops on thread lanes


def test_failed_rank_is_a_marked_row(tmp_path):
    from ddprof.dashboards.timeline.figure import timeline_figure

    from ddprof.synth import Spec, generate

    generate(Spec(ranks=4, steps=2, kernels=20, seed=1), tmp_path / "t", with_truth=False)
    bad = sorted((tmp_path / "t" / "traces").glob("*1.*trace*"))[0]
    bad.write_text("{ not json")
    with open_source([tmp_path / "t" / "traces"], cache=tmp_path / "c") as src:
        report = build_report(src.run, dumps=src.dumps)
        data = load(src.run)
    failed = report["run"]["failed"]  # unreadable: its rank is unknown, its file is named
    assert [f["path"] for f in failed] == [str(bad)] and data.ranks == [0, 2, 3]
    v = view(data)
    label = f"{bad.name} (failed)"
    assert [r.label for r in v.rows] == ["rank 0", "rank 2", "rank 3", label]
    fig = timeline_figure(v)
    bars = [t for t in fig.data if t.name == "failed rank"]
    assert len(bars) == 1 and list(bars[0].y) == [3]
    hover = bars[0].hovertext[0].replace("<br>", " ")  # the error, wrapped at spaces
    assert "not valid JSON" in hover and str(bad) in hover
    assert fig.layout.meta["ddprof"]["failed"] == [label]
    assert label in fig.layout.yaxis.ticktext[-1]


def test_failed_rank_with_a_known_rank_keeps_its_place(tmp_path):
    """A part that fails with its rank known (the meta file names it) sits in rank order."""
    from ddprof.dashboards.timeline.data import _failed

    from ddprof.store.rundir import Run

    run = Run(path=tmp_path, manifest={"ranks": [0, 2], "sources": {"x": {"status": "failed", "rank": 1,
                                                                          "error": "x: truncated"}}})
    assert _failed(run) == {1: ("rank 1 (failed)", "x: truncated")}


def test_figures_from_the_dlrm_report(dlrm):
    _, report = dlrm
    fig = stragglers_figure(report)
    assert fig.layout.title.text == "Stragglers: rank 7"
    assert list(fig.data[0].x) == list(range(8))
    inst = instance_figure(report)  # the largest skew: all_to_all #0, rank 7 last
    assert "last rank 7" in inst.layout.title.text
    assert len(breakdown_figure(report).data) == 3
    assert {t.name for t in bandwidth_figure(report).data} == {"all_reduce", "all_to_all"}
    assert pipeline_figure(report).layout.annotations[0].text.startswith("not a pipeline run")


def test_the_header_names_a_problem_and_the_steps_as_ranges(dlrm):
    """The DLRM sample's status is ok, but its first verdict is "rank 7 is the straggler": its badge is not a
    green OK; and the steps are ranges ("steps 2-21"), not every step listed."""
    from ddprof.dashboards.app.layout import STATUS_COLOURS, header
    from ddprof.dashboards.app.state import DashboardState
    from ddprof.dashboards.html_report import render_html

    run, report = dlrm
    state = DashboardState(run=run, dumps=None, title="dlrm", report=report)
    state._done.set()
    badge, facts = header(state)[:2]
    assert report["status"] == "ok" and report["verdicts"][0].startswith("rank 7 is the straggler")
    assert badge.children == "ATTENTION" and badge.style["background"] != STATUS_COLOURS["ok"]
    assert badge.title == report["verdicts"][0]
    assert facts.children.endswith(" · steps 10")  # its one step
    state.report = {**report, "run": {**report["run"], "steps": [*range(2, 22), 30, 31]}}
    assert header(state)[1].children.endswith(" · steps 2-21, 30-31")
    page = render_html(report)
    assert "<span id='status' class='status attention'" in page and ">ATTENTION</span>" in page
    assert ">OK</span>" not in page


def test_hang_figure_and_rows_name_the_suspect():
    with open_source([FR_HANG]) as src:
        report = build_report(None, dumps=src.dumps)
    assert hang_figure(report).layout.title.text == "Hang started at rank 12"
    rows = hang_rows(report)
    assert len(rows) == len(report["hang"]["collectives"]) and rows[0]["missing"] == "12"


def test_safe_defaults():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert exposure_warning("127.0.0.1") is None
    assert "0.0.0.0" in (exposure_warning("0.0.0.0") or "")


def test_html_report_is_self_contained(tmp_path):
    out = tmp_path / "r.html"
    rc = subprocess.run([sys.executable, "-m", "ddprof", "analyze", str(REPO / "sample_traces/gloo-pipeline-4stage"),
                         "--cache", str(tmp_path / "c"), "--format", "html", "-o", str(out)],
                        capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    from plotly.offline import get_plotlyjs

    page = out.read_text()
    bundle = get_plotlyjs()
    assert page.count(bundle) == 1  # plotly.js inlined once; nothing else loads a script or a resource
    rest = page.replace(bundle, "")
    assert "<script src" not in rest and "https://" not in rest and "<link" not in rest
    from ddprof.dashboards.panels import PANELS

    assert page.count('class="plotly-graph-div"') == 1 + len(PANELS) == 13  # the timeline and every panel
    assert "Pipeline bubble: 4 stages" in page


def test_analyze_runs_without_dash_and_html_says_what_to_install(tmp_path):
    """With dash and plotly unimportable, json still works and html exits 2 naming the extra."""
    block = ("import sys\nclass B:\n def find_spec(self, n, p=None, t=None):\n"
             "  return None if n.split('.')[0] not in ('dash','plotly') else (_ for _ in ()).throw(ImportError(n))\n"
             "sys.meta_path.insert(0, B())\nimport importlib.util as u\n_f=u.find_spec\n"
             "u.find_spec=lambda n,*a: None if n.split('.')[0] in ('dash','plotly') else _f(n,*a)\n"
             "from ddprof.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    src = str(REPO / "sample_traces/gloo-pipeline-4stage")
    ok = subprocess.run([sys.executable, "-c", block, "analyze", src, "--cache", str(tmp_path / "c"), "--format", "json"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    html = subprocess.run([sys.executable, "-c", block, "analyze", src, "--cache", str(tmp_path / "c"), "--format",
                           "html"], capture_output=True, text=True)
    assert html.returncode == 2 and "pip install 'ddprof[dash]'" in html.stderr


def test_dashboard_command_is_listed():
    from ddprof.cli import COMMANDS

    assert COMMANDS["dashboard"][0] == "ddprof.cli.dashboard_cmd:dashboard"
