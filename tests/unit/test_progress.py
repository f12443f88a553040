"""Ingest progress: the core reports every parsed trace and its bytes; the CLI draws click's bar."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

import ddprof
from ddprof.cli.progress import IngestBar, ingest_progress
from ddprof.ingestion import pipeline
from tests.support.paths import DLRM


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, total_files: int, total_bytes: int) -> None:
        self.calls.append(("start", total_files, total_bytes))

    def advance(self, path: Path, nbytes: int) -> None:
        self.calls.append(("advance", Path(path), nbytes))

    def close(self) -> None:
        self.calls.append(("close",))


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def dlrm(tmp_path, traces) -> Path:
    dst = tmp_path / "dlrm"
    shutil.copytree(DLRM, dst)
    return dst


def expected_sizes(src: Path) -> dict[Path, int]:
    return {f: f.stat().st_size for f in sorted(src.glob("*.json.gz"))}


@pytest.mark.parametrize("parallel", [False, True], ids=["in-process", "worker-pool"])
def test_every_trace_and_the_byte_totals_are_reported(dlrm, tmp_path, monkeypatch, parallel):
    if parallel:  # the small sample would otherwise be parsed in this process
        monkeypatch.setattr(pipeline, "PARALLEL_MIN_BYTES", 0)
    sizes = expected_sizes(dlrm)
    rec = Recorder()
    run = ddprof.ingest([dlrm], tmp_path / "run", jobs=2 if parallel else 1, progress=rec)
    assert run.ranks == list(range(8))
    assert rec.calls[0] == ("start", 8, sum(sizes.values()))
    assert rec.calls[-1] == ("close",)
    advances = rec.calls[1:-1]
    assert sorted((p.resolve(), n) for _, p, n in advances) == sorted((p.resolve(), n) for p, n in sizes.items())

    again = Recorder()  # nothing left to parse: the store is reused, nothing is reported
    ddprof.ingest([dlrm], tmp_path / "run", progress=again)
    assert again.calls == []


def test_close_is_called_when_the_ingest_fails(tmp_path, monkeypatch):
    (tmp_path / "rank-0.json").write_text('{"traceEvents": []}')

    def boom(*_args):
        raise RuntimeError("worker died")

    monkeypatch.setattr(pipeline, "ingest_files", boom)
    rec = Recorder()
    with pytest.raises(RuntimeError, match="worker died"):
        ddprof.ingest([tmp_path / "rank-0.json"], tmp_path / "run", progress=rec)
    assert [c[0] for c in rec.calls] == ["start", "close"]


@pytest.mark.parametrize("value", [None, False, True])
def test_no_reporter_means_no_output(dlrm, tmp_path, capfd, value):
    ddprof.ingest([dlrm], tmp_path / "run", progress=value)
    assert capfd.readouterr() == ("", "")


def test_the_click_bar_shows_traces_bytes_and_ends_its_line():
    term = Terminal()
    bar = ingest_progress(True, term)
    assert isinstance(bar, IngestBar)
    bar.start(2, 3 << 20)
    bar.advance(Path("a.json"), 1 << 20)
    bar.advance(Path("b.json"), 2 << 20)
    bar.close()
    out = term.getvalue()
    assert "ingest" in out and "1/2 traces  1 MiB/3 MiB" in out
    assert "2/2 traces  3 MiB/3 MiB" in out and "100%" in out
    assert out.endswith("\n")


def test_the_bar_only_on_a_terminal_and_when_asked():
    assert ingest_progress(True, io.StringIO()) is None
    assert ingest_progress(False, Terminal()) is None


def test_the_time_left_once_click_knows_it(monkeypatch):
    term = Terminal()
    bar = IngestBar(term)
    bar.start(4, 4000)
    monkeypatch.setattr(bar._bar, "eta_known", True)
    monkeypatch.setattr(bar._bar, "avg", [0.01])
    bar.advance(Path("a.json"), 1000)
    assert bar._info(None).endswith("00:00:30 left")
    bar.close()
