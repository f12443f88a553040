"""Property: whatever a trace file holds, ``ddprof ingest`` / ``analyze`` end with 0, 2 or 3, never a
traceback, never 70 (a bug), never a warning leaked to stderr, in bounded time and memory.

Cases are mutations of the real traces (``tests/data/traces``, ``sample_traces``): a sample of each one's
events by category and phase, then changes of structure (keys dropped, events duplicated, phases
changed), of types and numbers (huge, negative, fractional, strings for integers), of nesting (args
thousands deep), of encoding (UTF-16, a byte-order mark, invalid UTF-8, gzip whole, cut or in several
members) and truncation. Run through the CLI's entry function in-process, so each case costs
milliseconds. Every case goes through the full analysis: half of them, picked by a checksum of the case's
bytes (so a failing case replays the same way), as ``analyze TRACE`` (ingested into a cache, then every
analysis), the others as ``ingest TRACE -o RUN`` then, when it ingested, ``analyze RUN``. Cases are
written on a memory file system (``/dev/shm``) when there is one. A per-case alarm fails a case that runs past ``CASE_SECONDS`` (the
stack it was stuck in shown), and a harder one stops the process with every thread's stack rather than
let one case stall CI.

``DDPROF_FUZZ_EXAMPLES`` sets the number of trace cases (CI's default: 1,000, about 50 s on two
cores; the dump fuzzer runs a quarter as many); with ``-s`` each test prints its cases, their exit codes
by command, its time and its slowest case::

    DDPROF_FUZZ_EXAMPLES=20000 pytest -s -p no:cacheprovider tests/fuzz/test_fuzz_traces.py tests/fuzz/test_fuzz_dumps.py
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_contract import EXAMPLES, Contract, contract_for
from tests.support.paths import DLRM, SAMPLES, TRACES

SEED_FILES = [
    DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz",
    TRACES / "hta" / "amd-mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    TRACES / "hta" / "edge-no-rank" / "rank_not_found.json.gz",
    TRACES / "hta" / "nccl-metadata-a100" / "nccl_data.json.gz",
    TRACES / "hta" / "sendrecv-2-of-128" / "sampled_rank-1.json.gz",
    TRACES / "tracelens" / "b200-vllm-rank0" / "eager_trace.json.gz",
    SAMPLES / "gloo-ddp-4rank-slow-rank" / "raw" / "rank-00000" / "rank-00000.cycle-000.pt.trace.json.gz",
    SAMPLES / "gloo-pipeline-4stage" / "raw" / "rank-00000" / "rank-00000.cycle-000.pt.trace.json.gz",
]
PER_KIND = 6  # events kept per (category, phase) of a seed
DEEP = "\x00deep\x00"  # placeholder for a value nested thousands deep (too deep for json.dumps)
GZIP_MAGIC = b"\x1f\x8b"
PHASES = list("XBEiIbneCsftPNODMVvRc()") + ["", "x", "XX", "\u00e9"]


def _sample(doc: Any) -> dict[str, Any]:
    """A few events of each (category, phase), in file order, with the document's other keys."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kept, seen = [], Counter()
    for ev in events:
        key = (ev.get("cat"), ev.get("ph")) if isinstance(ev, dict) else ("?", "?")
        if seen[key] < PER_KIND:
            seen[key] += 1
            kept.append(ev)
    head = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
    return {**head, "traceEvents": kept}


@pytest.fixture(scope="module")
def seeds() -> list[dict[str, Any]]:
    found = [p for p in SEED_FILES if p.is_file()]
    if len(found) < len(SEED_FILES) // 2:
        pytest.fail(f"real traces not found in the repo ({TRACES})")
    return [_sample(json.loads(gzip.decompress(p.read_bytes()))) for p in found]


hostile = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, -8, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 10**12, 1e308, -1e308, 1e-308,
                     0.5, 8.5, 1.8e13]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["", "0x0", "0x7f", "8", "nan", "-Infinity", "\u0000", "\ud7ff\ue000", "X", "B", "E",
                     "kernel", "nccl:all_reduce", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)", "gloo:all_reduce"]),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
    st.just(DEEP),
)
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s", "bp"]
ARG_KEYS = ["External id", "correlation", "stream", "device", "Collective name", "In msg nelems", "Out msg nelems",
            "Group size", "dtype", "Process Group Name", "Process Group ID", "Seq", "Input Dims", "Input type",
            "Concrete Inputs", "deep"]
