"""The cause of a straggler (analyses/straggler_cause.py): generated runs with one fault of known cause
(ddprof.synth.faults.FaultyDP), the real slow-rank sample, a pipeline with an imbalanced stage, and runs
where no cause may be claimed."""

from __future__ import annotations

import polars as pl
import pytest
from ddprof.analyses.report import analyse, build_report
from ddprof.analyses.straggler_cause import CLASSES, host_paused, op_ratio, pipeline_imbalance

import ddprof
from ddprof.report.schema import Stragglers
from ddprof.synth import ingest_generated
from ddprof.synth.faults import CAUSE, FaultyDP
from tests.support.paths import RUNS, SAMPLES

FAULTS = [f for f, cause in CAUSE.items() if cause is not None]  # a straggler to name


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("seed", [0, 1])
def test_each_fault_is_named_with_its_cause(fault, ranks, seed):
    """48 steps: on 2 ranks a rank that pauses every 4th step is named a straggler only over enough steps
    (the straggler rule tests its lateness against chance; 12 steps give p ≈ 0.1)."""
    sc = FaultyDP(fault=fault, ranks=ranks, rank=ranks - 1, seed=seed, steps=48)
    truth = sc.truth()
    st = analyse(sc.events().lazy())["stragglers"]
    assert st["ranks"] == [truth["straggler"]]
    (cause,) = st["causes"]
    assert (cause["rank"], cause["cause"]) == (truth["straggler"], truth["cause"]), cause
    assert cause["excess_us"] > 0
    Stragglers(**{**st, "per_rank": [], "causes": []})  # the section still converts
    assert cause["evidence"][0]["measure"] in {"stall_peak", "lead", "precomm", "idle", "compute"}


def test_the_evidence_says_how_much(tmp_path):
    """Input: 3 ms more before the first op, every step -> the lead excess is the delay, to the jitter."""
    sc = FaultyDP(fault="input", ranks=4, rank=2, delay=3000_000)
    (cause,) = analyse(sc.events().lazy())["stragglers"]["causes"]
    lead = cause["evidence"][0]
    assert lead["measure"] == "lead"
    assert lead["rank_value"] - lead["peers_value"] == pytest.approx(3000, abs=5)
    assert cause["excess_us"] == pytest.approx(3000, abs=5)
    stalls = analyse(FaultyDP(fault="stalls", ranks=4, rank=2, every=3).events().lazy())["stragglers"]["causes"][0]
    steps = next(e for e in stalls["evidence"] if e["measure"] == "stall_steps")
    assert (steps["rank_value"], steps["peers_value"]) == (4, 12)  # steps 2, 5, 8, 11 of 12


def test_compute_and_contention_differ_by_the_same_ops():
    """Bigger work stretches every addmm (op ratio ≈ the factor); a busy CPU stretches a few ops by a time
    slice and leaves the typical op alone (op ratio ≈ 1), for as much extra time."""
    compute = FaultyDP(fault="compute", factor=3.0)
    busy = FaultyDP(fault="contention")
    for sc, low, high in ((compute, 2.0, 3.5), (busy, 0.9, 1.2)):
        from ddprof.analyses.straggler_cause import cause_ops

        ratio = op_ratio(cause_ops(sc.events().lazy()), sc.rank)
        assert ratio is not None and low < ratio < high, (sc.fault, ratio)


def test_ops_stretched_in_a_few_steps_are_contention_not_stalls():
    """Every 4th step one of the rank's ops is stretched 4 ms: its long steps are apart from the rest like
    a pause's, but the time is inside its ops (its compute rose by their extra wait): contention."""
    sc = FaultyDP(fault="contention", ranks=4, rank=1, bursts=True, delay=4000_000)
    (cause,) = analyse(sc.events().lazy())["stragglers"]["causes"]
    assert cause["cause"] == "contention", cause
    stalls = FaultyDP(fault="stalls", ranks=4, rank=1, delay=4000_000)
    assert analyse(stalls.events().lazy())["stragglers"]["causes"][0]["cause"] == "stalls"


