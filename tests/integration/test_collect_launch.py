"""``ddprof launch``: the job's environment, the exit status, the run-dir rule, and a real job under it."""

from __future__ import annotations

import json
import os
import sys

import pytest
from click.testing import CliRunner
from ddprof.collectors.launch import launch

from ddprof.cli.launch_cmd import launch as launch_command
from ddprof.errors import UsageError

DUMP_ENV = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in sys.argv[2:]}, open(sys.argv[1], 'w'));"
            " sys.exit(5)")
NAMES = ["DDPROF_RUN_DIR", "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DUMP_ON_TIMEOUT"]


def clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "DDPROF_"))}


def test_the_job_gets_the_settings_and_its_exit_status_is_returned(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "env.json"
    rc = launch(run_dir, [sys.executable, "-c", DUMP_ENV, str(out), *NAMES], fr_buffer=500, environ=clean_environ())
    assert rc == 5
    assert json.loads(out.read_text()) == {
        "DDPROF_RUN_DIR": str(run_dir),
        "TORCH_FR_BUFFER_SIZE": "500",
        "TORCH_FR_DUMP_TEMP_FILE": str(run_dir / "raw" / "fr_trace_rank_"),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    }


def test_the_users_own_settings_win(tmp_path):
    out = tmp_path / "env.json"
    environ = clean_environ() | {"TORCH_FR_BUFFER_SIZE": "7", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}
    launch(tmp_path / "run", [sys.executable, "-c", DUMP_ENV, str(out), *NAMES], environ=environ)
    got = json.loads(out.read_text())
    assert (got["TORCH_FR_BUFFER_SIZE"], got["TORCH_NCCL_DUMP_ON_TIMEOUT"]) == ("7", "0")


def test_a_used_run_dir_or_no_command_is_refused(tmp_path):
    meta = tmp_path / "raw" / "rank-00001" / "rank-00001.meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text("{}")
    with pytest.raises(UsageError, match=r"already holds a capture .*rank-00001\.meta\.json"):
        launch(tmp_path, [sys.executable, "-c", "pass"])
    with pytest.raises(UsageError, match="nothing to run"):
        launch(tmp_path / "fresh", [])
    with pytest.raises(UsageError, match="no-such-launcher: command not found"):
        launch(tmp_path / "fresh", ["no-such-launcher"])


def test_click_command_passes_the_command_through_untouched(tmp_path):
    out = tmp_path / "env.json"
    result = CliRunner().invoke(launch_command, ["-o", str(tmp_path / "run"), "--fr-buffer", "9", "--",
                                                 sys.executable, "-c", DUMP_ENV, str(out), "--weird-flag"],
                                standalone_mode=False)
    assert result.exception is None, result.output
    assert result.return_value == 5
    assert json.loads(out.read_text()) == {"--weird-flag": None}


def test_a_real_job_under_the_launcher_needs_no_run_dir_argument(tmp_path):
    pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")
    import ddprof
    from tests.support.jobs import JOBS, free_port

    run_dir = tmp_path / "run"
    environ = clean_environ() | {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    rc = launch(run_dir, [sys.executable, str(JOBS), "ddp", "--steps", "4",
                          "--wait-ingest"], environ=environ)
    assert rc == 0
    run = ddprof.open_run(run_dir)
    assert (run.ranks, run.world_size, run.steps) == ([0], 1, [2, 3])
    meta = json.loads((run_dir / "raw" / "rank-00000" / "rank-00000.meta.json").read_text())
    assert meta["enabled"]["flight_recorder"] is True
    assert [d["file"] for d in meta["flight_recorder"]] == ["fr_trace_rank_0"]
