"""``ddprof export --perfetto``: the file follows the Trace Event Format (checked by a validator written
from the format's rules) and holds every event of the chosen ranks and steps, and nothing else; on the
real DLRM traces, a captured gloo run and generated runs (one with hosts whose clocks disagree)."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import ddprof
from ddprof.cli import main
from ddprof.cli.common import parse_selection
from ddprof.errors import BadInputError, UsageError
from ddprof.inputs.sources import open_source
from ddprof.render.perfetto import export_perfetto
from ddprof.store.rundir import Run
from ddprof.synth import US, DataParallel, ingest_generated
from tests.support.clock_runs import HOSTS8, constant, hosts_run
from tests.support.paths import SAMPLES

SAMPLES = SAMPLES

METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
            "thread_sort_index": "sort_index", "process_labels": "labels"}


def _int(x: Any) -> bool:
    return type(x) is int


def _number(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def load(path: Path) -> dict[str, Any]:
    """The file as JSON (gunzipped when its name ends in .gz: it must then be gzip)."""
    if path.name.endswith(".gz"):
        with gzip.open(path) as fh:
            raw = fh.read()
    else:
        raw = path.read_bytes()
    doc = json.loads(raw)
    assert isinstance(doc, dict)
    return doc


def validate_trace(doc: dict[str, Any]) -> Counter[str]:
    """The Trace Event Format rules this export uses; returns the count of events per phase.

    * JSON object format: ``traceEvents`` a list; ``displayTimeUnit`` ``ms`` or ``ns``; ``otherData`` an object;
    * every event an object with a string ``ph``; ``pid`` and ``tid`` integers;
    * ``X`` (complete): string ``name``, string ``cat``, numeric ``ts`` and ``dur`` with ``dur ≥ 0``,
      ``args`` an object;
    * ``M`` (metadata): a known name, ``args`` holding its value (a string name, an integer sort index);
    * ``s``/``f`` (flow): an ``id``, numeric ``ts``, ``name`` and ``cat``; ``f`` binds to the enclosing slice
      (``bp: e``); each id has exactly one start and one finish with the same name and cat, and each lies
      inside a complete event on its own thread (the slice it binds to);
    * complete events on one thread nest: none starts inside another and ends after it (times read as
      integer ns, as Perfetto reads them);
    * every process and thread that holds events is named by a metadata event.
    """
    assert set(doc) <= {"traceEvents", "displayTimeUnit", "otherData", "metadata", "systemTraceEvents"}
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    assert isinstance(doc.get("otherData", {}), dict)
    events = doc["traceEvents"]
    assert isinstance(events, list)
    phases: Counter[str] = Counter()
    named_pids, named_threads = set(), set()
    slices: dict[tuple[int, int], list[tuple[float, float]]] = {}
    flows: dict[Any, dict[str, dict[str, Any]]] = {}
    for ev in events:
        assert isinstance(ev, dict) and isinstance(ev.get("ph"), str), ev
        ph = ev["ph"]
        phases[ph] += 1
        assert _int(ev.get("pid")) and _int(ev.get("tid")), ev
        if ph == "X":
            assert isinstance(ev.get("name"), str) and isinstance(ev.get("cat"), str), ev
            assert _number(ev.get("ts")) and _number(ev.get("dur")) and ev["dur"] >= 0, ev
            assert isinstance(ev.get("args", {}), dict), ev
            start, length = round(ev["ts"] * 1000), round(ev["dur"] * 1000)  # to ns, as Perfetto reads them
            slices.setdefault((ev["pid"], ev["tid"]), []).append((start, start + length))
        elif ph == "M":
            key = METADATA.get(ev.get("name", ""))
            assert key is not None and isinstance(ev.get("args"), dict) and key in ev["args"], ev
            value = ev["args"][key]
            assert isinstance(value, str) if key == "name" else _int(value), ev
            if ev["name"] == "process_name":
                named_pids.add(ev["pid"])
            elif ev["name"] == "thread_name":
                named_threads.add((ev["pid"], ev["tid"]))
        elif ph in ("s", "f"):
            assert "id" in ev and _number(ev.get("ts")), ev
            assert isinstance(ev.get("name"), str) and isinstance(ev.get("cat"), str), ev
            if ph == "f":
                assert ev.get("bp") == "e", ev
            pair = flows.setdefault(ev["id"], {})
            assert ph not in pair, f"flow id {ev['id']} has two {ph!r} events"
            pair[ph] = ev
        else:
            raise AssertionError(f"phase {ph!r} is not one this export writes: {ev}")
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {fid} is not a matched pair: {pair}"
        s, f = pair["s"], pair["f"]
        assert (s["name"], s["cat"]) == (f["name"], f["cat"]), pair
        for ev in (s, f):
            ts = round(ev["ts"] * 1000)
            assert any(a <= ts <= b for a, b in slices.get((ev["pid"], ev["tid"]), [])), f"unbound {ev}"
    for thread, spans in slices.items():  # complete events on one thread nest (Perfetto drops the others)
        open_ends: list[int] = []
        for a, b in sorted(spans, key=lambda x: (x[0], -x[1])):
            while open_ends and open_ends[-1] <= a:
                open_ends.pop()
            assert not open_ends or b <= open_ends[-1], f"{thread}: [{a}, {b}) partly overlaps an event ending at {open_ends[-1]}"
            open_ends.append(b)
    assert {pid for pid, _ in slices} <= named_pids
    assert set(slices) <= named_threads
    return phases


def check_complete(doc: dict[str, Any], run: Run, ranks: list[int], steps: list[int] | None,
                   shift_ns: dict[int, int] | None = None) -> None:
    """The export's complete events are exactly the store's rows of those ranks and steps, and no other
    process: per rank the same multiset of (name, start, duration, step, kind and collective metadata),
    the start read back as ``origin_ns + round(ts · 1000)`` plus ``shift_ns[rank]`` (the clock offset the
    export took off)."""
    origin = int(doc["otherData"]["origin_ns"])
    keys = {"step": "step", "op": "coll_op", "process group": "pg", "group size": "group_size", "bytes": "bytes",
            "peer": "peer", "seq": "seq", "correlation": "correlation"}
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in xs} <= set(ranks)
    for r in ranks:
        lf = run.events([r])
        if steps is not None:
            lf = lf.filter(pl.col("step").is_in(steps))
        store = lf.select("name", "ts_ns", "dur_ns", pl.col("kind").cast(pl.String), *keys.values()).collect()
        shift = (shift_ns or {}).get(r, 0)
        mine = Counter((e["name"], origin + round(e["ts"] * 1000) + shift, round(e["dur"] * 1000), e["cat"],
                        *(e["args"].get(k) for k in keys)) for e in xs if e["pid"] == r)
        assert mine == Counter(store.iter_rows()), f"rank {r}"
        assert sum(mine.values()) == store.height > 0


def test_dlrm_all_ranks(tmp_path: Path) -> None:
    """The 8-rank DLRM sample: every event of every rank, one process per rank with its threads and
    streams named, launch arrows to kernels, collective metadata in args, ns kept."""
    with open_source([SAMPLES / "dlrm-8xV100-nccl"], cache=tmp_path / "cache") as src:
        run = src.run
        assert run is not None
        out = tmp_path / "dlrm.json.gz"
        summary = export_perfetto(run, out)
        doc = load(out)
        phases = validate_trace(doc)
        check_complete(doc, run, run.ranks, None)
        launches = run.events().filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()).join(
            run.events().filter(pl.col("stream").is_not_null()), on=["rank", "correlation"]).collect()
    assert phases["X"] == summary.events and phases["s"] == phases["f"] == summary.flows == launches.height > 1000
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == {r: f"rank {r}" for r in range(8)}  # the DLRM traces do not name their hosts
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name" and e["pid"] == 0}
    assert {"stream 7", "stream 84"} <= threads and any(t.startswith("thread ") for t in threads)
    comm = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "comm" and "op" in e["args"]]
    assert {e["args"]["op"] for e in comm} >= {"all_reduce", "all_to_all"}
    assert all(e["args"]["bytes"] > 0 for e in comm)
    lanes = _thread_names(doc)
    arrows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert all(lanes[(e["pid"], e["tid"])].startswith("thread " if e["ph"] == "s" else "stream ") for e in arrows)
    origin = int(doc["otherData"]["origin_ns"])
    first = min(e["ts"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert first == 0 and origin % 1000 == 0  # the DLRM traces are in whole µs


def test_dlrm_subset(tmp_path: Path) -> None:
    """Ranks 1 and 3, step 10, through the command: only those, every one of them."""
    cache = tmp_path / "cache"
    out = tmp_path / "sub.json"
    assert main(["export", str(SAMPLES / "dlrm-8xV100-nccl"), "--perfetto", str(out), "--ranks", "1,3",
                 "--steps", "10", "--cache", str(cache)]) == 0
    doc = load(out)
    validate_trace(doc)
    with open_source([SAMPLES / "dlrm-8xV100-nccl"], cache=cache) as src:
        assert src.run is not None
        check_complete(doc, src.run, [1, 3], [10])
    assert doc["otherData"]["ranks"] == "1,3" and doc["otherData"]["steps"] == "10"


def test_gloo_sample(tmp_path: Path) -> None:
    """A captured gloo run (CPU only, one host named by its collector): processes named with the host,
    gloo threads as threads, no launch arrows."""
    with open_source([SAMPLES / "gloo-ddp-4rank-slow-rank" / "raw"], cache=tmp_path / "cache") as src:
        run = src.run
        assert run is not None
        out = tmp_path / "gloo.json.gz"
        export_perfetto(run, out)
        doc = load(out)
        phases = validate_trace(doc)
        check_complete(doc, run, run.ranks, None)
    assert phases["s"] == 0
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == {r: f"rank {r} (vm)" for r in range(4)}
    gloo = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("gloo:")]
    assert gloo and all(e["cat"] == "comm" and e["args"].get("bytes") for e in gloo)


def test_overlapping_events_kept_on_extra_lanes(tmp_path: Path, traces: Path) -> None:
    """A real ROCm trace (MI300X) whose profiler wrote a few events that partly overlap others on their
    thread: they go to an ``(overlapping 1)`` lane, so the file nests and still holds every event."""
    with open_source([traces / "tracelens" / "mi300-rocm-resnet-rank0"], cache=tmp_path / "cache") as src:
        run = src.run
        assert run is not None
        out = tmp_path / "mi300.json.gz"
        export_perfetto(run, out)
        doc = load(out)
        validate_trace(doc)
        check_complete(doc, run, run.ranks, None)
    labels = set(_thread_names(doc).values())
    assert {"thread 542 (overlapping 1)", "stream 0 (overlapping 1)"} <= labels


def test_generated_sub_microsecond(tmp_path: Path) -> None:
    """A generated run whose events start at fractional microseconds (as Kineto writes them): the export
    keeps every nanosecond, and ``--steps`` keeps only those steps' rows."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank, trace in DataParallel(ranks=4, steps=3, base=10_000_000 * US).kineto().items():  # µs floats: ns kept
        for i, ev in enumerate(trace["traceEvents"]):
            ev["ts"] = ev["ts"] + (i % 997) / 1000  # 1 µs + 1 ns steps: 0.001 ... 0.996 µs
        (traces / f"rank{rank}.pt.trace.json").write_text(json.dumps(trace))
    run = ddprof.ingest([traces], tmp_path / "run")
    assert run.events().filter(pl.col("ts_ns") % 1000 != 0).select(pl.len()).collect().item() > 100
    out = tmp_path / "gen.json"
    export_perfetto(run, out, steps=[1, 2])
    doc = load(out)
    validate_trace(doc)
    check_complete(doc, run, run.ranks, [1, 2])
    origin = int(doc["otherData"]["origin_ns"])
    for r in run.ranks:
        store = run.events([r]).filter(pl.col("step").is_in([1, 2])).select("ts_ns").collect()["ts_ns"]
        mine = sorted(round(e["ts"] * 1000) + origin for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == r)
        assert mine == sorted(store.to_list())


