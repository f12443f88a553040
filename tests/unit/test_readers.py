"""Input formats are readers behind one interface (ddprof/readers): recognition names what a file is and
refuses, by name, what no reader takes; a new format is one reader and one registration line."""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest

import ddprof
from ddprof.cli import main
from ddprof.errors import BadInputError
from ddprof.ingestion.discover import discover
from ddprof.readers import registry
from ddprof.readers.base import DumpReader, EventReader, Identity, Opened, with_trace_index
from ddprof.readers.kineto.decode import decode
from ddprof.readers.kineto.reader import from_pytorch
from ddprof.store.schema import conform
from ddprof.synth import DataParallel, Spec, generate, write_kineto
from tests.support.paths import FLIGHT_RECORDER, REPO, SAMPLES, TRACES

NOT_PYTORCH = ("a Chrome trace without PyTorch profiler events (no event of a PyTorch profiler category such "
               "as cpu_op, kernel or cuda_runtime, no ProfilerStep#N step, no distributedInfo or other PyTorch "
               "profiler key): not a format ddprof reads")


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def nsight_export(path: Path) -> Path:
    """A small database with the tables of an Nsight Systems SQLite export (nsys export --type sqlite)."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER, streamId INTEGER, correlationId INTEGER, shortName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, correlationId INTEGER);
        INSERT INTO StringIds VALUES (1, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL');
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 5000, 0, 7, 1, 1);
    """)
    con.commit()
    con.close()
    return path


def other_database(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript("CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');")
    con.commit()
    con.close()
    return path


def chrome_trace(path: Path) -> Path:
    """A Chrome trace of a tool that is not the PyTorch profiler (a framework's merged timeline)."""
    events = [{"ph": "X", "cat": "megatron", "name": f"forward-{i}", "pid": 0, "tid": 1, "ts": 10.0 * i, "dur": 5.0}
              for i in range(20)]
    events += [{"ph": "B", "cat": "optimizer", "name": "step", "pid": 0, "tid": 1, "ts": 300.0},
               {"ph": "E", "pid": 0, "tid": 1, "ts": 350.0}]
    path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"tool": "x"}}))
    return path


def perfetto_like(path: Path) -> Path:
    """Bytes shaped like a Perfetto trace: TracePacket (field 1) messages, binary."""
    packet = bytes([0x08, 0x96, 0x01, 0x50, 0x02, 0x00, 0x01, 0x7F])
    path.write_bytes((bytes([0x0A, len(packet)]) + packet) * 8)
    return path


#: What opening :func:`nsight_export` says: its kernel table lacks columns the Nsight Systems reader reads.
LACKS = ("an Nsight Systems export whose CUPTI_ACTIVITY_KIND_KERNEL table lacks column(s) globalPid: not an "
         "export ddprof can read")


def test_an_nsight_systems_export_is_its_reader_s_and_one_it_cannot_read_is_refused_naming_why(tmp_path, capsys):
    db = nsight_export(tmp_path / "profile.sqlite")
    assert registry.recognise(db).name == "nsys"
    with pytest.raises(BadInputError) as exc:
        registry.recognise(db).open(db)
    assert str(exc.value) == f"{db}: {LACKS}"
    rc, _, err = run_cli(["analyze", str(db)], capsys)
    assert rc == 2 and f"{db}: {LACKS}" in err
    assert "not valid JSON" not in err and "Traceback" not in err


def test_a_directory_of_exports_is_read_as_traces(tmp_path, capsys):
    src = tmp_path / "nsys"
    src.mkdir()
    db = nsight_export(src / "report.sqlite")
    (src / "notes.txt").write_text("rank 0 ran on node 3\n")
    assert discover([src]) == [db]
    rc, _, err = run_cli(["analyze", str(src)], capsys)
    assert rc == 2 and f"{db}: {LACKS}" in err


def test_an_nsight_systems_report_is_refused_pointing_to_its_export(tmp_path):
    rep = tmp_path / "profile.nsys-rep"
    rep.write_bytes(b"\x00\x01QDSTRM" + bytes(range(256)) * 4)
    with pytest.raises(BadInputError) as exc:
        registry.recognise(rep)
    assert str(exc.value) == (f"{rep}: an Nsight Systems report: not read directly: export it with `nsys export "
                              "--type sqlite profile.nsys-rep` and give ddprof the .sqlite file it writes")


