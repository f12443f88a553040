"""Helpers for the tests of ``ddprof launch`` and ``ddprof trigger`` on ``tests/support/plain_train.py``, a script that
does not import ddprof: run it under the real command line, wait for what the ranks write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
PLAIN = TESTS / "plain_train.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "DDPROF_"))}
    return env | {"OMP_NUM_THREADS": "1"}


def launch_cmd(run_dir: Path, launch_args: list[str], job: list[str]) -> list[str]:
    return [sys.executable, "-m", "ddprof", "launch", "-o", str(run_dir), "--ingest-timeout", "30", *launch_args,
            "--", *job]


def torchrun(nproc: int, *args: str) -> list[str]:
    return [*TORCHRUN, f"--nproc-per-node={nproc}", str(PLAIN), *args]


def run_launch(run_dir: Path, launch_args: list[str], job: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    """``ddprof launch`` in the foreground; fails the test with its output when it does not exit 0."""
    proc = subprocess.run(launch_cmd(run_dir, launch_args, job), env=job_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def start_launch(run_dir: Path, launch_args: list[str], job: list[str], log: Path) -> subprocess.Popen:
    """``ddprof launch`` in the background, in a session of its own (killable as a group)."""
    with open(log, "wb") as out:
        return subprocess.Popen(launch_cmd(run_dir, launch_args, job), env=job_env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def statuses(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The status files of the ranks, by rank."""
    from ddprof.store.capture_status import read_statuses

    return {int(s["rank"]): s for s in read_statuses(run_dir) if s.get("rank") is not None}


def wait_for(what: str, check: Any, timeout: float = 120.0, poll: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def wait_ingested(run_dir: Path, timeout: float = 120.0) -> Any:
    """The run once rank 0's background ingest wrote its manifest."""
    import ddprof

    wait_for(f"{run_dir}/manifest.json", lambda: (run_dir / "manifest.json").exists(), timeout)
    return ddprof.open_run(run_dir)


def analyze_json(run_dir: Path) -> tuple[int, dict[str, Any] | None, str]:
    """``ddprof analyze RUN --format json``: exit status, the report (None when it printed none), stderr."""
    proc = subprocess.run([sys.executable, "-m", "ddprof", "analyze", str(run_dir), "--format", "json"],
                          capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, report, proc.stderr