def test_hosts_aligned_on_one_clock(tmp_path: Path) -> None:
    """Two hosts, node-b's clock 5 ms ahead: the exported timeline is on node-a's clock (each all-reduce
    ends at one instant on every rank), and with --raw-clocks it is not."""
    sc = DataParallel(ranks=8, steps=10)
    run = hosts_run(sc, tmp_path / "hosts", HOSTS8, constant({"node-b": 5_000 * US}))
    aligned, raw = tmp_path / "aligned.json.gz", tmp_path / "raw.json.gz"
    assert main(["export", str(run.path), "--perfetto", str(aligned)]) == 0
    assert main(["export", str(run.path), "--perfetto", str(raw), "--raw-clocks"]) == 0

    def comm_ends(doc: dict[str, Any]) -> dict[int, list[float]]:
        ends: dict[int, list[float]] = {}
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and e["cat"] == "comm" and e["tid"] and "stream" in _thread_names(doc)[(e["pid"], e["tid"])]:
                ends.setdefault(e["args"]["step"], []).append(e["ts"] + e["dur"])
        return ends

    a, r = load(aligned), load(raw)
    validate_trace(a)
    validate_trace(r)
    assert all(max(v) - min(v) < 1e-3 for v in comm_ends(a).values())
    assert all(max(v) - min(v) == pytest.approx(5_000) for v in comm_ends(r).values())
    assert a["otherData"]["clock"] == "host(s) node-b aligned to host node-a's clock: host node-b +5,000.0 µs ± 800.0 µs"
    assert r["otherData"]["clock"] == "each rank's trace clock, as traced (--raw-clocks)"
    names = {e["pid"]: e["args"]["name"] for e in a["traceEvents"] if e.get("name") == "process_name"}
    assert names[0] == "rank 0 (node-a)" and names[7] == "rank 7 (node-b)"
    check_complete(a, run, run.ranks, None, {r: 5_000 * US for r in range(4, 8)})
    check_complete(r, run, run.ranks, None)


