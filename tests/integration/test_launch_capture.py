"""``ddprof launch`` captures jobs whose script does not import ddprof (``tests/support/plain_train.py``): real 2-rank
gloo DDP jobs under torchrun or ``mp.spawn``, rank 1 made slow, each capture analysed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import polars as pl
import pytest

pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

import ddprof  # noqa: E402
from tests.support.jobs import free_port  # noqa: E402
from tests.support.launch_util import (  # noqa: E402
    PLAIN,
    analyze_json,
    job_env,
    launch_cmd,
    run_launch,
    start_launch,
    statuses,
    torchrun,
    wait_for,
    wait_ingested,
)

#: Rank 1 sleeps 60 ms a step. A capture that should name it records 3 steps: of 2 ranks, 2 steps leave
#: one degree of freedom for the step-to-step variation a straggler is told from chance against
#: (analyses/stragglers.py), and on a loaded machine a 60 ms sleep came out 31 ms late at one step and
#: 45 ms at the other, not told from chance (a 250 or 500 ms sleep varies as much in proportion).
SLOW = ["--slow-rank", "1", "--slow-ms", "60"]


def assert_names_slow_rank(run_dir) -> dict:
    report = ddprof.analyze(run_dir)  # what `ddprof analyze RUN --format json` prints
    assert report["status"] == "ok", report["run"]["warnings"]
    assert report["stragglers"]["ranks"] == [1], report["verdicts"]
    assert report["verdicts"][0].startswith("rank 1 is the straggler"), report["verdicts"]
    return report


def test_ddp_under_torchrun_is_captured_without_a_line_of_ddprof(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_launch(run_dir, [], torchrun(2, "--steps", "6", *SLOW))
    assert f"analyse with: ddprof analyze {run_dir}" in proc.stderr
    run = wait_ingested(run_dir)
    assert (run.ranks, run.world_size, run.steps) == ([0, 1], 2, [2, 3, 4])  # the default schedule
    assert run.manifest["collector"]["ranks_complete"] == [0, 1]
    for rank, status in statuses(run_dir).items():
        assert status["steps_seen"] == 6 and status["step_source"] == "optimizer.step"
        assert status["exit"]["how"] == "exited normally"
        assert status["traces"] == [f"rank-{rank:05d}.cycle-000.pt.trace.json.gz"]
        assert (run_dir / "raw" / f"rank-{rank:05d}" / f"fr_trace_rank_{rank}").exists()
    # the bootstrap wrote nothing outside the run dir, and torchrun's agent is no rank
    assert sorted(p.name for p in (run_dir / ".bootstrap").iterdir()) == ["config.json", "sitecustomize.py"]
    assert len(list((run_dir / ".ddprof" / "status").glob("*.json"))) == 2
    assert_names_slow_rank(run_dir)


def test_two_optimizers_count_one_step_per_iteration(tmp_path):
    run_dir = tmp_path / "run"
    run_launch(run_dir, ["--active", "3"], torchrun(2, "--steps", "5", "--optimizers", "2", *SLOW))
    run = wait_ingested(run_dir)
    assert run.steps == [2, 3, 4]
    assert {s["steps_seen"] for s in statuses(run_dir).values()} == {5}  # 5 iterations, not 10 optimizer steps
    opt_steps = (run.events().filter(pl.col("name").str.starts_with("Optimizer.step#")).collect()
                 .group_by("rank", "step").agg(pl.col("name").sort()).sort("rank", "step"))
    assert opt_steps.height == 6  # 2 ranks x 3 steps, each step one whole iteration: SGD then Adam
    assert set(map(tuple, opt_steps["name"].to_list())) == {("Optimizer.step#Adam.step", "Optimizer.step#SGD.step")}
    assert_names_slow_rank(run_dir)


def test_a_job_without_optimizer_is_counted_with_step_on_and_explained_without(tmp_path):
    job = torchrun(2, "--steps", "5", "--optimizers", "0", *SLOW)
    counted = tmp_path / "counted"
    run_launch(counted, ["--step-on", "plain_steps:train_step", "--active", "3"], job)
    run = wait_ingested(counted)
    assert (run.ranks, run.steps) == ([0, 1], [2, 3, 4])
    assert {s["step_source"] for s in statuses(counted).values()} == {"plain_steps:train_step"}
    assert_names_slow_rank(counted)

    uncounted = tmp_path / "uncounted"
    proc = run_launch(uncounted, [], job)
    assert f"no trace was written; `ddprof analyze {uncounted}` says what each process saw" in proc.stderr
    rc, report, err = analyze_json(uncounted)
    assert (rc, report) == (2, None)
    assert "no trace file in" in err and "no trace files (*.json" not in err
    for rank in (0, 1):
        assert f"rank {rank} (host" in err
    assert err.count("0 steps seen (step source: optimizer.step); ended: exited normally: no step was counted") == 2
    assert "--step-on MODULE:FUNCTION" in err


def test_steps_counted_per_batch_of_a_dataloader_with_gradient_accumulation(tmp_path):
    """``--step-on-loader``: one step per batch the DataLoader yields, where the optimizer steps every 2 batches."""
    run_dir = tmp_path / "run"
    run_launch(run_dir, ["--step-on-loader", "torch.utils.data:DataLoader", "--active", "3"],
               torchrun(2, "--steps", "6", "--loader", "--accumulate", "2", *SLOW))
    run = wait_ingested(run_dir)
    assert (run.ranks, run.steps) == ([0, 1], [2, 3, 4])
    for status in statuses(run_dir).values():  # 6 batches, not 3 optimizer steps
        assert (status["steps_seen"], status["step_source"]) == (6, "loader torch.utils.data:DataLoader")
    opt_steps = (run.events().filter(pl.col("name").str.starts_with("Optimizer.step#")).collect()
                 .group_by("rank").agg(pl.col("step").unique().sort()).sort("rank"))
    assert opt_steps["step"].to_list() == [[3], [3]]  # batch 3 is the second of a pair: the optimizer steps there
    assert_names_slow_rank(run_dir)


def test_mp_spawn_children_are_captured(tmp_path):
    run_dir = tmp_path / "run"
    job = [sys.executable, str(PLAIN), "--spawn", "2", "--steps", "6", *SLOW]
    env = job_env() | {"PLAIN_TRAIN_PORT": str(free_port())}
    proc = subprocess.run(launch_cmd(run_dir, [], job), env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-5000:]
    run = wait_ingested(run_dir)
    assert (run.ranks, run.steps) == ([0, 1], [2, 3, 4])
    assert_names_slow_rank(run_dir)


def test_a_job_killed_mid_capture_is_explained(tmp_path):
    run_dir = tmp_path / "run"
    launcher = start_launch(run_dir, ["--active", "200"], torchrun(2, "--steps", "2000", "--step-ms", "10"),
                            tmp_path / "launch.log")
    try:
        wait_for("both ranks recording", lambda: len([s for s in statuses(run_dir).values()
                                                      if s.get("recording")]) == 2)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)  # the launcher, torchrun and the ranks: nothing exits cleanly
        launcher.wait(timeout=30)
    rc, report, err = analyze_json(run_dir)
    assert (rc, report) == (2, None), err
    for rank in (0, 1):
        line = next(ln for ln in err.splitlines() if ln.strip().startswith(f"rank {rank} (host"))
        assert "was recording steps 2-201" in line
        assert "no exit recorded" in line and "the process ended while recording, before the window was written" in line


def test_a_rank_killed_mid_capture_leaves_the_others_window_and_analyze_names_it(tmp_path):
    run_dir = tmp_path / "run"
    launcher = start_launch(run_dir, ["--active", "200", "--ingest-timeout", "5"],
                            torchrun(2, "--steps", "2000", "--step-ms", "10", *SLOW), tmp_path / "launch.log")
    try:
        # kill only once both ranks are a few steps into the window, so rank 0 has recorded some of it to write
        def recording_a_while(s):
            into = [v for v in s.values() if v.get("recording") and v["step"] >= v["recording"]["start_step"] + 3]
            return s if len(into) == 2 else None
        got = wait_for("both ranks a few steps into the window", lambda: recording_a_while(statuses(run_dir)))
        os.kill(got[1]["pid"], signal.SIGKILL)  # rank 1 dies; torchrun stops rank 0 with SIGTERM
        assert launcher.wait(timeout=120) != 0
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    run = wait_ingested(run_dir)
    collector = run.manifest["collector"]
    assert (run.ranks, collector["ranks_failed"], collector["ranks_incomplete"]) == ([0], [0], [1])
    assert run.steps[0] == 2 and len(run.steps) >= 2  # rank 0 wrote the part of the window it recorded
    report = ddprof.analyze(run_dir)
    assert report["verdicts"][0].startswith("1 of 2 ranks traced; missing 1"), report["verdicts"]
    assert statuses(run_dir)[0]["exit"]["how"].startswith("raised ")  # gloo's error, or the SIGTERM
    assert statuses(run_dir)[1]["exit"] is None
