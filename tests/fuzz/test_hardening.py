"""Hostile traces, unwritable outputs, full disks, stale caches: each ends cleanly, with the exit code
that says what happened (0 ok, 2 bad input or usage, 3 partial, 70 a bug only) and one sentence naming
the path. Generated traces with a known answer, and the real traces in ``tests/data/traces``."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ddprof
from ddprof.cli import main
from ddprof.errors import OutputError
from ddprof.ingestion import pipeline
from ddprof.ingestion.world import MAX_WORLD_SIZE, checked_world_size, format_ranges, missing_ranges
from ddprof.readers.kineto.depth import flatten_deep
from ddprof.store.atomic import remove_stale_tmp, write_atomic, write_bytes_atomic
from tests.support.paths import SAMPLES

GLOO = SAMPLES / "gloo-ddp-4rank-slow-rank"
REPO = os.geteuid() == 0


def events(n: int = 3, **extra) -> list[dict]:
    return [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5.5,
             **extra} for i in range(n)]


def trace(path: Path, rank: int, world: object, evs: list[dict] | None = None, raw: bytes | None = None) -> Path:
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
           "traceEvents": evs if evs is not None else events()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw if raw is not None else json.dumps(doc).encode())
    return path


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


# 1. a world size is a claim to check -------------------------------------------------------------------


def test_absurd_world_size_is_ignored_with_a_warning_and_costs_nothing(tmp_path):
    t0 = time.perf_counter()
    run = ddprof.ingest([trace(tmp_path / "r0.json", 0, 10**12)], tmp_path / "run")
    assert time.perf_counter() - t0 < 30  # it used to expand 10^12 missing ranks: minutes, then killed
    assert run.manifest["world_size"] is None
    (w,) = [w for w in run.manifest["per_rank"]["0"]["warnings"] if "world_size" in w]
    assert "1000000000000" in w and "ignored" in w


@pytest.mark.parametrize("value, why", [(0, "not a positive integer"), (-8, "not a positive integer"),
                                        ("8", "a str, not an integer"), (8.5, "a float, not an integer"),
                                        (True, "a bool, not an integer"),
                                        (MAX_WORLD_SIZE + 1, "larger than any plausible job")])
def test_world_size_of_a_bad_type_or_value_is_named_not_dropped_silently(tmp_path, value, why):
    assert checked_world_size(value) == (None, checked_world_size(value)[1])
    run = ddprof.ingest([trace(tmp_path / "r0.json", 0, value)], tmp_path / "run")
    text = "\n".join(run.manifest["per_rank"]["0"]["warnings"])
    assert repr(value) in text or str(value) in text
    assert why in text


def test_missing_ranks_are_ranges_never_expanded(tmp_path):
    assert missing_ranges([0, 1, 5], 8) == [(2, 4), (6, 7)]
    assert missing_ranges([], 3) == [(0, 2)]
    assert missing_ranges([0, 1, 2], 3) == []
    assert format_ranges([(2, 4), (6, 6)]) == "2-4, 6"
    assert format_ranges([(i * 2, i * 2) for i in range(20)], limit=2) == "0, 2 ... (20 in all)"
    t0 = time.perf_counter()
    assert missing_ranges([7], MAX_WORLD_SIZE) == [(0, 6), (8, MAX_WORLD_SIZE - 1)]
    assert time.perf_counter() - t0 < 0.1
    run = ddprof.ingest([trace(tmp_path / "r7.json", 7, MAX_WORLD_SIZE)], tmp_path / "run")
    assert f"1 of {MAX_WORLD_SIZE} ranks present (missing: 0-6, 8-{MAX_WORLD_SIZE - 1})" in run.manifest["warnings"]


def test_world_sizes_that_disagree_fail_the_minority(tmp_path):
    src = tmp_path / "src"
    for r in range(3):
        trace(src / f"r{r}.json", r, 4)
    trace(src / "r3.json", 3, 8)
    run = ddprof.ingest([src], tmp_path / "run")
    assert run.ranks == [0, 1, 2] and run.manifest["world_size"] == 4
    (failed,) = run.failed.values()
    assert "world_size 8 differs" in failed["error"] and "r3.json" in failed["error"]


# 2. args nested deeper than the decoder recurses -------------------------------------------------------


def deep(depth: int) -> str:
    return '{"x":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_args_do_not_break_the_trace(tmp_path, capsys, depth):
    text = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1, "extra": "@@"},
                       "traceEvents": [{**events(1)[0], "args": {"stream": 7, "junk": "@@"}}] + events(3)[1:]})
    path = tmp_path / "src" / "r0.json"
    path.parent.mkdir()
    path.write_text(text.replace('"@@"', deep(depth)))
    rc, out, err = cli(["analyze", path.parent, "--format", "json", "--cache", tmp_path / "c"], capsys)
    assert rc == 0, err
    assert "Traceback" not in err and "internal error" not in err
    report = json.loads(out)
    assert report["run"]["per_rank"][0]["events"] == 3  # the event with deep args is kept


def test_flatten_deep_cuts_only_past_the_limit_and_respects_strings():
    assert flatten_deep(b'[{"a": [[1], {"b": "]"}]}]', limit=3) == b'[{"a": [null, null]}]'
    assert flatten_deep(b'[{"a": "[[[[", "b": [1]}]', limit=2) == b'[{"a": "[[[[", "b": null}]'
    assert flatten_deep(b'[{"a": 1}]', limit=8) == b'[{"a": 1}]'
    assert flatten_deep(b'[{"s": "\\"[[["}]', limit=2) == b'[{"s": "\\"[[["}]'


def test_a_bug_while_ingesting_is_exit_70_never_a_bad_input(tmp_path, capsys, monkeypatch):
    from ddprof.readers.kineto import reader

    def broken(*a, **k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(reader, "build_events", broken)
    trace(tmp_path / "src" / "r0.json", 0, 1)
    rc, _, err = cli(["analyze", tmp_path / "src", "--cache", tmp_path / "c"], capsys)
    assert rc == 70
    assert "internal error" in err and "ZeroDivisionError" in err and "r0.json" in err


# 3. outputs that cannot be written ---------------------------------------------------------------------


@pytest.fixture
def readonly_dir(tmpfs):
    """A directory on a read-only mount (root ignores mode bits, so a mode-0o555 directory would not do)."""
    d = tmpfs("1m", "ro")
    subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
    return d


def _outputs(base: Path, src: Path) -> list[tuple[list[object], Path]]:
    return [(["analyze", src, "--cache", base / "c"], base / "c"),
            (["analyze", src, "--cache", tmp_cache(src), "-o", base / "report.json"], base / "report.json"),
            (["analyze", src, "--cache", tmp_cache(src), "--format", "json", "-o", base / "r.json"], base / "r.json"),
            (["ingest", src, "-q", "-o", base / "run"], base / "run")]


def tmp_cache(src: Path) -> Path:
    return src.parent / "cache-ok"


def test_outputs_on_a_read_only_mount_are_usage_errors_naming_the_path(tmp_path, readonly_dir, capsys):
    src = trace(tmp_path / "src" / "r0.json", 0, 1).parent
    for args, path in _outputs(readonly_dir, src):
        rc, _, err = cli(args, capsys)
        assert rc == 2, (args, err)
        assert err.strip() == f"ddprof: error: cannot write {path}: read-only file system"


def test_outputs_below_a_regular_file_are_usage_errors_naming_the_path(tmp_path, capsys):
    """What a user without write permission meets, simulated where root cannot write either."""
    src = trace(tmp_path / "src" / "r0.json", 0, 1).parent
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for args, path in _outputs(blocker, src):
        rc, _, err = cli(args, capsys)
        assert rc == 2, (args, err)
        assert err.strip().startswith(f"ddprof: error: cannot write {path}")
        assert "Traceback" not in err and err.count("\n") == 1


@pytest.mark.skipif(REPO, reason="root ignores mode bits; the read-only mount test covers root")
def test_outputs_in_a_directory_without_write_permission(tmp_path, capsys):
    src = trace(tmp_path / "src" / "r0.json", 0, 1).parent
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    for args, path in _outputs(locked, src):
        rc, _, err = cli(args, capsys)
        assert rc == 2 and err.strip() == f"ddprof: error: cannot write {path}: permission denied"


# 4. a full disk ----------------------------------------------------------------------------------------


@pytest.fixture
def small_fs(tmpfs):
    """A 96 KiB tmpfs: room for a manifest, not for a real trace's Parquet part or report."""
    return tmpfs("96k", "small")


