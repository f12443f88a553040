"""Every analysis recovers the answers a synthetic run was built with (ddprof.synth.scenarios)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from ddprof.analyses.breakdown import breakdown_by_step, temporal_breakdown
from ddprof.analyses.bubbles import bubble_verdicts, bubbles, pipeline_stages
from ddprof.analyses.collectives import bandwidth, collective_warnings, collectives
from ddprof.analyses.idle import idle_breakdown, idle_by_step
from ddprof.analyses.overlap import overlap, overlap_by_step
from ddprof.analyses.stragglers import stragglers

from ddprof.store.schema import validate
from ddprof.synth import CollectiveBench, DataParallel, Pipeline

SCENARIOS = {
    "gpu": DataParallel(),
    "gpu-jitter": DataParallel(ranks=6, steps=4, jitter=30_000, seed=3, naming="nccl_dev"),
    "gpu-rccl": DataParallel(ranks=3, naming="rccl", op="all_gather", nbytes=24 << 20),
    "gpu-multimem": DataParallel(ranks=2, slow_rank=1, naming="multimem"),
    "cpu-gloo": DataParallel(device="cpu", ranks=3, slow_rank=0, delay=700_000),
    # the device runs half a step, and two steps, behind its host
    "gpu-lag-half-step": DataParallel(ranks=3, steps=4, lag=5_000_000),
    "gpu-lag-two-steps": DataParallel(ranks=3, steps=5, jitter=30_000, seed=4, lag=20_000_000),
}
APPROX = dict(rel=1e-9, abs=1e-6)


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def case(request):
    sc = SCENARIOS[request.param]
    df = sc.events()
    validate(df)
    return sc, df.lazy(), sc.truth()


def by_rank(df: pl.DataFrame) -> dict[int, dict]:
    return {row["rank"]: row for row in df.iter_rows(named=True)}


def test_overlap(case):
    sc, lf, truth = case
    got = by_rank(overlap(lf))
    assert sorted(got) == list(range(sc.ranks))
    for r, want in truth["overlap"].items():
        for key, value in want.items():
            assert got[r][key] == pytest.approx(value, **APPROX), (r, key)
        assert got[r]["device"] == sc.device


def test_overlap_by_step(case):
    sc, lf, truth = case
    got = overlap_by_step(lf)
    assert got.height == sc.ranks * sc.steps
    for row in got.iter_rows(named=True):
        assert row["overlap_pct"] == pytest.approx(truth["step_overlap"][row["rank"]][row["step"]], **APPROX)


def test_temporal_breakdown(case):
    sc, lf, truth = case
    got = by_rank(temporal_breakdown(lf))
    for r, want in truth["breakdown"].items():
        for key, value in want.items():
            assert got[r][key] == pytest.approx(value, **APPROX), (r, key)
        pct = got[r]["idle_pct"] + got[r]["compute_pct"] + got[r]["non_compute_pct"]
        assert pct == pytest.approx(100.0)
        assert got[r]["compute_pct"] == pytest.approx(100 * want["compute_us"] / want["span_us"], **APPROX)


def test_breakdown_by_step_uses_the_step_window(case):
    sc, lf, truth = case
    got = breakdown_by_step(lf)
    assert got.height == sc.ranks * sc.steps
    assert set(got["basis"]) == {"device" if sc.device == "gpu" else "host"}
    for row in got.iter_rows(named=True):
        assert row["span_us"] == pytest.approx(truth["window"][row["rank"]][row["step"]])
        idle_and_noncompute = row["idle_us"] + row["non_compute_us"]
        assert idle_and_noncompute == pytest.approx(truth["bubble"][row["rank"]][row["step"]], **APPROX)


def test_idle_categories(case):
    sc, lf, truth = case
    got = idle_breakdown(lf)
    if sc.device == "cpu":
        assert got.height == 0  # idle categories are about GPU streams
        return
    for r, want in truth["idle"].items():
        mine = {(row["stream"], row["category"]): row["idle_us"]
                for row in got.filter(pl.col("rank") == r).iter_rows(named=True)}
        for key, value in want.items():
            assert mine[key] == pytest.approx(value, **APPROX), (r, key)
        assert sum(mine.values()) == pytest.approx(sum(want.values()), **APPROX)
    ratios = got.group_by("rank", "stream").agg(pl.col("ratio").sum())
    assert ratios["ratio"].to_list() == pytest.approx([1.0] * ratios.height)


def test_idle_by_step_adds_up_to_the_whole(case):
    sc, lf, _ = case
    whole = idle_breakdown(lf).select("rank", "stream", "category", "idle_us")
    steps = idle_by_step(lf)
    if sc.device == "cpu":
        assert steps.height == 0
        return
    assert set(steps["step"]) == set(range(sc.steps))
    summed = steps.group_by("rank", "stream", "category").agg(pl.col("idle_us").sum().alias("steps_us"))
    joined = whole.join(summed, on=["rank", "stream", "category"], how="left").with_columns(pl.col("steps_us").fill_null(0.0))
    assert joined["idle_us"].to_list() == pytest.approx(joined["steps_us"].to_list())
    # Step 0 holds no gap between steps: its host wait is nil on every stream.
    assert steps.filter((pl.col("step") == 0) & (pl.col("category") == "host_wait"))["idle_us"].sum() == 0


def test_idle_threshold_is_in_microseconds():
    sc = DataParallel(steps=2, KW=40_000)  # a 40 µs gap is above HTA's effective 30 µs threshold
    got = idle_breakdown(sc.events().lazy()).filter((pl.col("rank") == 0) & (pl.col("stream") == 7))
    cats = {row["category"]: row["idle_us"] for row in got.iter_rows(named=True)}
    assert cats["kernel_wait"] == 0
    wider = idle_breakdown(sc.events().lazy(), kernel_wait_us=50.0).filter(
        (pl.col("rank") == 0) & (pl.col("stream") == 7))
    assert {row["category"]: row["idle_us"] for row in wider.iter_rows(named=True)}["kernel_wait"] == 80.0


def test_bubbles(case):
    sc, lf, truth = case
    got = bubbles(lf)
    assert got.height == sc.ranks * sc.steps
    for row in got.iter_rows(named=True):
        assert row["bubble_us"] == pytest.approx(truth["bubble"][row["rank"]][row["step"]], **APPROX)
        window = truth["window"][row["rank"]][row["step"]]
        assert row["window_us"] == pytest.approx(window) and row["basis"] == ("device" if sc.device == "gpu" else "host")
        assert row["bubble_pct"] == pytest.approx(100 * row["bubble_us"] / window, **APPROX)


def test_collectives(case):
    sc, lf, truth = case
    got = collectives(lf, world_size=sc.ranks)
    assert got.height == sc.steps
    assert collective_warnings(got) == []
    for row, want in zip(got.iter_rows(named=True), truth["collectives"], strict=True):
        assert row["pg"] == "0" and row["ranks_seen"] == list(range(sc.ranks))
        for key, value in want.items():
            assert row[key] == pytest.approx(value, **APPROX) if isinstance(value, float) else row[key] == value, key
        assert max(row["arrival_us"]) == pytest.approx(want["arrival_skew_us"])


def test_stragglers(case):
    sc, lf, truth = case
    got = stragglers(lf)
    per = by_rank(pl.DataFrame(got["per_rank"]))
    want = truth["stragglers"]
    for r in range(sc.ranks):
        assert per[r]["times_last"] == want["times_last"][r]
        assert per[r]["wait_caused_us"] == pytest.approx(want["wait_caused_us"][r], **APPROX)
        assert per[r]["step_us"] == pytest.approx(want["step_us"])
    assert got["ranks"] == [sc.slow_rank]


@pytest.mark.parametrize("jitter", [0, 20_000])
def test_balanced_run_names_no_straggler(jitter):
    sc = DataParallel(ranks=8, steps=5, slow_rank=None, jitter=jitter, seed=11)
    got = stragglers(sc.events().lazy())
    assert got["ranks"] == []
    total = sum(row["wait_caused_us"] for row in got["per_rank"])
    assert total == pytest.approx(sum(sc.truth()["stragglers"]["wait_caused_us"].values()))
    if jitter == 0:
        assert total == 0 and all(row["times_last"] == 0 for row in got["per_rank"])


def test_bandwidth_per_op_and_size():
    bench = CollectiveBench()
    coll = collectives(bench.events().lazy(), world_size=bench.ranks)
    assert coll.height == len(bench.ops) * bench.repeats
    assert coll["arrival_skew_us"].max() == 0
    got = {(row["op"], row["bytes"]): row for row in bandwidth(coll).iter_rows(named=True)}
    assert set(got) == set(bench.truth())
    for key, want in bench.truth().items():
        assert got[key]["count"] == want["count"]
        assert got[key]["algbw_gbps"] == pytest.approx(want["algbw_gbps"], **APPROX)
        assert got[key]["busbw_gbps"] == pytest.approx(want["busbw_gbps"], **APPROX)


@pytest.mark.parametrize("order,micro", [((2, 0, 3, 1), 6), ((0, 1), 4), ((5, 3, 1, 0, 2, 4, 7, 6), 8)])
def test_pipeline_stages_and_bubbles(order, micro):
    pp = Pipeline(order=order, micro=micro)
    lf = pp.events().lazy()
    truth = pp.truth()
    got = pipeline_stages(lf)
    assert got.height == len(order)
    for row in got.iter_rows(named=True):
        assert row["stage"] == truth["stage_of"][row["rank"]]
        assert row["pipeline"] == order[0]
        assert row["stages"] == truth["stages"] and row["micro_batches"] == truth["micro_batches"]
        assert row["theoretical_pct"] == pytest.approx(truth["bubble_pct"])
        # measured per device step: the theory's bubble in all but the last step (module doc of Pipeline)
        assert row["bubble_pct"] == pytest.approx(truth["device_bubble_pct"][row["rank"]], **APPROX)
    p2p = collectives(lf)
    assert set(p2p["op"]) == {"sendrecv"} and p2p["ranks_seen"].list.len().min() == 2
    assert collective_warnings(p2p) == []


def test_pipeline_verdict_names_the_ranks_of_its_stages():
    """A pipeline's verdict says which ranks it covers, stage 0 first."""
    pp = Pipeline(order=(2, 0, 3, 1), micro=6)
    report = {"pipeline": pipeline_stages(pp.events().lazy()).to_dicts(), "bubbles": {"per_rank": [], "worst": []}}
    (line,) = bubble_verdicts(report)
    assert line.startswith("pipeline of 4 stages x 6 micro-batches (ranks 2→0→3→1): bubble ")
    assert line.endswith(f"% measured, {pp.truth()['bubble_pct']:.1f} % in theory")


