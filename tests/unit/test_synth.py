"""Generated runs (``ddprof.synth``): ddprof's report on them equals the truth written beside them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ddprof.cli import main
from ddprof.errors import UsageError
from ddprof.inputs.analyze import analyze
from ddprof.synth import US, DataParallel, NoisyPipeline, Pipeline, Spec, generate, ingest_generated
from ddprof.synth.truth import events_truth, union_ns

SHAPES = {
    "dp-slow-rank": Spec(ranks=8, steps=3, kernels=60, slow={5: 1.5}),
    "tp2-dp4-clock-offsets": Spec(ranks=8, tp=2, steps=2, kernels=48, gpus_per_host=4,
                                  clock_offset_us={1: 5000.0}, seed=3),
    "pp4-1f1b-dp2": Spec(ranks=8, pp=4, micro_batches=4, steps=2, kernels=48),
    "pp4-gpipe": Spec(ranks=4, pp=4, micro_batches=6, schedule="gpipe", steps=2, kernels=48, noise=0.0),
}
TOL = 1e-6


@pytest.fixture(scope="module", params=list(SHAPES))
def synth_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Spec, dict[str, Any], dict[str, Any]]:
    spec = SHAPES[request.param]
    out = tmp_path_factory.mktemp(request.param)
    truth = generate(spec, out)
    return spec, truth, analyze(out / "traces", cache=out / "run")


def _close(got: Any, want: Any) -> bool:
    if want is None or got is None:
        return got is want
    return abs(got - want) <= TOL * max(1.0, abs(want))


def test_overlap_and_breakdown_equal_truth(synth_run: tuple[Spec, dict[str, Any], dict[str, Any]]) -> None:
    spec, truth, report = synth_run
    assert report["status"] == "ok"
    assert report["clocks"]["applied"] == bool(spec.clock_offset_us)
    for h in report["clocks"]["hosts"]:  # the offsets the generator put in, within the stated bound
        true_ns = spec.clock_offset_us.get(int(h["host"].removeprefix("node")), 0.0) * 1000
        assert abs(h["offset_ns"] - true_ns) <= h["bound_ns"], h
    assert [r["rank"] for r in report["overlap"]] == list(range(spec.ranks))
    for got, want in zip(report["overlap"], truth["per_rank"]):
        for k in ("overlap_pct", "comm_us", "overlapped_us", "exposed_comm_us"):
            assert _close(got[k], want[k]), (got["rank"], k, got[k], want[k])
    for got, want in zip(report["breakdown"], truth["per_rank"]):
        for k in ("idle_us", "compute_us", "non_compute_us", "span_us"):
            assert _close(got[k], want[k]), (got["rank"], k, got[k], want[k])


def test_steps_and_bubbles_equal_truth(synth_run: tuple[Spec, dict[str, Any], dict[str, Any]]) -> None:
    spec, truth, report = synth_run
    assert report["run"]["steps"] == list(range(spec.steps))
    bubbles = report.table("bubbles").to_dicts()  # rows per rank and step: a detail table
    assert len(bubbles) == len(truth["per_step"]) == spec.ranks * spec.steps
    for got, want in zip(bubbles, truth["per_step"]):
        assert (got["rank"], got["step"]) == (want["rank"], want["step"])
        for k in ("window_us", "compute_us", "bubble_us", "bubble_pct"):
            assert _close(got[k], want[k]), (got["rank"], got["step"], k)
    by_step = {(r["rank"], r["step"]): r for r in report.table("overlap_by_step").to_dicts()}
    for want in truth["per_step"]:
        got = by_step[(want["rank"], want["step"])]
        assert _close(got["overlap_pct"], want["overlap_pct"]) and _close(got["exposed_comm_us"], want["exposed_comm_us"])
    step_us = {r["rank"]: r["step_us"] for r in report["stragglers"]["per_rank"]}
    assert all(_close(step_us[r["rank"]], r["step_us"]) for r in truth["per_rank"])


def test_collectives_equal_truth(synth_run: tuple[Spec, dict[str, Any], dict[str, Any]]) -> None:
    """All-reduce instances: ranks, skew, transfer time and bandwidth; every send/recv kernel is counted."""
    spec, truth, report = synth_run
    want = {(c["pg"], c["index"]): c for c in truth["collectives"] if c["src"] is None}
    got = {(c["pg"], c["index"]): c for c in report.table("collectives").to_dicts() if c["op"] == "all_reduce"}
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        assert g["ranks_seen"] == w["ranks"] and g["bytes"] == w["bytes"]
        assert _close(g["duration_us"], w["duration_us"]) and _close(g["arrival_skew_us"], w["arrival_skew_us"])
        assert _close(g["algbw_gbps"], w["bytes"] / (w["duration_us"] * 1000))
    p2p_truth = sum(1 for c in truth["collectives"] if c["src"] is not None)
    p2p_kernels = sum(len(c["ranks_seen"]) for c in report.table("collectives").to_dicts() if c["op"] == "sendrecv")
    assert p2p_kernels == 2 * p2p_truth  # a sender and a receiver per transfer, however they are paired


def test_slow_rank_is_the_straggler(synth_run: tuple[Spec, dict[str, Any], dict[str, Any]]) -> None:
    """Also on pipelines: a stage waiting for its neighbour by design is no straggler."""
    spec, truth, report = synth_run
    assert report["stragglers"]["ranks"] == truth["stragglers"]["slow_ranks"]
    times = {r["rank"]: r["times_last"] for r in report["stragglers"]["per_rank"] if r["times_last"]}
    assert {int(k): v for k, v in truth["stragglers"]["times_last"].items()} == times


def test_truth_file_beside_the_traces(tmp_path: Path) -> None:
    spec = Spec(ranks=4, steps=2, kernels=30, pp=2, micro_batches=3, clock_offset_us={0: 12.5})
    truth = generate(spec, tmp_path)
    on_disk = json.loads((tmp_path / "truth.json").read_text())
    assert on_disk["per_rank"] == truth["per_rank"] and on_disk["clock_offsets_us"] == {"0": 12.5}
    assert sorted(p.name for p in (tmp_path / "traces").glob("*.trace.json")) == [f"rank{r}.pt.trace.json" for r in range(4)]
    assert on_disk["pipeline"]["theoretical_bubble_pct"] == pytest.approx(100 * 1 / 4)
    trace = json.loads((tmp_path / "traces" / "rank1.pt.trace.json").read_text())
    assert trace["distributedInfo"]["rank"] == 1 and len(trace["traceEvents"]) == truth["events"]["1"]
    groups = {g["pg_desc"] for g in trace["distributedInfo"]["pg_config"]}
    assert groups == {"default_pg", "dp", "pp"}


def test_generation_is_seeded(tmp_path: Path) -> None:
    a = generate(Spec(ranks=2, steps=2, kernels=30, seed=7), tmp_path / "a")
    b = generate(Spec(ranks=2, steps=2, kernels=30, seed=7), tmp_path / "b")
    c = generate(Spec(ranks=2, steps=2, kernels=30, seed=8), tmp_path / "c")
    assert (tmp_path / "a/traces/rank1.pt.trace.json").read_bytes() == (tmp_path / "b/traces/rank1.pt.trace.json").read_bytes()
    assert a["per_rank"] == b["per_rank"] != c["per_rank"]


def test_union_by_hand() -> None:
    import numpy as np

    assert union_ns(np.array([0, 2, 9]), np.array([4, 5, 10])) == 6
    assert union_ns(np.array([5, 0]), np.array([6, 10])) == 10


def test_bad_spec_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="multiple of tp"):
        Spec(ranks=6, tp=4)
    with pytest.raises(UsageError, match="schedule"):
        Spec(ranks=4, pp=2, schedule="zb")


def test_cli_writes_a_run_analyze_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "synth"
    assert main(["synth", f"{out}/", "--ranks", "4", "--steps", "2", "--kernels", "30", "--slow", "2=1.6",
                 "--clock-offset", "0=3"]) == 0
    truth = json.loads((out / "truth.json").read_text())
    said = capsys.readouterr().out  # the paths it names, as a user would copy them (no "synth//traces")
    assert said == f"4 ranks, {truth['total_events']:,} events: {out / 'traces'}; truth: {out / 'truth.json'}\n"
    assert truth["stragglers"]["slow_ranks"] == [2]
    capsys.readouterr()
    assert main(["analyze", str(out / "traces"), "--cache", str(tmp_path / "run"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stragglers"]["ranks"] == [2]
    assert [r["rank"] for r in report["overlap"]] == [0, 1, 2, 3]
    assert main(["synth", str(out), "--slow", "two"]) == 2


def _strip(folder: Path, out: Path, keys: tuple[str, ...]) -> Path:
    """The traces of ``folder`` with these args removed from every event and no process-group ranks in
    ``distributedInfo``: what PyTorch writes when shapes are not recorded (no ``Concrete Inputs``)."""
    out.mkdir()
    for path in folder.glob("*.pt.trace.json*"):
        opener: Any = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:
            trace = json.load(fh)
        for event in trace["traceEvents"]:
            for key in keys:
                event.get("args", {}).pop(key, None)
        trace.get("distributedInfo", {}).pop("pg_config", None)
        (out / path.name.removesuffix(".gz")).write_text(json.dumps(trace))
    return out


def test_send_recv_peers_from_src_and_dst_rank_without_recorded_shapes(tmp_path: Path) -> None:
    """A pipeline of 4 stages across 8 ranks (its groups are not the world group): with ``Concrete
    Inputs`` and the groups' ranks gone, each send/recv still finds its global peer in ``Src Rank`` /
    ``Dst Rank`` (PyTorch 2.5+), the same as from the full trace; without those either, it has none."""
    import ddprof

    generate(Spec(ranks=8, pp=4, micro_batches=2, steps=1, kernels=24), tmp_path, with_truth=False)

    def peers(folder: Path, name: str) -> list[tuple[Any, ...]]:
        run = ddprof.ingest([folder], tmp_path / name)
        return (run.events().filter(pl.col("coll_op").is_in(["send", "recv"]) & (pl.col("cat") == "kernel"))
                .select("rank", "ts_ns", "coll_op", "peer").collect().sort("rank", "ts_ns").rows())

    full = peers(tmp_path / "traces", "full")
    assert full and all(peer is not None and peer % 2 == rank % 2 and peer != rank for rank, _, _, peer in full)
    unshaped = _strip(tmp_path / "traces", tmp_path / "unshaped", ("Concrete Inputs",))
    assert peers(unshaped, "unshaped") == full
    bare = _strip(tmp_path / "traces", tmp_path / "bare", ("Concrete Inputs", "Src Rank", "Dst Rank"))
    assert {peer for *_, peer in peers(bare, "bare")} == {None}


SCENARIOS = {
    "dp-slow-rank": DataParallel(),
    "dp-even": DataParallel(slow_rank=None),
    "dp-jitter": DataParallel(ranks=6, jitter=40_000, seed=5),
    "dp-delays": DataParallel(ranks=3, steps=2, delays=((0, 300 * US, 100 * US), (200 * US, 0, 0))),
    "dp-rccl-8": DataParallel(ranks=8, naming="rccl"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_truth_by_hand_equals_the_interval_arithmetic(name: str) -> None:
    """A scenario's answers, derived by hand from its parameters, are what the interval arithmetic that
    gives a simulated run's truth finds on its events: overlap, breakdown, bubbles, per-step overlap."""
    sc = SCENARIOS[name]
    want, got = sc.truth(), events_truth(sc.events())
    assert [r["rank"] for r in got["per_rank"]] == list(range(sc.ranks)) and len(got["per_step"]) == sc.ranks * sc.steps
    for row in got["per_rank"]:
        r = row["rank"]
        for k in ("overlap_pct", "comm_us", "exposed_comm_us"):
            assert _close(row[k], want["overlap"][r][k]), (r, k)
        for k in ("span_us", "idle_us", "compute_us", "non_compute_us"):
            assert _close(row[k], want["breakdown"][r][k]), (r, k)
    for row in got["per_step"]:
        r, s = row["rank"], row["step"]
        assert _close(row["bubble_us"], want["bubble"][r][s]) and _close(row["overlap_pct"], want["step_overlap"][r][s])


