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

import ddprof  # noqa: E402
from ddprof.errors import UsageError  # noqa: E402
from tests.support.launch_util import start_launch, statuses, torchrun, wait_for, wait_ingested  # noqa: E402

WINDOW = re.compile(r"trigger (\d+): ranks 0-1 record steps (\d+)-(\d+) \(trace rank-R.trigger-\d+\); the trigger came "
                    r"during step (\d+); the first recorded step, (\d+), began ([0-9.]+) (?:µs|ms|s) after it \(bound: the step "
                    r"after the one in progress\)")


def trigger_cli(run_dir, steps: int) -> tuple[int, int, int, int]:
    """Run ``ddprof trigger``; return (id, first step, last step, step in progress) from its line."""
    proc = subprocess.run([sys.executable, "-m", "ddprof", "trigger", str(run_dir), "--steps", str(steps)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = WINDOW.search(proc.stdout)
    assert match, proc.stdout
    assert match[2] == match[5] and float(match[6]) > 0  # the latency printed is that of the first recorded step
    return int(match[1]), int(match[2]), int(match[3]), int(match[4])


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
            trigger_id, first, last, in_progress = trigger_cli(run_dir, steps)
            assert last - first + 1 == steps
            # the bound: the step after the one in progress (the same step when the signal came at the boundary)
            assert in_progress <= first <= in_progress + 1
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
            assert (window["start_step"], window["end_step"], window["late_by"], window["confirmed"]) == (
                first, last, 0, True)
            assert window["began_wall"] >= window["seen_wall"]
        with gzip.open(run_dir / "raw" / f"rank-{rank:05d}" / names[0], "rt") as fh:
            assert json.load(fh)["distributedInfo"]["rank"] == rank
    # the bound, from what each rank noted: the window starts at the step after the one the job's furthest
    # rank was in when the signal came (a rank at most one step behind it starts there too)
    for trigger_id, first, _ in windows:
        noted = [s["windows"][trigger_id - 1]["signalled_in_step"] for s in statuses(run_dir).values()]
        assert max(noted) <= first <= max(noted) + 1 and min(noted) >= first - 2, noted
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
            if step == 3:  # the request comes during step 3: the window is steps 4-5, no warm-up step
                result = trigger(run_dir, 2, wait_s=0)
                assert result.signalled == [0]
            prof.step()
    trace = run_dir / "raw" / "rank-00000" / "rank-00000.trigger-001.pt.trace.json.gz"
    with gzip.open(trace, "rt") as fh:
        steps = {e["name"] for e in json.load(fh)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#4", "ProfilerStep#5"}
    assert not list((run_dir / "raw" / "rank-00000").glob("*.cycle-*"))
    status = statuses(run_dir)[0]
    assert status["windows"][0] | {"seen_wall": 0, "began_wall": 0} == {
        "id": 1, "requested_start": 4, "start_step": 4, "end_step": 5, "seen_at_step": 4, "signalled_in_step": 3,
        "seen_wall": 0, "late_by": 0, "confirmed": True, "began_wall": 0, "written": trace.name}
    assert status["exit"]["how"] == "profile exited"


def test_on_demand_only_and_never_triggered_says_no_trigger_was_sent(tmp_path):
    """``active=0`` and no ``ddprof trigger``: nothing is recorded, and the run dir's explanation says that
    no trigger was sent (not only that no process wrote a trace)."""
    import torch

    from ddprof.store.capture_status import explain_no_trace

    run_dir = tmp_path / "run"
    model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
    with ddprof.profile(run_dir, active=0, on_demand=True, ingest=False, flight_recorder=False) as prof:
        for _ in range(6):
            model(x).sum().backward()
            prof.step()
    assert not list(run_dir.glob("raw/rank-*/*.pt.trace.json.gz"))
    assert statuses(run_dir)[0]["active"] == 0
    head, rank0 = explain_no_trace(run_dir).splitlines()
    assert head.endswith("none wrote a trace: they record on demand only (--active 0) and no trigger was sent")
    assert rank0.startswith("  rank 0 ") and rank0.endswith(
        f"--active 0 records only the windows ddprof trigger asks for, and no trigger was sent: ask with "
        f"ddprof trigger {run_dir} --steps N while the job runs")
    with pytest.raises(Exception, match="no trigger was sent"):
        ddprof.analyze(run_dir)


def _request(run_dir, trigger_id: int, steps: int, ranks: list[int]) -> None:
    from ddprof.collectors.ondemand import trigger_path

    path = trigger_path(run_dir, trigger_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": trigger_id, "steps": steps, "wall": 0, "signalled_all": True, "ranks": ranks}))


def test_a_rank_a_step_ahead_moves_the_start_for_every_rank(tmp_path, monkeypatch):
    """Rank 1 had passed the boundary into step 5 when the trigger came; rank 0, still in step 4, sees it
    first and proposes 5. Rank 1 learns 5 at the boundary into 6 and raises the start to 6; rank 0 reads 6
    when it confirms, at the boundary after its first recorded step: both record 6-7."""
    from ddprof.collectors.ondemand import OnDemand
    from ddprof.collectors.status import ProcessStatus
    from torch.distributed import HashStore

    store = HashStore()
    monkeypatch.setattr(OnDemand, "_store", lambda self: store)
    ranks = [OnDemand(tmp_path, ProcessStatus(tmp_path, step_source="test"), step=s) for s in (4, 5)]
    _request(tmp_path, 1, 2, [0, 1])
    for od in ranks:
        od.signalled()
    assert ranks[0].boundary(5) == []  # the first to see it: proposes 5, begins recording step 5
    assert (ranks[0].windows[0].start, ranks[0].windows[0].confirmed) == (5, False)
    assert ranks[1].boundary(6) == []  # a step ahead: 5 already began here, the start becomes 6
    assert (ranks[1].windows[0].start, ranks[1].windows[0].end, ranks[1].windows[0].extra["late_by"]) == (6, 7, 0)
    moved = ranks[0].boundary(6)  # confirms: every rank answered, the start is 6
    assert [(m.window.id, m.old_start) for m in moved] == [(1, 5)]
    assert ranks[1].boundary(7) == []
    for od in ranks:
        (w,) = od.windows
        assert (w.start, w.end, w.confirmed, w.extra["start_step"], w.extra["confirmed"]) == (6, 7, True, 6, True)
    assert [od.windows[0].extra["signalled_in_step"] for od in ranks] == [4, 5]


def test_a_window_that_moved_drops_the_step_recorded_before_and_records_from_the_new_start(tmp_path, monkeypatch):
    """``ddprof.profile`` on the early rank: step 4 was recorded for the window alone, the start moved to
    5 (the other rank, played here through the store, was a step ahead); the trace holds steps 5-6 only."""
    import torch
    from ddprof.collectors.ondemand import OnDemand
    from torch.distributed import HashStore

    store = HashStore()
    monkeypatch.setattr(OnDemand, "_store", lambda self: store)
    run_dir = tmp_path / "run"
    model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
    with ddprof.profile(run_dir, active=0, on_demand=True, ingest=False, flight_recorder=False) as prof:
        for step in range(10):
            model(x).sum().backward()
            if step == 3:
                _request(run_dir, 1, 2, [0, 1])
                prof._ondemand.signalled()
            if step == 4:  # rank 1 learns the start 4 at the boundary into 5: it raises it and answers
                assert store.get("ddprof/trigger/1").decode() == "4"
                store.compare_set("ddprof/trigger/1", "4", "5")
                assert store.add("ddprof/trigger/1/acks", 1) == 2
                store.set("ddprof/trigger/1/done", "1")
            prof.step()
    names = sorted(p.name for p in (run_dir / "raw" / "rank-00000").glob("*.pt.trace.json.gz"))
    assert names == ["rank-00000.trigger-001.pt.trace.json.gz"]
    with gzip.open(run_dir / "raw" / "rank-00000" / names[0], "rt") as fh:
        steps = {e["name"] for e in json.load(fh)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#5", "ProfilerStep#6"}
    (window,) = statuses(run_dir)[0]["windows"]
    assert (window["start_step"], window["end_step"], window["moved_from"], window["written"]) == (5, 6, 4, names[0])