def _pipeline_rows(first: int, stride: int, stages: int, bubble: float) -> list[dict]:
    return [{"rank": first + i * stride, "pipeline": first, "stage": i, "stages": stages, "micro_batches": 8.0,
             "bubble_pct": bubble, "theoretical_pct": 100 * (stages - 1) / (8 + stages - 1)} for i in range(stages)]


def test_pipelines_with_the_same_figures_are_one_verdict_naming_their_ranks():
    """64 ranks, 16 pipelines of 4 stages (ranks r, r+16, r+32, r+48): not 16 lines that read the same, but
    one per distinct figure, each naming the ranks of every stage of its pipelines."""
    rows = [row for r in range(16) for row in _pipeline_rows(r, 16, 4, 37.2 if r in (1, 7) else 37.14)]
    lines = bubble_verdicts({"pipeline": rows, "bubbles": {"per_rank": [], "worst": []}})
    assert lines == [
        "14 pipelines of 4 stages x 8 micro-batches (stage 0 on ranks 0, 2-6, 8-15; stage 1 on 16, 18-22, "
        "24-31; stage 2 on 32, 34-38, 40-47; stage 3 on 48, 50-54, 56-63): bubble 37.1 % measured, "
        "27.3 % in theory",
        "2 pipelines of 4 stages x 8 micro-batches (ranks 1→17→33→49, 7→23→39→55): bubble 37.2 % measured, "
        "27.3 % in theory",
    ]
    # many stages: the first two, the last, and every rank the pipelines cover
    rows = [row for r in range(4) for row in _pipeline_rows(r, 4, 8, 50.0)]
    (line,) = bubble_verdicts({"pipeline": rows, "bubbles": {"per_rank": [], "worst": []}})
    assert line.startswith("4 pipelines of 8 stages x 8 micro-batches (stage 0 on ranks 0-3; stage 1 on 4-7; …; "
                           "stage 7 on 28-31; in all ranks 0-31): bubble 50.0 % measured")


