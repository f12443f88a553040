"""Collector pieces that need no process group: rank detection, Flight Recorder settings, run-dir rules."""

from __future__ import annotations

import json

import pytest
from ddprof.collectors import layout
from ddprof.collectors.finish import summarize
from ddprof.collectors.flight_recorder import fr_env
from ddprof.collectors.rankinfo import detect_rank

from ddprof.errors import UsageError


def test_torchrun_environment():
    info = detect_rank({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
    assert (info.rank, info.local_rank, info.world_size, info.source) == (5, 1, 8, "env:RANK")


def test_slurm_environment():
    info = detect_rank({"SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NTASKS": "4"})
    assert (info.rank, info.local_rank, info.world_size, info.source) == (3, 3, 4, "env:SLURM_PROCID")


def test_torchrun_wins_over_slurm_and_local_rank_defaults_to_rank():
    info = detect_rank({"RANK": "2", "WORLD_SIZE": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert (info.rank, info.local_rank, info.world_size) == (2, 2, 4)


def test_no_launcher_is_rank_0_of_1():
    info = detect_rank({})
    assert (info.rank, info.local_rank, info.world_size, info.source) == (0, 0, 1, "default: single process")


def test_a_malformed_rank_is_refused_by_name():
    with pytest.raises(UsageError, match=r"RANK='two' is not an integer"):
        detect_rank({"RANK": "two"})


def test_flight_recorder_settings_point_into_the_rank_dir(tmp_path):
    env = fr_env(tmp_path, 3, 2000, True, {})
    assert env == {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                   "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "raw" / "rank-00003" / "fr_trace_rank_")}


def test_flight_recorder_settings_keep_what_the_user_chose(tmp_path):
    user = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "50", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/scratch/fr_"}
    assert fr_env(tmp_path, 0, 2000, True, user) == {}


def test_a_launcher_prefix_in_raw_is_narrowed_to_the_rank_dir(tmp_path):
    launcher = {"TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "raw" / "fr_trace_rank_")}
    env = fr_env(tmp_path, 1, 2000, False, launcher)
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "raw" / "rank-00001" / "fr_trace_rank_")
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in env


def test_run_dir_with_a_manifest_or_this_ranks_meta_is_refused(tmp_path):
    layout.check_unused(tmp_path, 0)  # empty: fine
    meta = layout.meta_path(tmp_path, 2)
    meta.parent.mkdir(parents=True)
    meta.write_text("{}")
    layout.check_unused(tmp_path, 0)  # another rank's file does not concern rank 0
    with pytest.raises(UsageError, match=r"already holds a capture of rank 2 .*rank-00002\.meta\.json"):
        layout.check_unused(tmp_path, 2)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "ddprof-run"}))
    with pytest.raises(UsageError, match=r"already holds an ingested run"):
        layout.check_unused(tmp_path, 0)


def test_init_then_profile_is_one_capture_but_a_second_init_is_not(tmp_path):
    run = tmp_path / "run"
    layout.claim(run, 7, "init")
    layout.claim(run, 7, "profile")
    with pytest.raises(UsageError, match="already captured rank 7"):
        layout.claim(run, 7, "profile")
    layout.claim(run, 8, "init")
    with pytest.raises(UsageError, match="already captured rank 8"):
        layout.claim(run, 8, "init")


def test_no_run_dir_anywhere_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("DDPROF_RUN_DIR", raising=False)
    with pytest.raises(UsageError, match=r"DDPROF_RUN_DIR"):
        layout.resolve_run_dir(None)
    monkeypatch.setenv("DDPROF_RUN_DIR", "/somewhere/run")
    assert str(layout.resolve_run_dir(None)) == "/somewhere/run"


def test_summary_sorts_ranks_by_what_became_of_them():
    def meta(status, **kw):
        return {"status": status, "world_size": 4, "job": {"MASTER_PORT": "1"}, "backend": "gloo",
                "failures": [], **kw}

    metas = {0: meta("complete"), 1: meta("running"), 2: None,
             3: meta("failed", failures=[{"stage": "export", "error": "OSError: disk full"}])}
    s = summarize(metas, waited_s=5.0, timeout_s=5.0)
    assert (s["ranks_complete"], s["ranks_incomplete"], s["ranks_missing"], s["ranks_failed"]) == ([0], [1], [2], [3])
    assert s["world_size"] == 4 and s["backend"] == "gloo"
    assert s["warnings"] == [
        "rank 1: capture not finalised after 5 s (rank died or still running); whatever trace it wrote is used",
        "rank 2: no meta file (raw/rank-00002/rank-00002.meta.json); the rank never started capturing or its "
        "directory is gone",
        "rank 3: export failed: OSError: disk full",
    ]


def test_summary_warns_when_ranks_come_from_different_jobs():
    metas = {0: {"status": "complete", "world_size": 2, "job": {"MASTER_PORT": "100"}},
             1: {"status": "complete", "world_size": 2, "job": {"MASTER_PORT": "200"}}}
    warnings = summarize(metas, waited_s=0.0, timeout_s=1.0)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("ranks disagree on job")


def test_a_rank_writes_its_meta_without_loading_polars():
    """The collector runs in every training process: what a rank writes about itself (its meta file, in the
    format ingest reads) must not load the analysis stack (Polars: ~0.5 s and tens of MB a rank)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from ddprof.collectors.meta import base_meta\n"
            "from ddprof.collectors.rankinfo import RankInfo\n"
            "meta = base_meta(RankInfo(rank=0, local_rank=0, world_size=1, source='test'), {})\n"
            "assert meta['format'] == 'ddprof-collector-meta', meta\n"
            "print(sorted(m for m in ('polars', 'pyarrow') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