def leftovers(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file()]


def test_full_disk_while_writing_parts_is_one_clean_error_then_a_correct_rerun(tmp_path, small_fs, capsys):
    src = SAMPLES / "dlrm-8xV100-nccl"  # eight parts of about 40 KiB each
    rc, _, err = cli(["ingest", src, "-q", "-j", "1", "-o", small_fs / "run"], capsys)
    assert rc == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "no space left on the device; it needs" in err and str(small_fs / "run" / "events") in err
    assert leftovers(small_fs) == []  # no part, no temporary file, no manifest
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    rc, _, err = cli(["ingest", src, "-q", "-o", small_fs / "run"], capsys)
    assert rc == 0, err
    fresh = ddprof.ingest([src], tmp_path / "elsewhere")
    assert ddprof.open_run(small_fs / "run").events().collect().sort(["rank", "ts_ns"]).equals(
        fresh.events().collect().sort(["rank", "ts_ns"]))


def test_full_disk_while_writing_the_report_or_the_manifest(tmp_path, small_fs, capsys):
    filler = small_fs / "filler"
    st = os.statvfs(small_fs)
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (8 << 10)))  # 8 KiB left
    rc, _, err = cli(["analyze", SAMPLES / "dlrm-8xV100-nccl", "--cache", tmp_path / "c",
                      "--format", "json",
                      "-o", small_fs / "report.json"], capsys)
    assert rc == 2 and err.startswith(f"ddprof: error: cannot write {small_fs / 'report.json'}: no space left")
    assert "KiB free there" in err and leftovers(small_fs) == [filler]
    with pytest.raises(OutputError, match=r"manifest.json: no space left on the device; it needs .* free there"):
        write_atomic(small_fs / "manifest.json", lambda p: p.write_bytes(b"x" * (200 << 10)),
                     needed=lambda: 200 << 10)
    assert leftovers(small_fs) == [filler]
    with pytest.raises(OutputError, match=r"part.parquet: no space left on the device; it needs 200\.0 KiB, .* free"):
        write_bytes_atomic(small_fs / "part.parquet", b"x" * (200 << 10))
    assert leftovers(small_fs) == [filler]


