"""Bad input: a clear error naming file and cause; the good ranks still ingest; inputs never change."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ddprof
from ddprof.errors import BadInputError, DdprofError


def kineto(rank: int | None, events: list[dict], world: int = 2, **extra) -> dict:
    doc: dict = {"schemaVersion": 1, "traceEvents": events, **extra}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world}
    return doc


def ok_events(n: int = 3) -> list[dict]:
    return [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5.5}
            for i in range(n)]


def write(path: Path, doc: dict | bytes, gz: bool = False) -> Path:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


BAD = {
    "truncated.json": lambda: json.dumps(kineto(1, ok_events())).encode()[:-25],
    "not-json.json": lambda: b"this is not json at all",
    "corrupt.json.gz": lambda: gzip.compress(json.dumps(kineto(1, ok_events())).encode())[:40],
    "empty.json": lambda: b"",
    "no-events.json": lambda: json.dumps({"distributedInfo": {"rank": 1, "world_size": 2}}).encode(),
    "string-top.json": lambda: b'"traceEvents"',  # a top-level list is Chrome's bare event array, read as one
}
EXPECT = {
    "truncated.json": "not valid JSON",
    "not-json.json": "not valid JSON",
    "corrupt.json.gz": "corrupt or truncated gzip",
    "empty.json": "file is empty",
    "no-events.json": "no 'traceEvents'",
    "string-top.json": "expected an object",
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_file_is_named_and_good_rank_survives(tmp_path, bad):
    src = tmp_path / "src"
    src.mkdir()
    write(src / "rank-0.json", kineto(0, ok_events()))
    (src / bad).write_bytes(BAD[bad]())
    before = digest(src)
    run = ddprof.ingest([src], tmp_path / "run")
    assert run.ranks == [0]
    assert run.events().collect().height == 3
    (failed,) = run.failed.values()
    assert bad in failed["error"] and EXPECT[bad] in failed["error"]
    assert digest(src) == before  # inputs never modified
    assert not list(src.glob(".*"))  # nothing written beside them by the API


def test_events_missing_fields_and_absurd_durations_are_dropped_with_counts(tmp_path):
    events = ok_events(4) + [
        {"ph": "X", "cat": "cpu_op", "name": "no_dur", "pid": 1, "tid": 1, "ts": 3.0},
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 3.0, "dur": -2},
        {"ph": "X", "cat": "kernel", "name": "overflow", "pid": 0, "tid": 7, "ts": 3.0, "dur": 1.8e13,
         "args": {"stream": 7, "device": 0}},
        {"ph": "X", "cat": "cpu_op", "name": "bad_ts", "pid": 1, "tid": 1, "ts": "soon", "dur": 1},
        {"ph": "X", "cat": "weird_new_cat", "name": "mystery", "pid": 1, "tid": 1, "ts": 4.0, "dur": 1},
    ]
    run = ddprof.ingest([write(tmp_path / "rank-0.json", kineto(0, events, world=1))], tmp_path / "run")
    ev = run.events().collect()
    assert sorted(ev["name"].to_list()) == ["aten::op0", "aten::op1", "aten::op2", "aten::op3", "mystery"]
    assert ev.filter(pl.col("name") == "mystery")["kind"].to_list() == ["other"]
    src = next(iter(run.manifest["sources"].values()))
    assert src["raw_complete"] == 9 and src["events"] == 5
    text = " | ".join(run.rank_info(0)["warnings"])
    assert "negative duration" in text and "over 24 h" in text and "missing ts, dur or name" in text
    assert "malformed event" in text and "unknown category 'weird_new_cat'" in text


def test_timestamps_keep_nanoseconds_at_epoch_scale(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 4458677009853.422, "dur": 0.001},
          {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1694128201429795, "dur": 2146},
          {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 1694128201429795.75, "dur": 1}]
    run = ddprof.ingest([write(tmp_path / "rank-0.json", kineto(0, ev, world=1, baseTimeNanoseconds=17))],
                        tmp_path / "run")
    rows = {r["name"]: r for r in run.events().collect().iter_rows(named=True)}
    # Whole microseconds and the fraction are converted apart: exact where float64 holds the value
    # (ts * 1000 in float64 would land on a multiple of 256 ns at epoch scale).
    assert rows["a"]["ts_ns"] == 4458677009853422 and rows["a"]["dur_ns"] == 1
    assert rows["b"]["ts_ns"] == 1694128201429795000 and rows["b"]["dur_ns"] == 2146000
    assert rows["c"]["ts_ns"] == 1694128201429795750
    assert run.rank_info(0)["base_time_ns"] == 17


def test_two_files_claiming_one_rank_at_once_both_fail(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write(src / "a.json", kineto(0, ok_events()))
    write(src / "b.json", kineto(0, ok_events()))
    write(src / "c.json", kineto(1, ok_events()))
    run = ddprof.ingest([src], tmp_path / "run")
    assert run.ranks == [1]
    errors = [f["error"] for f in run.failed.values()]
    assert len(errors) == 2 and all("claim rank 0" in e and "a.json" in e and "b.json" in e for e in errors)


def test_two_profiling_windows_of_one_rank_are_parts(tmp_path):
    late = [dict(e, ts=e["ts"] + 1e6) for e in ok_events()]
    write(tmp_path / "w0.json", kineto(0, ok_events(), world=1))
    write(tmp_path / "w1.json", kineto(0, late, world=1))
    run = ddprof.ingest([tmp_path / "w0.json", tmp_path / "w1.json"], tmp_path / "run")
    assert run.ranks == [0] and len(run.rank_info(0)["parts"]) == 2
    assert run.events().collect().height == 6


def test_files_of_different_jobs_are_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for r in range(3):
        write(src / f"rank-{r}.json", kineto(r, ok_events(), world=4))
    write(src / "other-job.json", kineto(3, ok_events(), world=8))
    run = ddprof.ingest([src], tmp_path / "run")
    assert run.ranks == [0, 1, 2] and run.world_size == 4
    (failed,) = run.failed.values()
    assert "other-job.json" in failed["error"] and "world_size 8" in failed["error"]


def test_rank_from_file_name_when_trace_does_not_say(tmp_path):
    write(tmp_path / "worker3_step_1.json", kineto(None, ok_events()))
    run = ddprof.ingest([tmp_path / "worker3_step_1.json"], tmp_path / "run")
    assert run.ranks == [3]
    assert any("taken from the file name" in w for w in run.rank_info(3)["warnings"])


def test_cache_is_reused_and_refreshed(tmp_path):
    f = write(tmp_path / "rank-0.json", kineto(0, ok_events(), world=1))
    run = ddprof.ingest([f], tmp_path / "run")
    part = run.path / run.rank_info(0)["parts"][0]
    mtime = part.stat().st_mtime_ns
    ddprof.ingest([f], tmp_path / "run")
    assert part.stat().st_mtime_ns == mtime  # unchanged source: not parsed again
    write(f, kineto(0, ok_events(5), world=1))
    run = ddprof.ingest([f], tmp_path / "run")
    assert run.events().collect().height == 5
    assert not part.exists()  # the stale part is gone
    assert len(list((tmp_path / "run" / "events").rglob("*.parquet"))) == 1


def test_killed_ingest_leaves_no_trusted_store(tmp_path, monkeypatch):
    """A crash before the manifest is written leaves no manifest, so nothing is trusted later."""
    from ddprof.ingestion import pipeline

    f = write(tmp_path / "rank-0.json", kineto(0, ok_events(), world=1))

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "write_json_atomic", boom)
    with pytest.raises(KeyboardInterrupt):
        ddprof.ingest([f], tmp_path / "run")
    with pytest.raises(BadInputError, match="not a ddprof run dir"):
        ddprof.open_run(tmp_path / "run")
    assert not [p for p in (tmp_path / "run").rglob("*") if ".tmp-" in p.name]


# --- property test: whatever the bytes, ingest raises only ddprof errors ---------------------------------

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                        st.text(max_size=8))
json_value = st.recursive(json_scalar, lambda c: st.one_of(st.lists(c, max_size=4),
                                                          st.dictionaries(st.text(max_size=6), c, max_size=4)),
                          max_leaves=12)
event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "M", "s", "f", 3, None]),
        "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "user_annotation", "gpu_memcpy", "??"]),
        "name": st.one_of(st.sampled_from(["ProfilerStep#1", "nccl:all_reduce", "record_param_comms",
                                           "ncclKernel_AllReduce", "gloo:all_reduce", "aten::mm"]), json_value),
        "pid": json_value, "tid": json_value,
        "ts": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**65, 2**65), json_value),
        "dur": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**65, 2**65), json_value),
        "args": st.one_of(json_value, st.fixed_dictionaries({}, optional={
            "External id": json_value, "correlation": json_value, "stream": json_value,
            "Input Dims": json_value, "Input type": json_value, "Collective name": json_value,
            "In msg nelems": json_value, "dtype": json_value, "Group size": json_value})),
    },
)
document = st.one_of(
    st.fixed_dictionaries({"traceEvents": st.lists(event, max_size=12)},
                          optional={"distributedInfo": st.one_of(json_value, st.fixed_dictionaries(
                              {"rank": st.one_of(st.integers(-3, 5), json_value)},
                              optional={"world_size": st.one_of(st.integers(-1, 6), json_value)}))}),
    json_value,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=document, cut=st.integers(0, 64), gz=st.booleans())
def test_fuzzed_traces_raise_only_ddprof_errors(tmp_path_factory, doc, cut, gz):
    tmp = tmp_path_factory.mktemp("fuzz")
    data = json.dumps(doc, allow_nan=True).encode()
    if cut:
        data = data[: max(0, len(data) - cut)]
    write(tmp / "rank-0.json", data, gz=gz)
    try:
        run = ddprof.ingest([tmp / "rank-0.json"], tmp / "run")
    except DdprofError:
        return
    ddprof.validate(run.events())
    for src in run.manifest["sources"].values():
        assert "internal error" not in (src.get("error") or "")


def test_collector_sidecars_give_hosts_and_clocks(tmp_path):
    raw = tmp_path / "raw" / "rank-00001"
    raw.mkdir(parents=True)
    write(raw / "trace.json", kineto(1, ok_events()))
    (raw / "rank-00001.meta.json").write_text(json.dumps({
        "format": "ddprof-collector-meta", "rank": 1, "host": "node-b",
        "start": {"wall_ns": 5, "monotonic_ns": 7}, "end": None, "versions": {"torch": "2.13.0"}}))
    (tmp_path / "raw" / "junk.meta.json").write_text("{not json")
    run = ddprof.ingest([tmp_path / "raw"], tmp_path / "run")
    assert run.ranks == [1] and run.manifest["hosts"] == {"1": "node-b"}
    assert run.manifest["clocks"]["1"]["start"] == {"wall_ns": 5, "monotonic_ns": 7}
    assert run.manifest["versions"]["torch"] == "2.13.0"
    assert any("junk.meta.json" in w for w in run.manifest["warnings"])


def test_cache_written_by_other_ingest_code_is_not_reused(tmp_path):
    f = write(tmp_path / "rank-0.json", kineto(0, ok_events(), world=1))
    run = ddprof.ingest([f], tmp_path / "run")
    manifest = run.path / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["ingest_fingerprint"] = "an-older-ingest"
    doc["per_rank"]["0"]["events"] = 999  # what an older ingest might have written
    manifest.write_text(json.dumps(doc))
    run = ddprof.ingest([f], tmp_path / "run")
    assert run.rank_info(0)["events"] == 3


def test_outputs_are_readable_by_others_like_plain_files(tmp_path):
    import os

    f = write(tmp_path / "rank-0.json", kineto(0, ok_events(), world=1))
    old = os.umask(0o022)
    try:
        run = ddprof.ingest([f], tmp_path / "run")
    finally:
        os.umask(old)
    for p in [run.path / "manifest.json", run.path / run.rank_info(0)["parts"][0]]:
        assert p.stat().st_mode & 0o777 == 0o644, p


def test_reingest_keeps_the_collector_section(tmp_path):
    f = write(tmp_path / "rank-0.json", kineto(0, ok_events(), world=1))
    ddprof.ingest([f], tmp_path / "run", extra_manifest={"collector": {"ranks_complete": [0]}})
    run = ddprof.ingest([f], tmp_path / "run", force=True)
    assert run.manifest["collector"] == {"ranks_complete": [0]}


def test_peer_is_translated_to_the_global_rank(tmp_path):
    """A send to group rank 1 in a pipeline group made of global ranks [2, 6] goes to rank 6."""
    send = {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0,
            "args": {"Concrete Inputs": ["", "", "1", "0"], "Input Dims": [[4]], "Input type": ["float"]}}
    gloo = {"ph": "X", "cat": "user_annotation", "name": "gloo:send", "pid": 1, "tid": 2, "ts": 11.0, "dur": 3.0,
            "args": {"Input Dims": [[4]], "Input type": ["float"]}}
    doc = kineto(2, [send, gloo], world=8)
    doc["distributedInfo"]["pg_config"] = [{"pg_name": "7", "pg_size": 2, "ranks": [2, 6]}]
    run = ddprof.ingest([write(tmp_path / "rank-2.json", doc)], tmp_path / "run")
    rows = run.events().filter(pl.col("coll_op") == "send").collect()
    assert sorted(rows["peer"].to_list()) == [6, 6] and set(rows["pg"]) == {"7"}
    assert rows.filter(pl.col("kind") == "comm")["bytes"].to_list() == [16]


@pytest.mark.parametrize("group", [{"pg_size": 2, "ranks": [2, 6]}, {"pg_name": None, "pg_size": 2}])
def test_the_only_group_without_a_name_still_gives_its_size(tmp_path, group):
    """A trace's one process group that has no name filled the collectives' group with a null, which Polars
    refuses (exit 70); its size still fills theirs, their group stays unknown."""
    gloo = {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 11.0,
            "dur": 3.0, "args": {"Input Dims": [[4]], "Input type": ["float"]}}
    doc = kineto(2, [gloo], world=8)
    doc["distributedInfo"]["pg_config"] = [group]
    run = ddprof.ingest([write(tmp_path / "rank-2.json", doc)], tmp_path / "run")
    rows = run.events().filter(pl.col("coll_op") == "all_reduce").collect()
    assert rows["group_size"].to_list() == [2] and rows["pg"].to_list() == [None]


@pytest.mark.parametrize("device, pid", [(32768, 1), (None, 40000), (-40000, 3)])
def test_a_device_id_past_the_store_type_is_unknown_not_a_crash(tmp_path, device, pid):
    """A kernel's device (its ``device`` argument, else its pid) past Int16 failed the cast to the store's
    type (exit 70); it is the pid where that fits, else unknown, the event kept."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": pid, "tid": 7, "ts": 1.0, "dur": 1.0,
              "args": {"stream": 7, **({"device": device} if device is not None else {})}}
    run = ddprof.ingest([write(tmp_path / "rank-0.json", kineto(0, [kernel], world=1))], tmp_path / "run")
    assert run.events().select("device", "stream").collect().rows() == [(pid if pid < 2**15 else None, 7)]


