"""Property: whatever a Flight Recorder dump holds, ``ddprof analyze`` ends with 0, 1, 2 or 3 (1: a hang
found), never a traceback, never 70, in bounded time, and loading it imports and runs nothing.

Cases are crafted from the real dumps in ``tests/data/traces/flight-recorder`` and the bundled capture:
their objects changed (values of every type, keys dropped, entries duplicated or nested, shared
sub-objects whose paths multiply) and pickled again with protocols 2 to 5 or written as JSON; pickles
written opcode by opcode that ask for globals, persistent ids, extension codes or instance building;
damaged bytes and truncation. Each case is a directory of dumps alone, or (one case in
``BESIDE_TRACES_ONE_IN``) the bundled capture's traces with the crafted dumps in its
``raw/rank-N/fr_trace_rank_N``: that capture is copied and ingested once per module, each such case
writing its dumps over the previous one's and analysing against the same cache (the cache serves the
traces, vouched for by content; the dumps are read anew). A quarter of ``DDPROF_FUZZ_EXAMPLES`` cases
(see test_fuzz_traces; CI's default: 250), written on ``/dev/shm`` when there is one.
"""

from __future__ import annotations

import copy
import importlib.abc
import json
import os
import pickle
import shutil
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ddprof
from ddprof.readers.flightrec.unpickle import SafeUnpickler, read_dump_object
from tests.support.fuzz_contract import EXAMPLES, Contract, contract_for
from tests.support.paths import FLIGHT_RECORDER, SAMPLES

FR = FLIGHT_RECORDER
GLOO = SAMPLES / "gloo-ddp-4rank-slow-rank"
CANARY = "ddprof_fuzz_canary"
#: One case in this many (picked by a checksum of its files, so a failing case replays the same way) puts
#: its dumps beside the bundled capture's traces: the run's analyses cost ten times a directory of dumps.
BESIDE_TRACES_ONE_IN = 5


class _ImportWatch(importlib.abc.MetaPathFinder):
    """Records any attempt to import the canary module a crafted pickle names."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name.startswith(CANARY):
            self.asked.append(name)
        return None


@pytest.fixture(scope="module")
def real_dumps() -> list[tuple[str, Any]]:
    """(file name, object) of four ranks of one real dump set, and of the bundled capture's dumps."""
    if not FR.is_dir():
        pytest.fail(f"real Flight Recorder dumps not found at {FR}")
    picked = [FR / "megatron-16rank-lock_gil_1st" / f"_dump_{r}" for r in (0, 1, 12, 13)]
    out = [(p.name, read_dump_object(p)) for p in picked]
    out += [(p.name, read_dump_object(p)) for p in sorted(GLOO.glob("raw/*/fr_trace_rank_*"))]
    return out


plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8),
              st.binary(max_size=8),
              st.sampled_from([0, -1, 2**63, 10**30, float("nan"), float("inf"), "", "scheduled", "completed",
                               "started", "nccl:all_reduce", "nccl:send 0->1", "gloo:all_reduce", "BFloat16"])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)
KEYS = ["version", "pg_config", "nccl_version", "pg_status", "entries", "record_id", "pg_id", "process_group",
        "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "time_created_ns", "input_sizes",
        "input_dtypes", "output_sizes", "output_dtypes", "state", "time_discovered_started_ns",
        "time_discovered_completed_ns", "retired", "timeout_ms", "is_p2p", "frames", "rank", "ranks", "desc"]


def _path(draw: st.DrawFn, obj: Any) -> tuple:
    """A path to a value inside a dump, drawn one step down at a time (a dump is a few levels deep; listing
    every path first cost more than the case itself)."""
    path: tuple = ()
    for _ in range(6):
        keys = list(obj)[:40] if isinstance(obj, dict) else range(min(len(obj), 40)) if isinstance(obj, list) else []
        if not keys or draw(st.integers(0, 3)) == 0:
            break
        key = draw(st.sampled_from(keys))
        path, obj = (*path, key), obj[key]
    return path


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return obj


def _multiplied(levels: int) -> list:
    """A list whose paths number 2**levels, from ``levels`` objects shared through the pickle memo."""
    x: list = []
    for _ in range(levels):
        x = [x, x]
    return x


def _nested(levels: int) -> list:
    x: list = []
    for _ in range(levels):
        x = [x]
    return x