def test_temporary_files_of_a_dead_writer_are_removed_a_live_ones_kept(tmp_path):
    from ddprof.store import atomic

    sleeper = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        run = tmp_path / "run" / "events" / "rank=0"
        run.mkdir(parents=True)
        stale = run / f".part-x.parquet.tmp-{atomic._HOST}-{dead.pid}-abc123"
        live = run / f".part-y.parquet.tmp-{atomic._HOST}-{sleeper.pid}-abc123"
        other_host = run / ".part-z.parquet.tmp-elsewhere-1-abc123"
        for p in (stale, live, other_host):
            p.write_bytes(b"half a part")
        assert remove_stale_tmp(tmp_path / "run") == [stale]
        assert live.exists() and other_host.exists()
        assert remove_stale_tmp(tmp_path / "run", now=time.time() + 2 * atomic.STALE_TMP_S) == [other_host]
        ddprof.ingest([trace(tmp_path / "src" / "r0.json", 0, 1)], tmp_path / "run")
        assert live.exists() and not stale.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


# 5. refused Flight Recorder dumps beside captured traces ------------------------------------------------


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned > /dev/null",))


@pytest.mark.parametrize("refused", [[0], [0, 1, 2, 3]])
def test_refused_dumps_beside_traces_are_exit_3_naming_every_file(tmp_path, capsys, refused):
    src = tmp_path / "capture"
    shutil.copytree(GLOO, src)
    for r in refused:
        (src / "raw" / f"rank-{r:05d}" / f"fr_trace_rank_{r}").write_bytes(pickle.dumps(_Evil(), protocol=4))
    rc, _, err = cli(["analyze", src, "--cache", tmp_path / "c"], capsys)
    assert rc == 3, err
    for r in refused:
        assert f"fr_trace_rank_{r}" in err and "refused to load" in err
    assert "Traceback" not in err