def test_a_rank_that_pauses_is_said_first_when_the_straggler_rule_names_none(tmp_path):
    """2 ranks, 12 steps, rank 1 pausing 3 ms every 4th step: its arrivals rotate with the other's in the
    other steps, so the straggler rule names nobody; the pause is found and said first all the same."""
    sc = FaultyDP(fault="stalls", ranks=2, rank=1, steps=12)
    report = build_report(ingest_generated(sc, tmp_path))
    assert report["stragglers"]["ranks"] == []
    assert [(c["rank"], c["cause"]) for c in report["stragglers"]["causes"]] == [(1, "stalls")]
    assert report["verdicts"][0].startswith("rank 1 pauses now and then (stalls: in 3 of 12 steps "), report["verdicts"]


def test_the_verdict_says_the_cause_first(tmp_path):
    run = ingest_generated(FaultyDP(fault="comm", ranks=4, rank=3), tmp_path)
    report = build_report(run)
    assert report["verdicts"][0].startswith("rank 3 is the straggler (communication: it enters its collectives "
                                            "3.0"), report["verdicts"]
    assert report["stragglers"]["causes"][0]["cause"] == "communication"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clean_run_has_no_straggler_and_no_cause(seed):
    st = analyse(FaultyDP(fault="none", seed=seed).events().lazy())["stragglers"]
    assert st["ranks"] == [] and st["causes"] == []


def test_a_cpu_rank_late_with_nothing_of_its_own_to_explain_it_is_not_named(tmp_path):
    """Rank 1 of 2 starts every step 1 ms late, all of its work with it (descheduled between steps): it is
    last at every all-reduce and the other waits 1 ms a step (26 % of it), yet its data loading, compute and
    collective entry are the other's. On a CPU run that is the host's scheduling: no straggler, and the
    verdict says why; the what-if names no fix. A device rank late with nothing to explain it stays named
    (the DLRM sample's rank 7, below)."""
    report = build_report(ingest_generated(FaultyDP(fault="none", ranks=2, rank=1, shift=1000_000, steps=12),
                                           tmp_path))
    st = report["stragglers"]
    assert st["ranks"] == [] and [(c["rank"], c["cause"]) for c in st["causes"]] == [(1, "undecided")]
    late = next(p for p in st["per_rank"] if p["rank"] == 1)
    assert late["significant"] and late["material"] and late["lateness_us"] == pytest.approx(500, rel=0.1)
    line = next(v for v in report["verdicts"] if "straggler" in v)
    assert line.startswith("no straggler: rank 1 arrives late consistently (lateness ") and \
        "nothing of its own explains it" in line, report["verdicts"]
    assert not [v for v in report["verdicts"] if "would cut the step" in v], report["verdicts"]


def test_mild_cpu_contention_is_the_hosts_and_strong_contention_is_named(tmp_path):
    """2 ranks; two of rank 1's eight addmm a step stretched 300 µs (its ops 1.2x the other's in all, the
    fast calls as fast): late beyond chance and at a cost, but a host sharing its cores unevenly does that:
    not named, and the verdict says why. Stretched 3 ms (2.6x): named, contention."""
    mild = build_report(ingest_generated(FaultyDP(fault="contention", ranks=2, rank=1, delay=300_000, steps=24),
                                         tmp_path / "mild"))
    st = mild["stragglers"]
    assert st["ranks"] == [] and [(c["rank"], c["cause"]) for c in st["causes"]] == [(1, "contention")]
    compute = next(e for e in st["causes"][0]["evidence"] if e["measure"] == "compute")
    assert 1.1 < compute["ratio"] < 1.3
    line = next(v for v in mild["verdicts"] if "straggler" in v)
    assert line.startswith("no straggler: rank 1 arrives late consistently") and \
        "CPU contention under the 1.5× that names one" in line, mild["verdicts"]
    assert not [v for v in mild["verdicts"] if "would cut the step" in v]
    strong = analyse(FaultyDP(fault="contention", ranks=2, rank=1, steps=24).events().lazy())["stragglers"]
    assert strong["ranks"] == [1] and strong["causes"][0]["cause"] == "contention"


def test_the_real_slow_rank_sample_is_input(tmp_path):
    """sample_traces/gloo-ddp-4rank-slow-rank: rank 2 sleeps 100 ms before each forward, on the host outside
    any op: host time before the step's first compute, so input (as a slow data loader would show)."""
    report = ddprof.analyze(SAMPLES / "gloo-ddp-4rank-slow-rank", cache=tmp_path / "c")
    (cause,) = report["stragglers"]["causes"]
    assert (cause["rank"], cause["cause"]) == (2, "input")
    lead = cause["evidence"][0]
    assert lead["measure"] == "lead" and 95_000 < lead["rank_value"] - lead["peers_value"] < 110_000
    assert report["verdicts"][0].startswith("rank 2 is the straggler (input: 10")