HEADER_KEYS = ["distributedInfo", "deviceProperties", "baseTimeNanoseconds", "schemaVersion", "traceName"]
DIST_KEYS = ["rank", "world_size", "backend", "pg_config", "nccl_version", "pg_count"]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[dict[str, Any]]) -> tuple[bytes, str]:
    """A seed with a few changes of structure and value, then of bytes; and the file suffix."""
    doc = json.loads(json.dumps(draw(st.sampled_from(seeds))))
    events: list[Any] = doc["traceEvents"]
    deep_depth = draw(st.sampled_from([10, 900, 1_100, 5_000]))
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(["event", "arg", "drop", "header", "dist", "phase", "dup", "order", "events"]))
        i = draw(st.integers(0, max(len(events) - 1, 0)))
        ev = events[i] if events and isinstance(events[i], dict) else None
        if op == "event" and ev is not None:
            ev[draw(st.sampled_from(EVENT_KEYS))] = draw(hostile)
        elif op == "arg" and ev is not None:
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            args[draw(st.sampled_from(ARG_KEYS))] = draw(hostile)
            ev["args"] = args
        elif op == "drop" and ev is not None and ev:
            ev.pop(draw(st.sampled_from(sorted(ev))), None)
        elif op == "header":
            doc[draw(st.sampled_from(HEADER_KEYS))] = draw(hostile)
        elif op == "dist":
            info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
            info[draw(st.sampled_from(DIST_KEYS))] = draw(hostile)
            doc["distributedInfo"] = info
        elif op == "phase" and ev is not None:
            ev["ph"] = draw(st.sampled_from(PHASES))
        elif op == "dup":
            events.extend(events if draw(st.booleans()) else events[i:i + 3])
        elif op == "order":
            random.Random(draw(st.integers(0, 2**16))).shuffle(events)
        elif op == "events":
            events[i:i + draw(st.integers(0, 3))] = [draw(hostile)]
    if draw(st.integers(0, 9)) == 0:
        doc["traceEvents"] = draw(hostile)
    top: Any = doc["traceEvents"] if draw(st.integers(0, 9)) == 0 else doc  # a bare list of events
    text = json.dumps(top, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, None, 1])))
    text = text.replace(json.dumps(DEEP), '{"a":[' * deep_depth + "1" + "]}" * deep_depth)
    data = _encode(draw, text)
    for _ in range(draw(st.integers(0, 2))):
        data = _damage(draw, data)
    suffix = ".json"
    if draw(st.integers(0, 3)) == 0:
        data, suffix = _gzip(draw, data), ".json.gz"
    return data, suffix


def _encode(draw: st.DrawFn, text: str) -> bytes:
    how = draw(st.sampled_from(["utf-8"] * 6 + ["bom", "utf-16", "latin-1", "bad-utf8"]))
    if how == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    if how == "utf-16":
        return text.encode("utf-16")
    if how == "latin-1":
        return text.encode("latin-1", errors="replace")
    if how == "bad-utf8":
        data = text.encode()
        at = draw(st.integers(0, len(data)))
        return data[:at] + b"\xff\xfe\xc3" + data[at:]
    return text.encode()


