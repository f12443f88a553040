"""Reading a trace ahead in a child process (ddprof.readers.read_ahead): the frame is the one the file gives
when read here, whatever happens to the file or the processes; ``ddprof ingest`` names its sources as the
command does.

That the plain columns make the same frame as the ordinary decoding, on every document shape, cut and
corruption, with runs asked for as text among them, is tests/unit/test_ingest_stream.py's (each of its tests runs
every way).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import click
import pytest
from polars.testing import assert_frame_equal

from ddprof.__main__ import OPTIONS, Told, command_args
from ddprof.readers import read_ahead
from ddprof.readers.kineto import decode as kineto
from tests.support.paths import trace_set

SMALL = sorted(trace_set("dlrm-8xV100-nccl").glob("*.json.gz"))[:2]  # 0.1 MB each, a string pid
LARGE = next(trace_set("hta/v100-2rank-rank1-large").glob("*.json.gz"))  # 3 MB, 123 k events, instants

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "memfd_create"),
                                reason="read-ahead needs fork and memfd_create (Linux)")


@pytest.fixture(autouse=True)
def no_child_left():
    """Every test leaves no child behind, and may read ahead any file (the size floor lifted)."""
    with mock.patch.object(read_ahead, "MIN_BYTES", 0), mock.patch.object(read_ahead, "_cores", lambda: 2), \
            mock.patch.dict(os.environ, {read_ahead.SWITCH: "on"}):
        yield
    read_ahead.discard()
    assert read_ahead._child is None


def read_here(path: Path) -> kineto.Decoded:
    assert read_ahead._child is None
    return kineto.decode(path)


def same(a: kineto.Decoded, b: kineto.Decoded) -> None:
    assert_frame_equal(a.frame, b.frame)
    assert_frame_equal(a.meta, b.meta)
    for key in ("distributed_info", "base_time_ns", "device_properties", "raw_complete", "dropped", "notices",
                "sha1", "uncompressed_bytes", "categories", "header_keys"):
        assert getattr(a, key) == getattr(b, key), key


def decoded_ahead(path: Path) -> kineto.Decoded:
    """``decode`` of a file a child read ahead; fails if it did not use the child's pieces."""
    with mock.patch.object(kineto, "_from_pieces", wraps=kineto._from_pieces) as used:
        got = kineto.decode(path)
    assert used.call_count == 1
    return got


@pytest.mark.parametrize("path", [*SMALL, LARGE], ids=lambda p: p.name[:24])
def test_a_file_read_ahead_gives_the_frame_it_gives_read_here(path):
    expected = read_here(path)
    assert read_ahead.start(path)
    same(decoded_ahead(path), expected)
    assert read_ahead._child is None


@pytest.mark.parametrize("events", [1, 5_000, 10**9])
def test_runs_handed_over_together_give_the_frame_of_each_alone(events):
    """The child hands runs over in pieces of PIECE_EVENTS events: joined runs (instants and metadata rows
    among them, columns with nulls beside columns without) make the frame each run makes alone."""
    from ddprof.readers.kineto import plain

    with mock.patch.object(plain, "PIECE_EVENTS", events):
        pieces: list[object] = []
        plain.read_plain(LARGE, pieces.append)
    runs = [p for p in pieces if isinstance(p, plain.Run)]
    assert len(runs) == 46 if events == 1 else 1 < len(runs) < 46 if events == 5_000 else len(runs) == 1
    same(kineto._from_pieces(pieces), read_here(LARGE))


@pytest.mark.parametrize("asked", ["every run", "every third run", "from the fifth run", "never"])
def test_runs_asked_for_as_text_give_the_frame_each_gives_decoded(asked):
    """Runs the process that builds the frame asks for come as their text, after the runs before them (held
    in columns, not yet handed over): decoded there, they make the frame the file makes."""
    from ddprof.readers.kineto import plain

    runs = iter(range(10**6))
    wanted = {"every run": lambda: True, "every third run": lambda: next(runs) % 3 == 0,
              "from the fifth run": lambda: next(runs) >= 5, "never": lambda: False}[asked]
    pieces: list[object] = []
    plain.read_plain(LARGE, pieces.append, wanted)
    text = [p for p in pieces if isinstance(p, bytes)]
    assert (not text) if asked == "never" else len(text) > 5
    same(kineto._from_pieces(pieces), read_here(LARGE))


def test_the_child_hands_runs_over_as_text_when_asked():
    """Once this process takes the pieces it asks for runs as text and decodes them itself: asked for every
    run, it decodes most of the file here; the frame is the same."""
    expected = read_here(LARGE)
    decoded_here = mock.patch.object(kineto, "_consume", wraps=kineto._consume)
    with mock.patch.object(read_ahead, "ASK_AHEAD", 10**4):
        assert read_ahead.start(LARGE)
        with decoded_here as consumed:
            got = decoded_ahead(LARGE)
    same(got, expected)
    assert consumed.call_count > 10  # of the file's ~50 runs, the child decodes the few before the asks came


