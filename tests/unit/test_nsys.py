"""Nsight Systems SQLite exports (ddprof/readers/nsys): real 2-GPU H100 exports against direct SQL, a generated
run written as an export against the same run written as Kineto traces, check/diff between two exports, and
the refusal of damaged or foreign SQLite files."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import ddprof
from ddprof.cli import main
from ddprof.errors import BadInputError
from ddprof.readers import registry
from ddprof.synth import Spec, generate
from ddprof.synth.nsys import SCHEMA, SESSION_CLOCK_NS, UTC_START_NS, global_pid
from tests.support.paths import TRACES

EXPORTS = TRACES / "nsys-h100-2gpu"
NAMES = ("mfu_2gpu_before", "h100_2gpu_1s")
#: The kernel names the NCCL family matches (ddprof.vocabulary.collective_ops), as SQL.
NCCL_SQL = "(s.value LIKE 'ncclDevKernel%' OR s.value LIKE 'ncclKernel%')"


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """The bundled exports (kept gzip-compressed in the repository), inflated."""
    out = tmp_path_factory.mktemp("nsys")
    paths = {}
    for name in NAMES:
        paths[name] = out / f"{name}.sqlite"
        with gzip.open(EXPORTS / f"{name}.sqlite.gz") as src, open(paths[name], "wb") as dst:
            shutil.copyfileobj(src, dst)
    return paths


def sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def by_device(path: Path) -> list[int]:
    """The export's processes with kernels, in the order of their CUDA device: ranks 0, 1, ..."""
    rows = sql(path, "SELECT globalPid, min(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 ORDER BY 2, 1")
    return [g for g, _ in rows]


@pytest.mark.parametrize("name", NAMES)
def test_a_real_export_is_two_ranks_with_the_kernels_sql_counts(exports, tmp_path, name):
    path = exports[name]
    before = hashlib.sha1(path.read_bytes()).hexdigest()
    run = ddprof.ingest([path], tmp_path / "run")
    assert run.ranks == [0, 1]
    per_rank = run.manifest["per_rank"]
    for rank, gpid in enumerate(by_device(path)):
        (kernels,) = sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid = {gpid}")[0]
        (nccl,) = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = "
                            f"k.demangledName WHERE k.globalPid = {gpid} AND {NCCL_SQL}")[0]
        assert (per_rank[str(rank)]["kernels"], per_rank[str(rank)]["comm_kernels"]) == (kernels, nccl)
    if name == "mfu_2gpu_before":
        assert [per_rank[r]["comm_kernels"] for r in ("0", "1")] == [33, 33]  # ncclDevKernel_SendRecv
    events = run.events().collect()
    ops = events.filter(pl.col("kind") == "cpu_op").get_column("name")
    assert ops.str.contains(", op_id = ").sum() == 0 and "aten::mul" in ops.to_list()
    assert hashlib.sha1(path.read_bytes()).hexdigest() == before  # never changed
    assert not [p for p in path.parent.iterdir() if p.name.endswith(("-journal", "-wal", "-shm"))]  # none beside it


