"""``ddprof finish RUN_DIR``: what rank 0 runs at exit, and what a user runs when rank 0 could not."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ddprof.collectors.finish import start_background

import ddprof
from ddprof.cli import main
from tests.support.paths import SAMPLES

SAMPLE = SAMPLES / "gloo-ddp-4rank-slow-rank"


def captured(tmp_path: Path) -> Path:
    """A run dir as the ranks leave it: ``raw/`` only, no store yet."""
    run_dir = tmp_path / "run"
    shutil.copytree(SAMPLE / "raw", run_dir / "raw")
    return run_dir


def test_finish_ingests_the_capture_with_its_collector_section(tmp_path):
    run_dir = captured(tmp_path)
    assert main(["finish", str(run_dir), "--timeout", "5"]) == 0
    run = ddprof.open_run(run_dir)
    assert (run.ranks, run.world_size, run.steps) == ([0, 1, 2, 3], 4, [2, 3])
    assert run.manifest["collector"]["ranks_complete"] == [0, 1, 2, 3]


def test_finish_without_a_capture_fails_with_exit_1_and_says_how_to_retry(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="ddprof.collectors"):
        assert main(["finish", str(tmp_path / "empty"), "--world-size", "2", "--timeout", "0"]) == 1
    assert f"`ddprof finish {tmp_path / 'empty'}`" in caplog.text


def test_rank_0_starts_the_finish_command_in_the_background(tmp_path):
    run_dir = captured(tmp_path)
    proc = start_background(run_dir, world_size=4, timeout_s=5)
    assert proc.args[1:4] == ["-m", "ddprof", "finish"]
    assert proc.wait(timeout=120) == 0, (run_dir / "collector-ingest.log").read_text()
    assert "ddprof: ingested" in (run_dir / "collector-ingest.log").read_text()
    assert ddprof.open_run(run_dir).ranks == [0, 1, 2, 3]
