"""Processes started to ingest share one allocator arena (ddprof.runtime.memory); analyses keep the default.
The cyclic collector is paused while a report is built, and restored after, even on an error."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import subprocess
import sys

import pytest

from ddprof.runtime.memory import (
    GLIBC_MALLOC,
    INGEST_ALLOCATOR,
    JEMALLOC_CONF,
    collector_paused,
    for_child_processes,
)
from tests.support.paths import DLRM


def _child_setting(queue, name) -> None:
    queue.put(os.environ.get(name))


def _setting_seen_by_a_spawned_child(name: str = JEMALLOC_CONF) -> str | None:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_setting, args=(queue, name))
    proc.start()
    value = queue.get(timeout=120)
    proc.join(timeout=60)
    return value


def test_children_get_the_setting_and_this_process_is_restored(monkeypatch):
    monkeypatch.delenv(JEMALLOC_CONF, raising=False)
    with for_child_processes():
        assert _setting_seen_by_a_spawned_child() == INGEST_ALLOCATOR
    assert JEMALLOC_CONF not in os.environ


def test_the_setting_goes_last_and_other_options_are_kept(monkeypatch):
    # jemalloc: a later option overrides an earlier one (Polars puts its own defaults first)
    monkeypatch.setenv(JEMALLOC_CONF, "narenas:4,dirty_decay_ms:500")
    with for_child_processes():
        assert _setting_seen_by_a_spawned_child() == f"narenas:4,dirty_decay_ms:500,{INGEST_ALLOCATOR}"
    assert os.environ[JEMALLOC_CONF] == "narenas:4,dirty_decay_ms:500"


def test_children_keep_glibc_malloc_blocks_and_the_users_settings_win(monkeypatch):
    trim, mmap = GLIBC_MALLOC
    monkeypatch.delenv(trim, raising=False)
    monkeypatch.setenv(mmap, "1048576")  # the user's own
    with for_child_processes():
        assert _setting_seen_by_a_spawned_child(trim) == str(GLIBC_MALLOC[trim][1])
        assert _setting_seen_by_a_spawned_child(mmap) == "1048576"
    assert trim not in os.environ and os.environ[mmap] == "1048576"


PROBE = """
import json, os, sys
sys.argv = ["ddprof"] + sys.argv[1:]
import ddprof, ddprof.__main__
loaded_by_import = "polars" in sys.modules
try:
    rc = ddprof.__main__.main()
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"polars_on_import": loaded_by_import, "setting": os.environ.get("JEMALLOC_CONF"), "rc": rc,
                  "glibc": os.environ.get("MALLOC_MMAP_THRESHOLD_")}))
""".replace("JEMALLOC_CONF", JEMALLOC_CONF)


def _program(args: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (JEMALLOC_CONF, *GLIBC_MALLOC)}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_ingest_command_sets_the_allocator_up_before_polars_loads(tmp_path, traces):
    res = _program(["ingest", "-q", str(DLRM), "-o", str(tmp_path / "run")])
    assert res["rc"] == 0 and not res["polars_on_import"]
    assert res["setting"].endswith(INGEST_ALLOCATOR)  # after the defaults Polars put first
    assert res["glibc"] == str(GLIBC_MALLOC["MALLOC_MMAP_THRESHOLD_"][1])  # and applied to the process (mallopt)


def test_analyze_keeps_the_default_allocator(tmp_path, traces):
    res = _program(["analyze", str(DLRM), "--format", "json", "-o",
                    str(tmp_path / "r.json"), "--cache", str(tmp_path / "c")])
    assert res["rc"] == 0 and not res["polars_on_import"]
    assert INGEST_ALLOCATOR not in (res["setting"] or "") and res["glibc"] is None


def test_collector_paused_restores_the_previous_state():
    assert gc.isenabled()
    try:
        with pytest.raises(RuntimeError), collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("analysis failed")
        assert gc.isenabled()
        gc.disable()  # a caller that turned it off itself keeps it off
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_analyses_run_with_the_collector_paused(monkeypatch):
    import polars as pl  # here: the tests above need a process where Polars is not loaded yet
    from ddprof.analyses import rank_groups, report

    from ddprof.store.schema import EVENT_SCHEMA

    seen = []
    real = rank_groups._idle
    monkeypatch.setattr(rank_groups, "_idle", lambda p: seen.append(gc.isenabled()) or real(p))
    sections = report.analyse(pl.LazyFrame(schema=EVENT_SCHEMA))
    assert seen == [False] and gc.isenabled()
    assert sections["idle"] == [] and list(sections) == list(report.SECTION_ORDER)