def _opcode_pickle(kind: str) -> bytes:
    """A pickle that asks for what no dump needs (it must be refused before anything runs)."""
    mod, name = f"{CANARY}_mod".encode(), b"boom"
    proto = b"\x80\x04"
    if kind == "global":
        return proto + b"c" + mod + b"\n" + name + b"\n)R."
    if kind == "stack_global":
        return proto + b"\x8c" + bytes([len(mod)]) + mod + b"\x8c\x04boom\x93)R."
    if kind == "os_system":
        return pickle.dumps(_Evil(), protocol=4)
    if kind == "inst":
        return proto + b"(i" + mod + b"\n" + name + b"\n."
    if kind == "obj":
        return proto + b"(c" + mod + b"\n" + name + b"\no."
    if kind == "ext":
        return proto + b"\x82\x01."
    if kind == "persid":
        return proto + b"P42\n."
    if kind == "binpersid":
        return proto + b"\x8c\x0242Q."
    if kind == "newobj":
        return proto + b"c" + mod + b"\n" + name + b"\n)\x81."
    if kind == "frame-lie":
        return proto + b"\x95" + struct.pack("<Q", 2**62) + b"N."
    if kind == "long-lie":
        return proto + b"\x8b" + struct.pack("<i", 2**31 - 1) + b"\x00" * 4 + b"."
    if kind == "memo-miss":
        return proto + b"h\x07."
    raise AssertionError(kind)


def _pickled(obj: Any, protocol: int) -> bytes:
    try:
        return pickle.dumps(obj, protocol=protocol)
    except RecursionError:  # the pickler recurses; a deeper dump is written opcode by opcode (_deep_pickle)
        return pickle.dumps(None, protocol=protocol)


def _deep_pickle(levels: int) -> bytes:
    """``{"entries": [[[...]]]}`` nested ``levels`` deep, written opcode by opcode: EMPTY_DICT, the key,
    ``levels`` EMPTY_LISTs, each APPENDed to the one before, SETITEM."""
    key = b"entries"
    return (b"\x80\x02}X" + struct.pack("<I", len(key)) + key + b"]" * levels + b"a" * (levels - 1) + b"s.")


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch /tmp/{CANARY}-ran",))


OPCODE_KINDS = ["global", "stack_global", "os_system", "inst", "obj", "ext", "persid", "binpersid", "newobj",
                "frame-lie", "long-lie", "memo-miss"]


def dump_files(real: list[tuple[str, Any]]) -> st.SearchStrategy[dict[str, bytes]]:
    """A directory's worth of dumps: the real ones, some changed, re-encoded or replaced by crafted pickles."""
    return _dump_files([(name, pickle.dumps(obj, protocol=5)) for name, obj in real])