# ------------------------------------------------------------------ unrelated traces claiming one rank


def _windows_of_rank_0(tmp_path: Path, second: dict) -> Path:
    """Rank 0's generated trace twice, the second 1 s after the first ended, with ``second``'s header keys."""
    from ddprof.synth import DataParallel

    first = DataParallel(ranks=2, steps=2).kineto()[0]
    first["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    first["baseTimeNanoseconds"] = 11_964_646_000_000_000  # + the first event (1.7e9 s) = 2024-04-01 09:44 UTC
    first["distributedInfo"]["nccl_version"] = "2.17.1"
    later = json.loads(json.dumps(first))
    for e in later["traceEvents"]:
        e["ts"] += 1_000_000
    later.update(second)
    src = tmp_path / "traces"
    src.mkdir()
    write(src / "monday.json", first)
    write(src / "tuesday.json", later)
    return src


def test_traces_of_one_rank_from_other_machines_are_refused_naming_both_and_what_differs(tmp_path):
    src = _windows_of_rank_0(tmp_path, {"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
                                        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2,
                                                            "nccl_version": "2.21.5"}})
    with pytest.raises(BadInputError) as exc:
        ddprof.ingest([src], tmp_path / "run")
    why = ("2 traces claim rank 0 but are not of one machine and job (monday.json, tuesday.json: the GPU model "
           "differs: monday.json NVIDIA A100-SXM4-80GB, tuesday.json NVIDIA H100 80GB HBM3; the NCCL version "
           "differs: monday.json 2.17.1, tuesday.json 2.21.5); map them with --rank FILE=N or ingest them into "
           "separate runs")
    for name in ("monday.json", "tuesday.json"):
        assert f"{src / name}: rank 0: {why}" in str(exc.value)


