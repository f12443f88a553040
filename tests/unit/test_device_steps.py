"""Per-step numbers in device steps on real traces (analyses/frames/stepwindows.py, docs/DESIGN.md §3).

On these traces the host's ProfilerStep#N and the work it launched overlap the next steps (the 16-rank A100
rank's device runs some streams 160 ms behind its host): measured in host step windows, the five steps of
that rank added up to 1.88 s on a 1.23 s trace and its average step had 89 % without compute against 83 %
over the whole trace. Device steps tile the device's time, so where steps are alike the per-step means
are the whole trace's shares (within 1 percentage point), and the steps' totals are the trace's.
"""

from __future__ import annotations

import polars as pl
import pytest
from ddprof.analyses.breakdown import breakdown_by_step, temporal_breakdown
from ddprof.analyses.bubbles import bubbles
from ddprof.analyses.frames.sets import steps
from ddprof.analyses.frames.stepwindows import step_windows
from ddprof.analyses.overlap import overlap, overlap_by_step
from ddprof.analyses.report import read_events

UNIFORM = ["hta/a100-16rank-rank0", "hta/nccl-metadata-a100", "hta/sendrecv-2-of-128",
           pytest.param("hta/v100-2rank-rank1-large", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", UNIFORM)
def test_per_step_means_are_the_whole_trace_shares_where_steps_are_alike(ingested, name):
    p = read_events(ingested(name))
    whole = {r["rank"]: r for r in temporal_breakdown(p).iter_rows(named=True)}
    exposed = {r["rank"]: r["exposed_comm_us"] for r in overlap(p).iter_rows(named=True)}
    per_step = (bubbles(p).join(breakdown_by_step(p).select("rank", "step", "idle_pct", "idle_us"), on=["rank", "step"])
                .join(overlap_by_step(p).select("rank", "step", "exposed_comm_us"), on=["rank", "step"], how="left"))
    assert set(per_step["basis"]) == {"device"}
    for (rank,), mine in per_step.group_by("rank"):
        w = whole[rank]
        assert mine["bubble_pct"].mean() == pytest.approx(100 - w["compute_pct"], abs=1.0), rank
        assert mine["idle_pct"].mean() == pytest.approx(w["idle_pct"], abs=1.0), rank
        exposed_share = 100 * mine["exposed_comm_us"].sum() / mine["window_us"].sum()
        assert exposed_share == pytest.approx(100 * exposed[rank] / w["span_us"], abs=1.0), rank
        # the steps hold all the device's time and work here: no step's work lies outside the steps
        assert mine["window_us"].sum() == pytest.approx(w["span_us"], rel=1e-9)
        assert mine["idle_us"].sum() == pytest.approx(w["idle_us"], rel=1e-9)
        assert mine["compute_us"].sum() == pytest.approx(w["compute_us"], rel=1e-9)


@pytest.mark.parametrize("name", ["hta/a100-16rank-rank0", "dlrm-8xV100-nccl", "tracelens/mi300-rocm-resnet-rank0"])
def test_device_steps_never_overlap_and_follow_the_device(ingested, name):
    p = read_events(ingested(name))
    windows = step_windows(p).sort("rank", "w_start")
    assert windows.height and set(windows["basis"]) == {"device"}
    after = windows.with_columns(pl.col("w_start").shift(-1).over("rank").alias("next"))
    assert (after["w_end"] >= after["w_start"]).all()
    assert after.filter(pl.col("next").is_not_null()).select((pl.col("w_end") == pl.col("next")).all()).item()
    spans = {r["rank"]: r["span_us"] for r in temporal_breakdown(p).iter_rows(named=True)}
    for (rank,), part in windows.group_by("rank"):
        assert (part["w_end"] - part["w_start"]).sum() / 1000 <= spans[rank] * (1 + 1e-12)
    host = steps(p).join(windows, on=["rank", "step"], how="inner")
    assert (host["w_start"] >= host["start"]).all()  # the device starts a step's work after its host does


def test_the_lagging_a100_rank(ingested):
    """Its host steps last 215 ms, but step 550's work runs on to 372 ms: host step windows stretched to the
    work they launched overlapped (1.88 s in all on a 1.23 s trace); its device steps last 211-372 ms each
    and add up to the 1.23 s trace."""
    p = read_events(ingested("hta/a100-16rank-rank0"))
    got = bubbles(p)
    assert got["step"].to_list() == [550, 551, 552, 553, 554]
    assert got["window_us"].sum() == pytest.approx(1_231_461, abs=1)
    host = steps(p).with_columns(((pl.col("end") - pl.col("start")) / 1000).alias("us"))
    assert host["us"].sum() < got["window_us"].sum()  # the device ran on after the host's last step ended