def test_a_database_that_is_not_nsight_s_is_refused_naming_its_tables(tmp_path, capsys):
    db = other_database(tmp_path / "app.db")
    message = f"{db}: an SQLite database that is not an Nsight Systems export (tables: users): not a format ddprof reads"
    with pytest.raises(BadInputError) as exc:
        registry.recognise(db).open(db)
    assert str(exc.value) == message
    rc, _, err = run_cli(["ingest", str(db), "-o", str(tmp_path / "run")], capsys)
    assert rc == 2 and message in err


def test_a_chrome_trace_of_another_tool_is_refused_not_analysed_into_an_empty_report(tmp_path, capsys):
    trace = chrome_trace(tmp_path / "timeline.json")
    assert registry.recognise(trace) is next(r for r in registry.READERS if r.name == "kineto")  # a JSON trace ...
    with pytest.raises(BadInputError) as exc:  # ... whose events are not PyTorch's
        registry.recognise(trace).open(trace)
    assert str(exc.value) == f"{trace}: {NOT_PYTORCH}"
    rc, out, err = run_cli(["analyze", str(trace), "--rank", "timeline.json=0", "--format", "json"], capsys)
    assert rc == 2 and f"{trace}: {NOT_PYTORCH}" in err and '"status": "ok"' not in out


def _x(name: str, cat: str, pid: int, tid: int, ts: float, dur: float, **args: object) -> dict[str, object]:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _ranks_as_pids(cat: str, names: tuple[str, ...] = ("forward-compute", "grads-reduce-scatter")) -> list[dict]:
    """Two ranks written as two pids of one file, each naming itself ("rank N") in process_name."""
    meta = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": f"rank {p}"}} for p in range(2)]
    return meta + [_x(n, cat, p, k, 1000.0 + 100 * i + 60 * k, 40.0, stream=7) for p in range(2) for i in range(5)
                   for k, n in enumerate(names)]


NO_WORK = ("a trace with no work ddprof analyses: its {n} complete events are annotations, Python frames or "
           "categories it does not read ({cats}); there is no CPU operator (cpu_op), GPU kernel, copy or runtime "
           "call (kernel, gpu_memcpy, cuda_runtime) to measure")
MERGED = ("a Chrome trace whose GPU activity comes from 2 processes (pid 0, 1) with no PyTorch profiler key "
          "(distributedInfo, deviceProperties, ...) and no CPU operator: several ranks merged into one file, which "
          "ddprof does not split (it reads one rank per trace file); give it each rank's own PyTorch profiler trace")


@pytest.mark.parametrize("shape, events, sentence", [
    # a merged Megatron timeline: its own categories, one pid a rank
    ("megatron-merged", _ranks_as_pids("megatron"), NOT_PYTORCH),
    # an accelerator vendor's trace (IBM AIU-like): device activity under cat "gpu", one pid a rank
    ("aiu", _ranks_as_pids("gpu", ("matmul", "allreduce")), NOT_PYTORCH),
    # a merged timeline that writes its device work as cat "kernel": two ranks would be read as one
    ("kernels-of-two-ranks", _ranks_as_pids("kernel", ("gemm", "ncclDevKernel_AllReduce")), MERGED),
    # PyTorch profiler categories, but nothing to measure: annotations, steps, Python frames
    ("annotations-only", [_x("ProfilerStep#1", "user_annotation", 1, 1, 0.0, 90.0),
                          _x("forward", "user_annotation", 1, 1, 5.0, 40.0),
                          _x("model.py(12): forward", "python_function", 1, 1, 6.0, 30.0)],
     NO_WORK.format(n=3, cats="2 user_annotation, 1 python_function")),
    ("gpu-annotations-only", [_x("fwd", "gpu_user_annotation", 0, 7, 10.0 * i, 5.0) for i in range(4)],
     NO_WORK.format(n=4, cats="4 gpu_user_annotation")),
])
def test_foreign_chrome_shapes_are_refused_even_with_a_rank_given(tmp_path, capsys, shape, events, sentence):
    """Chrome traces of the wild that ddprof cannot map honestly: exit 2 with the sentence, with or without
    --rank, never status ok and an empty report."""
    trace = tmp_path / f"{shape}.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(BadInputError) as exc:
        registry.recognise(trace).open(trace)
    assert str(exc.value) == f"{trace}: {sentence}"
    for extra in ([], ["--rank", f"{shape}.json=0"]):
        rc, out, err = run_cli(["analyze", str(trace), *extra, "--format", "json"], capsys)
        assert rc == 2 and f"{trace}: {sentence}" in err and '"status": "ok"' not in out