def test_traces_of_one_rank_days_apart_are_windows_with_a_warning(tmp_path):
    src = _windows_of_rank_0(tmp_path, {"baseTimeNanoseconds": 11_964_646_000_000_000 + 3 * 86_400 * 10**9})
    run = ddprof.ingest([src], tmp_path / "run")
    assert run.manifest["per_rank"]["0"]["windows"] and len(run.manifest["per_rank"]["0"]["sources"]) == 2
    assert ("rank 0: its traces monday.json (2024-04-01 09:44 UTC) and tuesday.json (2024-04-04 09:44 UTC) are "
            "3 d apart; read as profiling windows of one rank") in run.manifest["warnings"]


def test_traces_with_wall_clock_times_and_no_base_months_apart_are_windows_with_a_warning(tmp_path):
    # PyTorch 1.8-1.9 wrote event times as µs since the epoch and no baseTimeNanoseconds (kineto's own
    # tb_plugin samples: worker0 traced in January and twice in June 2021, in one folder)
    src = _windows_of_rank_0(tmp_path, {})
    for name, shift_us in (("monday.json", 0), ("tuesday.json", 148 * 86_400 * 10**6)):
        doc = json.loads((src / name).read_text())
        doc.pop("baseTimeNanoseconds")
        for e in doc["traceEvents"]:
            e["ts"] += shift_us
        write(src / name, doc)
    run = ddprof.ingest([src], tmp_path / "run")
    assert len(run.manifest["per_rank"]["0"]["sources"]) == 2
    assert any(w.startswith("rank 0: its traces monday.json (") and "are 148 d apart" in w
               for w in run.manifest["warnings"])


def test_windows_of_one_rank_on_one_machine_stay_silent(tmp_path):
    run = ddprof.ingest([_windows_of_rank_0(tmp_path, {})], tmp_path / "run")
    assert len(run.manifest["per_rank"]["0"]["sources"]) == 2
    assert run.manifest["warnings"] == ["1 of 2 ranks present (missing: 1)"]
