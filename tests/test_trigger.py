"""``ddprof trigger``: windows recorded on request while a job runs, the same steps on every rank."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import polars as pl
import pytest

pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

from ddprof.collectors.trigger import trigger  # noqa: E402
from launch_util import start_launch, statuses, torchrun, wait_for, wait_ingested  # noqa: E402

import ddprof  # noqa: E402
from ddprof.errors import UsageError  # noqa: E402

WINDOW = re.compile(r"trigger (\d+): ranks 0-1 record steps (\d+)-(\d+) .*began ([0-9.]+) s after the trigger")


def trigger_cli(run_dir, steps: int) -> tuple[int, int, int]:
    """Run ``ddprof trigger``; return (id, first step, last step) from its line."""
    proc = subprocess.run([sys.executable, "-m", "ddprof", "trigger", str(run_dir), "--steps", str(steps)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = WINDOW.search(proc.stdout)
    assert match, proc.stdout
    return int(match[1]), int(match[2]), int(match[3])


def written(run_dir, trigger_id: int) -> bool:
    got = statuses(run_dir)
    return len(got) == 2 and all(any(w["id"] == trigger_id and w.get("written") for w in s["windows"])
                                 for s in got.values())


def test_a_running_job_records_each_triggered_window_on_every_rank_at_the_same_steps(tmp_path):
    run_dir, stop = tmp_path / "run", tmp_path / "stop"
    job = torchrun(2, "--steps", "5000", "--step-ms", "20", "--slow-rank", "1", "--slow-ms", "40",
                   "--stop-file", str(stop))
    launcher = start_launch(run_dir, ["--active", "0"], job, tmp_path / "launch.log")
    try:
        wait_for("both ranks listening past step 3", lambda: len([
            s for s in statuses(run_dir).values() if s.get("listening") and s["step"] >= 3]) == 2)
        windows = []
        for steps in (3, 2):
            trigger_id, first, last = trigger_cli(run_dir, steps)
            assert last - first + 1 == steps
            windows.append((trigger_id, first, last))
            wait_for(f"window {trigger_id} written", lambda tid=trigger_id: written(run_dir, tid))
        stop.touch()
        assert launcher.wait(timeout=120) == 0, (tmp_path / "launch.log").read_text()[-3000:]
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert [w[0] for w in windows] == [1, 2]
    run = wait_ingested(run_dir)
    expected = [s for _, first, last in windows for s in range(first, last + 1)]
    assert run.steps == expected
    per_rank = (run.events().filter(pl.col("name").str.starts_with("ProfilerStep#")).collect()
                .group_by("rank").agg(steps=pl.col("step").unique().sort()).sort("rank"))
    assert per_rank["steps"].to_list() == [expected, expected]  # every rank, the same step numbers
    for rank, status in statuses(run_dir).items():
        names = sorted(p.name for p in (run_dir / "raw" / f"rank-{rank:05d}").glob("*.pt.trace.json.gz"))
        assert names == [f"rank-{rank:05d}.trigger-001.pt.trace.json.gz", f"rank-{rank:05d}.trigger-002.pt.trace.json.gz"]
        for window, (_, first, last) in zip(status["windows"], windows, strict=True):
            assert (window["start_step"], window["end_step"], window["late_by"]) == (first, last, 0)
            # the bound: the window starts one step after the step the first rank began when it saw the trigger
            assert window["began_wall"] > window["seen_wall"]
        with gzip.open(run_dir / "raw" / f"rank-{rank:05d}" / names[0], "rt") as fh:
            assert json.load(fh)["distributedInfo"]["rank"] == rank
    firsts = {w["id"]: min(s["windows"][w["id"] - 1]["seen_at_step"] for s in statuses(run_dir).values())
              for w in next(iter(statuses(run_dir).values()))["windows"]}
    assert [first for _, first, _ in windows] == [firsts[1] + 1, firsts[2] + 1]
    report = ddprof.analyze(run_dir)
    assert report["stragglers"]["ranks"] == [1], report["verdicts"]


def test_on_demand_profile_in_a_script_records_the_window_asked_for(tmp_path):
    """``ddprof.profile(on_demand=True, active=0)`` records nothing until triggered; one process, no launcher."""
    import torch

    run_dir = tmp_path / "run"
    model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
    with pytest.raises(UsageError, match="nothing to trigger"):
        trigger(run_dir, 2, wait_s=0)
    with ddprof.profile(run_dir, active=0, on_demand=True, ingest=False, flight_recorder=False) as prof:
        for step in range(10):
            model(x).sum().backward()
            if step == 3:  # the request comes during step 3: the window is steps 5-6 (step 4 warms up)
                result = trigger(run_dir, 2, wait_s=0)
                assert result.signalled == [0]
            prof.step()
    trace = run_dir / "raw" / "rank-00000" / "rank-00000.trigger-001.pt.trace.json.gz"
    with gzip.open(trace, "rt") as fh:
        steps = {e["name"] for e in json.load(fh)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#5", "ProfilerStep#6"}
    assert not list((run_dir / "raw" / "rank-00000").glob("*.cycle-*"))
    status = statuses(run_dir)[0]
    assert status["windows"][0] | {"seen_wall": 0, "began_wall": 0} == {
        "id": 1, "requested_start": 5, "start_step": 5, "end_step": 6, "seen_at_step": 4, "seen_wall": 0,
        "late_by": 0, "began_wall": 0, "written": trace.name}
    assert status["exit"]["how"] == "profile exited"
