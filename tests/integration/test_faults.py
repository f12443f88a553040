"""Faults: an ingest killed with SIGKILL at several moments (its parallel workers with it), then run again,
gives the run a clean ingest gives, with no temporary file of the killed run left behind. (Unwritable
outputs, a full disk and files changed behind the cache: tests/fuzz/test_hardening.py.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ddprof
from tests.support.paths import REPO, SAMPLES

DLRM = SAMPLES / "dlrm-8xV100-nccl"


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    run = ddprof.ingest([DLRM], tmp_path_factory.mktemp("clean") / "run")
    return run.events().collect().sort(["rank", "ts_ns", "name"])


def _wait_for(run: Path, what: str, proc: subprocess.Popen, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if what == "start" or any(run.rglob(what)):
            return
        time.sleep(0.005)


@pytest.mark.parametrize("moment", ["start", ".*.tmp-*", "*.parquet", "manifest.json"])
def test_kill_9_during_ingest_then_rerun_is_correct(tmp_path, clean, moment):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # -j 2 with a low parallel threshold: the traces go to worker processes, killed with the parent
    code = ("import sys; from ddprof.ingestion import pipeline; pipeline.PARALLEL_MIN_BYTES = 0; "
            "from ddprof.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "ingest", str(DLRM), "-q", "-j", "2", "-o", str(run)],
                            cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(run, moment, proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(0.1)  # the workers' exit is reaped by init once the group is gone
    again = ddprof.ingest([DLRM], run, jobs=1)
    assert again.events().collect().sort(["rank", "ts_ns", "name"]).equals(clean)
    assert again.ranks == list(range(8)) and not again.failed
    assert not [p for p in run.rglob("*") if ".tmp-" in p.name]
    parts = {str(p.relative_to(run)) for p in run.rglob("*.parquet")}
    assert parts == {p for info in again.manifest["per_rank"].values() for p in info["parts"]}