def _thread_names(doc: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}


def test_bad_selection(tmp_path: Path) -> None:
    run = ingest_generated(DataParallel(ranks=2, steps=2), tmp_path / "gen")
    with pytest.raises(BadInputError, match=r"rank\(s\) \[5\] not in this run"):
        export_perfetto(run, tmp_path / "x.json", ranks=[5])
    with pytest.raises(BadInputError, match=r"step\(s\) \[9\] not in this run"):
        export_perfetto(run, tmp_path / "x.json", steps=[9])
    assert not (tmp_path / "x.json").exists()
    assert parse_selection("0,2,4-6", "ranks") == [0, 2, 4, 5, 6]
    for bad in ("a", "3-1", "1,,2", "-2"):
        with pytest.raises(UsageError):
            parse_selection(bad, "ranks")
    assert main(["export", str(run.path), "--perfetto", str(tmp_path / "x.json"), "--ranks", "0-x"]) == 2


def test_dumps_alone_refused(tmp_path: Path, traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Flight Recorder dumps hold no timeline: a usage error (exit 2) that says so, and no file."""
    out = tmp_path / "x.json"
    assert main(["export", str(traces / "flight-recorder" / "megatron-16rank-gpu_error_1st"),
                 "--perfetto", str(out)]) == 2
    assert "Flight Recorder dumps hold no timeline" in capsys.readouterr().err and not out.exists()