def test_gloo_annotations_alone_are_work(tmp_path):
    """A CPU trace whose only events are gloo's collective annotations is communication, not refused."""
    trace = tmp_path / "rank-0.json"
    trace.write_text(json.dumps({"traceEvents": [_x("gloo:all_reduce", "user_annotation", 1, 2, 10.0, 3.0)]}))
    assert registry.recognise(trace).open(trace).identity is not None


def test_a_pytorch_execution_trace_is_refused_by_name(tmp_path, capsys):
    """An ExecutionTraceObserver file (JSON: schema, pid, time, nodes; HTA's test data has a real one, its
    head copied here) is no profiler trace: named, with what to give instead, beside a profiler trace that
    is analysed. A Kineto trace that holds a key "schema" first is still one."""
    et = tmp_path / "benchmark_simple_add_et.json"
    et.write_text('{\n  "schema": "1.0.1", "pid": 563677, "time": "2023-07-14 11:53:07", "start_ts": 6278907328,\n'
                  '  "nodes": [\n    {"name": "[pytorch|profiler|execution_trace|thread]", "id": 2, "rf_id": 0, '
                  '"parent": 1, "inputs": [], "outputs": []}\n  ]\n}\n')
    with pytest.raises(BadInputError) as exc:
        registry.recognise(et)
    assert str(exc.value) == (f"{et}: a PyTorch execution trace (ExecutionTraceObserver's graph of ops and tensors: "
                              "'schema', 'nodes'): it records no times: give ddprof the profiler trace taken with it "
                              "(a Kineto trace, *.pt.trace.json)")
    rc, _, err = run_cli(["analyze", str(et)], capsys)
    assert rc == 2 and "a PyTorch execution trace" in err
    kineto = tmp_path / "rank-0.json"
    kineto.write_text(json.dumps({"schema": 1, "traceEvents": [_x("aten::mm", "cpu_op", 1, 2, 10.0, 3.0)]}))
    assert registry.recognise(kineto).describes == registry.READERS[1].describes


def test_a_perfetto_protobuf_trace_is_refused_by_name(tmp_path, capsys):
    for name in ("trace.pftrace", "capture.bin"):  # by its name, or by its first bytes
        f = perfetto_like(tmp_path / name)
        with pytest.raises(BadInputError) as exc:
            registry.recognise(f)
        assert str(exc.value) == f"{f}: a Perfetto protobuf trace: not supported yet"
    rc, _, err = run_cli(["analyze", str(tmp_path / "capture.bin")], capsys)
    assert rc == 2 and f"{tmp_path / 'capture.bin'}: a Perfetto protobuf trace: not supported yet" in err


def test_a_pickle_that_is_not_a_flight_recorder_dump_is_refused_by_name(tmp_path, capsys):
    f = tmp_path / "state.pkl"
    f.write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    assert registry.recognise(f) is registry.dump_reader()  # a pickle: the dump reader's to judge
    message = f"{f}: not a Flight Recorder dump: top level is a list, expected a dict"
    rc, _, err = run_cli(["analyze", str(f)], capsys)
    assert rc == 2 and message in err
    rc, _, err = run_cli(["ingest", str(f), "-o", str(tmp_path / "run")], capsys)
    assert rc == 2 and message in err