def test_no_cause_is_claimed_that_explains_little_of_the_wait(tmp_path):
    """The DLRM sample's rank 7 makes the others wait 5 ms a step; neither its lead nor its kernels differ
    from the others' by a quarter of that: undecided, and the verdict names no cause. A GPU rank, so it
    stays named (a CPU rank would be the host's scheduling)."""
    report = ddprof.analyze(SAMPLES / "dlrm-8xV100-nccl", cache=tmp_path / "c")
    assert [(c["rank"], c["cause"]) for c in report["stragglers"]["causes"]] == [(7, "undecided")]
    assert report["verdicts"][0].startswith("rank 7 is the straggler: ")


def _stage_steps(compute_us: dict[int, float]) -> pl.DataFrame:
    rows = [{"rank": r, "step": s, "step_ns": 50_000_000, "lead_ns": 50_000, "compute_ns": int(c * 1000),
             "precomm_ns": 0, "idle_ns": 0} for r, c in compute_us.items() for s in range(4)]
    return pl.DataFrame(rows).cast({"rank": pl.Int32, "step": pl.Int32})


def test_the_slowest_pipeline_stage_is_named_when_imbalanced():
    stages = pl.DataFrame({"rank": [0, 1, 2, 3], "pipeline": [0] * 4, "stage": [0, 1, 2, 3],
                           "micro_batches": [4.0] * 4}).cast({"rank": pl.Int32})
    (slow,) = pipeline_imbalance(_stage_steps({0: 8000, 1: 8200, 2: 24000, 3: 8100}), stages)
    assert (slow["rank"], slow["cause"]) == (2, "pipeline imbalance")
    assert slow["evidence"][0]["rank_value"] == pytest.approx(6000)  # 24 ms / 4 micro-batches
    assert slow["evidence"][0]["ratio"] == pytest.approx(24000 / 8100)
    assert pipeline_imbalance(_stage_steps({0: 8000, 1: 8200, 2: 9000, 3: 8100}), stages) == []
    # a last stage that also computes the loss: 1.35x, as a clean pipeline of equal layers has it
    assert pipeline_imbalance(_stage_steps({0: 8000, 1: 8200, 2: 8100, 3: 11000}), stages) == []
    (last,) = pipeline_imbalance(_stage_steps({0: 8000, 1: 8200, 2: 8100, 3: 12200}), stages)  # 1.5x
    assert last["rank"] == 3


def test_the_real_pipeline_sample_is_balanced_enough(tmp_path):
    """sample_traces/gloo-pipeline-4stage: stages of similar width; no stage is said to hold it back."""
    report = ddprof.analyze(SAMPLES / "gloo-pipeline-4stage", cache=tmp_path / "c")
    assert report["stragglers"]["causes"] == []
    assert not any("holds the pipeline back" in v for v in report["verdicts"])


def test_the_classes_are_the_declared_ones():
    """Every class the analysis can give is one the report's record declares (and no other)."""
    import msgspec

    from ddprof.report.schema import StragglerCause

    for cause in (*CLASSES, "undecided"):
        msgspec.convert({"rank": 0, "cause": cause, "excess_us": None}, StragglerCause)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"rank": 0, "cause": "gremlins", "excess_us": None}, StragglerCause)


