"""``ddprof check`` on a fresh real capture: 4 gloo ranks on loopback running the DDP job of the bundled
``gloo-ddp-4rank-slow-rank`` sample with the same arguments but no sleeping rank; and the same job re-run
while busy processes share the machine, whose cause is the environment, not a rank and not the code."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

from ddprof.analyses.compare.check import check  # noqa: E402
from ddprof.analyses.compare.job import job_differences, other_shapes, workload_changes  # noqa: E402
from ddprof.analyses.compare.rules import DEFAULTS  # noqa: E402

from ddprof.inputs.reports import load_report  # noqa: E402
from tests.support.distributed_util import run_example  # noqa: E402
from tests.support.paths import SAMPLES

pytestmark = pytest.mark.slow
SAMPLE = SAMPLES / "gloo-ddp-4rank-slow-rank"
#: The sample's job (its README) without ``--slow-rank 2 --slow-ms 100``.
JOB = ("--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2", "--bucket-cap-mb", "0.5", "--wait-ingest")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("check-gloo") / "run"
    run_example("ddp", run_dir, 4, *JOB)
    return load_report(run_dir)


#: More active steps than ``JOB``: a cause is told from the steps of each rank.
LONGER = ("--steps", "8", "--wait", "1", "--warmup", "1", "--active", "6", "--bucket-cap-mb", "0.5", "--wait-ingest")


@pytest.fixture(scope="module")
def clean_and_busy(tmp_path_factory):
    """The job run alone, then again beside one busy process per CPU (2 to 16): the machine slower."""
    root = tmp_path_factory.mktemp("check-gloo-busy")
    run_example("ddp", root / "clean", 4, *LONGER)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(min(max(os.cpu_count() or 2, 2), 16))]
    try:
        run_example("ddp", root / "busy", 4, *LONGER)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    return load_report(root / "clean"), load_report(root / "busy")


def test_a_rerun_on_a_busy_machine_is_the_environment_not_a_rank_nor_the_code(clean_and_busy):
    clean, busy = clean_and_busy
    result = check(busy, clean)
    # the busy processes slow every rank, unevenly (which rank the scheduler descheduled most varies): when
    # the check finds the run slower, the cause is the environment, never one rank or the code
    if result["status"] != "ok":
        assert result["cause"]["class"] == "environment", (result["cause"], result["summary"])
        assert result["status"] == "environment_changed", result["status"]
    assert check(busy, clean, environment="warn")["status"] == "ok"
    cause = check(clean, clean)["cause"]
    assert cause is None


#: The fault matrix's DDP job, every rank pinned to its own CPU (benchmarks/fault_matrix.py).
PINNED = ("--steps", "16", "--wait", "1", "--warmup", "1", "--active", "12", "--wait-ingest", "--hidden", "512",
          "--batch", "64", "--loader", "--pin")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="pins each rank to a CPU")
def test_another_process_on_one_ranks_cpu_is_the_machines_load(tmp_path):
    """The same 2-rank job, then again with another process busy on rank 1's CPU (the fault matrix's
    ``machine`` fault): rank 1 is late, and its training thread waited for the CPU while its own threads
    ran no more than rank 0's. analyze says other processes took its CPU; check says the environment, the
    machine's load, not rank 1 (10 of 10 such runs against 2 clean baselines did, in the benchmark; here
    one clean baseline, which this VM may have run as slowly or disturbed: then it passes or names another
    rule of the environment, never rank 1). The busy process must be the machine's load that counts: where
    something else took rank 0's CPU more (a CI runner once had rank 0 wait 4.5 ms a step more than rank
    1), the run does not pose the question, and the pair is run once more."""
    for attempt in range(2):
        run_example("ddp", tmp_path / f"clean-{attempt}", 2, *PINNED, "--fault", "none")
        run_example("ddp", tmp_path / f"busy-{attempt}", 2, *PINNED, "--fault", "machine", "--fault-rank", "1")
        clean, busy = load_report(tmp_path / f"clean-{attempt}"), load_report(tmp_path / f"busy-{attempt}")
        cpu = {c["rank"]: c for c in busy["job"]["cpu"]}
        extra = cpu[1]["wait_ms"] - cpu[0]["wait_ms"]  # rank 1 waited for its CPU; its own threads did not take it
        if extra > 1.0:
            break
    assert extra > 1.0 and cpu[1]["other_threads_ms"] - cpu[0]["other_threads_ms"] < 0.5 * extra, busy["job"]["cpu"]
    if busy["verdicts"][0].startswith("rank 1 is the straggler (CPU contention"):
        assert "its own process took it" not in busy["verdicts"][0], busy["verdicts"]
    result = check(busy, clean)  # the environment (the baseline may be as slow or disturbed: this VM drifts)
    if result["status"] != "ok":
        assert result["cause"]["class"] == "environment", (result["cause"], result["summary"])


def test_a_run_of_another_batch_size_is_another_workload(fresh, tmp_path):
    """The same job with twice the batch: no message changes (DDP's all-reduces carry the gradients, whose
    sizes the batch does not set), but the ops' recorded input shapes do: a changed workload, not a slower
    machine (every op slower by a similar factor was the environment before the shapes were read)."""
    run_example("ddp", tmp_path / "run", 4, *JOB, "--batch", "64")
    bigger = load_report(tmp_path / "run")
    changes = workload_changes(fresh, bigger, DEFAULTS["workload"])
    assert any("on other input shapes" in c for c in changes), changes
    assert {"aten::mm", "aten::addmm"} <= set(other_shapes(fresh, bigger))
    result = check(bigger, fresh)
    assert any("on other input shapes" in line for line in result["summary"]), result["summary"]
    # Four ranks on two shared cores, two steps traced: the machine may hold one rank back long enough for it
    # to be named a straggler in the new run (seen once in CI: 8.9 ms a step); the shapes are still said.
    late = [o["subject"] for o in result["outcomes"] if o["kind"] == "straggler" and o["outcome"] == "fail"]
    if not late:
        assert result["status"] == "workload_changed" and result["cause"]["class"] == "workload", result["summary"]
    else:
        assert result["status"] == "regression" and result["cause"]["class"] in ("workload", "rank"), result
    blind = check(bigger, fresh, rules={**DEFAULTS, "workload": {**DEFAULTS["workload"], "op_shapes": False}})
    assert (blind["cause"] or {}).get("class") != "workload"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return load_report(SAMPLE, cache=tmp_path_factory.mktemp("check-gloo-sample"))


def test_a_fresh_capture_checks_clean_against_itself(fresh):
    assert fresh["run"]["world_size"] == 4 and fresh["run"]["steps"] == [2, 3]
    result = check(fresh, fresh)
    assert result["status"] == "ok", result["summary"]
    assert not any(o["outcome"] == "fail" for o in result["outcomes"])
    passed = {o["id"] for o in result["outcomes"] if o["outcome"] == "pass"}
    assert {"workload[per step]", "step_time[all ranks]", "straggler[all ranks]"} <= passed
    assert {o["subject"] for o in result["outcomes"] if o["rule"] == "busbw"} == {"all_reduce 514 KiB",
                                                                                 "all_reduce 1.02 MiB"}


def test_the_slow_rank_sample_is_the_same_job_with_a_straggler(fresh, sample):
    """Same world size, backend, device, ops and message sizes (two DDP buckets of 1071144 and 526336 bytes
    per step): the same job and workload, so the timings are compared. The sample's rank 2 sleeps 100 ms
    before each forward: against it as the baseline the fresh run is faster (no step-time regression); as the run,
    the sample fails with rank 2 named the straggler and the step time about 100 ms longer."""
    assert job_differences(sample, fresh) == []
    assert workload_changes(sample, fresh, DEFAULTS["workload"]) == [], fresh["step_times"]
    sizes = sorted({c["bytes"] for c in fresh.table("collectives").to_dicts() if c["op"] == "all_reduce"})
    assert sizes == [526336, 1071144]
    better = check(fresh, sample)
    # no step time or workload rule fails: the fresh run is ~100 ms faster per step. The CPU ops' own times,
    # and which rank of a fresh 4-process run on a 2-core machine is descheduled longest, depend on how busy
    # the machine is now: a kernels rule or a (real) straggler of the fresh run may fail here and is not asserted
    assert not [o["message"] for o in better["outcomes"] if o["outcome"] == "fail"
                and o["rule"] in ("step_time", "step_time_p90", "workload")]
    assert next(o for o in better["outcomes"] if o["id"] == "step_time[all ranks]")["change"] < -50_000  # µs
    worse = check(sample, fresh)
    assert worse["status"] == "regression", worse["summary"]
    # on a busy machine a fresh capture may name rank 2 a straggler too: then it straggles more
    assert worse["summary"][0].startswith(("rank 2 became a straggler: the others wait ",
                                           "rank 2, a straggler already, makes the others wait ")), worse["summary"]
    # rank 2's own time per step (its sleep is no communication) rose by about 100 ms, the others' by a few:
    # one rank, whatever else the two machines differ in
    assert (worse["cause"]["class"], worse["cause"]["rank"]) == ("rank", 2), worse["cause"]
    overall = next(o for o in worse["outcomes"] if o["id"] == "step_time[all ranks]")
    assert overall["outcome"] == "fail" and overall["interval"][0] > 0
    # µs: the sample's steps hold the 100 ms sleep; the fresh run's own steps are longer the busier this
    # machine is (36-60 ms seen against the sample's 122 ms), so the shift is 60-90 ms, not the whole 100 ms
    assert overall["change"] > 20_000
