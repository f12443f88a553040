"""Clocks across hosts: generated runs whose hosts' clocks are shifted by known offsets (and one that
drifts), ingested with collector sidecar files naming each rank's host; and the real traces, which stay
as they are."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from ddprof.analyses.clocks import MIN_INSTANCES, align, estimate, run_hosts
from ddprof.analyses.report import build_report, read_events

import ddprof
from ddprof.store.rundir import Run
from ddprof.synth import US, CollectiveBench, DataParallel, write_meta
from tests.support.clock_runs import HOSTS8, constant, hosts_run
from tests.support.paths import SAMPLES


def instances(report: dict) -> list[dict]:
    """Every collective instance of a report: its ``collectives`` detail table."""
    return report.table("collectives").to_dicts()


def test_constant_offset_recovered_and_aligned(tmp_path: Path) -> None:
    """Host node-b's clock runs 5 ms ahead: the offset is recovered within its bound, applied, said in the
    warnings, and the cross-rank sections come out as the scenario's truth (as with one clock)."""
    sc = DataParallel(ranks=8, steps=12, slow_rank=5, delay=300 * US, jitter=40 * US)
    run = hosts_run(sc, tmp_path / "shifted", HOSTS8, constant({"node-b": 5_000 * US}))
    report = build_report(run)
    clocks = report["clocks"]
    assert clocks["applied"] and clocks["reference"] == "node-a"
    [b] = clocks["hosts"]
    assert b["host"] == "node-b" and b["ranks"] == [4, 5, 6, 7] and b["instances"] == 12 and b["applied"]
    assert abs(b["offset_ns"] - 5_000 * US) <= b["bound_ns"]
    assert b["offset_ns"] == 5_000 * US  # every rank ends together here: exact
    assert b["bound_ns"] == sc.T  # the transfer time
    assert b["drift_ppm"] == 0.0
    assert any("node-b" in w and "aligned" in w for w in report["run"]["warnings"])

    truth = sc.truth()
    assert report["stragglers"]["ranks"] == [5]
    for row in report["stragglers"]["per_rank"]:
        assert row["times_last"] == truth["stragglers"]["times_last"][row["rank"]]
        assert row["wait_caused_us"] == pytest.approx(truth["stragglers"]["wait_caused_us"][row["rank"]])
    for got, want in zip(instances(report), truth["collectives"]):
        assert got["arrival_skew_us"] == pytest.approx(want["arrival_skew_us"])
        assert got["last_rank"] == want["last_rank"]

    # the same traces without hosts: one clock assumed; the collectives' end-alignment fallback is all left
    blind = build_report(hosts_run(sc, tmp_path / "blind", HOSTS8, constant({"node-b": 5_000 * US}),
                                   sidecars=False))
    plain = build_report(hosts_run(sc, tmp_path / "unshifted", HOSTS8, None))
    assert not plain["clocks"]["applied"]
    assert plain["stragglers"] == report["stragglers"] and instances(plain) == instances(report)
    assert blind["clocks"]["reason"].startswith("the run names no host")
    assert not any(c["clock_aligned"] for c in instances(blind))
    assert all(c["clock_aligned"] for c in instances(report))
    assert any("clocks disagree" in w for w in blind["run"]["warnings"])
    assert not any("clocks disagree" in w for w in report["run"]["warnings"])


