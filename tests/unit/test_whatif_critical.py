"""Each step's critical path (analyses/whatif/critical.py) on generated runs whose path is known (a slow
rank's compute; a communication-bound run's all-reduce) and on real traces, and as the report shows it."""

from __future__ import annotations

import polars as pl
import pytest
from ddprof.analyses.report import build_report
from ddprof.analyses.whatif.critical import KINDS, critical_path
from ddprof.analyses.whatif.projections import whatif
from ddprof.analyses.whatif.store import replay_check

import ddprof
from ddprof.synth import Spec, generate


def _run(spec: Spec, tmp_path):
    generate(spec, tmp_path / "gen")
    return ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")


def _path(run):
    check = replay_check(run.events())
    assert check.explained, check.reason
    return check, critical_path(check.model, check.replayed)


def test_a_slow_ranks_compute_is_the_critical_path(tmp_path):
    # Rank 2's kernels take 1.5x as long: every all-reduce waits for it, so the path runs through its compute.
    check, cp = _path(_run(Spec(ranks=4, steps=3, slow={2: 1.5}, noise=0.0), tmp_path))
    kinds = dict(zip(cp.by_kind()["kind"], cp.by_kind()["share"]))
    assert kinds["compute"] > 0.8
    top = cp.top_ops(5)
    assert set(top["rank"]) == {2} and set(top["kind"]) == {"compute"}
    # The path's links add up to each step's replayed end: the step as recorded.
    per_step = cp.links.group_by("step").agg(pl.col("s").sum().alias("t")).sort("step")
    assert per_step["t"].to_list() == pytest.approx(cp.steps.sort("step")["length"].to_list(), rel=1e-9)


def test_a_communication_bound_runs_all_reduce_is_the_critical_path(tmp_path):
    # 25 MB buckets at 2 GB/s: each all-reduce takes 12.5 ms against a few hundred µs of compute.
    check, cp = _path(_run(Spec(ranks=4, steps=3, bus_gbps=2.0, noise=0.0), tmp_path))
    kinds = dict(zip(cp.by_kind()["kind"], cp.by_kind()["share"]))
    assert kinds["communication"] > 0.9
    assert cp.top_ops(1)["kind"].item() == "communication" and "AllReduce" in cp.top_ops(1)["name"].item()


@pytest.mark.parametrize("name", ["gloo-ddp-4rank-slow-rank", "hta/v100-2rank-rank1-large"])
def test_a_real_traces_critical_path_adds_up_to_its_steps(ingested, name):
    w = whatif(ingested(name).events(), stragglers=None, comm_k=[], host_gaps=False, rebalance=False,
               attribute=False)
    assert w.explained and w.critical is not None
    by = w.critical.by_kind()
    assert by["kind"].to_list() == list(KINDS) and sum(by["share"]) == pytest.approx(1.0)
    # The path ends with each step's last end, from the step's origin: the run's step (first op at 0).
    assert float(w.critical.steps["length"].mean()) == pytest.approx(w.step_s, rel=1e-6)


def test_the_gloo_samples_sleeping_rank_is_on_the_path_and_in_the_report(ingested):
    report = build_report(ingested("gloo-ddp-4rank-slow-rank"))
    cp = report["whatif"]["critical_path"]
    assert cp["length_us"] == pytest.approx(report["whatif"]["step_us"], rel=1e-6)
    assert sum(k["pct"] for k in cp["by_kind"]) == pytest.approx(100.0)
    # Rank 2 sleeps 100 ms before each forward pass: an idle host gap of rank 2 leads the path.
    assert cp["top_ops"][0]["rank"] == 2 and cp["top_ops"][0]["kind"] == "idle"


def cp_ms(report):
    return report["whatif"]["critical_path"]["length_us"] / 1e3


def test_the_dashboard_panel_draws_the_top_ops_by_kind(ingested):
    from ddprof.dashboards.figures.critical import critical_path_figure
    from ddprof.dashboards.panels import panel_ids

    report = build_report(ingested("gloo-ddp-4rank-slow-rank"))
    fig = critical_path_figure(report)
    assert "critical_path" in panel_ids()
    assert fig.layout.title.text == f"Critical path: {cp_ms(report):,.2f} ms a step"
    idle_pct = next(k["pct"] for k in report["whatif"]["critical_path"]["by_kind"] if k["kind"] == "idle")
    idle = next(t for t in fig.data if t.name == f"idle {idle_pct:.0f} %")
    assert idle.y[0].startswith("rank 2 host: gloo:all_reduce") and idle.customdata[0][0] == 2
    off = {**report, "whatif": {**report["whatif"], "computed": False, "reason": "switched off"}}
    assert "switched off" in str(critical_path_figure(off).layout.annotations[0].text)