def _damage(draw: st.DrawFn, data: bytes) -> bytes:
    at = draw(st.integers(0, len(data)))
    how = draw(st.sampled_from(["cut", "flip", "insert", "delete", "punct"]))
    if how == "cut":
        return data[:at]
    if how == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ (1 << draw(st.integers(0, 7)))]) + data[at + 1:]
    if how == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if how == "delete":
        return data[:at] + data[at + draw(st.integers(1, 64)):]
    return data[:at] + draw(st.sampled_from([b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\"])) + data[at + 1:]


def _gzip(draw: st.DrawFn, data: bytes) -> bytes:
    how = draw(st.sampled_from(["whole", "whole", "members", "cut", "padded"]))
    if how == "members":
        at = draw(st.integers(0, len(data)))
        return gzip.compress(data[:at]) + gzip.compress(data[at:])
    packed = gzip.compress(data)
    if how == "cut":
        return packed[:draw(st.integers(0, len(packed)))]
    if how == "padded":
        return packed + b"\x00" * draw(st.integers(1, 64)) + draw(st.binary(max_size=8))
    return packed


@pytest.fixture(scope="module")
def contract(tmp_path_factory) -> Iterator[Contract]:
    yield from contract_for(tmp_path_factory, "fuzz", "traces")


def test_mutated_real_traces_keep_the_exit_code_contract(seeds, contract):
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(case=mutated(seeds))
    def run(case: tuple[bytes, str]) -> None:
        data, suffix = case
        d = contract.case_dir()
        try:
            src = d / f"rank-0{suffix}"
            src.write_bytes(data)
            if zlib.crc32(data) % 2:  # the trace itself, ingested into a cache then analysed
                contract.check(["analyze", str(src), "--format", "json", "--cache", str(d / "cache")])
            elif contract.check(["ingest", str(src), "-q", "-j", "1", "-o", str(d / "run")]) != 2:
                contract.check(["analyze", str(d / "run"), "--format", "json"])
            assert src.read_bytes() == data  # a user's trace is never modified
        finally:
            shutil.rmtree(d, ignore_errors=True)

    run()


@pytest.mark.parametrize("name, data", [
    ("world-1e12", b'{"distributedInfo": {"rank": 0, "world_size": 1000000000000}, "traceEvents": '
                   b'[{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'),
    ("world-float", b'{"distributedInfo": {"rank": 0, "world_size": 1e300}, "traceEvents": '
                    b'[{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'),
    ("args-deep", b'{"traceEvents": [{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, '
                  b'"dur": 1, "args": ' + b'[' * 200_000 + b']' * 200_000 + b'}]}'),
    ("header-deep", b'{"distributedInfo": ' + b'{"a":' * 50_000 + b'1' + b'}' * 50_000 + b', "traceEvents": []}'),
    ("unclosed-deep", b'{"traceEvents": [' + b'[' * 100_000),
    ("dur-1e308", b'{"traceEvents": [{"ph": "X", "name": "a", "cat": "kernel", "pid": 1, "tid": 1, "ts": 1, '
                  b'"dur": 1e308, "args": {"stream": 7}}]}'),
    ("ts-1e308", b'{"traceEvents": [{"ph": "X", "name": "a", "cat": "kernel", "pid": 1, "tid": 1, "ts": 1e308, '
                 b'"dur": 1}]}'),
    ("huge-ints", b'{"traceEvents": [{"ph": "X", "name": "a", "cat": "kernel", "pid": 99999999999999999999999, '
                  b'"tid": -99999999999999999999999, "ts": 1, "dur": 1, "args": {"stream": 18446744073709551616}}]}'),
    ("rank-huge", b'{"distributedInfo": {"rank": 62504883586784160}, "traceEvents": '
                  b'[{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'),
    ("rank-negative", b'{"distributedInfo": {"rank": -3}, "traceEvents": '
                      b'[{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'),
    ("nul-bytes", b"\x00" * 4096),
    ("utf16", '{"traceEvents": []}'.encode("utf-16")),
    ("number-only", b"1e999999"),
    ("keys-only", b'{"traceEvents": {"ph": "X"}}'),
    ("gzip-bomb-ish", gzip.compress(b" " * (8 << 20))),
])
def test_no_bad_input_reaches_exit_70(tmp_path, name, data):
    """Exit 70 is for bugs in ddprof alone: each of these hostile files is an answer, not a crash."""
    src = tmp_path / ("rank-0.json.gz" if data[:2] == GZIP_MAGIC else "rank-0.json")
    src.write_bytes(data)
    c = Contract(tmp_path)
    c.check(["ingest", str(src), "-q", "-j", "1", "-o", str(tmp_path / "run")])
    c.check(["analyze", str(src), "--format", "json", "--cache", str(tmp_path / "cache")])