@pytest.mark.parametrize("sc", [Pipeline(), Pipeline(order=(0, 1), micro=3, steps=1)], ids=["4-stages", "2-stages"])
def test_pipeline_bubble_by_hand_equals_the_interval_arithmetic(sc: Pipeline) -> None:
    """Per device step, a GPipe stage idles the theory's (P−1)/(M+P−1) of L in every step but the last (plus
    the 1 ms between steps); the last step ends with the stage's last kernel."""
    got = events_truth(sc.events())["per_step"]
    assert len(got) == len(sc.order) * sc.steps
    want = sc.truth()["device_bubble_pct"]
    for rank in sc.order:
        mine = [row["bubble_pct"] for row in got if row["rank"] == rank]
        assert _close(sum(mine) / len(mine), want[rank]), rank
    stage0 = [row for row in got if row["rank"] == sc.order[0] and row["step"] == sc.steps - 1]
    assert _close(stage0[0]["bubble_pct"], sc.truth()["bubble_pct"])  # stage 0's last step: the theory's bubble


def test_noisy_pipeline_through_ingest_keeps_its_send_recv_peers(tmp_path: Path) -> None:
    """to_kineto names a send/recv's ranks (Src Rank / Dst Rank): the ingested run has the scenario's
    kernels with their peers, as the event table has them."""
    sc = NoisyPipeline(steps=2)
    run = ingest_generated(sc, tmp_path)
    cols = ["rank", "ts_ns", "dur_ns", "kind", "stream", "coll_op", "peer", "step"]
    kernels = pl.col("kind").is_in(["compute", "comm"]) & pl.col("stream").is_not_null()
    got = run.events().filter(kernels).select(cols).collect().sort(cols)
    want = sc.events().filter(kernels).select(cols).cast(got.schema).sort(cols)
    assert got.filter(pl.col("coll_op") == "send")["peer"].null_count() == 0
    assert got.equals(want)


def test_compressed_traces_hold_the_same_events(tmp_path: Path) -> None:
    spec = Spec(ranks=2, steps=2, kernels=30)
    plain = generate(spec, tmp_path / "plain", with_truth=False)
    packed = generate(spec, tmp_path / "packed", with_truth=False, compress=True)
    assert plain == packed
    for r in range(2):
        with gzip.open(tmp_path / f"packed/traces/rank{r}.pt.trace.json.gz", "rt") as fh:
            trace = json.load(fh)
        assert trace == json.loads((tmp_path / f"plain/traces/rank{r}.pt.trace.json").read_text()) | {
            "traceName": f"rank{r}.pt.trace.json.gz"}