def test_three_hosts_noisy_ends_within_bound(tmp_path: Path) -> None:
    """Three hosts, offsets +5 ms and −7.5 ms, kernels ending up to 30 µs apart: each recovered within its
    stated bound, and the aligned timestamps of every rank agree with the unshifted run's within it."""
    sc = DataParallel(ranks=6, steps=16, slow_rank=1, jitter=50 * US)
    hosts = {r: ("h0", "h1", "h2")[r // 2] for r in range(6)}
    truth = {"h1": 5_000 * US, "h2": -7_500 * US}
    run = hosts_run(sc, tmp_path / "shifted", hosts, constant(truth), end_noise_us=30)
    est = estimate(read_events(run), run_hosts(run.manifest))
    assert est.reference == "h0" and est.applied
    for h in est.hosts:
        assert h.applied and h.instances == 16
        assert abs(h.offset_ns - truth[h.host]) <= h.bound_ns
        assert abs(h.offset_ns - truth[h.host]) <= 30 * US  # the noise, well inside the bound
    aligned = align(run.events(), est).events.select("rank", "name", "ts_ns").sort("rank", "ts_ns", "name")
    ref_run = hosts_run(sc, tmp_path / "plain", hosts, None, end_noise_us=30)
    ref = ref_run.events().select("rank", "name", "ts_ns").sort("rank", "ts_ns", "name").collect()
    err = (aligned.collect()["ts_ns"] - ref["ts_ns"]).abs().max()
    assert isinstance(err, int) and err <= max(h.bound_ns for h in est.hosts)


def test_drifting_host(tmp_path: Path) -> None:
    """node-b starts 3 ms ahead and gains 100 ppm over a 24 s run (2.4 ms more): offset and drift are
    estimated, the offset at every collective recovered within the bound, and arrivals match the truth."""
    sc = DataParallel(ranks=8, steps=24, slow_rank=2, step_ns=1_000_000 * US)

    def drift(host: str, ts: int) -> int:
        return 3_000 * US + round(100e-6 * (ts - sc.base) / US) * US if host == "node-b" else 0

    run = hosts_run(sc, tmp_path / "drift", HOSTS8, drift)
    report = build_report(run)
    [b] = report["clocks"]["hosts"]
    assert b["applied"] and b["drift_ppm"] == pytest.approx(100, abs=1)
    for s in range(sc.steps):  # the offset at each all-reduce's end, on the reference clock
        t = sc.base + s * sc.step_ns + sc.a0 + sc.F + sc.KW + sc.Fb + sc.dmax(s) - sc.X + sc.T
        est = b["offset_ns"] + b["drift_ppm"] / 1e6 * (t - b["t0_ns"])
        assert abs(est - drift("node-b", t)) <= b["bound_ns"]
    assert "drift" in b["reason"]
    for got, want in zip(instances(report), sc.truth()["collectives"]):
        assert got["arrival_skew_us"] == pytest.approx(want["arrival_skew_us"], abs=b["bound_ns"] / US)
    per_rank = {row["rank"]: row for row in report["stragglers"]["per_rank"]}
    assert per_rank[2]["times_last"] == sc.steps


def test_weak_evidence_refused(tmp_path: Path) -> None:
    """Too few collectives, or an offset inside the bound: not aligned, the reason said, the report as if
    the hosts were one."""
    few = DataParallel(ranks=8, steps=MIN_INSTANCES - 1)
    run = hosts_run(few, tmp_path / "few", HOSTS8, constant({"node-b": 5_000 * US}))
    report = build_report(run)
    [b] = report["clocks"]["hosts"]
    assert not report["clocks"]["applied"] and not b["applied"]
    assert b["instances"] == MIN_INSTANCES - 1 and "at least" in b["reason"]
    assert not any(w.startswith("clocks:") for w in report["run"]["warnings"])

    small = DataParallel(ranks=8, steps=10)
    run = hosts_run(small, tmp_path / "small", HOSTS8, constant({"node-b": 200 * US}))  # < T = 800 µs
    report = build_report(run)
    [b] = report["clocks"]["hosts"]
    assert not b["applied"] and "within its bound" in b["reason"] and b["offset_ns"] == 200 * US
    one = build_report(hosts_run(small, tmp_path / "one", {r: "x" for r in range(8)},
                                 constant({"node-b": 200 * US})))
    again = build_report(run)
    for key in ("collectives", "stragglers", "overlap", "breakdown", "idle"):
        assert report[key] == again[key]
    assert report.table("collectives").equals(again.table("collectives"), null_equal=True)
    assert one["clocks"]["reason"].startswith("one host")


def test_narrow_transfers_bound_tightly(tmp_path: Path) -> None:
    """Collectives of 40 to 700 µs transfer, host node-b 60 µs ahead: the three 40 µs broadcasts bound
    the offset to 40 µs (the tenth of the instances allowed to be wrong leaves the others), so 60 µs is
    told apart from zero and applied."""
    sc = CollectiveBench(ranks=8, repeats=3)
    run = hosts_run(sc, tmp_path / "bench", HOSTS8, constant({"node-b": 60 * US}))
    [b] = build_report(run)["clocks"]["hosts"]
    assert b["instances"] == 15 and b["offset_ns"] == 60 * US and b["bound_ns"] == 40 * US and b["applied"]


def test_clock_step_refused(tmp_path: Path) -> None:
    """node-b's clock jumps from 5 to 9 ms ahead half-way: no offset or steady drift fits every
    collective within its transfer time, so nothing is applied and the reason says so."""
    sc = DataParallel(ranks=8, steps=12)
    half = sc.base + 6 * sc.step_ns
    run = hosts_run(sc, tmp_path / "step", HOSTS8,
                    lambda host, ts: (5_000 if ts < half else 9_000) * US if host == "node-b" else 0)
    report = build_report(run)
    [b] = report["clocks"]["hosts"]
    assert not b["applied"] and "disagree" in b["reason"] and "clock step" in b["reason"]
    assert report["clocks"]["reason"].startswith("no host's clock told apart")


def test_missing_host_refused(tmp_path: Path) -> None:
    sc = DataParallel(ranks=8, steps=10)
    hosts = {r: h for r, h in HOSTS8.items() if r != 6}
    run = hosts_run(sc, tmp_path / "partial", hosts, constant({"node-b": 5_000 * US}))
    clocks = build_report(run)["clocks"]
    assert not clocks["applied"] and clocks["reason"] == "no host known for rank(s) 6: clocks left as traced"


@pytest.mark.parametrize("sample", ["dlrm-8xV100-nccl", "gloo-ddp-4rank-slow-rank/raw"])
def test_real_traces_untouched(sample: str, tmp_path: Path) -> None:
    """A real run on one host (gloo, its sidecars say so) or with no hosts named (DLRM) is not aligned:
    the analyses get the very events they would without the clocks step."""
    from ddprof.inputs.sources import open_source

    with open_source([SAMPLES / sample], cache=tmp_path / "cache") as src:
        assert src.run is not None
        events = read_events(src.run)
        est = estimate(events, run_hosts(src.run.manifest))
        assert not est.applied and not est.hosts
        assert align(events, est) is events
        report = build_report(src.run)
    assert report["clocks"] == {**est.section()}
    assert not any(w.startswith("clocks:") for w in report["run"]["warnings"])


def _real_on_two_hosts(src: Path, dst: Path, second: set[int], shift_us: float) -> Run:
    """Copies of a real run's traces (the originals untouched) whose ranks in ``second`` sit on host
    ``b`` with their clock ``shift_us`` ahead (every ``ts`` moved), the others on host ``a``, each named by
    a collector meta file; ingested into ``dst/run``."""
    traces = dst / "traces"
    traces.mkdir(parents=True)
    for path in sorted(src.rglob("*.pt.trace.json.gz")):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        rank = trace["distributedInfo"]["rank"]
        if rank in second:
            for ev in trace["traceEvents"]:
                if "ts" in ev:
                    ev["ts"] += shift_us
        (traces / path.name).write_bytes(gzip.compress(json.dumps(trace).encode()))
        write_meta(traces, rank, "b" if rank in second else "a")
    return ddprof.ingest([traces], dst / "run")


def test_real_nccl_offset_recovered(tmp_path: Path) -> None:
    """The DLRM traces (8 V100s, NCCL: 5 all-to-alls and 3 all-reduces) with ranks 4-7 put on a second
    host whose clock runs 300 µs ahead: the offset is recovered within its bound (a few µs: the
    all-to-alls' transfers are 7-10 µs), applied, and the cross-rank sections come out as on the traces'
    own clocks. Unshifted, the offset found is inside its bound and nothing moves."""
    src = SAMPLES / "dlrm-8xV100-nccl"
    second = {4, 5, 6, 7}
    shifted = build_report(_real_on_two_hosts(src, tmp_path / "shifted", second, 300.0))
    plain = build_report(_real_on_two_hosts(src, tmp_path / "plain", second, 0.0))
    [b] = shifted["clocks"]["hosts"]
    assert b["applied"] and b["instances"] == 8 and b["bound_ns"] < 20 * US
    assert abs(b["offset_ns"] - 300 * US) <= b["bound_ns"]
    [p] = plain["clocks"]["hosts"]
    assert not p["applied"] and abs(p["offset_ns"]) <= p["bound_ns"] and "within its bound" in p["reason"]
    assert shifted["stragglers"]["ranks"] == plain["stragglers"]["ranks"] == [7]
    for got, want in zip(instances(shifted), instances(plain)):
        assert (got["op"], got["last_rank"]) == (want["op"], want["last_rank"])
        assert got["arrival_skew_us"] == pytest.approx(want["arrival_skew_us"], abs=b["bound_ns"] / US)


def test_real_gloo_too_few_collectives(tmp_path: Path) -> None:
    """The captured gloo run holds 4 all-reduces per rank: with two of its ranks moved to a second host,
    too few to estimate an offset; refused, and said."""
    run = _real_on_two_hosts(SAMPLES / "gloo-ddp-4rank-slow-rank" / "raw", tmp_path, {2, 3}, 3000.0)
    clocks = build_report(run)["clocks"]
    [b] = clocks["hosts"]
    assert not clocks["applied"] and b["instances"] == 4 and b["reason"].startswith("only 4 collective(s)")


def test_align_moves_spans_and_windows() -> None:
    """Aligning moves a corrected rank's events, its span and its profiling windows (as a run's manifest
    provides them, on the traced clock) by the host's offset, and leaves the reference host's alone."""
    from ddprof.analyses.clocks import ClockEstimate, HostClock
    from ddprof.analyses.frames.memo import prepare
    from ddprof.analyses.frames.sets import rank_spans
    from ddprof.analyses.frames.windows import trace_windows, windows_frame

    events = DataParallel(ranks=2, steps=2).events().lazy()
    p = prepare(events)
    p.provide(trace_windows, windows_frame({0: [[0, 10], [50, 60]], 1: [[5_000, 5_010], [5_050, 5_060]]}))
    b = HostClock("b", [1], 5_000, 0.0, 0, 100, 12, True, "")
    out = align(p, ClockEstimate("a", "", [b]))
    assert out.known(trace_windows)["t_start"].to_list() == [0, 50, 0, 50]
    before, after = rank_spans(p).sort("rank"), rank_spans(out).sort("rank")
    assert after["first_ns"].to_list() == [before["first_ns"][0], before["first_ns"][1] - 5_000]
    moved = out.events.filter(pl.col("rank") == 1).select("ts_ns").collect()["ts_ns"]
    assert (moved - events.filter(pl.col("rank") == 1).select("ts_ns").collect()["ts_ns"]).unique().to_list() == [-5_000]
