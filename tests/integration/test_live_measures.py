"""The always-on step measures on real 2-rank gloo DDP jobs under ``ddprof launch`` (tests/support/plain_train.py,
a script that never imports ddprof): every rank writes them, readable while the job runs and after (through
``ddprof.open_run``); a rank that slows down at a known step is named by the launcher's log line, by
``ddprof top --once`` and by the detector within the bound (2 steps or 10 s, whichever is longer), and with
``--auto-trigger`` a window is recorded on every rank; the report's ``job`` section keeps that stretch in its
straggler history; a healthy job raises nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import polars as pl
from ddprof.analyses.live import detect_slow_ranks
from ddprof.analyses.report import build_report

from ddprof.store.step_measures import MeasureTail, measure_files, read_step_measures
from tests.support.launch_util import job_env, launch_cmd, run_launch, torchrun, wait_for, wait_ingested


def top_once(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddprof", "top", str(run_dir), "--once"], capture_output=True,
                          text=True, timeout=120)


def test_slow_rank_named_within_the_bound_and_auto_triggered(tmp_path: Path) -> None:
    run_dir = tmp_path / "slow"
    log = tmp_path / "launch.log"
    job = torchrun(2, "--steps", "70", "--step-ms", "10", "--slow-rank", "1", "--slow-from", "35", "--slow-ms", "60")
    with open(log, "wb") as out:
        proc = subprocess.Popen(launch_cmd(run_dir, ["--active", "0", "--auto-trigger", "--auto-trigger-steps", "2"],
                                           job), env=job_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        # readable while the job runs: both ranks' files grow, and a reader sees whole records
        tail = MeasureTail(run_dir)
        wait_for("both ranks' step measures", lambda: tail.poll() >= 0 and len(tail.records) == 2
                 and all(len(r) >= 5 for r in tail.records.values()), timeout=90, poll=0.1)
        assert proc.poll() is None, "the job ended before its measures were read"
        assert tail.headers[0]["world_size"] == 2 and tail.headers[1]["rank"] == 1
        rc = proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert rc == 0, text[-4000:]
    frame = read_step_measures(run_dir)
    assert set(frame.get_column("rank").unique()) == {0, 1}
    per_rank = frame.group_by("rank").agg(pl.col("step").min().alias("first"), pl.col("step").max().alias("last"))
    assert per_rank.get_column("first").to_list() == [1, 1] and per_rank.get_column("last").to_list() == [69, 69]
    # DDP's all-reduces were timed, without the profiler; the last step's are never reported (DDP reports an
    # iteration's times at the next forward): unknown, not zero
    coll = frame.filter(pl.col("step") < 69).get_column("coll_ms")
    assert coll.null_count() == 0 and coll.min() >= 0
    assert frame.filter(pl.col("step") == 69).get_column("coll_ms").to_list() == [None, None]
    assert frame.filter(pl.col("step") < 69).get_column("arrive").null_count() == 0
    assert frame.get_column("rss_mb").drop_nulls().len() > 0

    # the detector, fed the steps as they came: named at the second slow step at the latest, or within 10 s
    ends = frame.filter(pl.col("rank") == 1).select("step", "end")
    change_end = ends.filter(pl.col("step") == 35).item(0, "end")
    first_named = None
    for upto in range(20, 70):
        slow = detect_slow_ranks(frame.filter(pl.col("step") <= upto))
        if slow:
            first_named = (upto, slow)
            break
    assert first_named is not None
    upto, slow = first_named
    assert [s.rank for s in slow] == [1] and slow[0].since_step == 35, slow
    named_end = ends.filter(pl.col("step") == upto).item(0, "end")
    assert upto <= 36 or named_end - change_end <= 10.0, (upto, named_end - change_end)
    assert not detect_slow_ranks(frame.filter(pl.col("step") <= 34))

    # the launcher said so (its watch reads the files once a second), and the trigger recorded a window
    assert "rank 1 is slow since step 35" in text, text[-3000:]
    assert "auto-trigger (rank(s) 1 became slow): trigger 1: ranks 0-1 record steps" in text, text[-3000:]
    assert len(list(run_dir.glob("raw/rank-*/rank-*.trigger-001.pt.trace.json.gz"))) == 2
    done = top_once(run_dir)
    assert done.returncode == 0, done.stderr
    assert "straggler: rank 1, slow since step 35" in done.stdout, done.stdout
    assert "rank 1 is slow since step 35" in done.stderr

    # after the run, the report's straggler history has the stretch, from the measures of every step
    report = build_report(wait_ingested(run_dir))
    job = report["job"]
    assert job["measured"] and job["ranks"] == 2 and job["first_step"] == 1, job
    assert [(e["rank"], e["first_step"], e["named_step"]) for e in job["episodes"]] == [(1, 35, 39)], job["episodes"]
    assert job["episodes"][0]["last_step"] >= 60 and job["episodes"][0]["excess_ms"] > 40
    assert any(v.startswith("rank 1 was slow for ") and "(35-" in v for v in report["verdicts"]), report["verdicts"]


def test_healthy_job_raises_nothing_and_the_measures_are_part_of_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "healthy"
    proc = run_launch(run_dir, ["--wait", "5", "--warmup", "1", "--active", "2"],
                      torchrun(2, "--steps", "40", "--step-ms", "10"))
    assert "is slow" not in proc.stderr, proc.stderr[-3000:]
    assert set(measure_files(run_dir)) == {0, 1}
    top = top_once(run_dir)
    assert top.returncode == 0, top.stderr
    assert "straggler: none" in top.stdout and "is slow" not in top.stderr, top.stdout
    run = wait_ingested(run_dir)
    measures = run.step_measures()
    assert measures.height == 2 * 39 and measures.get_column("wall_ms").min() > 0
    assert measures.columns[:4] == ["rank", "step", "end", "wall_ms"]
    report = build_report(run)
    assert report["job"]["measured"] and report["job"]["episodes"] == [], report["job"]["episodes"]
    assert not [v for v in report["verdicts"] if " was slow for " in v or "not typical" in v], report["verdicts"]


def test_top_without_measures_says_why(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    started = time.monotonic()
    proc = top_once(empty)
    assert proc.returncode == 2 and "no step measures in" in proc.stderr
    assert time.monotonic() - started < 60


def test_ddprof_profile_writes_the_measures_too(tmp_path: Path) -> None:
    """The same measures from a script that calls ``ddprof.profile`` (tests/support/jobs.py ddp), its DDP
    model built inside the profile; rank 1 slow from the start: its own time is the longer one."""
    from tests.support.jobs import spawn_local

    run_dir = tmp_path / "profiled"
    codes = spawn_local(["ddp", "-o", str(run_dir), "--steps", "14", "--slow-rank", "1", "--slow-ms", "40",
                         "--active", "1"], 2, tmp_path / "logs", timeout=240)
    assert not any(codes.values()), codes
    frame = read_step_measures(run_dir)
    assert frame.filter(pl.col("rank") == 0).get_column("step").to_list() == list(range(14))
    steady = frame.filter(pl.col("step").is_between(2, 12))
    own = steady.group_by("rank").agg((pl.col("wall_ms") - pl.col("coll_ms")).median().alias("own")).sort("rank")
    low, high = own.get_column("own").to_list()
    assert high - low > 25, own  # rank 1 sleeps 40 ms a step; rank 0 waits that long in the all-reduce