def test_a_file_no_reader_takes_is_refused_with_the_formats_read(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("step 1 took 3 s\n")
    message = (f"{f}: not a format ddprof reads (it reads an NCCL Flight Recorder dump, a PyTorch profiler "
               "(Kineto) trace, an Nsight Systems SQLite export)")
    with pytest.raises(BadInputError) as exc:
        registry.recognise(f)
    assert str(exc.value) == message
    rc, _, err = run_cli(["analyze", str(f)], capsys)
    assert rc == 2 and message in err


def test_refused_files_beside_read_ones_are_named_and_the_others_analysed(tmp_path, capsys):
    src = write_kineto(DataParallel(ranks=2, steps=2), tmp_path / "traces")
    chrome_trace(src / "merged_timeline.json")
    db = nsight_export(tmp_path / "profile.sqlite")
    rc, out, err = run_cli(["analyze", str(src), str(db), "--format", "json", "--cache", str(tmp_path / "c")],
                           capsys)
    report = json.loads(out)
    assert rc == 3 and report["status"] == "partial"
    assert [r["rank"] for r in report["run"]["per_rank"]] == [0, 1]
    failed = {Path(f["path"]).name: f["error"] for f in report["run"]["failed"]}
    assert failed == {"merged_timeline.json": f"{src / 'merged_timeline.json'}: {NOT_PYTORCH}",
                      "profile.sqlite": f"{db}: {LACKS}"}


def test_a_flight_recorder_dump_is_not_ingested_as_a_trace(tmp_path, capsys):
    dump = next(iter(sorted((FLIGHT_RECORDER / "megatron-16rank-gpu_error_1st").glob("_dump_*"))))
    rc, _, err = run_cli(["ingest", str(dump), "-o", str(tmp_path / "run")], capsys)
    assert rc == 2
    assert (f"{dump}: an NCCL Flight Recorder dump, not a trace: it holds no events to ingest (ddprof analyze "
            "reads it for the hang diagnosis)") in err


def test_dump_files_named_one_by_one_are_read_for_the_hang(tmp_path, capsys):
    dumps = sorted((FLIGHT_RECORDER / "megatron-16rank-gpu_error_1st").glob("_dump_*"))
    rc_files, out_files, _ = run_cli(["analyze", *map(str, dumps), "--format", "json"], capsys)
    rc_dir, out_dir, _ = run_cli(["analyze", str(FLIGHT_RECORDER / "megatron-16rank-gpu_error_1st"),
                                  "--format", "json"], capsys)
    assert rc_files == rc_dir == 1
    by_files, by_dir = json.loads(out_files)["hang"], json.loads(out_dir)["hang"]
    assert by_dir.pop("skipped_files") == ["expected_missing_ranks.txt", "fault_injection.log"]
    assert by_files.pop("skipped_files") == []  # only the dumps were named
    assert by_files == by_dir and by_files["collectives"]


def test_a_json_dump_named_like_a_trace_is_read_for_the_hang_beside_traces(tmp_path, capsys):
    src = write_kineto(DataParallel(ranks=2, steps=1), tmp_path / "traces")
    dump = tmp_path / "rank0.json"
    dump.write_text(json.dumps({"version": "2.9", "rank": 0, "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                                              "ranks": "[0, 1]"}},
                                "pg_status": {}, "entries": []}))
    rc, out, _ = run_cli(["analyze", str(dump), "--format", "json"], capsys)
    assert rc == 0 and json.loads(out)["run"]["ranks"] == [0]  # a dump set alone, not a trace refused
    rc, out, _ = run_cli(["analyze", str(src), str(dump), "--format", "json", "--cache", str(tmp_path / "c")],
                         capsys)
    report = json.loads(out)
    assert rc == 0 and report["status"] == "ok" and [r["rank"] for r in report["run"]["per_rank"]] == [0, 1]
    assert report["hang"]["ranks"] == [0] and report["hang"]["missing_dumps"] == [1]  # the dump named was read


#: Sets in tests/data/traces that are not Kineto traces (the OSDI'25 study's Parquet tables and answers,
#: Nsight Systems exports): each has its own reader or adapter and its own tests.
NOT_KINETO = ("osdi25", "nsys-h100-2gpu")


def _real_traces() -> list[Path]:
    return [f for f in discover([TRACES, SAMPLES]) if not set(NOT_KINETO) & set(f.relative_to(REPO).parts)]


def test_every_real_and_generated_trace_is_recognised_as_pytorch_s(tmp_path):
    """What marks a PyTorch profiler trace (ddprof/readers/kineto/reader.py) holds for every real trace of
    every generation, and for what ddprof synth and the tests' generator write."""
    generate(Spec(ranks=2, tp=2), tmp_path / "synth")
    generated = [*write_kineto(DataParallel(ranks=2, steps=1), tmp_path / "dp").glob("*.json"),
                 *discover([tmp_path / "synth" / "traces"])]
    files = _real_traces() + generated
    assert len(files) >= 30
    kineto = next(r for r in registry.READERS if r.name == "kineto")
    for f in files:
        assert registry.recognise(f) is kineto, f
        assert from_pytorch(decode(f)), f


def test_what_marks_a_pytorch_trace(tmp_path):
    def doc(events: list[dict], **keys) -> Path:
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"traceEvents": events, **keys}))
        return path

    def ev(cat: str | None = "custom", name: str = "x") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}

    assert not from_pytorch(decode(doc([ev(), ev("Trace"), ev("memory")])))
    assert from_pytorch(decode(doc([ev("Operator")])))  # PyTorch 1.8's spelling of cpu_op
    assert from_pytorch(decode(doc([ev("User Annotation")])))
    assert from_pytorch(decode(doc([ev(name="ProfilerStep#3")])))
    assert from_pytorch(decode(doc([ev()], schemaVersion=1)))
    assert from_pytorch(decode(doc([ev()], distributedInfo={"rank": 0})))
    assert from_pytorch(decode(doc([ev()], computeProperties=[])))  # PyTorch 1.8's header
    gz = tmp_path / "bare.json.gz"  # a bare list of B/E events, gzip
    gz.write_bytes(gzip.compress(json.dumps([{**ev("cpu_op"), "ph": "B"}, {"ph": "E", "pid": 1, "tid": 1,
                                                                                  "ts": 4.0}]).encode()))
    assert registry.recognise(gz).name == "kineto" and from_pytorch(decode(gz))