def test_a_directory_whose_every_dump_fails_names_them_all(tmp_path, capsys):
    d = tmp_path / "dumps"
    d.mkdir()
    for r in range(6):
        (d / f"nccl_trace_rank_{r}").write_bytes(b"\x80\x04" + b"garbage")
    rc, _, err = cli(["analyze", d], capsys)
    assert rc == 2
    assert all(f"nccl_trace_rank_{r}" in err for r in range(6))


# 6. the cache vouches for content -----------------------------------------------------------------------


@pytest.fixture
def counted(monkeypatch):
    """Names of the traces parsed (not served from the cache) by each ingest."""
    parsed: list[str] = []
    real = pipeline.ingest_files

    def spy(paths, *rest):
        parsed.extend(Path(p).name for p in paths)
        return real(paths, *rest)

    monkeypatch.setattr(pipeline, "ingest_files", spy)
    return parsed


def same_size_pair(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src"
    a = trace(src / "a.json", 0, 2, events(3))
    b = trace(src / "b.json", 1, 2, [{**e, "name": e["name"].replace("op", "oq")} for e in events(3)])
    assert a.stat().st_size == b.stat().st_size
    return a, b


def test_same_size_edit_with_mtime_restored_is_read_again(tmp_path, counted):
    a, _ = same_size_pair(tmp_path)
    ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    st = a.stat()
    text = a.read_text()
    a.write_text(text.replace('"aten::op1"', '"aten::ZZZ"'))  # same size, in the middle of the file
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))  # what cp -p, rsync -a and tar do
    assert a.stat().st_size == st.st_size and a.stat().st_mtime_ns == st.st_mtime_ns
    counted.clear()
    run = ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    assert counted == ["a.json"]
    names = run.events().collect().filter(rank=0)["name"].to_list()
    assert "aten::ZZZ" in names and "aten::op1" not in names


def test_swapped_same_size_files_with_equal_mtimes_are_read_again(tmp_path, counted):
    a, b = same_size_pair(tmp_path)
    for p in (a, b):
        os.utime(p, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    tmp = a.with_name("tmp")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    counted.clear()
    run = ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    assert sorted(counted) == ["a.json", "b.json"]
    # the ranks follow the content: rank 0's events are still aten::op*
    assert set(run.events().collect().filter(rank=0)["name"]) == {"aten::op0", "aten::op1", "aten::op2"}
    assert Path(run.manifest["per_rank"]["0"]["sources"][0]).name == "b.json"


def test_an_identical_copy_is_served_from_the_cache_after_a_full_hash(tmp_path, counted):
    a, _ = same_size_pair(tmp_path)
    ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    shutil.copy2(a, a.with_name("copy"))
    a.with_name("copy").replace(a)  # a new inode, same bytes and mtime
    counted.clear()
    ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    assert counted == []
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["sources"][str(a.resolve())]["ino"] == a.stat().st_ino  # refreshed: the next check is cheap


def test_an_untouched_cache_parses_nothing(tmp_path, counted):
    a, _ = same_size_pair(tmp_path)
    ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    counted.clear()
    ddprof.ingest([a.parent], tmp_path / "run", jobs=1)
    assert counted == []


# 7. smaller: offsets, absurd numbers, duplicated events ------------------------------------------------


def test_json_error_offsets_are_in_the_file_and_truncation_is_said_only_when_true(tmp_path):
    good = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
                       "traceEvents": events(2000)}).encode()
    at = good.index(b'"aten::op1500"')
    bad = good[:at] + b"@" + good[at + 1:]
    src = tmp_path / "src"
    trace(src / "r0.json", 0, 1, raw=bad)
    with gzip.open(src / "r1.json.gz", "wb") as fh:
        fh.write(bad.replace(b'"rank": 0', b'"rank": 1'))
    run = ddprof.ingest([src / "r0.json", src / "r1.json.gz", trace(src / "ok.json", 2, 3)], tmp_path / "run")
    errors = {Path(v["path"]).name: v["error"] for v in run.failed.values()}
    assert f"byte {at}" in errors["r0.json"], errors["r0.json"]
    assert f"byte {at}" in errors["r1.json.gz"], errors["r1.json.gz"]
    assert "truncated" not in errors["r0.json"]
    trace(src / "cut.json", 0, 1, raw=good[: len(good) // 2])
    run = ddprof.ingest([src / "cut.json", src / "ok.json"], tmp_path / "run2")
    (cut,) = run.failed.values()
    assert "truncated" in cut["error"]


@pytest.mark.parametrize("large", [False, True])
def test_exact_duplicates_are_rows_equal_in_every_field(tmp_path, monkeypatch, large):
    """Rows that start and last alike but differ elsewhere are kept; copies equal in every field are dropped,
    on a small frame (every column hashed) and on a large one (compared whole where start and duration repeat)."""
    from ddprof.ingestion import job

    if large:
        monkeypatch.setattr(job, "MANY_ROWS", 8)  # the large-frame path, on a trace ingested in this process
    evs = events(40)
    evs += [dict(evs[i]) for i in (3, 3, 17)]  # exact copies: 3
    evs += [{**evs[5], "name": "aten::other"}, {**evs[9], "tid": 2}]  # same start and duration, not copies
    run = ddprof.ingest([trace(tmp_path / "r0.json", 0, 1, evs)], tmp_path / "run")
    info = run.manifest["per_rank"]["0"]
    assert info["events"] == 42
    (w,) = [w for w in info["warnings"] if "duplicate" in w]
    assert w.startswith("dropped 3 exact duplicate event(s)")


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(0, 1), st.integers(0, 1)),
                max_size=60))