@st.composite
def _dump_files(draw: st.DrawFn, real: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """:func:`dump_files` of the real dumps pickled once (each case unpickles its copy: a deep copy cost
    ~20 ms a case)."""
    files: dict[str, bytes] = {}
    chosen = draw(st.lists(st.sampled_from(range(len(real))), min_size=1, max_size=4, unique=True))
    for idx in chosen:
        name, frozen = real[idx]
        obj = pickle.loads(frozen)
        shared = False  # a DAG of shared lists: pickled (memo), never spelled out as JSON (2**levels nodes)
        for _ in range(draw(st.integers(0, 4))):
            path = _path(draw, obj)
            how = draw(st.sampled_from(["value", "value", "drop", "key", "dup", "multiply", "nest"]))
            try:
                if how == "value":
                    obj = _set(obj, path, draw(plain))
                elif how == "drop" and path:
                    parent = obj
                    for k in path[:-1]:
                        parent = parent[k]
                    del parent[path[-1]]
                elif how == "key" and isinstance(obj, dict):
                    obj[draw(st.sampled_from(KEYS))] = draw(plain)
                elif how == "dup" and isinstance(obj, dict) and isinstance(obj.get("entries"), list):
                    obj["entries"] = obj["entries"] * draw(st.integers(2, 50))
                elif how == "multiply":
                    obj, shared = _set(obj, path, _multiplied(draw(st.integers(10, 64)))), True
                elif how == "nest":
                    obj = _set(obj, path, _nested(draw(st.sampled_from([50, 400]))))
            except (KeyError, IndexError, TypeError):
                continue
        enc = draw(st.sampled_from(["p2", "p3", "p4", "p5", "json", "opcodes", "damaged", "deep"]))
        if enc == "json" and not shared:
            try:
                data = json.dumps(obj).encode()
            except (TypeError, ValueError, RecursionError):  # bytes, or a shared list nested too deep
                data = _pickled(obj, 4)
        elif enc == "opcodes":
            data = _opcode_pickle(draw(st.sampled_from(OPCODE_KINDS)))
        elif enc == "json":
            data = _pickled(obj, 4)
        elif enc == "deep":
            data = _deep_pickle(draw(st.sampled_from([1_000, 100_000])))
        else:
            data = _pickled(obj, int(enc[1]) if enc != "damaged" else 4)
            if enc == "damaged":
                at = draw(st.integers(0, len(data)))
                cut = draw(st.booleans())
                data = data[:at] if cut else data[:at] + draw(st.binary(min_size=1, max_size=6)) + data[at + 1:]
        files[name] = data
    return files


@pytest.fixture(scope="module")
def contract(tmp_path_factory) -> Iterator[Contract]:
    yield from contract_for(tmp_path_factory, "fuzz-dumps", "dumps")


@pytest.fixture(scope="module")
def capture(contract) -> tuple[Path, Path, dict[Path, bytes]]:
    """The bundled capture copied once, its traces ingested once: (capture, its cache, the dumps it had)."""
    target = contract.root / "capture"
    shutil.copytree(GLOO, target, ignore=shutil.ignore_patterns(".ddprof-cache"))
    ddprof.ingest([target], contract.root / "capture-cache")
    return target, contract.root / "capture-cache", {p: p.read_bytes() for p in target.glob("raw/*/fr_trace_rank_*")}


def test_crafted_dumps_keep_the_exit_code_contract_and_run_nothing(real_dumps, contract, capture):
    watch = _ImportWatch()
    sys.meta_path.insert(0, watch)
    ran = Path(f"/tmp/{CANARY}-ran")
    ran.unlink(missing_ok=True)
    captured, cache, originals = capture
    try:
        @settings(max_examples=max(EXAMPLES // 4, 10), deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(files=dump_files(real_dumps))
        def run(files: dict[str, bytes]) -> None:
            d = contract.case_dir()
            try:
                if zlib.crc32(b"".join(files.values())) % BESIDE_TRACES_ONE_IN == 0:
                    # a captured run: traces with dumps in raw/rank-N/fr_trace_rank_N
                    for path, data in originals.items():
                        path.write_bytes(data)
                    for i, data in enumerate(files.values()):
                        (captured / "raw" / f"rank-{i:05d}" / f"fr_trace_rank_{i}").write_bytes(data)
                    args = ["analyze", str(captured), "--format", "json", "--cache", str(cache)]
                else:
                    target = d / "dumps"
                    target.mkdir()
                    for name, data in files.items():
                        (target / name).write_bytes(data)
                    args = ["analyze", str(target), "--format", "json", "--cache", str(d / "cache")]
                contract.check(args, allowed=frozenset({0, 1, 2, 3}))
            finally:
                shutil.rmtree(d, ignore_errors=True)

        run()
    finally:
        sys.meta_path.remove(watch)
    assert watch.asked == [] and not any(m.startswith(CANARY) for m in sys.modules)
    assert not ran.exists()


@pytest.mark.parametrize("kind", OPCODE_KINDS)
def test_every_crafted_opcode_is_refused_naming_the_file(tmp_path, kind):
    d = tmp_path / "dumps"
    d.mkdir()
    (d / "nccl_trace_rank_0").write_bytes(_opcode_pickle(kind))
    c = Contract(tmp_path)
    assert c.check(["analyze", str(d)]) == 2
    assert not Path(f"/tmp/{CANARY}-ran").exists()


def test_shared_subobjects_do_not_multiply_the_work(tmp_path, real_dumps):
    """2**60 paths through 60 shared lists, as a dump's entries and as an entry's sizes: refused or read,
    never walked path by path."""
    d = tmp_path / "dumps"
    d.mkdir()
    name, obj = real_dumps[0]
    a = copy.deepcopy(obj)
    a["entries"][0]["input_sizes"] = _multiplied(60)
    b = copy.deepcopy(obj)
    b["entries"] = _multiplied(60)
    (d / "nccl_trace_rank_0").write_bytes(pickle.dumps(a, protocol=4))
    (d / "nccl_trace_rank_1").write_bytes(pickle.dumps(b, protocol=4))
    c = Contract(tmp_path)
    c.check(["analyze", str(d), "--format", "json"], allowed=frozenset({0, 1, 2, 3}))


@pytest.mark.parametrize("field", ["profiling_name", "state", "process_group", "input_sizes", "input_dtypes"])
def test_a_shared_list_where_a_field_belongs_is_never_spelled_out(tmp_path, real_dumps, field):
    """One of 64 lists shared through the pickle memo (2**64 items spelled out) as an entry's text or
    sizes: the dump is refused naming the field, or read without the sizes, in well under a second's work
    per dump; never turned into text or written into the report."""
    d = tmp_path / "dumps"
    d.mkdir()
    obj = copy.deepcopy(real_dumps[0][1])
    for e in obj["entries"]:
        e[field] = _multiplied(64)
    (d / "nccl_trace_rank_0").write_bytes(pickle.dumps(obj, protocol=4))
    c = Contract(tmp_path)
    code = c.check(["analyze", str(d), "--format", "json", "-o", str(tmp_path / "r.json")],
                   allowed=frozenset({0, 1, 2, 3}))
    if field in ("input_sizes", "input_dtypes"):
        assert code != 2 and len((tmp_path / "r.json").read_text()) < 1_000_000
    else:
        assert code == 2


@pytest.mark.parametrize("value", [[], {}, "soon", 1.5, 2**64, True, _multiplied(40)])
def test_an_entry_time_that_is_no_integer_is_unknown_not_a_crash(tmp_path, real_dumps, value):
    """A ``time_created_ns`` of another type reached the sorting of the hang's records (exit 70: '<' between
    a list and an int); it is an unknown time, the rest of the dump diagnosed as usual."""
    d = tmp_path / "dumps"
    d.mkdir()
    for name, obj in real_dumps[:4]:
        obj = copy.deepcopy(obj)
        for e in obj["entries"][:2]:
            e["time_created_ns"] = value
        (d / name).write_bytes(pickle.dumps(obj, protocol=4))
    c = Contract(tmp_path)
    assert c.check(["analyze", str(d), "--format", "json", "-o", str(tmp_path / "r.json")],
                   allowed=frozenset({0, 1, 3})) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    times = [rec["waiting_since_ns"] for rec in report["hang"]["collectives"]]
    assert times and all(t is None or isinstance(t, int) for t in times)


def test_an_entry_referred_to_again_is_refused_at_once_naming_the_file(tmp_path, real_dumps):
    """A dump's 12 entries repeated 50**3 times through the pickle memo (a file of ~2 MB) held 1.5 million
    entries to parse and diagnose, tens of seconds; the dump is refused naming the file, the others read.
    The same entries spelled out (JSON, each a new object) are read as they are."""
    d = tmp_path / "dumps"
    d.mkdir()
    name, obj = real_dumps[0]
    shared = copy.deepcopy(obj)
    shared["entries"] = shared["entries"] * 50**3
    (d / name).write_bytes(pickle.dumps(shared, protocol=4))
    for other, o in real_dumps[1:4]:
        (d / other).write_bytes(pickle.dumps(o, protocol=4))
    c = Contract(tmp_path)
    assert c.check(["analyze", str(d), "--format", "json", "-o", str(tmp_path / "r.json")],
                   allowed=frozenset({1, 3})) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(Path(f["path"]).name, "earlier entry again" in f["reason"]) for f in report["hang"]["failed"]] \
        == [(name, True)]
    assert c.slowest < 5
    spelled = copy.deepcopy(obj)
    spelled["entries"] = spelled["entries"] + copy.deepcopy(spelled["entries"])
    (d / name).write_text(json.dumps(spelled))
    assert c.check(["analyze", str(d), "--format", "json", "-o", str(tmp_path / "r.json")],
                   allowed=frozenset({0, 1})) == 1
    assert json.loads((tmp_path / "r.json").read_text())["hang"]["failed"] == []


def test_what_the_unpickler_prints_itself_never_reaches_stderr(tmp_path, monkeypatch):
    """On a bytearray of absurd length CPython's unpickler can print ``SystemError: deallocated bytearray
    object has exported buffers`` before it raises MemoryError (seen once in 2,728 crafted dumps, depending
    on the process's memory): stderr must hold ddprof's message alone. The unpickler's behaviour is played
    here, the crafted dump that met it on disk."""
    def load(self):
        print("SystemError: deallocated bytearray object has exported buffers", file=sys.stderr)
        raise MemoryError

    monkeypatch.setattr(SafeUnpickler, "load", load)
    d = tmp_path / "dumps"
    d.mkdir()
    (d / "_dump_0").write_bytes(b"\x80\x05\x95\x14\x00\x00\x00\x00\x00\x00\x00\x96" + struct.pack("<Q", 2**62) + b".")
    c = Contract(tmp_path)
    assert c.check(["analyze", str(d)]) == 2