def test_no_pipeline_in_data_parallel_run():
    assert pipeline_stages(DataParallel().events().lazy()).height == 0


def test_missing_rank_and_different_order_warn_without_crashing():
    df = DataParallel(ranks=3, steps=4).events()
    comm = (pl.col("kind") == "comm") & (pl.col("rank") == 1)
    dropped = df.filter(~(comm & (pl.col("step") == 3)))
    coll = collectives(dropped.lazy(), world_size=3)
    assert coll.filter(pl.col("index") == 3)["missing_ranks"].to_list() == [[1]]
    assert any("not seen on every rank" in w for w in collective_warnings(coll))
    swapped = df.with_columns(
        pl.when(comm & (pl.col("step") == 0)).then(pl.lit("broadcast")).otherwise(pl.col("coll_op")).alias("coll_op"))
    warnings = collective_warnings(collectives(swapped.lazy(), world_size=3))
    assert any("disagree on the op" in w for w in warnings)


def test_collective_warnings_one_sentence_per_group_and_problem_naming_the_first_instance():
    coll = pl.DataFrame({
        "pg": ["b", "b", "b", "a", "a"],
        "index": [0, 1, 2, 0, 1],
        "op": ["all_reduce", "broadcast", "all_reduce", "sendrecv", "sendrecv"],
        "ops_seen": [["all_reduce"], ["all_reduce", "broadcast"], ["all_gather", "all_reduce"],
                     ["sendrecv"], ["sendrecv"]],
        "src": [None, None, None, None, 1],
        "missing_ranks": [[], [2], [0, 3], [], []],
        "clock_aligned": [True, False, False, True, True],
    }, schema_overrides={"src": pl.Int32})
    assert collective_warnings(coll) == [
        "process group b: 2 collective(s) not seen on every rank (first: #1 broadcast, missing rank(s) [2])",
        "process group b: ranks disagree on the op of 2 collective(s) (first: #1: all_reduce, broadcast); they "
        "may issue this group's collectives in different orders, so its matching is unreliable",
        "process group b: rank clocks disagree on 2 collective(s); arrivals there are aligned on the "
        "collective's end",
        "process group a: 1 send/recv transfer(s) without a known peer are matched by their order in the group "
        "only; their skew and bandwidth are unreliable",
    ]
    assert collective_warnings(coll.head(0)) == []


