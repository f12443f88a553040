"""The report sections a regression check reads: step times with work counts, and the top kernels,
on generated runs with known answers and on a real gloo capture."""

from __future__ import annotations

import pytest
from ddprof.analyses.kernels import kernels_by_step, top_kernels
from ddprof.analyses.steptimes import step_times

import ddprof
from ddprof.synth import US, DataParallel
from tests.support.paths import SAMPLES


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_step_times_and_counts_match_the_generator(device):
    sc = DataParallel(ranks=3, steps=4, device=device)
    t = step_times(sc.events().lazy())
    assert t.height == 3 * 4
    assert t["step_us"].to_list() == [sc.step_ns / US] * 12
    assert set(t["kernels"].to_list()) == {3}  # gemm_fwd, elementwise, gemm_bwd
    assert set(t["collectives"].to_list()) == {1}
    assert set(t["comm_bytes"].to_list()) == {sc.nbytes}


def test_top_kernels_known_totals():
    sc = DataParallel(ranks=2, steps=4, slow_rank=None)
    top = {r["name"]: r for r in top_kernels(sc.events().lazy()).to_dicts()}
    fwd = top["gemm_fwd_kernel"]
    assert fwd["count"] == 8 and fwd["ranks"] == 2 and fwd["kind"] == "compute"
    assert fwd["total_us"] == pytest.approx(8 * sc.F / US)
    assert fwd["per_step_us"] == pytest.approx(sc.F / US) and fwd["per_step_count"] == 1.0
    bwd = top["gemm_bwd_kernel"]
    assert bwd["mean_us"] == pytest.approx(sc.G / US)
    by_step = kernels_by_step(sc.events().lazy()).filter(name="gemm_fwd_kernel")
    assert by_step["step"].to_list() == [0, 1, 2, 3]
    assert by_step["count"].to_list() == [2] * 4
    assert by_step["total_us"].to_list() == [2 * sc.F / US] * 4


def test_top_kernels_keep_the_largest(tmp_path):
    sc = DataParallel(ranks=2, steps=2)
    top = top_kernels(sc.events().lazy(), 2)
    assert top.height == 2
    assert top["total_us"].to_list() == sorted(top["total_us"].to_list(), reverse=True)


def test_report_carries_the_sections_on_a_real_gloo_capture(tmp_path):
    report = ddprof.analyze(SAMPLES / "gloo-ddp-4rank-slow-rank", cache=tmp_path / "c")
    steps = report.table("step_times").to_dicts()  # rows per rank and step: a detail table
    assert {(r["rank"], r["step"]) for r in steps} == {(r, s) for r in range(4) for s in report["run"]["steps"]}
    assert all(r["step_us"] > 0 and r["kernels"] > 0 for r in steps)
    # DDP on this model: two gradient buckets, one all-reduce each, in every step
    assert {r["collectives"] for r in steps} == {2}
    names = [k["name"] for k in report["kernels"]]
    assert "gloo:all_reduce" in names and len(names) <= 20
    assert {k["name"] for k in report.table("kernels_by_step").to_dicts()} <= set(names)
    assert {k["name"] for k in report["kernels_by_step"]["per_kernel"]} <= set(names)  # and their summaries
