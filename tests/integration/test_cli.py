"""The command line: exit codes, the JSON contract, outputs written atomically, sources left untouched."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddprof.cli import main
from ddprof.report.schema import SCHEMA_PATH
from tests.support.paths import DLRM, REPO, SAMPLES, trace_set

CONTRACT = {
    "run": {"world_size", "ranks", "backend", "device", "steps", "warnings"},
    "overlap": list, "overlap_by_step": {"per_rank", "worst"}, "breakdown": list, "idle": list,
    "bubbles": {"per_rank", "worst"},
    "stragglers": {"ranks", "per_rank"}, "collectives": {"instances", "by_op", "worst"}, "bandwidth": list,
    "hang": {"collectives"},
}


def check_schema(report: dict) -> None:
    """The printed JSON against the committed JSON Schema (``docs/report.schema.json``)."""
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, json.loads((REPO / SCHEMA_PATH).read_text()))


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def dlrm_copy(tmp_path, traces) -> Path:
    dst = tmp_path / "dlrm"
    shutil.copytree(DLRM, dst)
    dst.chmod(0o755)  # the shared originals are read-only; this copy is a user's writable folder
    return dst


def test_analyze_json_follows_the_contract(dlrm_copy, capsys):
    rc, out, _ = run_cli(["analyze", str(dlrm_copy), "--format", "json"], capsys)
    assert rc == 0
    report = json.loads(out)
    check_schema(report)
    for key, shape in CONTRACT.items():
        assert key in report, key
        if isinstance(shape, set):
            assert shape <= set(report[key]), key
        else:
            assert isinstance(report[key], shape), key
    assert report["run"]["ranks"] == list(range(8)) and report["run"]["world_size"] == 8
    assert report["run"]["device"] == "gpu" and report["run"]["steps"] == [10]
    assert [p["kernels"] for p in report["run"]["per_rank"]] == [245, 310, 246, 315, 251, 245, 246, 246]
    # The cache sits beside the traces and is reused.
    assert (dlrm_copy / ".ddprof-cache" / "manifest.json").is_file()


def test_analyze_text_and_output_file(dlrm_copy, tmp_path, capsys):
    out_file = tmp_path / "report.txt"
    rc, out, _ = run_cli(["analyze", str(dlrm_copy), "-o", str(out_file)], capsys)
    assert rc == 0 and out == ""
    text = out_file.read_text()
    assert "8 rank(s) of 8" in text and "backend nccl" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_read_only_source_is_not_touched(tmp_path, traces, capsys):
    src = tmp_path / "ro"
    shutil.copytree(DLRM, src)
    for p in [src, *src.iterdir()]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        before = sorted(os.listdir(src))
        rc, out, _ = run_cli(["analyze", str(src), "--format", "json"], capsys)
        assert rc == 0 and json.loads(out)["run"]["world_size"] == 8
        assert sorted(os.listdir(src)) == before
    finally:
        src.chmod(0o755)


def test_ingest_then_analyze_run_dir(tmp_path, traces, capsys):
    rc, out, _ = run_cli(["ingest", str(DLRM), "-o", str(tmp_path / "run"), "-q"], capsys)
    assert rc == 0
    rc, out, _ = run_cli(["analyze", str(tmp_path / "run"), "--format", "json"], capsys)
    assert rc == 0 and json.loads(out)["run"]["ranks"] == list(range(8))


def test_partial_run_exits_3_and_names_the_failure(tmp_path, traces, capsys):
    src = tmp_path / "src"
    shutil.copytree(DLRM, src)
    src.chmod(0o755)
    (src / "worker5_step_12.1694128201549.pt.trace.json.gz").write_bytes(b"\x1f\x8b broken")
    rc, out, err = run_cli(["analyze", str(src), "--format", "json"], capsys)
    assert rc == 3
    report = json.loads(out)
    assert report["run"]["ranks"] == [0, 1, 2, 3, 4, 6, 7]
    assert any("worker5_step_12" in w and "gzip" in w for w in report["run"]["warnings"])
    assert "failed" in err


def test_bad_input_exits_2_with_fix(tmp_path, traces, capsys):
    one = traces / "hta/edge-no-rank/rank_not_found.json.gz"
    rc, out, _ = run_cli(["analyze", str(one.parent), "--cache", str(tmp_path / "c")], capsys)
    assert rc == 0 and "rank 0, the only" in out and "(--rank rank_not_found.json.gz=N gives another)" in out
    two = tmp_path / "two"  # two traces, neither with a rank: refused, each named with its fix
    two.mkdir()
    for name in ("a.json.gz", "b.json.gz"):
        (two / name).write_bytes(one.read_bytes())
    rc, _, err = run_cli(["analyze", str(two), "--cache", str(tmp_path / "d")], capsys)
    assert rc == 2 and "--rank a.json.gz=N" in err and "--rank b.json.gz=N" in err
    rc, _, err = run_cli(["analyze", str(two), "--cache", str(tmp_path / "d"), "--rank", "a.json.gz=0",
                          "--rank", "b.json.gz=1"], capsys)
    assert rc == 0
    rc, _, err = run_cli(["ingest", str(tmp_path), "-o", str(tmp_path / "x"), "--rank", "nonsense"], capsys)
    assert rc == 2 and "FILE=N" in err


@pytest.mark.parametrize("command", ["check", "diff"])
def test_check_and_diff_take_the_rank_they_ask_for(tmp_path, traces, capsys, command):
    """Traces without a rank are refused naming --rank; check and diff take it, for both sides."""
    src = tmp_path / "two"
    src.mkdir()
    for name in ("a.json.gz", "b.json.gz"):
        (src / name).write_bytes((traces / "hta/edge-no-rank/rank_not_found.json.gz").read_bytes())
    args = [command, str(src), "--baseline", str(src)] if command == "check" else [command, str(src), str(src)]
    rc, _, err = run_cli([*args, "--cache", str(tmp_path / "c")], capsys)
    assert rc == 2 and "Give it one with --rank a.json.gz=N" in err
    rc, out, err = run_cli([*args, "--cache", str(tmp_path / "c"), "--rank", "a.json.gz=0", "--rank", "b.json.gz=1"],
                           capsys)
    assert rc == 0, err
    assert ("OK: no regression" in out) if command == "check" else ("cause: none" in out)


def test_edge_traces_without_gpu_events_ingest_as_cpu(traces, tmp_path, capsys):
    rc, out, _ = run_cli(["analyze", str(traces / "hta/edge-non-gpu"), "--format", "json",
                          "--cache", str(tmp_path / "c")], capsys)
    assert rc == 0 and json.loads(out)["run"]["device"] == "cpu"
    rc, out, err = run_cli(["analyze", str(traces / "hta/edge-no-distributed-info"), "--format", "json",
                            "--cache", str(tmp_path / "d")], capsys)  # the only trace, with no rank: rank 0, said
    report = json.loads(out)
    assert rc == 0 and report["run"]["ranks"] == [0]
    assert any("--rank distributed_info_not_found.json.gz=N gives another" in w
               for w in report["run"]["per_rank"][0]["warnings"])


def test_flight_recorder_directory_is_diagnosed(traces, capsys):
    rc, out, _ = run_cli(["analyze", str(traces / "flight-recorder/megatron-16rank-gpu_error_1st"),
                          "--format", "json"], capsys)
    assert rc == 1  # a hang is a problem found
    hang = json.loads(out)["hang"]
    first = hang["collectives"][0]
    assert first["missing_ranks"] == [12] and first["op"]


def test_console_script_runs_without_torch_or_dash(tmp_path, traces):
    """`ddprof analyze` must work with neither torch nor dash importable."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    # A None entry in sys.modules makes `import torch` fail as if it were not installed.
    (blocker / "sitecustomize.py").write_text(
        "import sys\nfor m in ('torch', 'dash', 'plotly'):\n    sys.modules[m] = None\n")
    env = dict(os.environ, PYTHONPATH=str(blocker))
    proc = subprocess.run([sys.executable, "-m", "ddprof", "analyze", str(DLRM),
                           "--format", "json", "--cache", str(tmp_path / "c")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run"]["world_size"] == 8


def test_a_bug_is_an_internal_error_not_problem_found(tmp_path, traces, capsys, monkeypatch):
    from ddprof.analyses import report

    from ddprof.cli import INTERNAL_ERROR

    def broken(*a, **k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(report, "verdicts", broken)
    rc, _, err = run_cli(["analyze", str(DLRM), "--cache", str(tmp_path / "c")], capsys)
    assert rc == INTERNAL_ERROR != 1 and "internal error" in err and "ZeroDivisionError: boom" in err


def test_ingest_partial_exits_3_naming_the_file(tmp_path, traces, capsys):
    src = tmp_path / "src"
    shutil.copytree(DLRM, src)
    src.chmod(0o755)
    (src / "worker2_step_12.1694128201554.pt.trace.json.gz").write_bytes(b"")
    rc, out, err = run_cli(["ingest", str(src), "-o", str(tmp_path / "run")], capsys)
    assert rc == 3 and "worker2_step_12.1694128201554.pt.trace.json.gz" in err and "file is empty" in err
    assert "7 rank(s) of 8" in out


def test_captured_run_reports_its_flight_recorder_dumps(tmp_path, capsys):
    """The collector leaves a Flight Recorder dump per rank beside the traces: analyze reads them too."""
    src = tmp_path / "cap"
    shutil.copytree(SAMPLES / "gloo-ddp-4rank-slow-rank", src)
    rc, out, _ = run_cli(["analyze", str(src), "--format", "json"], capsys)
    hang = json.loads(out)["hang"]
    assert rc == 0 and hang["ranks"] == [0, 1, 2, 3] and hang["collectives"] == []
    assert hang["verdict"].startswith("no hang found")


def test_hang_in_captured_dumps_is_a_problem_found(tmp_path, traces, capsys):
    src = tmp_path / "cap"
    shutil.copytree(DLRM, src)
    src.chmod(0o755)
    fr = src / "raw"
    fr.mkdir()
    for dump in (traces / "flight-recorder/megatron-16rank-gpu_error_1st").glob("_dump_*"):
        shutil.copy(dump, fr / f"fr_trace_rank_{dump.name.rsplit('_', 1)[1]}")
    rc, out, err = run_cli(["analyze", str(src), "--format", "json"], capsys)
    report = json.loads(out)
    assert rc == 1 and report["hang"]["collectives"][0]["missing_ranks"] == [12]
    assert report["verdicts"][0] == report["hang"]["verdict"] and "rank 12" in err


@pytest.mark.parametrize("source", ["dlrm-8xV100-nccl", "flight-recorder/megatron-16rank-lock_gil_1st",
                                    "sample:gloo-ddp-4rank-slow-rank"])
def test_the_python_report_is_what_the_json_output_prints(source, tmp_path, traces, capsys):
    """One builder: ``ddprof.analyze(path)`` equals ``ddprof analyze path --format json`` (a run with its
    captured Flight Recorder dumps, raw traces, a directory of dumps alone)."""
    import ddprof
    from ddprof.report.tables import rounded

    src = SAMPLES / source[7:] if source.startswith("sample:") else trace_set(source)
    rc, out, _ = run_cli(["analyze", str(src), "--format", "json", "--cache", str(tmp_path / "c")], capsys)
    report = ddprof.analyze(src, cache=tmp_path / "c")
    assert json.loads(out) == rounded(json.loads(json.dumps(report)))  # floats at the JSON's digits
    check_schema(json.loads(out))
    assert rc == {"ok": 0, "problem": 1, "partial": 3}[report["status"]]
    assert list(report)[:2] == ["run", "overlap"] and list(report)[-2:] == ["verdicts", "status"]
    assert {"per_rank", "failed"} <= set(report["run"])