def test_instance_op_is_the_most_frequent_and_the_first_by_name_on_a_tie():
    df = DataParallel(ranks=4, steps=6).events()
    comm = pl.col("kind") == "comm"
    relabel = {(1, 0): "broadcast", (1, 1): "all_gather", (2, 0): "broadcast", (2, 1): "broadcast",
               (3, 2): "all_gather", (3, 3): "barrier", (4, 0): "all_gather", (4, 1): "all_gather",
               (4, 2): "broadcast", (4, 3): "broadcast"}  # (step, rank) -> op on that rank's collective
    ops = pl.DataFrame([(s, r, op) for (s, r), op in relabel.items()], schema=["step", "rank", "_op"], orient="row")
    df = (df.join(ops.with_columns(pl.col("step", "rank").cast(pl.Int32)), on=["step", "rank"], how="left")
          .with_columns(pl.when(comm & pl.col("_op").is_not_null()).then("_op").otherwise("coll_op").alias("coll_op"))
          .drop("_op"))
    coll = collectives(df.lazy(), world_size=4).sort("index")
    expect = {1: ("all_reduce", ["all_gather", "all_reduce", "broadcast"]),  # 2 all_reduce, 1 each of the rest
              2: ("all_reduce", ["all_reduce", "broadcast"]),  # 2 and 2: the first by name
              3: ("all_reduce", ["all_gather", "all_reduce", "barrier"]),
              4: ("all_gather", ["all_gather", "broadcast"])}  # 2 and 2
    for i, (op, seen) in expect.items():
        row = coll.filter(pl.col("index") == i).row(0, named=True)
        assert (row["op"], row["ops_seen"]) == (op, seen), i
    agreed = coll.filter(~pl.col("index").is_in(list(expect)))
    assert agreed["ops_seen"].to_list() == [["all_reduce"]] * agreed.height


