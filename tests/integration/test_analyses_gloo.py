"""The analyses on real CPU-only gloo runs (3 local ranks): a DDP job with a slow rank, a GPipe job."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

from ddprof.analyses.report import build_report  # noqa: E402
from ddprof.analyses.straggler_cause import CONTENTION_MIN  # noqa: E402

import ddprof  # noqa: E402
from ddprof.render.text import render_text  # noqa: E402
from tests.support.distributed_util import run_example  # noqa: E402

pytestmark = pytest.mark.slow
SLOW_RANK, SLOW_MS = 1, 40


@pytest.fixture(scope="module")
def ddp_report(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ddp-slow") / "run"
    run_example("ddp", run_dir, 3, "--steps", "6", "--wait", "1", "--warmup", "1", "--active", "3",
                "--slow-rank", str(SLOW_RANK), "--slow-ms", str(SLOW_MS), "--wait-ingest")
    return build_report(ddprof.open_run(run_dir))


def test_slow_rank_is_the_straggler(ddp_report):
    st = ddp_report["stragglers"]
    assert st["ranks"] == [SLOW_RANK]
    per = {p["rank"]: p for p in st["per_rank"]}
    assert per[SLOW_RANK]["times_last"] == per[SLOW_RANK]["instances"] > 0
    # The others wait for the sleep at every step's first bucket (most of the 40 ms).
    steps = len(ddp_report["run"]["steps"])
    assert per[SLOW_RANK]["wait_caused_us"] / steps > 0.5 * SLOW_MS * 1000
    assert ddp_report["verdicts"][0].startswith(f"rank {SLOW_RANK} is the straggler")


def test_healthy_ddp_names_no_straggler(tmp_path):
    """The same job without a slow rank, each rank on a CPU of its own (pinned; a healthy machine): some
    rank is last at every bucket and the others wait milliseconds for it (often 5-40 % of a step), but which
    rank rotates from step to step: nobody is named. (Under pure chance a run names one with probability at
    most 5 %, the test's level; the healthy captures measured never came near: p 0.125 and above.) Three
    ranks on this machine's two CPUs are not a healthy machine: one of two ranks sharing a CPU ran its ops
    1.5x slower than the third for a whole run, once in eight CI runs, and was named for it. Pinned to
    its own CPU, a rank still shares it with whatever else the machine runs: once in some twenty CI runs a
    rank's ops took 2.4x the other's for the whole run (its CPU busy with work outside the job), and it was
    named with that cause, CPU contention, which is right; never with a cause of the job's own."""
    run_dir = tmp_path / "run"
    ranks = min(3, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else 2
    run_example("ddp", run_dir, ranks, "--steps", "6", "--wait", "1", "--warmup", "1", "--active", "3",
                "--wait-ingest", "--pin")
    report = build_report(ddprof.open_run(run_dir))
    st = report["stragglers"]
    if st["ranks"]:  # the machine, not the job: a CPU busier than the others for the whole run
        causes = {c["rank"]: c for c in st["causes"]}
        for r in st["ranks"]:
            ev = {e["measure"]: e for e in causes[r]["evidence"]}
            assert causes[r]["cause"] == "contention" and ev["compute"]["ratio"] >= CONTENTION_MIN, report["verdicts"]
        return
    assert st["ranks"] == [], report["verdicts"]
    assert sum(p["times_last"] for p in st["per_rank"]) > 0 and all(p["units"] == 3 for p in st["per_rank"])
    assert any(v.startswith("no straggler: ") for v in report["verdicts"]), report["verdicts"]
    assert "Stragglers: none" in render_text(report)


def test_cpu_sections(ddp_report):
    assert ddp_report["run"]["device"] == "cpu" and ddp_report["idle"] == []
    assert all(o["device"] == "cpu" and o["comm_us"] > 0 for o in ddp_report["overlap"])
    # DDP all-reduces run on gloo threads while the backward pass computes: some overlap.
    assert max(o["overlapped_us"] for o in ddp_report["overlap"]) > 0
    for b in ddp_report["breakdown"]:
        assert b["idle_pct"] + b["compute_pct"] + b["non_compute_pct"] == pytest.approx(100.0)
    coll = ddp_report.table("collectives").to_dicts()  # every instance: the detail table
    assert coll and {c["op"] for c in coll} == {"all_reduce"} and all(c["ranks_seen"] == [0, 1, 2] for c in coll)
    assert all(c["bytes"] and c["busbw_gbps"] > 0 for c in coll)
    assert not [w for w in ddp_report["run"]["warnings"] if "process group" in w]
    assert max(len(line) for line in render_text(ddp_report).splitlines()) <= 100


def test_gpipe_over_gloo(tmp_path):
    run_dir = tmp_path / "run"
    run_example("pipeline", run_dir, 3, "--steps", "4", "--wait", "1", "--warmup", "1", "--active", "2",
                "--microbatches", "4", "--wait-ingest")
    report = build_report(ddprof.open_run(run_dir))
    # Blocking send/recv run on the main thread; the compute around them is still found.
    assert all(b["compute_us"] > 0 for b in report["breakdown"])
    assert all(0 < b["bubble_pct"] < 100 for b in report.table("bubbles").to_dicts())
    # Waiting on a pipeline neighbour is a bubble, not straggling.
    assert report["stragglers"]["ranks"] == []
    assert not [w for w in report["run"]["warnings"] if "process group" in w]
    stages = sorted(report["pipeline"], key=lambda p: p["stage"])
    assert [p["rank"] for p in stages] == [0, 1, 2]
    assert all(p["stages"] == 3 and p["micro_batches"] == 4 for p in stages)
    assert all(p["theoretical_pct"] == pytest.approx(100 * 2 / 6) and 0 < p["bubble_pct"] < 100 for p in stages)
    p2p = report.table("collectives").to_dicts()
    assert {(c["src"], c["dst"]) for c in p2p} == {(0, 1), (1, 2), (2, 1), (1, 0)}
    assert all(len(c["ranks_seen"]) == 2 and c["bytes"] for c in p2p)
