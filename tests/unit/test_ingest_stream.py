"""Streaming Kineto reader (readers.source, readers.kineto.stream, readers.kineto.decode): cut anywhere, read the same.

Every document is decoded with pieces of 1, 7, 64 and 300 bytes (inflated blocks for gzip, reads for
plain JSON) and with the defaults, and compared with a reference computed from ``json.loads`` of the
same text. Bad input must be a :class:`BadInputError` naming the file, whatever the piece size.

Every test runs three times: the file decoded by :func:`~ddprof.readers.kineto.decode.decode` itself; decoded
first into plain columns (:mod:`ddprof.readers.kineto.plain`, as a read-ahead child does) that ``decode``
then makes the frame of (a file the plain reader declines falls back to the first way, as it does
after a child); and the same with every other run asked for as its text and decoded by ``decode`` (as the
process that took a child's pieces does once it has a core free). Each of the three twice: runs read by the
compiled scanner first (:class:`~ddprof.readers.kineto.plain.TextScanner`), and by the typed decoders alone
(an install without the scanner); where the scanner is not built, the first is the second.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import itertools
import json
import math
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from ddprof.errors import BadInputError, DdprofError
from ddprof.readers import read_ahead, source
from ddprof.readers.kineto import decode as kineto
from ddprof.readers.kineto import plain, stream
from ddprof.readers.kineto.categories import CAT_KIND, canonical
from ddprof.readers.kineto.events import RAW_SCHEMA
from ddprof.vocabulary.collective_ops import MARKER_RE

GZ_MAGIC = b"\x1f\x8b"
#: Bytes per piece: the inflated block for gzip, the read size for plain JSON; None: the defaults.
CUTS = [1, 7, 64, 300, None]
FRAME_COLS = ["ts_ns", "dur_ns", "pid", "tid", "cat", "name", "a_stream", "a_device", "correlation",
              "external_id", "is_marker"]
INT_COLS = {"ts_ns", "dur_ns", "pid", "tid", "a_stream", "a_device", "correlation", "external_id"}
ARG_COLS = {"a_stream": "stream", "a_device": "device", "correlation": "correlation",
            "external_id": "External id"}


# ---------------------------------------------------------------- decoding with small pieces


@contextlib.contextmanager
def pieces(block: int | None = None, read: int | None = None, impl: Any = None) -> Iterator[None]:
    """Patch the inflated block size, the bytes per read and the inflate implementation."""
    with contextlib.ExitStack() as stack:
        if block is not None:
            for reader in (kineto, plain):
                stack.enter_context(mock.patch.object(reader, "Source", functools.partial(source.Source, block=block)))
        if read is not None:
            stack.enter_context(mock.patch.object(source, "READ", read))
        if impl is not None:
            stack.enter_context(mock.patch.object(source, "_inflate_impl", impl))
        yield


def _read_here(path: Path, wanted: Any = None) -> Iterator[Any]:
    """What :func:`ddprof.readers.read_ahead.take` gives, read in this process: the plain pieces, or
    :class:`~ddprof.readers.read_ahead.Lost` where the plain reader declines the file (``wanted``: which
    runs the reader of the pieces asks for as text)."""
    got: list[Any] = []
    try:
        plain.read_plain(path, got.append, wanted)
    except plain.Declined as exc:
        raise read_ahead.Lost(str(exc)) from None
    yield from got


def _every_other_run_asked(path: Path) -> Iterator[Any]:
    asks = itertools.count()
    return _read_here(path, lambda: next(asks) % 2 == 1)


@pytest.fixture(autouse=True, params=[
    f"{way}{scanner}" for way in ("decoded here", "plain columns", "plain columns, every other run as text")
    for scanner in ("", ", typed decoders only")])
def reading(request):
    """Run the test with each way of decoding a file (module doc)."""
    with contextlib.ExitStack() as stack:
        if request.param.endswith(", typed decoders only"):
            stack.enter_context(mock.patch.object(plain, "SCANNER", False))
        if request.param.startswith("plain columns"):
            asked = request.param.startswith("plain columns, every other")
            stack.enter_context(mock.patch.object(read_ahead, "take", _every_other_run_asked if asked else _read_here))
        yield


def decode(path: Path, cut: int | None = None, impl: Any = None) -> kineto.Decoded:
    """``kineto.decode`` reading ``cut`` bytes at a time (a gzip file needs two to show its magic)."""
    read = None if cut is None else max(cut, 2) if path.read_bytes()[:2] == GZ_MAGIC else cut
    with pieces(block=cut, read=read, impl=impl):
        return kineto.decode(path)


def bad(path: Path, cut: int | None = None, impl: Any = None) -> BadInputError:
    """The error decoding ``path`` raises: it must be a BadInputError naming the file."""
    with pytest.raises(BadInputError) as info:
        decode(path, cut, impl)
    err = info.value
    assert isinstance(err, DdprofError)
    assert err.path == str(path) and str(path) in str(err)
    return err


def inflated(path: Path, block: int, limit: int) -> bytes:
    """All of ``Source(path, block).blocks()``, stopping once past ``limit`` bytes (a runaway inflate)."""
    out = bytearray()
    for piece in source.Source(path, block=block).blocks():
        assert len(piece) > 0
        out += piece
        if len(out) > limit:
            break
    return bytes(out)


# ---------------------------------------------------------------- documents and the reference


def _compact(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


#: style -> (dump a value, between items, between key and value, inside the braces)
STYLES = {
    "compact": (_compact, ",", ":", ""),
    "spaced": (json.dumps, ", ", ": ", " "),
    "pretty": (lambda v: json.dumps(v, indent=2, ensure_ascii=False), ",\n  ", ": ", "\n  "),
    "tabs": (lambda v: json.dumps(v, indent="\t"), "\t,\t", "\t:\t", "\t"),
    "comma-first": (_compact, "\n ,\n ", " :\r\n", "\n "),
}


def document(events: list[Any], extra: dict[str, Any] | None = None, where: int = 0,
             style: str = "compact") -> str:
    """``{ <extra keys>, "traceEvents": [...], <more extra keys> }`` with the list at index ``where``."""
    dump, sep, colon, pad = STYLES[style]
    items = [(k, dump(v)) for k, v in (extra or {}).items()]
    body = "[" + pad + sep.join(dump(e) for e in events) + pad + "]" if events else "[]"
    items.insert(where, ("traceEvents", body))
    text = "{" + pad + sep.join(json.dumps(k) + colon + v for k, v in items) + pad + "}\n"
    assert json.loads(text) == {**(extra or {}), "traceEvents": events}  # the builder writes what it says
    return text


def write(path: Path, text: str | bytes, gz: bool = False, splits: tuple[int, ...] = ()) -> Path:
    """Write ``text``, gzipped as one member per piece between the ``splits`` positions when ``gz``."""
    data = text.encode() if isinstance(text, str) else text
    if gz:
        bounds = [0, *splits, len(data)]
        data = b"".join(gzip.compress(data[a:b]) for a, b in zip(bounds, bounds[1:]))
    path.write_bytes(data)
    return path


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ns(us: float) -> int:
    """Microseconds to integer nanoseconds: whole microseconds and the fraction separately."""
    whole = math.floor(us)
    return int(whole) * 1000 + round((us - whole) * 1000)


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        v = int(v) if v.is_integer() else None
    elif isinstance(v, str):
        try:
            v = int(v, 0)
        except ValueError:
            return None
    return v if v is not None and -2**63 <= v < 2**63 else None


def _well_typed(e: dict[str, Any]) -> bool:
    """The fields ddprof reads have the types Kineto writes (otherwise the event is malformed)."""
    args = e.get("args")
    return (all(e.get(k) is None or isinstance(e[k], str) for k in ("name", "cat"))
            and all(e.get(k) is None or _num(e[k]) for k in ("ts", "dur"))
            and all(e.get(k) is None or _num(e[k]) or isinstance(e[k], str) for k in ("pid", "tid"))
            and (args is None or isinstance(args, dict)))


def _derived(events: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """The complete events that instants and B/E pairs make (instants of a category with a kind;
    B/E matched per (pid, tid) as a stack in (ts, file order)), in the file order of their opening
    event, and how many complete events they count for (pairs, unmatched B and E, B/E without ts)."""
    timed = [(i, e) for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") in ("B", "E", "i", "I")
             and _well_typed(e)]
    out = [(i, {**e, "ph": "X", "dur": 0.0}) for i, e in timed
           if e["ph"] in "iI" and canonical(e.get("cat")) in CAT_KIND]
    instants = len(out)
    pairs = [(i, e) for i, e in timed if e["ph"] in "BE"]
    count = sum(e.get("ts") is None for _, e in pairs)
    stacks: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]] = {}
    for i, e in sorted(((i, e) for i, e in pairs if e.get("ts") is not None), key=lambda p: (p[1]["ts"], p[0])):
        stack = stacks.setdefault((e.get("pid"), e.get("tid")), [])
        if e["ph"] == "B":
            stack.append((i, e))
        elif stack:
            j, b = stack.pop()
            out.append((j, {"ph": "X", "name": b.get("name") if b.get("name") is not None else e.get("name"),
                            "cat": b.get("cat") if b.get("cat") is not None else e.get("cat"),
                            "pid": b.get("pid"), "tid": b.get("tid"), "ts": b["ts"], "dur": e["ts"] - b["ts"],
                            "args": b.get("args") if b.get("args") is not None else e.get("args")}))
            count += 1
        else:
            count += 1
    count += sum(len(s) for s in stacks.values())
    return [e for _, e in sorted(out, key=lambda p: p[0])], count + instants


def raw_complete(events: list[Any]) -> int:
    """Complete events a document holds: 'X' events, and what instants and B/E pairs count for."""
    return sum(isinstance(e, dict) and e.get("ph") == "X" for e in events) + _derived(events)[1]


def expected(events: list[Any]) -> pl.DataFrame:
    """The frame of the kept complete events, from the parsed document: its 'X' events in file
    order, then the events instants and B/E pairs make (:func:`_derived`)."""
    rows = []
    for e in [*events, *_derived(events)[0]]:
        if not (isinstance(e, dict) and e.get("ph") == "X" and _well_typed(e)):
            continue
        name, ts, dur = e.get("name"), e.get("ts"), e.get("dur")
        if name is None or ts is None or dur is None:
            continue
        if not (abs(ts) < 9.2e15 and dur >= 0 and dur * 1000 <= 24 * 3600 * 10**9):
            continue
        args = e.get("args") or {}
        row = {"ts_ns": _ns(ts), "dur_ns": _ns(dur), "pid": _int(e.get("pid")), "tid": _int(e.get("tid")),
               "cat": canonical(e.get("cat")), "name": name, "is_marker": MARKER_RE.search(name) is not None}
        row.update({col: _int(args.get(key)) for col, key in ARG_COLS.items()})
        rows.append(row)
    schema = {c: pl.Int64 if c in INT_COLS else pl.Boolean if c == "is_marker" else pl.String
              for c in FRAME_COLS}
    return pl.DataFrame(rows, schema=schema)


def check(got: kineto.Decoded, text: str, path: Path) -> None:
    """``got`` agrees with ``json.loads(text)`` and with the bytes of ``path``."""
    doc = json.loads(text)
    events = doc["traceEvents"]
    assert dict(got.frame.schema) == RAW_SCHEMA  # every decoding path builds the same columns
    assert_frame_equal(got.frame.select(FRAME_COLS), expected(events), check_dtypes=True)
    assert got.raw_complete == raw_complete(events)
    assert got.raw_complete - got.frame.height == sum(got.dropped.values())
    info, base, props = doc.get("distributedInfo"), doc.get("baseTimeNanoseconds"), doc.get("deviceProperties")
    assert got.distributed_info == (info if isinstance(info, dict) else None)
    assert got.base_time_ns == (base if isinstance(base, int) and not isinstance(base, bool) else None)
    assert got.device_properties == (props if isinstance(props, list) else [])
    assert got.sha1 == hashlib.sha1(path.read_bytes()).hexdigest()
    assert got.uncompressed_bytes == len(text.encode())


def same(a: kineto.Decoded, b: kineto.Decoded) -> None:
    assert_frame_equal(a.frame, b.frame)
    assert_frame_equal(a.meta, b.meta)
    assert (a.raw_complete, a.dropped, a.sha1, a.uncompressed_bytes) == (
        b.raw_complete, b.dropped, b.sha1, b.uncompressed_bytes)
    assert (a.distributed_info, a.base_time_ns, a.device_properties) == (
        b.distributed_info, b.base_time_ns, b.device_properties)


def x(name: str, ts: Any, dur: Any = 1.0, **more: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": ts, "dur": dur, **more}


#: Events whose text holds every character a naive cut could trip on.
TRICKY: list[dict[str, Any]] = [
    x("plain", 1.5, 2.25),
    x("brace } close", 10),
    {"ph": "i", "name": "instant }", "ts": 11, "s": "t", "pid": 1, "tid": 2},
    x("},{", 12.001, 0.5, cat="kernel", pid=0, tid=7,
      args={"stream": 7, "device": 0, "correlation": 99, "External id": 5}),
    x("]", 13),
    {"ph": "s", "id": 1, "name": "flow", "cat": "ac2g", "ts": 13.5, "bp": "e", "pid": 1, "tid": 2},
    x('"traceEvents": [', 14),
    x('say "hi" \\ } ] {', 15),
    {"ph": "f", "id": 1, "name": "flow", "cat": "ac2g", "ts": 16, "pid": 0, "tid": 7},
    x("nested", 17, args={"x": [{"a": 1}, {"b": {"c": 2}}], "y": {"z": "}]", "w": [[], {}]}}),
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python }"}},
    {"ph": "C", "name": "mem", "ts": 18, "pid": 1, "args": {"bytes": 10}},
    {"ph": "B", "name": "begin", "ts": 19, "pid": 1, "tid": 2},
    x("nccl:all_reduce", 20, 3, args={"Collective name": "allreduce", "In msg nelems": 1024,
                                     "Out msg nelems": 1024, "Group size": 4, "dtype": "Float",
                                     "Process Group Name": "0", "Seq": 3, "Input Dims": [[1024]]}),
    {"ph": "E", "ts": 21, "pid": 1, "tid": 2},
    x("unicode é 中 😀 \u2028", 22.123456),
    x("hex pid", 23, pid="0x1f", tid="7"),
    x("record_param_comms", 24, args={"Collective name": "broadcast", "Group size": 2}),
    x("last }", 1.7e12 + 0.5, 86400e6),
]
HEADER = {"schemaVersion": 1, "note": "a } b ] c , d { e \"traceEvents\": [",
          "deviceProperties": [{"id": 0, "name": "x}]", "totalGlobalMem": 85e9}],
          "baseTimeNanoseconds": 1700000000000000000}
TRAILER = {"distributedInfo": {"rank": 3, "world_size": 4, "backend": "nccl", "pg": "{]}"},
           "traceName": "t}],{\"", "nested": [[1, [2]], {"a": [{}], "b": "]"}], "displayTimeUnit": "ms"}


def tricky_text(where: int = len(HEADER), style: str = "compact") -> str:
    return document(TRICKY, {**HEADER, **TRAILER}, where, style)


# ---------------------------------------------------------------- 1, 2: equivalence and layouts


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gz"])
@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("where", [0, len(HEADER), len(HEADER) + len(TRAILER)], ids=["first", "middle", "last"])
def test_every_cut_reads_the_whole_document(tmp_path, where, style, gz):
    text = tricky_text(where, style)
    path = write(tmp_path / ("t.json.gz" if gz else "t.json"), text, gz)
    whole = decode(path)
    check(whole, text, path)
    assert whole.frame.height == 13 and whole.raw_complete == 13  # 12 X events and one B/E pair
    for cut in CUTS[:-1]:
        same(decode(path, cut), whole)


def test_microseconds_become_integer_nanoseconds(tmp_path):
    path = write(tmp_path / "t.json", tricky_text())
    for cut in (1, None):
        f = decode(path, cut).frame
        rows = {r["name"]: (r["ts_ns"], r["dur_ns"]) for r in f.iter_rows(named=True)}
        assert rows["plain"] == (1500, 2250)
        assert rows["},{"] == (12001, 500)
        assert rows["unicode é 中 😀 \u2028"] == (22123, 1000)  # 22.123456 µs rounds to the nanosecond
        assert rows["last }"] == (1_700_000_000_000_500, 86_400_000_000_000)  # no float64 rounding to 256 ns
        kernel = f.filter(pl.col("name") == "},{").row(0, named=True)
        assert (kernel["a_stream"], kernel["a_device"], kernel["correlation"], kernel["external_id"]) == (7, 0, 99, 5)
        assert f.filter(pl.col("name") == "hex pid").select("pid", "tid").row(0) == (31, 7)
        assert f.filter(pl.col("is_marker"))["name"].to_list() == ["nccl:all_reduce", "record_param_comms"]


def test_collective_metadata_is_the_same_at_every_cut(tmp_path):
    path = write(tmp_path / "t.json.gz", tricky_text(style="pretty"), gz=True)
    whole = decode(path)
    meta = whole.meta.sort("_row")
    names = whole.frame["name"].to_list()
    assert [names[i] for i in meta["_row"]] == ["nccl:all_reduce", "record_param_comms"]
    assert meta.select("coll_name", "in_nelems", "group_size", "dtype", "pg", "seq").rows() == [
        ("allreduce", 1024, 4, "Float", "0", 3), ("broadcast", None, 2, None, None, None)]
    assert json.loads(meta["input_dims"][0]) == [[1024]]
    for cut in (1, 7, 300):
        assert_frame_equal(decode(path, cut).meta.sort("_row"), meta)


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gz"])
@pytest.mark.parametrize("text", [
    '{"traceEvents": []}',
    '{"traceEvents":[]}',
    '{"traceEvents": [\n]}',
    '{"a": {"b": "]"}, "traceEvents": [ ], "distributedInfo": {"rank": 3, "world_size": 4}}',
    '{"traceEvents": [], "deviceProperties": [{"name": "x}]"}], "baseTimeNanoseconds": 5}',
], ids=["spaced", "compact", "newline", "header-trailer", "trailer"])
def test_empty_event_list(tmp_path, text, gz):
    path = write(tmp_path / "t.json", text, gz)
    for cut in CUTS:
        got = decode(path, cut)
        check(got, text, path)
        assert got.frame.height == 0 and got.frame.columns == [*FRAME_COLS, "shapes"] and got.meta.height == 0


def test_header_and_trailer_keys_with_brackets_in_strings(tmp_path):
    events = [x("a", 1), x("b", 2)]
    text = ('{"traceEvents": ' + json.dumps(events) + ', "deviceProperties": [{"name": "x}]"}], '
            '"distributedInfo": {"rank": 3, "world_size": 4}}')
    path = write(tmp_path / "t.json", text)
    for cut in CUTS:
        got = decode(path, cut)
        check(got, text, path)
        assert got.distributed_info == {"rank": 3, "world_size": 4}
        assert got.device_properties == [{"name": "x}]"}]
        assert got.frame["name"].to_list() == ["a", "b"]


def test_trace_events_text_inside_a_header_string(tmp_path):
    # the key's text, escaped inside a string before the real key, is not taken for the list
    text = '{"note": "\\"traceEvents\\": [", "traceEvents": [' + _compact(x("real", 1)) + "]}"
    assert json.loads(text)["note"] == '"traceEvents": ['
    path = write(tmp_path / "t.json", text)
    for cut in CUTS:
        got = decode(path, cut)
        check(got, text, path)
        assert got.frame["name"].to_list() == ["real"]


def test_trace_events_key_nested_in_a_header_value(tmp_path):
    text = '{"meta": {"traceEvents": []}, "traceEvents": [' + _compact(x("real", 1)) + "]}"
    path = write(tmp_path / "t.json", text)
    check(decode(path), text, path)


def test_events_full_of_closing_braces(tmp_path):
    # more '}' per event than CUT_TRIES: whole blocks pass without a cut, the rest waits for a later one
    deep: Any = {}
    for i in range(12):
        deep = {f"k{i}": deep, "s": "}" * i}
    events = [x("}" * (stream.CUT_TRIES * 3), i, args={"deep": deep, "list": [{"a": "}}"}] * 5}) for i in range(30)]
    text = document(events, {"traceName": "}" * 20})
    path = write(tmp_path / "t.json.gz", text, gz=True)
    whole = decode(path)
    check(whole, text, path)
    assert whole.frame.height == 30
    for cut in CUTS[:-1]:
        same(decode(path, cut), whole)


def test_unknown_phase_and_malformed_events_fall_back_per_event(tmp_path):
    events = [x("a", 1), {"ph": "Z", "name": "unknown phase", "ts": 1}, x("b", 2),
              {"name": "no phase", "ts": 2, "dur": 1}, {"ph": None}, x("c", 3, args={"stream": 7}),
              x("bad ts", "soon"), x("bad pid", 4, pid=[1]), x("bad args", 5, args=[1, 2]),
              x("no dur", 6, dur=None), x("negative", 7, -1), x("too long", 8, 86400e6 + 1),
              x("d", 9), 5, [x("in a list", 1)], x("e", 10)]
    text = document(events, {"distributedInfo": {"rank": 0}})
    path = write(tmp_path / "t.json", text)
    whole = decode(path)
    check(whole, text, path)
    assert whole.frame["name"].to_list() == ["a", "b", "c", "d", "e"]
    assert whole.raw_complete == 11
    assert sum(n for why, n in whole.dropped.items() if why.startswith("malformed event")) == 3
    assert whole.dropped["missing ts, dur or name"] == 1
    assert whole.dropped["negative duration"] == 1
    assert whole.dropped["duration over 24 h (CUPTI timestamp overflow)"] == 1
    for cut in CUTS[:-1]:
        same(decode(path, cut), whole)


# ---------------------------------------------------------------- 4: bad input


def _doc(**keys: Any) -> str:
    return json.dumps({"schemaVersion": 1, **keys})


GOOD = _doc(traceEvents=[x("a", 1), x("b", 2)], distributedInfo={"rank": 0})
BAD = {  # name -> (bytes on disk, words in the message)
    "empty": (b"", "file is empty"),
    "empty-gzip": (gzip.compress(b""), "file is empty once decompressed"),
    "blank": (b"  \n ", "not valid JSON"),
    "top-string": (b'"traceEvents"', "expected an object"),
    "no-events": (_doc(distributedInfo={"rank": 1}).encode(), "no 'traceEvents'"),
    "events-null": (_doc(traceEvents=None).encode(), "no 'traceEvents'"),
    "events-number": (_doc(traceEvents=5).encode(), "not a list of events"),
    "events-object": (_doc(traceEvents={"a": [1]}).encode(), "not a list of events"),
    "not-json": (b"this is not json at all", "not valid JSON"),
    "garbage-after": ((GOOD + " trailing").encode(), "not valid JSON"),
    "second-document": ((GOOD + GOOD).encode(), "not valid JSON"),
    "bracket-after": ((GOOD + "]").encode(), "not valid JSON"),
    "unclosed-list": (b'{"traceEvents": [', "not valid JSON"),
    "corrupt-gzip": (GZ_MAGIC + b"\x08\x00garbage" * 5, "corrupt or truncated gzip"),
    "truncated-gzip": (gzip.compress(GOOD.encode())[:-9], "corrupt or truncated gzip"),
    "gzip-then-garbage": (gzip.compress(GOOD.encode()) + b"garbage!", "corrupt or truncated gzip"),
    "gzip-of-garbage": (gzip.compress(b"\x00\xff{{{"), "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_a_bad_input_error_naming_the_file(tmp_path, name):
    data, words = BAD[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(data)
    for cut in CUTS:
        assert words in bad(path, cut).cause


def test_a_bare_list_of_no_events_holds_no_complete_event(tmp_path):
    """A top-level list is the Chrome format's bare event list: items that are no events are skipped
    (ingest then says the trace has no complete events)."""
    for name, data in (("numbers", b"[1, 2, 3]"), ("doc", ("[" + GOOD + "]").encode())):
        path = tmp_path / f"{name}.json"
        path.write_bytes(data)
        for cut in CUTS:
            assert decode(path, cut).frame.height == 0


def test_missing_and_unreadable_files(tmp_path):
    assert "cannot read file" in bad(tmp_path / "absent.json").cause
    assert "cannot read file" in bad(tmp_path).cause  # a folder


def _positions(text: str) -> list[int]:
    """Cut positions worth trying at small blocks: near every structural character."""
    marks = {i for i, c in enumerate(text) if c in '[]{},:"'}
    return sorted({p for m in marks for p in (m, m + 1) if 0 < p < len(text.rstrip())})


def test_truncated_json_at_every_position(tmp_path):
    text = tricky_text()
    end = len(text.rstrip()) - 1  # the last '}': every shorter prefix is invalid
    path = tmp_path / "t.json"
    for n in range(end + 1):  # default pieces: the whole prefix in one block
        write(path, text[:n])
        bad(path)
    starts = [text.index('"traceEvents":[') + len('"traceEvents":['), text.index('"distributedInfo"'),
              text.index("[[1,[2]]"), text.index("nested") - 10, len(text.rstrip()) - 1]
    for cut, stride in ((1, 97), (7, 5), (64, 3), (300, 1)):
        for n in sorted({*_positions(text)[::stride], *starts, *(s + 1 for s in starts)} - {end + 1}):
            write(path, text[:n])
            bad(path, cut)


def test_truncated_gzip_at_every_position(tmp_path):
    text = tricky_text(style="pretty")
    data = gzip.compress(text.encode())
    path = tmp_path / "t.json.gz"
    for n in range(1, len(data)):
        path.write_bytes(data[:n])
        for cut in ((None, 7) if n % 4 == 0 else (None,)):
            err = bad(path, cut)
            assert "gzip" in err.cause or "JSON" in err.cause or n < 2


def test_corrupt_gzip_bytes(tmp_path):
    data = bytearray(gzip.compress(tricky_text().encode()))
    path = tmp_path / "t.json.gz"
    for i in range(10, len(data), 7):  # past the header: the deflate data and the CRC/size trailer
        corrupt = bytearray(data)
        corrupt[i] ^= 0x55
        path.write_bytes(corrupt)
        for cut in (None, 64):
            bad(path, cut)


@pytest.mark.parametrize("sep", ["  ", ",,", ", , ,", ",]", "[,"], ids=["missing", "double", "triple", "trailing", "leading"])
def test_malformed_separators_are_rejected_at_every_cut(tmp_path, sep):
    a, b = _compact(x("a", 1)), _compact(x("b", 2))
    body = {"[,": "[," + a + "," + b + "]", ",]": "[" + a + "," + b + ",]"}.get(sep, "[" + a + sep + b + "]")
    text = '{"traceEvents": ' + body + "}"
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    path = write(tmp_path / "t.json", text)
    for cut in CUTS:
        bad(path, cut)


def test_trailer_with_many_closing_brackets(tmp_path):
    text = document([x("a", 1)], {"traceName": "t", "ranks": [[r] for r in range(64)]})
    path = write(tmp_path / "t.json", text)
    check(decode(path), text, path)


def test_out_of_range_number_drops_the_event_only(tmp_path):
    text = document([x("a", 1), x("huge", 2), x("b", 3)]).replace('"ts":2,', '"ts":1e400,')
    assert math.isinf(json.loads(text)["traceEvents"][1]["ts"])
    path = write(tmp_path / "t.json", text)
    got = decode(path)
    assert got.frame["name"].to_list() == ["a", "b"] and got.raw_complete == 3


# ---------------------------------------------------------------- 5: multi-member gzip


def test_multi_member_gzip_reads_like_one(tmp_path):
    text = tricky_text(style="spaced")
    data = text.encode()
    key = data.index(b'"traceEvents"')
    splits = [(key + 5,), (data.index(b"[", key) + 1,), (data.index(b"nested"),),
              (data.index(b"distributedInfo"),), (len(data) - 1,), (1, 2, 300, 301, 301, len(data) - 2)]
    one = decode(write(tmp_path / "one.json.gz", text, gz=True))
    for i, cuts in enumerate(splits):
        path = write(tmp_path / f"multi{i}.json.gz", text, gz=True, splits=cuts)
        assert gzip.decompress(path.read_bytes()) == data
        for cut in CUTS:
            got = decode(path, cut)
            check(got, text, path)
            assert_frame_equal(got.frame, one.frame)


def test_stdlib_zlib_single_member_reads_like_isal(tmp_path):
    text = tricky_text()
    path = write(tmp_path / "t.json.gz", text, gz=True)
    for cut in CUTS:
        check(decode(path, cut, impl=zlib), text, path)


def test_stdlib_zlib_multi_member(tmp_path):
    text = tricky_text()
    data = text.encode()
    path = write(tmp_path / "t.json.gz", text, gz=True, splits=(len(data) // 2,))
    with pieces(impl=zlib):
        for block in (7, 64):
            try:
                out = inflated(path, block, limit=4 * len(data))
            except BadInputError as exc:
                out = str(exc).encode()
            assert out == data


# ---------------------------------------------------------------- split() directly


def _keep(runs: list[list[Any]], view: memoryview) -> None:
    runs.append(msgspec.json.decode(view))


def test_split_feeds_runs_of_whole_events_in_order(tmp_path):
    text = tricky_text(style="comma-first")
    path = write(tmp_path / "t.json.gz", text, gz=True)
    for block in (1, 5, 64, 1 << 21):
        runs: list[list[Any]] = []
        src = source.Source(path, block=block)
        # a bad cut must raise msgspec.DecodeError and keep nothing: decode first, then keep
        head = stream.split(src.blocks(), functools.partial(_keep, runs))
        assert [e for run in runs for e in run] == TRICKY
        assert all(run for run in runs[:-1])
        if block == 1:
            assert len(runs) >= len(TRICKY) // 2  # cut often, not once at the end
        assert head.distributedInfo == TRAILER["distributedInfo"]
        assert head.deviceProperties == HEADER["deviceProperties"]
        assert head.baseTimeNanoseconds == HEADER["baseTimeNanoseconds"]
        assert src.size == len(text.encode())


def test_source_blocks_are_at_most_the_block_size(tmp_path):
    data = tricky_text().encode() * 3
    path = tmp_path / "t.gz"
    path.write_bytes(gzip.compress(data[:500]) + gzip.compress(data[500:], compresslevel=1))
    for block in (1, 7, 64, 300):
        with pieces(read=13):
            chunks = list(source.Source(path, block=block).blocks())
        assert b"".join(chunks) == data
        assert max(map(len, chunks)) <= block


# ---------------------------------------------------------------- 6: properties


ALPHABET = st.one_of(st.sampled_from(list('{}[],":\\ \n\t/') + ["é", "中", "😀", "\u2028", "\x00"]),
                     st.characters(codec="utf-8"))
names = st.one_of(st.text(ALPHABET, max_size=12),
                  st.sampled_from(["nccl:all_reduce", '"traceEvents": [', "},{", "record_param_comms"]))
times = st.one_of(st.integers(0, 10**13), st.floats(0, 1e13, allow_nan=False),
                  st.sampled_from([0.5, 1.5, 2.0005, 1.7e12 + 0.123, 86400e6, 86400e6 + 1, -1.0]))
ints = st.one_of(st.integers(-2**40, 2**40), st.sampled_from(["0x1f", "7", "abc", 3.0, 3.5]))
leaves = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False,
                   allow_infinity=False), st.text(ALPHABET, max_size=5))
nested = st.recursive(leaves, lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(st.text(ALPHABET, max_size=4), c, max_size=3), max_leaves=8)
args = st.fixed_dictionaries({}, optional={
    "k_nested": nested, "k_text": st.text(ALPHABET, max_size=8), "stream": st.integers(0, 100),
    "correlation": st.integers(0, 2**40), "External id": st.integers(0, 2**40), "device": st.integers(0, 8)})
events = st.fixed_dictionaries(
    {"name": names, "ts": times, "dur": times},
    optional={"ph": st.sampled_from(["X", "X", "X", "X", "i", "s", "f", "M", "C", "B", "E", "Z"]),
              "cat": st.sampled_from(["cpu_op", "kernel", "gpu_memcpy", "a}b"]), "pid": ints, "tid": ints,
              "args": args})
extras = st.dictionaries(st.sampled_from(["schemaVersion", "note", "distributedInfo", "deviceProperties",
                                          "baseTimeNanoseconds", "traceName"]), nested, max_size=4)
layouts = st.tuples(st.integers(0, 4), st.sampled_from(sorted(STYLES)), st.booleans(),
                    st.sampled_from([1, 2, 7, 64, 300, None]))


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=st.lists(st.one_of(events, events.map(lambda e: {**e, "ph": "X"})), max_size=20),
       extra=extras, layout=layouts, split=st.floats(0, 1))
def test_property_random_documents_read_like_json_loads(scratch, evs, extra, layout, split):
    where, style, gz, cut = layout
    text = document(evs, extra, min(where, len(extra)), style)
    at = int(split * len(text.encode()))
    path = write(scratch / "p.json", text, gz, splits=(at,) if gz and at > 0 else ())
    check(decode(path, cut), text, path)


MUTATIONS = st.lists(st.tuples(st.sampled_from(["flip", "drop", "insert", "truncate"]), st.floats(0, 1),
                               st.binary(min_size=1, max_size=3)), min_size=1, max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=MUTATIONS, gz=st.booleans(), after=st.booleans(), cut=st.sampled_from([1, 7, 64, None]))
def test_property_corruption_is_a_bad_input_error_or_a_result(scratch, mutations, gz, after, cut):
    data = bytearray(tricky_text().encode())
    if gz and after:  # corrupt the compressed bytes instead of the text
        data = bytearray(gzip.compress(bytes(data)))
    for kind, where, blob in mutations:
        if not data:
            break
        i = int(where * (len(data) - 1))
        if kind == "flip":
            data[i] ^= blob[0] or 1
        elif kind == "drop":
            del data[i:i + len(blob)]
        elif kind == "insert":
            data[i:i] = blob
        else:
            del data[i:]
    path = scratch / "c.json"
    path.write_bytes(gzip.compress(bytes(data)) if gz and not after else bytes(data))
    try:
        got = decode(path, cut)
    except BadInputError as exc:
        assert exc.path == str(path)
    else:
        assert got.raw_complete - got.frame.height == sum(got.dropped.values())
        assert got.sha1 == hashlib.sha1(path.read_bytes()).hexdigest()


def test_an_ops_recorded_shapes_become_a_checksum_equal_where_they_are(tmp_path):
    """``Input Dims`` and ``Input type`` as written (raw text) -> a CRC-32 of both (the store's ``shapes``):
    equal for calls on the same shapes and types, different otherwise, null where none were recorded;
    the same whatever the reader's cut of the text."""
    dims, types = '[[8, 512], [512, 512]]', '["float", "float"]'
    text = ('{"traceEvents": ['
            f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2, '
            f'"args": {{"Input Dims": {dims}, "Input type": {types}}}}}, '
            f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 4, "dur": 2, '
            f'"args": {{"Input Dims": {dims}, "Input type": {types}}}}}, '
            '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 7, "dur": 2, '
            '"args": {"Input Dims": [[32, 512], [512, 512]], "Input type": ["float", "float"]}}, '
            '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 2, '
            f'"args": {{"Input Dims": {dims}, "Input type": ["c10::Half", "c10::Half"]}}}}, '
            '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 13, "dur": 2}]}')
    path = write(tmp_path / "t.json", text)
    want = zlib.crc32(dims.encode(), zlib.crc32(types.encode()))
    for cut in CUTS:
        got = decode(path, cut).frame.get_column("shapes").to_list()
        assert got[:2] == [want, want] and len({*got[:4]}) == 3 and got[4] is None, (cut, got)