@settings(max_examples=300, deadline=None)
def test_rows_that_may_be_duplicates_are_those_sharing_start_trace_and_duration(rows):
    """The large frame's candidates (sorted starts, then trace and duration among ties) are exactly the rows
    whose start, trace and duration another row shares, in any order of the rows."""
    import polars as pl

    from ddprof.ingestion.job import _same_time

    df = pl.DataFrame(rows, schema={"ts_ns": pl.Int64, "dur_ns": pl.Int64, "_trace": pl.UInt32, "x": pl.Int64},
                      orient="row")
    expected = set(df.with_row_index().filter(pl.struct("_trace", "ts_ns", "dur_ns").is_duplicated())
                   .get_column("index").to_list())
    assert set(_same_time(df).tolist()) == expected


def test_absurd_durations_are_dropped_by_name_with_nothing_on_stderr(tmp_path, capfd):
    evs = events(3) + [{**events(1)[0], "name": "huge", "dur": 1e308}, {**events(1)[0], "name": "inf", "ts": 1e308}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy overflow warning would be raised, then reported as a bug
        run = ddprof.ingest([trace(tmp_path / "r0.json", 0, 1, evs)], tmp_path / "run")
    text = "\n".join(run.manifest["per_rank"]["0"]["warnings"])
    assert "duration over 24 h" in text and "timestamp out of range" in text
    assert capfd.readouterr().err == ""


def test_every_event_duplicated_is_warned_and_counted_once(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SAMPLES / "dlrm-8xV100-nccl", src)
    once = ddprof.ingest([src], tmp_path / "once")
    for p in src.glob("*.json.gz"):
        doc = json.loads(gzip.decompress(p.read_bytes()))
        doc["traceEvents"] = doc["traceEvents"] + doc["traceEvents"]
        p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    twice = ddprof.ingest([src], tmp_path / "twice")
    for rank, info in twice.manifest["per_rank"].items():
        assert info["events"] == once.manifest["per_rank"][rank]["events"]
        assert info["comm_kernels"] == once.manifest["per_rank"][rank]["comm_kernels"]
        (w,) = [w for w in info["warnings"] if "exact duplicate" in w]
        assert w.startswith(f"dropped {info['events']} exact duplicate event(s)")
    for info in once.manifest["per_rank"].values():
        assert not [w for w in info["warnings"] if "duplicate" in w]