def test_a_file_replaced_after_the_child_started_is_read_as_it_is_now(tmp_path):
    """Replaced (a new file under the name) or rewritten in place: the child's pieces of the old one are
    not used, whenever the change lands."""
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copy(SMALL[0], a)
    shutil.copy(SMALL[1], b)
    expected = read_here(b)
    for change in ("replace", "rewrite"):
        trace = tmp_path / f"{change}.json.gz"
        shutil.copy(SMALL[0], trace)
        assert read_ahead.start(trace)
        if change == "replace":
            new = tmp_path / "new"
            shutil.copy(b, new)
            os.replace(new, trace)
        else:
            trace.write_bytes(b.read_bytes())
            os.utime(trace, ns=(time.time_ns(), time.time_ns() + 10**9))
        same(kineto.decode(trace), expected)
        assert read_ahead._child is None


def test_a_child_that_fails_leaves_the_file_to_be_read_here(tmp_path):
    trace = tmp_path / "t.json.gz"
    shutil.copy(SMALL[0], trace)
    expected = read_here(trace)
    with mock.patch("ddprof.readers.kineto.plain.read_plain", side_effect=RuntimeError("boom")):
        assert read_ahead.start(trace)  # forked with the patch: the child fails
    same(kineto.decode(trace), expected)


def test_a_file_not_read_ahead_is_read_here_and_the_child_ended():
    assert read_ahead.start(SMALL[0])
    pid = read_ahead._child.pid
    assert read_ahead.take(SMALL[1]) is None  # another file: the child is kept for its own
    same(kineto.decode(SMALL[1]), read_here_without_child(SMALL[1]))
    read_ahead.discard()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped


def read_here_without_child(path: Path) -> kineto.Decoded:
    with mock.patch.object(read_ahead, "_child", None):
        return kineto.decode(path)


def test_switched_off_or_one_core_reads_nothing_ahead():
    with mock.patch.dict(os.environ, {read_ahead.SWITCH: "off"}):
        assert not read_ahead.start(SMALL[0])
    with mock.patch.object(read_ahead, "_cores", lambda: 1):
        assert not read_ahead.start(SMALL[0])
    assert read_ahead._child is None