def test_recognition_goes_by_content_before_names(tmp_path):
    kineto, dumps = (next(r for r in registry.READERS if r.name == n) for n in ("kineto", "flight-recorder"))
    fr_json = tmp_path / "rank0.json"  # a Flight Recorder dump written as JSON, named like a trace
    fr_json.write_text(json.dumps({"version": "2.9", "pg_config": {"0": {"name": "0", "ranks": "[0, 1]"}},
                                   "entries": []}))
    trace_named_like_a_dump = tmp_path / "_dump_0"
    trace_named_like_a_dump.write_text(json.dumps({"schemaVersion": 1, "traceEvents": []}))
    db_named_json = nsight_export(tmp_path / "profile.json")
    assert registry.recognise(fr_json) is dumps
    assert registry.recognise(trace_named_like_a_dump) is kineto
    assert registry.recognise(db_named_json).name == "nsys"
    empty, bad_gzip = tmp_path / "empty.json", tmp_path / "bad.json.gz"  # the name: the decoder says what is wrong
    empty.write_bytes(b"")
    bad_gzip.write_bytes(b"\x1f\x8b\x08\x00garbage")
    assert registry.recognise(empty) is kineto and registry.recognise(bad_gzip) is kineto
    assert isinstance(kineto, EventReader) and not isinstance(kineto, DumpReader)
    assert isinstance(dumps, DumpReader) and not isinstance(dumps, EventReader)


class SpansReader:
    """A third format, made up for the test: ``name,start_us,end_us`` lines, the rank in the file name."""

    name, describes, names = "spans", "a CSV file of spans", "*.spans.csv"
    HEADER = b"name,start_us,end_us\n"

    def claims_name(self, name: str) -> bool:
        return name.endswith(".spans.csv")

    def recognise(self, name: str, head: bytes) -> bool:
        return head.startswith(self.HEADER)

    def open(self, path: Path) -> Opened:
        data = path.read_bytes()
        rows = [line.split(",") for line in data[len(self.HEADER):].decode().splitlines()]
        return Opened(identity=Identity(claims_in="spans"), sha1=hashlib.sha1(data).hexdigest(),
                      raw_complete=len(rows), state=rows)

    def read(self, opened: Sequence[Opened], ranks: Sequence[int], rules) -> tuple[pl.DataFrame, list[list[str]]]:
        frames = []
        for o, rank in zip(opened, ranks):
            start = [int(r[1]) * 1000 for r in o.state]
            frames.append(conform(pl.DataFrame({"name": [r[0] for r in o.state], "ts_ns": start,
                                                "dur_ns": [int(r[2]) * 1000 - s for r, s in zip(o.state, start)]}),
                                  {"rank": pl.lit(rank), "kind": pl.lit("cpu_op"), "cat": pl.lit("cpu_op"),
                                   "pid": pl.lit(1), "tid": pl.lit(1)}))
        return with_trace_index(frames), [[] for _ in opened]


def test_a_new_format_is_one_reader_and_one_registration_line(tmp_path, monkeypatch, capsys):
    src = tmp_path / "spans"
    src.mkdir()
    for rank in range(2):
        (src / f"rank{rank}.spans.csv").write_bytes(SpansReader.HEADER + b"".join(
            f"op{i},{100 * i + rank},{100 * i + 50}\n".encode() for i in range(4)))
    rc, _, err = run_cli(["ingest", str(src), "-o", str(tmp_path / "before")], capsys)
    assert rc == 2 and "no trace files (*.json, *.json.gz, *.sqlite) found" in err  # nobody reads it yet

    monkeypatch.setattr(registry, "READERS", [*registry.READERS, SpansReader()])  # the one line

    run = ddprof.ingest([src], tmp_path / "run")
    events = run.events().sort("rank", "ts_ns").collect()
    assert run.ranks == [0, 1] and events.height == 8
    assert events.filter(pl.col("rank") == 1).get_column("ts_ns").to_list() == [1000, 101000, 201000, 301000]
    assert set(events.get_column("kind").to_list()) == {"cpu_op"}
    rc, out, _ = run_cli(["analyze", str(tmp_path / "run"), "--format", "json"], capsys)
    assert rc == 0 and json.loads(out)["status"] == "ok"
