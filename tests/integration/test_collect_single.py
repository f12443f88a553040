"""ddprof.profile in this very process (no process group): rank 0 of 1, failures that must not reach the
training loop, the run-dir rule, the decorator form, the background ingest, Flight Recorder requests."""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

from ddprof.collectors import layout  # noqa: E402

import ddprof  # noqa: E402
from ddprof.errors import UsageError  # noqa: E402
from tests.support.distributed_util import read_flight_recorder, read_meta  # noqa: E402

ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
       "PMI_RANK", "DDPROF_RUN_DIR", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
       "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DUMP_ON_TIMEOUT")
SCHEDULE = {"wait": 1, "warmup": 1, "active": 2}


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    """No launcher variables; whatever the capture sets in os.environ is undone after the test."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def train(prof, steps: int = 6) -> int:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for _ in range(steps):
        model(torch.randn(8, 16)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
        done += 1
    return done


def test_single_process_is_rank_0_of_1_and_ingests_synchronously(tmp_path):
    run_dir = tmp_path / "run"
    with ddprof.profile(run_dir, wait_ingest=True, **SCHEDULE) as prof:
        assert train(prof) == 6
    assert prof.failures == []
    with gzip.open(run_dir / "raw" / "rank-00000" / "rank-00000.cycle-000.pt.trace.json.gz") as fh:
        trace = json.load(fh)
    assert trace["distributedInfo"] == {"rank": 0, "world_size": 1, "backend": None,
                                        "source": "ddprof (default: single process)"}
    run = prof.run
    assert run is not None and run.path == run_dir.absolute()
    assert (run.ranks, run.world_size, run.steps) == ([0], 1, [2, 3])
    assert run.manifest["collector"]["ranks_complete"] == [0]
    assert run.manifest["collector"]["enabled"]["ingest"] == "sync"
    meta = read_meta(run_dir, 0)
    assert (meta["rank"], meta["world_size"], meta["rank_source"], meta["backend"]) == (
        0, 1, "default: single process", None)
    assert [d["reason"] for d in meta["flight_recorder"]] == ["exit"]


def test_a_failing_export_is_logged_and_training_continues(tmp_path, monkeypatch, caplog):
    def broken_export(self, path, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken_export)
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="ddprof.collectors"), \
            ddprof.profile(run_dir, wait_ingest=True, **SCHEDULE) as prof:
        assert train(prof) == 6  # the export ran inside step 4 and raised there
    assert prof.failures[0] == {"stage": "export", "error": "OSError: [Errno 28] No space left on device"}
    assert "export failed: OSError" in caplog.text and "training continues" in caplog.text
    meta = read_meta(run_dir, 0)
    assert meta["status"] == "complete"
    assert meta["traces"] == []
    assert meta["failures"][0]["stage"] == "export"
    assert not list((run_dir / "raw").rglob("*.json.gz"))
    assert not list((run_dir / "raw").rglob("*.tmp"))
    # nothing to ingest: logged, not raised, and the run dir can be finished later
    assert prof.run is None
    assert "ingest of" in caplog.text and "ddprof ingest" in caplog.text


def test_a_really_full_disk_is_logged_and_training_continues(tmpfs, caplog):
    """The run dir on a 64 KiB tmpfs: room for the run's small files, not for a trace. Whatever fails first
    (the export, the meta file, the ingest) is logged; the training loop never sees it and leaves nothing
    half-written behind."""
    start = time.monotonic()
    small = tmpfs("64k", "small")
    with caplog.at_level(logging.INFO, logger="ddprof.collectors"), \
            ddprof.profile(small / "run", wait_ingest=True, record_shapes=True, with_stack=True, **SCHEDULE) as prof:
        assert train(prof, steps=8) == 8
    assert prof.failures, "a trace of two steps with stacks cannot fit in 64 KiB"
    export = prof.failures[0]
    assert export["stage"] == "export" and "no space left on the device" in export["error"], prof.failures
    assert "training continues" in caplog.text
    # rank 0's final status could not be written either: no ingest waiting for it (ddprof finish later)
    assert "no ingest now" in caplog.text and prof.run is None
    assert "not finalised" not in caplog.text
    assert not [p for p in small.rglob("*") if ".tmp" in p.name]
    assert not list(small.rglob("*.json.gz"))  # no truncated trace left to be read as a whole one
    assert time.monotonic() - start < 60  # the exit does not wait out the ingest's timeout


def test_an_unwritable_run_dir_turns_capture_off_without_raising(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.ERROR, logger="ddprof.collectors"), ddprof.profile(blocker / "run") as prof:
        assert train(prof) == 6
    assert prof.failures and prof.failures[0]["stage"] == "setup"
    assert "capture is off for rank 0" in caplog.text


def test_a_run_dir_that_holds_a_run_is_refused_before_training(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with ddprof.profile(run_dir, wait_ingest=True, **SCHEDULE) as prof:
        train(prof)
    monkeypatch.setattr(layout, "_claims", {})  # as if this were the next job
    manifest = (run_dir / "manifest.json").stat().st_mtime_ns
    trained = False
    with pytest.raises(UsageError, match=r"already holds an ingested run"), ddprof.profile(run_dir):
        trained = True
    assert not trained
    assert (run_dir / "manifest.json").stat().st_mtime_ns == manifest


def test_a_rank_whose_previous_capture_was_never_ingested_is_refused(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with ddprof.profile(run_dir, ingest=False, **SCHEDULE) as prof:
        train(prof)
    monkeypatch.setattr(layout, "_claims", {})  # as if this were the next job
    assert not (run_dir / "manifest.json").exists()
    with pytest.raises(UsageError, match=r"already holds a capture of rank 0"), ddprof.profile(run_dir):
        pass


def test_decorator_form(tmp_path):
    prof = ddprof.profile(tmp_path / "run", wait_ingest=True, **SCHEDULE)

    @prof
    def fit(steps):
        return train(prof, steps)

    assert fit(5) == 5
    assert prof.run is not None and prof.run.steps == [2, 3]
    with pytest.raises(UsageError, match="already captured rank 0"):
        fit(5)


def test_background_ingest_finishes_the_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    with ddprof.profile(run_dir, **SCHEDULE) as prof:
        train(prof)
    assert prof.run is None and prof.ingest_process is not None
    assert prof.ingest_process.wait(timeout=120) == 0
    run = ddprof.open_run(run_dir)
    assert run.ranks == [0] and run.steps == [2, 3]
    assert run.manifest["collector"]["enabled"]["ingest"] == "background"
    assert "ingested" in (run_dir / "collector-ingest.log").read_text()


def test_an_exception_in_training_is_recorded_and_propagates(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ZeroDivisionError), ddprof.profile(run_dir, wait_ingest=True, **SCHEDULE) as prof:
        train(prof, steps=3)  # steps 0-2 done; the cycle (steps 2-3) is still recording
        _ = 1 / 0
    meta = read_meta(run_dir, 0)
    assert meta["status"] == "failed"
    assert meta["error"] == "training raised ZeroDivisionError: division by zero"
    assert meta["traces"] == ["rank-00000.cycle-000.pt.trace.json.gz"]  # the partial cycle is kept
    assert prof.run is not None and prof.run.steps == [2, 3]
    assert prof.run.manifest["collector"]["ranks_failed"] == [0]


def test_signal_dumps_the_flight_recorder_and_the_handler_is_restored(tmp_path):
    run_dir = tmp_path / "run"
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    with ddprof.profile(run_dir, ingest=False, stall_timeout_s=None, **SCHEDULE) as prof:
        train(prof, steps=2)
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not read_meta(run_dir, 0)["flight_recorder"] and time.monotonic() < deadline:
            time.sleep(0.05)
        dumps = read_meta(run_dir, 0)["flight_recorder"]
        assert [d["reason"] for d in dumps] == ["signal SIGUSR1"]
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    path = run_dir / "raw" / "rank-00000" / "fr_trace_rank_0"
    assert read_flight_recorder(path)["entries"] == []  # no process group, no collectives
    assert [d["reason"] for d in read_meta(run_dir, 0)["flight_recorder"]] == ["signal SIGUSR1", "exit"]


def test_a_stalled_loop_dumps_the_flight_recorder_once(tmp_path):
    run_dir = tmp_path / "run"
    with ddprof.profile(run_dir, ingest=False, stall_timeout_s=0.4, **SCHEDULE) as prof:
        train(prof, steps=1)
        time.sleep(1.5)  # one stall: one dump, however long it lasts
        train(prof, steps=1)
    reasons = [d["reason"] for d in read_meta(run_dir, 0)["flight_recorder"]]
    assert reasons == ["no step for 0.4 s", "exit"]


def test_the_window_settles_before_the_profiler_stops_and_no_step_is_measured_longer(tmp_path, monkeypatch):
    """At the end of a recorded window the profiler waits (collectives finishing on other threads must leave
    it first: collectors.capture._settle), after the last step's annotation is closed: the recorded steps keep
    their length, and the wait happens before the stop, at the window's last step and at exit."""
    from ddprof.collectors import capture

    monkeypatch.setattr(capture, "SETTLE_S", 0.2)
    settled: list[int] = []
    real = capture._settle

    def spy(prof):
        settled.append(prof.step_num)
        real(prof)

    monkeypatch.setattr(capture, "_settle", spy)
    run_dir = tmp_path / "run"
    with ddprof.profile(run_dir, wait=0, warmup=0, active=2, repeat=2, wait_ingest=True) as prof:
        train(prof, steps=3)  # windows: steps 0-1 (stopped by a step) and 2 (stopped at exit)
    assert prof.failures == [] and settled == [1, 3]
    for cycle in ("000", "001"):
        with gzip.open(run_dir / "raw" / "rank-00000" / f"rank-00000.cycle-{cycle}.pt.trace.json.gz") as fh:
            marks = [e for e in json.load(fh)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
        assert marks and all(e["dur"] < 150_000 for e in marks), marks  # µs: the 0.2 s wait is in no step