@pytest.mark.parametrize("name", NAMES)
def test_a_real_export_s_report_equals_unions_computed_from_sql(exports, name):
    path = exports[name]
    report = ddprof.analyze(path)
    assert report["status"] == "ok" and report["run"]["ranks"] == [0, 1]
    assert report["run"]["steps"] == [] and report["step_times"]["per_rank"] == []  # no step ranges here
    overlap = {r["rank"]: r for r in report["overlap"]}
    breakdown = {r["rank"]: r for r in report["breakdown"]}
    for rank, gpid in enumerate(by_device(path)):
        rows = sql(path, "SELECT k.start, k.end, " + NCCL_SQL + " FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                         f"ON s.id = k.demangledName WHERE k.globalPid = {gpid}")
        memory = sql(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE globalPid = "
                           f"{gpid} UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE globalPid = {gpid}")
        compute = union([(s, e) for s, e, comm in rows if not comm])
        comm = union([(s, e) for s, e, c in rows if c])
        work = union([(s, e) for s, e, _ in rows] + memory)
        span = max(e for _, e in work) - min(s for s, _ in work)
        assert overlap[rank]["comm_us"] == pytest.approx(length(comm) / 1e3, abs=1e-3)
        assert overlap[rank]["overlapped_us"] == pytest.approx(intersection(comm, compute) / 1e3, abs=1e-3)
        if comm:
            assert overlap[rank]["overlap_pct"] == pytest.approx(100 * intersection(comm, compute) / length(comm))
        assert breakdown[rank]["span_us"] == pytest.approx(span / 1e3, abs=1e-3)
        assert breakdown[rank]["compute_us"] == pytest.approx(length(compute) / 1e3, abs=1e-3)
        assert breakdown[rank]["idle_us"] == pytest.approx((span - length(work)) / 1e3, abs=1e-3)
    if name == "mfu_2gpu_before":
        assert overlap[0]["comm_us"] > 0 and overlap[1]["comm_us"] > 0


def test_a_generated_run_as_an_export_reports_what_its_kineto_traces_report(tmp_path):
    spec = Spec(ranks=4, steps=3, kernels=24, layers=2, buckets=2, slow={2: 1.3}, seed=3)
    generate(spec, tmp_path / "kineto")
    truth = generate(spec, tmp_path / "nsys", fmt="nsys")
    assert sorted(p.name for p in (tmp_path / "nsys" / "traces").glob("*.sqlite")) == ["run.sqlite"]
    kineto, nsys = ddprof.analyze(tmp_path / "kineto" / "traces"), ddprof.analyze(tmp_path / "nsys" / "traces")
    assert nsys["status"] == "ok" and nsys["run"]["ranks"] == kineto["run"]["ranks"] == [0, 1, 2, 3]
    assert nsys["run"]["steps"] == kineto["run"]["steps"]
    # every section but those of the collectives' metadata (message sizes, groups), which an export lacks
    for section in sorted(set(kineto) - {"run", "verdicts", "collectives", "bandwidth", "stragglers", "health", "links"}):
        assert nsys[section] == kineto[section], section
    # the stragglers' decision is the same; their lateness differs by tens of ns: an export's times are integer
    # ns from the session's start where the Kineto file's are µs with three decimals, and the arrival test's
    # p-value follows that spread
    assert nsys["stragglers"]["ranks"] == kineto["stragglers"]["ranks"] == [2]
    for got, want in zip(nsys["stragglers"]["per_rank"], kineto["stragglers"]["per_rank"], strict=True):
        assert {k: v for k, v in got.items() if not isinstance(v, float)} == \
            {k: v for k, v in want.items() if not isinstance(v, float)}
        for k, v in want.items():
            if isinstance(v, float):
                tol = {"rel": 0.1} if k == "p_value" else {"rel": 1e-3, "abs": 0.1 if k.endswith("_us") else 1e-3}
                assert got[k] == pytest.approx(v, **tol), (got["rank"], k)
    # the health section says why the export has no bandwidth: each rank's collectives have no message size
    sizes = [h for h in nsys["health"] if h["finding"] == "no_message_sizes"]
    assert [h for h in nsys["health"] if h["finding"] != "no_message_sizes"] == kineto["health"]
    assert [h["rank"] for h in sizes] == [0, 1, 2, 3] and all(h["count"] > 0 for h in sizes)
    assert nsys["verdicts"] == [v for v in kineto["verdicts"] if "bus bandwidth" not in v]
    assert nsys["stragglers"] and nsys["overlap"] and nsys["step_times"]["per_rank"]
    assert [r["kernels"] for r in nsys["run"]["per_rank"]] == [r["kernels"] for r in kineto["run"]["per_rank"]]
    assert [r["comm_kernels"] for r in nsys["run"]["per_rank"]] == [r["comm_kernels"] for r in kineto["run"]["per_rank"]]
    true = {r["rank"]: r for r in truth["per_rank"]}
    for row in nsys["overlap"]:
        assert row["overlap_pct"] == pytest.approx(true[row["rank"]]["overlap_pct"], abs=1e-6)
    for row in nsys["breakdown"]:
        assert row["idle_us"] == pytest.approx(true[row["rank"]]["idle_us"], abs=1e-3)


def test_the_synth_command_writes_an_export(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "out"), "--ranks", "2", "--steps", "2", "--format", "nsys"]) == 0
    capsys.readouterr()
    db = tmp_path / "out" / "traces" / "run.sqlite"
    assert registry.recognise(db).name == "nsys"
    assert main(["analyze", str(db), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["ranks"] == [0, 1]


def test_check_and_diff_between_two_exports(exports, tmp_path, capsys):
    real = exports["mfu_2gpu_before"]
    again = tmp_path / "again.sqlite"
    shutil.copyfile(real, again)
    assert main(["check", str(again), "--baseline", str(real), "--cache", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ddprof check: OK: no regression") and "2 ranks (world size not recorded)" in out
    assert main(["diff", str(again), str(real), "--format", "json", "--cache", str(tmp_path / "c")]) == 0
    same = json.loads(capsys.readouterr().out)
    kernels = {k["name"]: k for k in same["kernels"]}
    nccl = kernels["ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"]
    assert nccl["kind"] == "comm" and nccl["base_count"] == nccl["run_count"] == 66
    for name, slow in (("base", {}), ("slow", {1: 1.5})):  # generated exports with steps: one rank slowed
        generate(Spec(ranks=2, steps=4, kernels=24, layers=2, buckets=2, slow=slow), tmp_path / name, fmt="nsys")
    slow, base = (str(tmp_path / n / "traces" / "run.sqlite") for n in ("slow", "base"))
    assert main(["check", slow, "--baseline", base, "--cache", str(tmp_path / "c")]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert main(["diff", slow, base, "--cache", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "median step time: " in out and "ncclDevKernel_AllReduce" in out and "sm90_xmma_gemm" in out


def test_ranks_of_another_node_s_export_start_where_rank_says(exports, tmp_path):
    run = ddprof.ingest([exports["mfu_2gpu_before"]], tmp_path / "run", rank_map={"mfu_2gpu_before.sqlite": 6})
    assert run.ranks == [6, 7]
    assert not any("no rank recorded" in w for w in run.manifest["per_rank"]["6"]["warnings"])


def test_a_damaged_export_is_refused_naming_the_file(exports, tmp_path, capsys):
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(exports["mfu_2gpu_before"].read_bytes()[:300_000])  # the header, then nothing whole
    with pytest.raises(BadInputError) as exc:
        registry.recognise(cut).open(cut)
    assert str(exc.value).startswith(f"{cut}: ") and "SQLite" in str(exc.value)
    torn = tmp_path / "torn.sqlite"  # whole in length, pages in the middle overwritten
    data = bytearray(exports["mfu_2gpu_before"].read_bytes())
    data[1_500_000:1_600_000] = b"\xa5" * 100_000
    torn.write_bytes(bytes(data))
    assert main(["analyze", str(torn)]) == 2
    err = capsys.readouterr().err
    assert f"{torn}: a damaged SQLite file (database disk image is malformed)" in err and "Traceback" not in err
    odd = tmp_path / "odd.sqlite"  # a well-formed database, a time that is text
    shutil.copyfile(exports["mfu_2gpu_before"], odd)
    con = sqlite3.connect(odd)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 5")
    con.commit()
    con.close()
    assert main(["analyze", str(odd)]) == 2
    err = capsys.readouterr().err
    for rank in (0, 1):  # each rank of the file fails, named
        assert (f"{odd}, rank {rank}: an Nsight Systems export with a value of the wrong type in "
                "CUPTI_ACTIVITY_KIND_KERNEL: ") in err
    assert "Traceback" not in err
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    rc = main(["analyze", str(garbage)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{garbage}: " in err and "SQLite" in err and "Traceback" not in err


def test_a_gzipped_export_is_named_and_refused_saying_to_inflate_it(tmp_path, capsys):
    """The bundled exports as stored (``.sqlite.gz``): a directory of them names each and says what to do, and
    one given itself is refused saying it is gzipped (SQLite reads the plain file only), never "not a
    database"."""
    src = tmp_path / "exports"
    src.mkdir()
    for name in NAMES:
        shutil.copyfile(EXPORTS / f"{name}.sqlite.gz", src / f"{name}.sqlite.gz")
    assert main(["analyze", str(src)]) == 2
    err = capsys.readouterr().err
    for name in NAMES:
        assert (f"{src / name}.sqlite.gz: an Nsight Systems SQLite export, gzipped: ddprof reads it inflated "
                f"(gunzip -k {name}.sqlite.gz)") in err, err
    one = src / f"{NAMES[1]}.sqlite.gz"
    assert main(["analyze", str(one)]) == 2
    err = capsys.readouterr().err
    assert (f"{one}: a gzipped file: an Nsight Systems export is read as the plain SQLite file (inflate it first: "
            f"gunzip -k {one.name})") in err and "not a database" not in err and "Traceback" not in err
    # an export under a name a directory search passes over, not gzipped: named, to be given itself
    plain = tmp_path / "other"
    plain.mkdir()
    with gzip.open(one) as fh:
        (plain / "export.db").write_bytes(fh.read())
    assert main(["analyze", str(plain)]) == 2
    assert (f"{plain / 'export.db'}: an Nsight Systems SQLite export by its content, not by its name (*.sqlite): "
            "give the file itself on the command line") in capsys.readouterr().err


def test_a_foreign_database_named_like_an_export_is_refused_naming_its_tables(tmp_path, capsys):
    db = tmp_path / "metrics.sqlite"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE runs (id INTEGER, loss REAL); INSERT INTO runs VALUES (1, 0.5);")
    con.commit()
    con.close()
    rc = main(["analyze", str(db)])
    err = capsys.readouterr().err
    assert rc == 2 and (f"{db}: an SQLite database that is not an Nsight Systems export (tables: runs): not a "
                        "format ddprof reads") in err


def test_an_export_without_gpu_activity_is_refused_saying_so(tmp_path):
    db = tmp_path / "cpu.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, systemClockNs INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, globalTid INTEGER, text TEXT,
            textId INTEGER, domainId INTEGER);
    """)
    con.commit()
    con.close()
    with pytest.raises(BadInputError, match="no GPU activity"):
        registry.recognise(db).open(db)


def tiny_export(path: Path, *, kernels=(), runtime=(), nvtx=(), memcpy=(), syncs=(), env: dict | None = None,
                utc: int = UTC_START_NS, clock: int = SESSION_CLOCK_NS) -> Path:
    """A small export made here (the tables of :data:`ddprof.synth.nsys.SCHEMA`, plus synchronisations and the
    capture's recorded environment). Rows name their process by pid (``gpid``: its global id) and their
    strings as text (put in ``StringIds`` here)."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA + """
        CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER, end INTEGER, deviceId INTEGER,
            contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, syncType INTEGER);
        CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
    """)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '', ?)", (utc, clock))
    for pid, dev, stream, start, end, corr, name in kernels:
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?)",
                    (start, end, dev, stream, corr, global_pid(pid), sid(name), sid(name)))
    for pid, start, end, corr, name in runtime:
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0)",
                    (start, end, global_pid(pid) | pid, corr, sid(name)))
    for pid, start, end, text in nvtx:
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, 59, ?, ?, 0)",
                    (start, end, text, global_pid(pid) | pid))
    for pid, dev, stream, start, end, copy, src, dst in memcpy:
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, 1, ?, 0, ?, 64, ?, ?, ?)",
                    (start, end, dev, stream, global_pid(pid), copy, src, dst))
    for pid, dev, stream, start, end, kind in syncs:
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?, ?, ?, 1, ?, 0, ?, ?)",
                    (start, end, dev, stream, global_pid(pid), kind))
    for k, v in (env or {}).items():
        con.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)", (f'{k}="{v}"',))
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    con.commit()
    con.close()
    return path


GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"


def test_rows_are_named_and_classified_as_the_kineto_reader_names_them(tmp_path):
    db = tiny_export(
        tmp_path / "one.sqlite", env={"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3"},
        kernels=[(7, 3, 7, 1_000, 5_000, 11, GEMM), (7, 3, 20, 6_000, 9_000, 12, "ncclKernel_AllReduce_RING_LL_Sum_float")],
        runtime=[(7, 500, 900, 11, "cudaLaunchKernel_v7000"), (7, 5_500, 5_900, 12, "cuLaunchKernelEx")],
        nvtx=[(7, 400, 1_000, "aten::mm, seq = 4, op_id = 17, sizes = [[2, 2], [2, 2]]"), (7, 5_400, 6_000, "ncclAllReduce"),
              (7, 13_000, 13_500, "MmBackward, stashed seq = 4, op_id = 18")],
        memcpy=[(7, 3, 7, 10_000, 10_500, 1, 1, 2)],
        syncs=[(7, 3, 7, 11_000, 11_100, 3), (7, 3, 0xFFFFFFFF, 12_000, 12_100, 1)])
    run = ddprof.ingest([db], tmp_path / "run")
    assert run.ranks == [3] and run.manifest["world_size"] == 4  # torchrun's RANK, recorded in the capture's environment
    ev = run.events().sort("ts_ns").collect()
    rows = {r["name"]: r for r in ev.iter_rows(named=True)}
    assert set(rows) == {GEMM, "ncclKernel_AllReduce_RING_LL_Sum_float", "cudaLaunchKernel", "cuLaunchKernelEx",
                         "aten::mm", "ncclAllReduce", "Memcpy HtoD (Pinned -> Device)", "Stream Sync", "MmBackward"}
    assert rows["MmBackward"]["kind"] == "cpu_op"
    assert [rows[n]["kind"] for n in (GEMM, "ncclKernel_AllReduce_RING_LL_Sum_float", "cudaLaunchKernel", "aten::mm",
                                      "ncclAllReduce", "Memcpy HtoD (Pinned -> Device)", "Stream Sync")] == \
        ["compute", "comm", "runtime", "cpu_op", "annotation", "memcpy", "sync"]
    assert rows["ncclKernel_AllReduce_RING_LL_Sum_float"]["coll_op"] == "all_reduce"
    assert rows["cuLaunchKernelEx"]["cat"] == "cuda_driver" and rows["cudaLaunchKernel"]["cat"] == "cuda_runtime"
    assert (rows[GEMM]["device"], rows[GEMM]["stream"], rows[GEMM]["pid"], rows[GEMM]["correlation"]) == (3, 7, 7, 11)
    assert (rows["aten::mm"]["pid"], rows["aten::mm"]["tid"], rows["aten::mm"]["stream"]) == (7, 7, None)
    # the session's clock mapped onto the epoch: t - systemClockNs + utcEpochNs
    assert rows[GEMM]["ts_ns"] == UTC_START_NS + 1_000 - SESSION_CLOCK_NS and rows[GEMM]["dur_ns"] == 4_000


def test_step_ranges_a_user_names_are_steps_unless_profiler_steps_are_there(tmp_path):
    kernels = [(9, 0, 7, 1_000 + 10_000 * i, 4_000 + 10_000 * i, 100 + i, GEMM) for i in range(3)]
    launches = [(9, 500 + 10_000 * i, 900 + 10_000 * i, 100 + i, "cudaLaunchKernel_v7000") for i in range(3)]
    steps = [(9, 10_000 * i, 10_000 * i + 9_000, f"train_step {i + 5}") for i in range(3)]
    run = ddprof.ingest([tiny_export(tmp_path / "user.sqlite", kernels=kernels, runtime=launches, nvtx=steps)],
                        tmp_path / "run-user")
    ev = run.events().collect()
    assert run.manifest["per_rank"]["0"]["steps"] == [5, 6, 7]
    assert sorted(ev.filter(pl.col("kind") == "annotation").get_column("name").to_list()) == \
        ["ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"]
    assert ev.filter(pl.col("kind") == "compute").sort("ts_ns").get_column("step").to_list() == [5, 6, 7]
    report = ddprof.analyze(tmp_path / "run-user")
    assert report["run"]["steps"] == [5, 6, 7] and len(report["step_times"]["per_rank"]) == 1

    profiler = [(9, 10_000 * i, 10_000 * i + 9_000, f"ProfilerStep#{i}") for i in range(3)]
    run = ddprof.ingest([tiny_export(tmp_path / "both.sqlite", kernels=kernels, runtime=launches,
                                     nvtx=profiler + [(9, 100, 200, "step 40")])], tmp_path / "run-both")
    names = run.events().collect().filter(pl.col("kind") == "annotation").get_column("name").to_list()
    assert run.manifest["per_rank"]["0"]["steps"] == [0, 1, 2] and "step 40" in names


def test_a_file_of_several_ranks_is_reused_from_the_cache_whole(exports, tmp_path):
    first = ddprof.ingest([exports["h100_2gpu_1s"]], tmp_path / "run")
    key = str(exports["h100_2gpu_1s"].resolve())
    assert sorted(first.manifest["sources"]) == [f"{key}#0", f"{key}#1"]
    parts = sorted((tmp_path / "run" / "events").rglob("*.parquet"))
    stamps = [p.stat().st_mtime_ns for p in parts]
    again = ddprof.ingest([exports["h100_2gpu_1s"]], tmp_path / "run")
    assert again.ranks == [0, 1] and sorted(again.manifest["sources"]) == [f"{key}#0", f"{key}#1"]
    assert [p.stat().st_mtime_ns for p in parts] == stamps  # nothing parsed again


# ------------------------------------------------------------------ collectives without NCCL metadata


def test_a_real_export_s_collectives_are_matched_by_comm_stream_position(exports):
    """mfu_2gpu_before: rank 0's 33 ncclDevKernel_SendRecv run on its stream 7, rank 1's on its stream 15
    (no NCCL metadata). They were two groups of one rank each; as each process's first communication
    stream they are one group, and the k-th kernel of each rank is the same transfer."""
    report = ddprof.analyze(exports["mfu_2gpu_before"])
    coll = report["collectives"]
    assert coll["instances"] == 33 and [r["count"] for r in coll["by_op"]] == [33]
    assert {(w["pg"], tuple(w["ranks_seen"])) for w in coll["worst"]} == {("comm stream #0", (0, 1))}
    assert not any("not seen on every rank" in w for w in report["run"]["warnings"])
    sizes = {h["rank"]: h for h in report["health"] if h["finding"] == "no_message_sizes"}
    assert sorted(sizes) == [0, 1] and {h["count"] for h in sizes.values()} == {33} and report["bandwidth"] == []
    assert sizes[0]["affects"].startswith("bandwidth: no message size was recorded")


NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


@pytest.mark.parametrize("streams, groups", [
    # two communicators: the k-th comm stream of each process by id, whatever the ids
    ({7: (7, 20), 8: (15, 31)}, {"comm stream #0", "comm stream #1"}),
    # not as many comm streams on each process: each stream stays its own group
    ({7: (7, 20), 8: (15,)}, {"stream 7", "stream 20", "stream 15"}),
])
def test_comm_streams_are_matched_by_position_only_when_every_process_has_as_many(tmp_path, streams, groups):
    kernels = [(pid, dev, stream, 10_000 * (k + 1) + 1_000 * i, 10_000 * (k + 1) + 1_000 * i + 500, 0, NCCL_AR)
               for dev, (pid, ss) in enumerate(streams.items()) for i, stream in enumerate(ss) for k in range(3)]
    report = ddprof.analyze(tiny_export(tmp_path / "two.sqlite", kernels=kernels), cache=tmp_path / "run")
    worst = report["collectives"]["worst"]
    assert {w["pg"] for w in worst} == groups
    if len(groups) == 2:
        assert report["collectives"]["instances"] == 6 and all(w["ranks_seen"] == [0, 1] for w in worst)