def _noisy_pauses(spikes_on: list[int]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """8 ranks × 24 steps of 60 ms as many ranks on few cores make them: each rank's host idle 1-5 ms a
    step, rank 7's waits caused long in 11 steps (30-50 ms in its pauses, 9-17 ms in five others: not twice
    apart). The ranks in ``spikes_on`` idle 40 ms every 4th step (steps 3, 7, ..., 23)."""
    rows, waits = [], []
    for r in range(8):
        for s in range(24):
            idle = 40_000 if r in spikes_on and s % 4 == 3 else 1000 + 4000 * ((r * 7 + s * 3) % 5) / 4
            rows.append({"rank": r, "step": s, "step_ns": 60_000_000, "lead_ns": 300_000, "compute_ns": 15_000_000,
                         "precomm_ns": 150_000, "idle_ns": int(idle * 1000)})
    for i, s in enumerate([3, 7, 11, 15, 19, 23]):
        waits.append({"rank": 7, "step": s, "wait_us": 30_000.0 + 4000 * i})
    for i, s in enumerate([0, 5, 9, 13, 17]):
        waits.append({"rank": 7, "step": s, "wait_us": 9000.0 + 2000 * i})
    return (pl.DataFrame(rows).cast({"rank": pl.Int32, "step": pl.Int32}),
            pl.DataFrame(waits).cast({"rank": pl.Int32, "step": pl.Int32}))


def test_pauses_are_told_by_the_ranks_own_idle_when_its_waits_are_too_noisy():
    """Rank 7 sleeps 40 ms every 4th step (the fault matrix's stalls at 8 ranks on 2 CPUs): its waits caused
    are not twice apart from its other long ones, but its own host idle is, and no other rank's: stalls,
    with the steps, the largest wait and the idle in its long steps. When every rank idles so (the machine
    pauses them all), or rank 7 only twice, it is not."""
    from ddprof.analyses.straggler_cause import classify

    cs, waits = _noisy_pauses([7])
    ops = pl.DataFrame(schema={"rank": pl.Int32, "name": pl.Utf8, "n": pl.UInt32, "low_ns": pl.Int64,
                               "total_ns": pl.Int64})
    found = classify(7, cs, ops, waits, wait_us=12_000)
    assert found["cause"] == "stalls", found
    ev = {e["measure"]: e for e in found["evidence"]}
    assert (ev["stall_steps"]["rank_value"], ev["stall_steps"]["peers_value"]) == (6, 24)
    assert ev["stall_peak"]["rank_value"] == 50_000 and ev["stall_idle"]["rank_value"] == 40_000
    everyone, _ = _noisy_pauses(list(range(8)))
    assert classify(7, everyone, ops, waits, wait_us=12_000)["cause"] != "stalls"
    twice = cs.with_columns(pl.when((pl.col("rank") == 7) & pl.col("step").is_in([3, 7, 11, 15]))
                            .then(1_000_000).otherwise(pl.col("idle_ns")).alias("idle_ns"))
    assert classify(7, twice, ops, waits, wait_us=12_000)["cause"] != "stalls"


def _pauses_beside_cpu_waits() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """:func:`_noisy_pauses` of rank 7, its idle 22.7 and 13.0 ms in steps 5 and 17 (the real run's steps
    where it waited for a CPU), and no ops: (cause steps, waits caused, ops)."""
    cs, waits = _noisy_pauses([7])
    mine = pl.col("rank") == 7
    cs = cs.with_columns(pl.when(mine & (pl.col("step") == 5)).then(22_700_000)
                         .when(mine & (pl.col("step") == 17)).then(13_000_000)
                         .otherwise(pl.col("idle_ns")).alias("idle_ns"))
    ops = pl.DataFrame(schema={"rank": pl.Int32, "name": pl.Utf8, "n": pl.UInt32, "low_ns": pl.Int64,
                               "total_ns": pl.Int64})
    return cs, waits, ops


def test_idle_spent_waiting_for_a_cpu_is_no_pause():
    """Rank 7's six pauses (40 ms) beside two steps whose thread idled while it waited for a CPU (the real
    8-rank run: idle 22.7 and 13.0 ms where it waited 24.8 and 16.9 ms, its median step 10 ms, against
    40.6-44.2 ms in its pauses): with those steps counted whole, the pauses are not twice apart (22.7 ms
    above half the longest, 13.0 ms next); less the wait for a CPU beyond its median step's, which the
    collector measured (``cpu_waits``), they are."""
    from ddprof.analyses.straggler_cause import classify, cpu_waits

    cs, waits, ops = _pauses_beside_cpu_waits()
    assert classify(7, cs, ops, waits, wait_us=12_000)["cause"] != "stalls"
    waited = cpu_waits({7: {"wait_ms": 10.0, "wait_peaks": [(5, 24.8), (17, 16.9), (2, 9.0)]}, 3: {"wait_ms": None}})
    assert waited == {7: {5: pytest.approx(14_800.0), 17: pytest.approx(6900.0), 2: 0.0}}
    found = classify(7, cs, ops, waits, wait_us=12_000, waited=waited)
    assert found["cause"] == "stalls", found
    assert cpu_waits(None) == {} and cpu_waits({0: {"wait_ms": 1.0}}) == {0: {}}


def test_a_rank_not_named_pauses_told_by_its_idle_less_its_cpu_waits(monkeypatch):
    """The path of a rank the straggler rule does not name (the most waited for): its pauses told by its
    idle, less its waits for a CPU, as for a named one."""
    from ddprof.analyses import straggler_cause as sc

    cs, waits, ops = _pauses_beside_cpu_waits()
    for name, frame in (("cause_steps", cs), ("cause_ops", ops), ("cause_shapes", None), ("step_waits", waits)):
        monkeypatch.setattr(sc, name, lambda p, frame=frame: frame)
    section = {"ranks": [], "min_share_pct": 2.0,
               "per_rank": [{"rank": r, "wait_share_pct": 20.0 if r == 7 else 1.0} for r in range(8)]}
    stages = pl.DataFrame(schema={"rank": pl.Int32})
    monkeypatch.setattr(sc, "pipeline_imbalance", lambda cs, stages: [])
    assert [c["cause"] for c in sc.straggler_causes(None, section, stages)] == []
    cpu = {7: {"wait_ms": 10.0, "wait_peaks": [(5, 24.8), (17, 16.9)]}}
    assert [(c["rank"], c["cause"]) for c in sc.straggler_causes(None, section, stages, sc.cpu_waits(cpu))] == \
        [(7, "stalls")]


def test_the_same_work_done_slower_on_a_cpu_rank_is_its_hosts(tmp_path):
    """Rank 1's every op takes 1.2x the other's on the same input shapes (a core its host shares or runs
    slower, as a clean 2-rank gloo run once showed for a whole run): contention, the host's under 1.5x, not
    named, and the verdict says why; at 3x, named contention. The same 1.2x with bigger shapes (compute:
    more rows) is compute, and without recorded shapes the two cannot be told apart: compute."""
    from ddprof.analyses.straggler_cause import cause_ops, cause_shapes, same_work

    mild = FaultyDP(fault="slow_core", ranks=2, rank=1, factor=1.2, steps=24)
    ev = mild.events().lazy()
    share, ratio = same_work(cause_shapes(ev), cause_ops(ev), 1)
    assert share == pytest.approx(1.0) and ratio == pytest.approx(1.2, abs=0.03)
    report = build_report(ingest_generated(mild, tmp_path / "mild"))  # through Kineto's Input Dims
    st = report["stragglers"]
    assert st["ranks"] == [] and [(c["rank"], c["cause"]) for c in st["causes"]] == [(1, "contention")], st["causes"]
    assert {e["measure"] for e in st["causes"][0]["evidence"]} >= {"same_shapes", "shapes_share"}
    line = next(v for v in report["verdicts"] if "straggler" in v)
    assert line.startswith("no straggler: rank 1 arrives late consistently") and \
        "ran on the others' input shapes" in line and "the same work done slower" in line, report["verdicts"]
    strong = analyse(FaultyDP(fault="slow_core", ranks=2, rank=1, factor=3.0, steps=24).events().lazy())["stragglers"]
    assert strong["ranks"] == [1] and strong["causes"][0]["cause"] == "contention"
    more = FaultyDP(fault="compute", ranks=2, rank=1, factor=1.2, steps=24).events().lazy()
    share, _ = same_work(cause_shapes(more), cause_ops(more), 1)
    assert share < 0.2
    st = analyse(more)["stragglers"]
    assert st["ranks"] == [1] and st["causes"][0]["cause"] == "compute"
    blind = analyse(FaultyDP(fault="slow_core", ranks=2, rank=1, factor=1.2, steps=24, shapes=False).events().lazy())
    assert blind["stragglers"]["ranks"] == [1] and blind["stragglers"]["causes"][0]["cause"] == "compute"


def test_a_rank_in_contention_says_whose_cpu_it_waited_for() -> None:
    """The step measures' figures (the report's job.cpu) beside a contention cause: the rank's thread's wait
    for a CPU and its own other threads' CPU, against the other ranks' medians; nothing without them."""
    from ddprof.analyses.straggler_cause import cpu_clause

    def row(rank: int, wait: float, others: float) -> dict[str, float]:
        return {"rank": rank, "steps": 20, "step_ms": 12.0, "thread_cpu_ms": 4.5, "wait_ms": wait,
                "other_threads_ms": others}

    report = {"job": {"cpu": [row(0, 0.27, 1.5), row(1, 5.21, 7.7), row(2, 0.25, 1.7)]}}
    assert cpu_clause(report, 1) == ("; its training thread waited for a CPU 5.21 ms a step (the others 260 µs), "
                                     "its own other threads ran 7.7 ms (the others 1.6 ms): its own process took it")
    machine = {"job": {"cpu": [row(0, 0.27, 1.5), row(1, 5.21, 1.4), row(2, 0.25, 1.7)]}}
    assert cpu_clause(machine, 1).endswith("its own other threads ran 1.4 ms (the others 1.6 ms): other processes "
                                           "on its host took it, the machine's load")
    small = {"job": {"cpu": [row(0, 0.27, 1.5), row(1, 1.2, 1.4), row(2, 0.25, 1.7)]}}  # 0.9 ms of a 12 ms step
    assert cpu_clause(small, 1).endswith("(the others 1.6 ms)")
    # a clean pinned 2-rank run: the same ops on the same shapes, its thread needing 1.5x the CPU time, little
    # extra wait: the core did the work slower; against its 3.79 ms of extra op time, the wait's 1.08 ms is
    # no longer immaterial beside it, but the core's 2.86 ms leads
    core = {"job": {"cpu": [dict(row(0, 0.29, 1.47), thread_cpu_ms=5.75), dict(row(1, 1.37, 1.64), thread_cpu_ms=8.61)]},
            "stragglers": {"causes": [{"rank": 1, "cause": "contention", "evidence": [
                {"measure": "compute", "rank_value": 8060.0, "peers_value": 4270.0, "ratio": 1.89}]}]}}
    assert cpu_clause(core, 1) == ("; its training thread needed 8.61 ms of CPU a step for the others' work (the others "
                                   "5.75 ms: 1.5×) and waited for one 1.37 ms (the others 290 µs): a slower core, or one "
                                   "shared below the operating system, the machine's doing")
    # the same wait measured against the extra op time, not the step: 1.95 ms of 3.84 ms is the machine's load
    load = {"job": {"cpu": [dict(row(0, 0.37, 2.36), thread_cpu_ms=6.38), dict(row(1, 2.32, 2.46), thread_cpu_ms=7.2)]},
            "stragglers": {"causes": [{"rank": 1, "cause": "contention", "evidence": [
                {"measure": "compute", "rank_value": 8580.0, "peers_value": 4740.0, "ratio": 1.81}]}]}}
    assert cpu_clause(load, 1).endswith(": other processes on its host took it, the machine's load")
    # no extra op time, wait or CPU to own: the figures alone, no owner
    even = {"job": {"cpu": [row(0, 0.3, 1.5), row(1, 0.3, 1.5)]}, "stragglers": {"causes": [{"rank": 1, "evidence": [
        {"measure": "compute", "rank_value": 4000.0, "peers_value": 4100.0, "ratio": 0.98}]}]}}
    assert cpu_clause(even, 1).endswith("(the others 1.5 ms)")
    assert cpu_clause({"job": {"cpu": [row(1, 5.0, 1.0)]}}, 1) == ""  # no peers
    assert cpu_clause({"job": {}}, 1) == "" and cpu_clause({}, 1) == ""


def test_the_step_measures_tell_more_work_from_a_busy_core() -> None:
    """A contention or compute cause decided again by the step measures: the rank's 4.4 ms of extra op time
    a step that its training thread ran itself is compute (the fault matrix's 4x batch, read as contention
    from its fast calls once); that it waited for a CPU, contention; without the figures, or in bursts, the
    cause stands; nor is the same work on the others' shapes done with more CPU compute (a slower core)."""
    import msgspec
    from ddprof.analyses.straggler_cause import by_cpu, describe

    from ddprof.report.schema import StragglerCause

    def cause(kind: str, *extra: dict) -> dict:
        ev = [{"measure": "compute", "rank_value": 9010.0, "peers_value": 4630.0, "ratio": 1.95},
              {"measure": "op_ratio", "rank_value": 1.3, "peers_value": 1.0, "ratio": 1.3}, *extra]
        return {"rank": 1, "cause": kind, "excess_us": 4380.0, "evidence": ev}

    def cpu(thread: float, wait: float) -> dict:
        row = {"steps": 20, "step_ms": 14.0, "other_threads_ms": 1.5}
        return {0: {**row, "rank": 0, "thread_cpu_ms": 4.5, "wait_ms": 0.3},
                1: {**row, "rank": 1, "thread_cpu_ms": thread, "wait_ms": wait}}

    more_work = by_cpu(cause("contention"), cpu(8.9, 0.3))
    assert more_work["cause"] == "compute" and more_work["evidence"][0]["measure"] == "compute"
    assert [e["measure"] for e in more_work["evidence"]][-2:] == ["thread_cpu", "cpu_wait"]
    said = describe(msgspec.convert(more_work, StragglerCause))
    assert said == ("compute: its training thread ran 8.9 ms of CPU a step against 4.5 ms on the others, its ops "
                    "9.01 ms against 4.63 ms: more work of its own, not a busy CPU (the step measures)"), said
    assert by_cpu(cause("contention"), cpu(8.9, 0.3), (0.95, 1.3))["cause"] == "contention"  # the others' work
    assert by_cpu(cause("contention"), cpu(8.9, 0.3), (0.1, 2.0))["cause"] == "compute"  # other shapes
    assert by_cpu(cause("compute"), cpu(4.6, 4.9))["cause"] == "contention"
    assert by_cpu(cause("contention"), cpu(6.0, 2.0))["cause"] == "contention"  # neither explains it: as told
    assert by_cpu(cause("contention"), {}) == cause("contention")
    burst = cause("contention", {"measure": "burst_compute", "rank_value": 9.0, "peers_value": 4.0, "ratio": 2.2})
    assert by_cpu(burst, cpu(8.9, 0.3)) == burst


@pytest.mark.parametrize("seed", [0, 1])
def test_pauses_the_host_made_name_no_straggler(seed):
    """A rank whose all-reduce ends 3 ms after the others' every 4th step (its communication thread
    descheduled) starts its next step late, and the others wait for it there: its pauses are the host's, no
    straggler. A rank that sleeps 3 ms every 4th step leaves its collectives with the others: its own."""
    late = analyse(FaultyDP(fault="late_end", ranks=2, rank=1, seed=seed, steps=24).events().lazy())["stragglers"]
    (cause,) = late["causes"]
    host = next(e for e in cause["evidence"] if e["measure"] == "stall_host")
    assert cause["cause"] == "stalls" and host_paused(cause) and host["ratio"] > 0.9, cause
    assert late["ranks"] == []
    own = analyse(FaultyDP(fault="stalls", ranks=2, rank=1, seed=seed, steps=48).events().lazy())["stragglers"]
    (cause,) = own["causes"]
    assert own["ranks"] == [1] and cause["cause"] == "stalls" and not host_paused(cause), cause


def test_a_clean_run_whose_rank_the_host_paused_names_no_straggler(tmp_path):
    """A real clean 2-rank gloo DDP run (``tests/data/runs``) that named rank 1 a straggler for its pauses (up to
    10.1 ms in 5 of 24 steps): before two of them its all-reduces ended 5.6-6.4 ms after rank 0's, before
    another its training thread waited 6.5 ms for a CPU (the collector's step measures)."""
    import shutil

    from ddprof.analyses.stragglers import straggler_verdicts
    from ddprof.analyses.whatif.section import whatif_verdicts

    from ddprof.inputs.reports import load_report

    run = tmp_path / "run"
    shutil.copytree(RUNS / "gloo-ddp-2rank-clean-host-pauses", run)
    report = load_report(run)
    st = report["stragglers"]
    assert st["ranks"] == []
    (cause,) = st["causes"]
    host = next(e for e in cause["evidence"] if e["measure"] == "stall_host")
    assert cause["rank"] == 1 and host_paused(cause)
    assert host["rank_value"] == pytest.approx(17_225, rel=0.02) and host["peers_value"] == pytest.approx(29_331, rel=0.02)
    (first,) = straggler_verdicts(report)
    assert first.startswith("no straggler: rank 1 pauses now and then (stalls: in 5 of 24 steps")
    assert "the host's scheduling explains 17.2 ms of the 29.3 ms" in first
    assert whatif_verdicts(report) == []  # no edit of a fault the run does not have