def test_analyses_do_not_mutate_and_return_json_ready_rows():
    df = DataParallel().events()
    before = df.clone()
    lf = df.lazy()
    for fn in (overlap, overlap_by_step, temporal_breakdown, breakdown_by_step, idle_breakdown, bubbles,
               pipeline_stages):
        out = fn(lf)
        assert isinstance(out, pl.DataFrame)
        json.dumps(out.to_dicts())
    assert df.equals(before)


def test_empty_store_gives_empty_sections():
    from ddprof.store.schema import empty_events

    lf = empty_events().lazy()
    assert overlap(lf).height == 0 and temporal_breakdown(lf).height == 0 and idle_breakdown(lf).height == 0
    assert bubbles(lf).height == 0 and collectives(lf).height == 0 and pipeline_stages(lf).height == 0
    got = stragglers(lf)
    assert got["ranks"] == [] and got["per_rank"] == []


def test_cpu_compute_excludes_time_inside_blocking_gloo_ops():
    """gloo send/recv run on the caller's thread: the op around them waits, it does not compute."""
    from ddprof.store.schema import conform

    us = 1000
    rows = [
        # main thread: a 100 µs op that blocks 30 µs in a recv, and a recv's own c10d op
        dict(tid=1, kind="cpu_op", name="aten::outer_step", ts_ns=0, dur_ns=100 * us),
        dict(tid=1, kind="comm", name="gloo:recv", ts_ns=40 * us, dur_ns=30 * us, coll_op="recv"),
        dict(tid=1, kind="cpu_op", name="c10d::recv_", ts_ns=39 * us, dur_ns=32 * us, coll_op="recv"),
        # a gloo worker thread: an all-reduce with a copy inside it
        dict(tid=2, kind="comm", name="gloo:all_reduce", ts_ns=80 * us, dur_ns=50 * us, coll_op="all_reduce"),
        dict(tid=2, kind="cpu_op", name="aten::copy_", ts_ns=90 * us, dur_ns=10 * us),
    ]
    lf = conform(pl.DataFrame([{**r, "rank": 0} for r in rows])).lazy()
    got = overlap(lf).row(0, named=True)
    # compute = [0,40) + [70,100) = 70 µs; comm = [40,70) + [80,130) = 80 µs; overlap = [80,100) = 20 µs
    assert got["device"] == "cpu" and got["comm_us"] == 80.0 and got["overlapped_us"] == 20.0
    assert temporal_breakdown(lf).row(0, named=True)["compute_us"] == 70.0


def test_step_number_that_does_not_fit_is_no_step():
    """``ProfilerStep#99999999999`` overflows Int32: the shared parser reads it as no step, no crash."""
    from ddprof.analyses.frames.sets import steps

    df = DataParallel(ranks=2, steps=2).events()
    huge = df.filter(pl.col("name") == "ProfilerStep#1").with_columns(
        pl.lit("ProfilerStep#99999999999").alias("name"), pl.lit(None, dtype=pl.Int32).alias("step"))
    lf = pl.concat([df, huge]).lazy()
    got = steps(lf).sort("rank", "step")
    assert got.select("rank", "step").rows() == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert bubbles(lf).height == 2 * 2


def _with_overlapping_copy(df: pl.DataFrame, shift_ns: int) -> pl.DataFrame:
    """Each comm kernel also in flight on a second group and stream, ``shift_ns`` later (DDP buckets or
    several process groups waiting at the same time)."""
    copy = df.filter(pl.col("kind") == "comm").with_columns(
        pl.lit("1").alias("pg"), pl.lit(21, dtype=pl.Int64).alias("stream"), pl.col("ts_ns") + shift_ns)
    return pl.concat([df, copy.select(df.columns)]).sort("rank", "ts_ns")


def test_overlapping_waits_count_once_per_waiting_rank():
    """Rank 2 is last at two collectives in flight together: rank r waits [a_r, L) and [a_r + 200 µs,
    L + 200 µs), a union of delay + 200 µs per step, not 2 · delay."""
    sc = DataParallel(ranks=4, steps=3, slow_rank=2, delay=400_000)
    got = stragglers(_with_overlapping_copy(sc.events(), 200_000).lazy())
    per = by_rank(pl.DataFrame(got["per_rank"]))
    assert got["ranks"] == [2]
    assert per[2]["times_last"] == 2 * sc.steps and per[2]["waiting_ranks"] == 3
    assert per[2]["wait_caused_us"] == pytest.approx(3 * sc.steps * (400 + 200))
    assert all(per[r]["wait_caused_us"] == 0 for r in (0, 1, 3))


