"""``ddprof whatif``: the projections of a run as text and JSON, and the OSDI'25 study's metrics from one
of its operation tables."""

from __future__ import annotations

import json
import shutil

import pytest

from ddprof.cli import main
from tests.support.paths import OSDI25, trace_set


def test_whatif_of_the_gloo_sample_names_its_sleeping_rank(tmp_path, capsys):
    src = tmp_path / "gloo"
    shutil.copytree(trace_set("gloo-ddp-4rank-slow-rank"), src)
    assert main(["whatif", str(src), "--format", "json", "--comm-faster", "2", "--comm-overlap"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["explained"] and out["replay_error_pct"] <= 2.0 and out["ranks"] == 4 and out["steps"] == 2
    assert [p["edit"] for p in out["projections"]][0] == "straggler_rank_2"
    assert {p["edit"] for p in out["projections"]} >= {"comm_x2", "comm_overlapped", "no_host_gaps"}
    assert out["verdict"].startswith("making rank 2 as fast as the others would cut the step from ")
    assert main(["whatif", str(src), "--straggler", "2", "--kernel", "addmm=2", "--no-host-gaps"]) == 0
    text = capsys.readouterr().out
    assert "verdict: making rank 2 as fast as the others" in text
    assert "kernels matching 'addmm' 2x faster" in text and "host gaps removed" not in text
    # the critical path: rank 2's sleep (its main thread idle before the forward's first op) sets most of
    # each step; the all-reduces on gloo's thread wait for the backward ops that issued them
    assert "critical path (the work and waits that set the step), per step:" in text
    first_op = text.split("critical path (the work and waits that set the step), per step:")[1].splitlines()[1]
    assert "rank 2" in first_op and "idle" in first_op and "aten::linear" in first_op
    assert sum(k["share"] for k in out["critical"]["by_kind"]) == pytest.approx(1.0)


def test_whatif_rejects_a_bad_kernel_edit(tmp_path, capsys):
    src = tmp_path / "gloo"
    shutil.copytree(trace_set("gloo-ddp-4rank-slow-rank"), src)
    assert main(["whatif", str(src), "--kernel", "addmm"]) == 2
    assert "REGEX=K" in capsys.readouterr().err


def test_whatif_models_the_steps_asked_for(tmp_path, capsys):
    """``--steps``: only those steps are modelled and replayed (a run too large to model whole); a step the
    run does not have is a usage error naming the steps it has. ``--no-attribution``: no replay per rank."""
    src = tmp_path / "gloo"
    shutil.copytree(trace_set("gloo-ddp-4rank-slow-rank"), src)
    assert main(["whatif", str(src), "--format", "json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    steps = whole["steps_modelled"]
    assert len(steps) == whole["steps"] == 2
    assert main(["whatif", str(src), "--format", "json", "--steps", str(steps[1]), "--no-attribution"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["steps"] == 1 and one["steps_modelled"] == [steps[1]] and one["ops"] < whole["ops"]
    assert one["explained"] and one["by_rank"] == {} and one["by_op_type"] == {} and whole["by_rank"]
    assert one["projections"][0]["edit"] == "straggler_rank_2"
    assert main(["whatif", str(src), "--steps", f"{steps[1]}"]) == 0
    assert f"1 step(s) ({steps[1]})" in capsys.readouterr().out
    assert main(["whatif", str(src), "--steps", "900-901"]) == 2
    assert f"no step 900, 901 (its steps: {steps[0]}-{steps[1]})" in capsys.readouterr().err


def test_whatif_of_an_osdi25_table_prints_the_study_metrics(capsys):
    assert main(["whatif", str(OSDI25 / "trace-ST.parquet"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["job"] == "ST" and abs(out["blocking_slowdown"] / 1.1787 - 1) < 0.005
    assert max(out["blocking_decompose_by_stage"], key=out["blocking_decompose_by_stage"].get) == "3"
    assert all(abs(r["error"]) <= r["tolerance"] for r in out["published"])
    assert main(["whatif", str(OSDI25 / "trace-ST.parquet")]) == 0
    assert "published answers: 21 of 21 within tolerance" in capsys.readouterr().out
