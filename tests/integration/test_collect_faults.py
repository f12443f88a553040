"""A rank that dies mid-job: the survivors' capture and the dead rank's finished cycle stay usable."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

import ddprof  # noqa: E402
from tests.support.distributed_util import comm_events, read_flight_recorder, read_meta, run_example  # noqa: E402


def test_a_dead_rank_is_recorded_and_the_others_are_ingested(tmp_path):
    run_dir = tmp_path / "run"
    # rank 1 exits without cleanup at step 4, after its profiled cycle (steps 2-3) was written;
    # rank 0 then fails in the next all-reduce and ingests after waiting 3 s for rank 1
    job = run_example("ddp", run_dir, 2, "--steps", "6", "--crash-rank", "1", "--crash-step", "4",
                      "--wait-ingest", "--ingest-timeout", "3", expect_rc={0: 1, 1: 17})
    assert "Traceback" in job.logs[0] and "Traceback" not in job.logs[1]

    dead, survivor = read_meta(run_dir, 1), read_meta(run_dir, 0)
    assert dead["status"] == "running" and dead["end"] is None
    assert dead["traces"] == ["rank-00001.cycle-000.pt.trace.json.gz"]
    assert survivor["status"] == "failed"
    assert survivor["error"].startswith("training raised RuntimeError")

    run = ddprof.open_run(run_dir)
    assert run.ranks == [0, 1] and run.steps == [2, 3]
    collector = run.manifest["collector"]
    assert (collector["ranks_complete"], collector["ranks_failed"], collector["ranks_incomplete"],
            collector["ranks_missing"]) == ([], [0], [1], [])
    assert 3 <= collector["waited_s"] < 10
    assert any(w.startswith("rank 1: capture not finalised") for w in collector["warnings"])
    reduces = comm_events(run.events().collect(), "all_reduce")
    assert reduces.group_by("rank").len().sort("rank").rows() == [(0, 4), (1, 4)]

    # the survivor's Flight Recorder shows every all-reduce it issued up to the failure
    fr = read_flight_recorder(run_dir / "raw" / "rank-00000" / "fr_trace_rank_0")
    elems = [e["input_sizes"][0][0] for e in fr["entries"] if e["profiling_name"] == "gloo:all_reduce"]
    assert elems[:7] == [399370] + [267786, 131584] * 3
    assert len(elems) in (8, 9)  # step 4's first bucket, and perhaps its second, were issued