def test_wait_per_waiting_rank_never_exceeds_the_traced_time():
    """Fully overlapping copies (shift 0): the union equals one collective's wait."""
    sc = DataParallel(ranks=3, steps=2, slow_rank=0, delay=900_000)
    got = by_rank(pl.DataFrame(stragglers(_with_overlapping_copy(sc.events(), 0).lazy())["per_rank"]))
    assert got[0]["wait_caused_us"] == pytest.approx(sc.truth()["stragglers"]["wait_caused_us"][0])
    assert got[0]["wait_caused_us"] / got[0]["waiting_ranks"] < sc.steps * sc.step_ns / 1000


MS = 1_000_000


@pytest.mark.parametrize("delays,named", [
    # two ranks taking turns: 5.5 ms vs 6.5 ms caused -> nobody stands out
    (((3 * MS, 0), (0, 3_500_000), (2_500_000, 0), (0, 3 * MS)), []),
    # rank 1 last at 3 of 4 steps and rank 0 at the other: 10x the wait, but 3 of 4 is what two ranks
    # taking turns give one time in three (p 0.47 after Bonferroni): not named
    (((0, 3 * MS), (900_000, 0), (0, 3 * MS), (0, 3 * MS)), []),
    # rank 1 last at each of 6 steps, 3 ms ± 0.1 ms late -> beyond chance (p < 0.001) and 30 % of a step
    (((0, 3 * MS), (0, 3_100_000), (0, 2_900_000), (0, 3 * MS), (0, 3_050_000), (0, 2_950_000)), [1]),
])
def test_two_ranks_need_a_clear_margin(delays, named):
    """With 2 ranks, more wait than the other is not enough: the last arrival must not merely rotate."""
    sc = DataParallel(ranks=2, steps=len(delays), delays=delays)
    got = stragglers(sc.events().lazy())
    assert got["ranks"] == named
    caused = {p["rank"]: p["wait_caused_us"] for p in got["per_rank"]}
    assert caused == pytest.approx(sc.truth()["stragglers"]["wait_caused_us"])


PER_STEP = {"bubbles": (bubbles, ["window_us", "compute_us", "bubble_us", "bubble_pct"]),
            "breakdown_by_step": (breakdown_by_step, ["span_us", "idle_us", "compute_us", "non_compute_us"]),
            "overlap_by_step": (overlap_by_step, ["overlap_pct", "comm_us", "overlapped_us", "exposed_comm_us"])}


@pytest.mark.parametrize("lag_steps", [0.5, 1.0, 1.5, 2.0])
def test_per_step_numbers_follow_the_device_when_it_lags_the_host(lag_steps):
    """The host launches step s+k's kernels while the device still runs step s's: the device steps move
    with the device, so every per-step number (and the idle time per step and stream) is the run's without
    the lag, while host step windows (ProfilerStep#s and the kernels it launched) would have overlapped."""
    sc = DataParallel(ranks=3, steps=5, jitter=20_000, seed=7)
    lagging = DataParallel(ranks=3, steps=5, jitter=20_000, seed=7, lag=int(lag_steps * sc.step_ns))
    lf, lagged = sc.events().lazy(), lagging.events().lazy()
    for name, (fn, measures) in PER_STEP.items():
        want, got = fn(lf), fn(lagged)
        assert got.select("rank", "step").equals(want.select("rank", "step")), name
        for m in measures:
            assert got[m].to_list() == pytest.approx(want[m].to_list(), **APPROX), (name, m)
    total = ["rank", "step", "stream"]
    idle = [idle_by_step(f).group_by(total).agg(pl.col("idle_us").sum()).sort(total) for f in (lf, lagged)]
    assert idle[1].select(total).equals(idle[0].select(total))
    assert idle[1]["idle_us"].to_list() == pytest.approx(idle[0]["idle_us"].to_list(), **APPROX)
    # the device steps tile the device's span: they never overlap and add up to the whole trace's figures
    steps = bubbles(lagged).join(breakdown_by_step(lagged), on=["rank", "step"])
    whole = by_rank(temporal_breakdown(lagged))
    for (r,), part in steps.group_by("rank"):
        assert part["window_us"].sum() == pytest.approx(whole[r]["span_us"], **APPROX)
        assert part["idle_us"].sum() == pytest.approx(whole[r]["idle_us"], **APPROX)
        assert part["compute_us"].sum() == pytest.approx(whole[r]["compute_us"], **APPROX)
    exposed = overlap_by_step(lagged).group_by("rank").agg(pl.col("exposed_comm_us").sum())
    assert by_rank(exposed)[0]["exposed_comm_us"] == pytest.approx(by_rank(overlap(lagged))[0]["exposed_comm_us"])
    # the truth's whole-trace idle categories: launches come long before the previous kernel ends, no host wait
    if lag_steps >= 1:
        assert all(v == 0 for (_, c), v in lagging.truth()["idle"][0].items() if c == "host_wait")