def test_the_child_ends_when_its_parent_is_killed(tmp_path):
    """A parent killed outright (SIGKILL) while its child reads: the child is gone within 2 s. The child
    reads a FIFO nobody writes, so it is surely still reading."""
    fifo = tmp_path / "never.json"
    os.mkfifo(fifo)
    code = ("import sys, time\nfrom unittest import mock\nfrom ddprof.readers import read_ahead\n"
            "with mock.patch.object(read_ahead, 'MIN_BYTES', 0), mock.patch.object(read_ahead, '_cores', lambda: 2):\n"
            f"    assert read_ahead.start({str(fifo)!r})\n"
            "print(read_ahead._child.pid, flush=True)\ntime.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, read_ahead.SWITCH: "on"})
    try:
        child = int(parent.stdout.readline())
        time.sleep(0.3)
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 2
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the read-ahead child outlived its parent"
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------- which file the program reads ahead


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_the_options_read_past_are_the_commands(command):
    """``command_args`` knows which options of each command take a value: a new option must be added
    there, or its value would be taken for a source."""
    from ddprof.cli import cli

    values, flags = set(), set()
    for param in cli.get_command(click.Context(cli), command).params:
        if isinstance(param, click.Option):
            names = {*param.opts, *param.secondary_opts}
            (flags if param.is_flag else values).update(names)
    assert (values, flags) == tuple(map(set, OPTIONS[command]))


@pytest.mark.parametrize(("command", "args", "told"), [
    ("ingest", ["t.json", "-o", "run"], Told(["t.json"], {"--output": "run"})),
    ("ingest", ["-o", "run", "--force", "-q", "dir"], Told(["dir"], {"--output": "run", "--force": True, "--quiet": True})),
    ("ingest", ["--output=run", "-j", "2", "--rank", "a.json=3", "a.json"],
     Told(["a.json"], {"--output": "run", "--jobs": "2", "--rank": "a.json=3"})),
    ("ingest", ["-orun", "-j2", "x", "y=z.json"], Told(["x", "y=z.json"], {"--output": "run", "--jobs": "2"})),
    ("ingest", ["-o", "run", "--", "-odd-name.json"], Told(["-odd-name.json"], {"--output": "run"})),
    ("ingest", ["--executor", "ray", "t.json"], Told(["t.json"], {"--executor": "ray"})),
    ("ingest", ["-h"], None),
    ("ingest", ["--unknown", "t.json"], None),
    ("ingest", ["t.json", "-o"], None),
    ("analyze", ["t.json", "--format", "json", "-o", "r.json"], Told(["t.json"], {"--format": "json", "--output": "r.json"})),
    ("analyze", ["--cache=/c", "dir"], Told(["dir"], {"--cache": "/c"})),
    ("analyze", ["dir", "--force"], None),
])
def test_command_args(command, args, told):
    assert command_args(command, args) == told


def test_the_trace_of_a_source(tmp_path):
    one = tmp_path / "one"
    (one / ".cache").mkdir(parents=True)
    (one / "events").mkdir()
    (one / "rank0.pt.trace.json").write_text("{}")
    for ignored in ("manifest.json", "rank-00000.meta.json", "notes.txt", ".cache/x.json", "events/y.json"):
        (one / ignored).write_text("{}")
    assert read_ahead.trace_of([str(one)]) == one / "rank0.pt.trace.json"
    assert read_ahead.trace_of([str(one / "notes.txt")]) == one / "notes.txt"  # a file named is read as given
    (one / "sub").mkdir()
    (one / "sub" / "rank1.json.gz").write_bytes(b"")
    assert read_ahead.trace_of([str(one)]) is None  # two traces: the pool reads them
    assert read_ahead.trace_of([str(one), str(tmp_path)]) is None
    assert read_ahead.trace_of([str(tmp_path / "missing")]) is None


#: ``ddprof ARGS`` as the console script runs it, saying on stderr whether a child started and whether a
#: file's pieces came from it.
DDPROF = """
import sys
from ddprof.readers import read_ahead
start, take = read_ahead.start, read_ahead.take
def started(path):
    print("child started:", start(path), file=sys.stderr)
def told(path):
    got = take(path)
    print("read ahead:", got is not None, file=sys.stderr)
    return got
read_ahead.start, read_ahead.take = started, told
sys.argv = ["ddprof", *sys.argv[1:]]
from ddprof.__main__ import main
sys.exit(main())
"""


def test_ingest_reads_ahead_and_stores_what_it_stores_without(tmp_path):
    """The whole program: ``ddprof ingest`` of one large trace, with and without reading ahead, writes the
    same part, byte for byte."""
    runs = {}
    for switch in ("on", "off"):
        out = tmp_path / switch
        proc = subprocess.run([sys.executable, "-c", DDPROF, "ingest", str(LARGE), "-o", str(out), "-q"],
                              capture_output=True, text=True, env={**os.environ, read_ahead.SWITCH: switch})
        assert proc.returncode == 0, proc.stderr
        assert f"read ahead: {switch == 'on'}" in proc.stderr and f"child started: {switch == 'on'}" in proc.stderr
        runs[switch] = out
    again = subprocess.run([sys.executable, "-c", DDPROF, "ingest", str(LARGE), "-o", str(runs["on"])],
                           capture_output=True, text=True, env={**os.environ, read_ahead.SWITCH: "on"})
    assert again.returncode == 0 and "child started" not in again.stderr  # a run dir there: its store is reused
    parts = {s: sorted(runs[s].glob("events/rank=*/*.parquet")) for s in runs}
    assert [p.name for p in parts["on"]] == [p.name for p in parts["off"]] and parts["on"]
    for a, b in zip(parts["on"], parts["off"]):
        assert a.read_bytes() == b.read_bytes()


def test_a_piece_read_is_freed():
    """The memory file gives back each piece's memory once read (a large trace's pieces are not all kept)."""
    fd = os.memfd_create("test")
    try:
        os.write(fd, b"x" * (4 << 20))
        before = os.fstat(fd).st_blocks
        assert read_ahead.release(fd, 0, 2 << 20)
        assert os.fstat(fd).st_blocks <= before // 2 + 8 and os.fstat(fd).st_size == 4 << 20
        assert os.pread(fd, 4, (2 << 20) + 10) == b"xxxx"  # the rest is untouched
    finally:
        os.close(fd)


def test_analyze_reads_ahead_and_reports_what_it_reports_without(tmp_path):
    """``ddprof analyze`` of one large trace: the same report with and without reading ahead; no child once
    the cache beside the trace holds its store."""
    reports = {}
    for switch in ("on", "off"):
        traces = tmp_path / switch
        traces.mkdir()
        shutil.copy(LARGE, traces / LARGE.name)
        for attempt in ("first", "again"):
            proc = subprocess.run([sys.executable, "-c", DDPROF, "analyze", str(traces), "--format", "json"],
                                  capture_output=True, text=True, env={**os.environ, read_ahead.SWITCH: switch})
            assert proc.returncode in (0, 1), proc.stderr
            started = attempt == "first" and switch == "on"
            assert f"child started: {started}" in proc.stderr or (not started and "child started" not in proc.stderr)
            assert ("read ahead: True" in proc.stderr) == started
            reports[switch, attempt] = json.loads(proc.stdout)
    for key in reports:
        assert _without_times(reports[key]) == _without_times(reports["off", "first"]), key


def _without_times(report: dict) -> dict:
    """A report less what depends on when and where it ran (the run's path and its cache's times)."""
    return json.loads(json.dumps(report).replace(str(Path.cwd()), "."), object_hook=lambda d: {
        k: v for k, v in d.items() if k not in ("path", "generated_at", "created", "ingested_at", "elapsed_s")})