def test_without_lag_every_device_step_but_the_last_is_its_host_step():
    """A healthy run (the device keeps up, ProfilerSteps back to back): every device step but the last lasts
    as long as its ProfilerStep and holds the same compute, so its numbers are the host step's; the last
    one, with no next step to begin, ends with its last kernel."""
    sc = DataParallel(ranks=4, steps=4, jitter=10_000, seed=2)
    lf = sc.events().lazy()
    got = bubbles(lf)
    last = got.filter(pl.col("step") == sc.steps - 1)
    rest = got.filter(pl.col("step") < sc.steps - 1)
    assert rest["window_us"].to_list() == [sc.step_ns / 1000] * rest.height
    truth = sc.truth()
    for row in rest.iter_rows(named=True):  # the host step's bubble: its span less its compute
        assert row["bubble_us"] == pytest.approx(truth["bubble"][row["rank"]][row["step"]], **APPROX)
    assert all(w == (sc.last_end(sc.steps - 1) - sc.a0) / 1000 for w in last["window_us"])
    assert set(got["basis"]) == {"device"}


def test_cpu_ranks_keep_host_steps():
    sc = DataParallel(device="cpu", ranks=2, steps=3)
    got = bubbles(sc.events().lazy())
    assert set(got["basis"]) == {"host"} and got["window_us"].to_list() == [sc.step_ns / 1000] * got.height
    with pytest.raises(ValueError, match="no device to lag"):
        DataParallel(device="cpu", lag=1_000)


def test_a_kernel_crossing_a_device_step_edge_counts_its_part_in_each():
    """Device steps [100, 200) and [200, 260) µs (the last ends with its last kernel): a compute kernel
    launched in step 0 running [150, 230) µs counts 50 µs in step 0 and 30 µs in step 1."""
    from ddprof.store.schema import conform

    us = 1000
    rows = [dict(kind="annotation", name=f"ProfilerStep#{s}", ts_ns=s * 100 * us, dur_ns=100 * us, step=s, tid=1)
            for s in (0, 1)]
    rows += [dict(kind="compute", name="k", ts_ns=a * us, dur_ns=(b - a) * us, step=s, stream=7, tid=7)
             for s, a, b in ((0, 100, 120), (0, 150, 230), (1, 200, 210), (1, 240, 260))]
    lf = conform(pl.DataFrame([{**r, "rank": 0} for r in rows])).lazy()
    got = bubbles(lf).select("step", "window_us", "compute_us").rows()
    assert got == [(0, 100.0, 70.0), (1, 60.0, 50.0)]


@pytest.mark.parametrize("name", ["gpu", "cpu-gloo"])
def test_the_gpu_ranks_are_the_kernel_rows_ranks_read_either_way(name):
    # From three columns of the events where the kernel rows are not computed, from them where they are.
    from ddprof.analyses.frames.memo import Prepared
    from ddprof.analyses.frames.sets import gpu_ranks, kernels
    events = SCENARIOS[name].events().lazy()
    alone, after = Prepared(events), Prepared(events)
    want = sorted(kernels(after)["rank"].unique().to_list())
    assert sorted(gpu_ranks(alone)["rank"].to_list()) == sorted(gpu_ranks(after)["rank"].to_list()) == want
    assert (want == []) == (name == "cpu-gloo")
