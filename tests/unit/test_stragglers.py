"""A straggler is named only when it is real: significant (late beyond the run's own arrival variability)
and material (its wait a real share of the step); a pipeline stage waiting for its neighbour by design is
none; a pipeline's host clocks are recovered through other hosts. Generated runs with known truth (healthy
ones with noise, planted slow ranks, the README's pipeline) and the bundled real traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ddprof.analyses.chance import last_tail, t_sf
from ddprof.analyses.report import build_report
from ddprof.analyses.stragglers import ALPHA, MIN_SHARE_PCT, stragglers

from ddprof.inputs.analyze import analyze
from ddprof.synth import US, DataParallel, NoisyDP, NoisyPipeline, Spec, generate, ingest_generated
from tests.support.paths import SAMPLES

#: The README's generated pipeline (section "Generated runs with known answers").
README_SPEC = Spec(ranks=64, tp=2, pp=4, micro_batches=8, schedule="1f1b", steps=5, kernels=400,
                   slow={13: 1.4}, clock_offset_us={3: 2500.0}, noise=0.1, seed=7)


def _per(section: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["rank"]: p for p in section["per_rank"]}


def test_tails():
    """Student's t and the chance of being last at k units, against known values."""
    assert t_sf(2.0, 4) == pytest.approx(0.0581, abs=1e-4)
    assert t_sf(0.0, 7) == pytest.approx(0.5)
    assert t_sf(-2.0, 4) == pytest.approx(1 - 0.0581, abs=1e-4)
    assert t_sf(1.0, 1) == pytest.approx(0.25)  # Cauchy
    assert t_sf(2.0, 1e6) == pytest.approx(0.02275, abs=1e-4)  # the normal tail
    assert t_sf(float("inf"), 3) == 0.0
    tail = last_tail(((4, 3),))  # 3 units of 4 ranks
    assert tail[0] == pytest.approx(1.0) and tail[3] == pytest.approx(1 / 64)
    assert last_tail(((2, 1), (4, 1)))[2] == pytest.approx(1 / 8)  # last at a unit of 2 and one of 4


@pytest.mark.parametrize("seed", range(8))
def test_healthy_noisy_data_parallel_names_nobody(seed):
    """Runs that differ by noise only (``NoisyDP``: 4 ranks, 20 steps, 2 % lognormal noise per kernel):
    some rank is always last, none is a straggler."""
    got = stragglers(NoisyDP(seed=seed, noise=0.05).events().lazy())
    assert got["ranks"] == [] and got["unit"] == "step"
    assert all(p["units"] == 20 for p in got["per_rank"])


@pytest.mark.parametrize("seed", range(4))
def test_healthy_noisy_pipeline_names_nobody(seed):
    assert stragglers(NoisyPipeline(seed=seed).events().lazy())["ranks"] == []


@pytest.mark.parametrize("seed", range(4))
def test_jitter_rotates_and_the_verdict_says_so(seed, tmp_path):
    """8 ranks, each step each rank late by up to 800 µs at random (8 % of a step): the others wait for
    whoever was last, but the last arrival rotates: nobody is named, and the verdict says why."""
    report = build_report(ingest_generated(DataParallel(ranks=8, steps=12, slow_rank=None, jitter=800 * US,
                                                        seed=seed), tmp_path))
    st = report["stragglers"]
    assert st["ranks"] == [] and st["alpha"] == ALPHA and st["min_share_pct"] == MIN_SHARE_PCT
    assert sum(p["times_last"] for p in st["per_rank"]) == 12
    # a rank may draw late jitter often enough to look consistent (seed 1: rank 7, p 0.03), but the wait is
    # spread over the run: under 2 % of a step
    assert not any(p["significant"] and p["material"] for p in st["per_rank"])
    [line] = [v for v in report["verdicts"] if "straggler" in v]
    late = [p["rank"] for p in st["per_rank"] if p["significant"]]
    if late:  # consistent, and said to cost too little
        assert line.startswith(f"no straggler: rank {late[0]} arrives late consistently ("), line
        assert "of 12 steps" in line and "under the 2 % that names a straggler" in line
    else:
        assert line.startswith("no straggler: the last arrival rotates (rank "), line
        assert "of 12 steps" in line and "the most waited for, rank " in line


def test_planted_slow_rank_in_noise_is_named():
    """``NoisyDP`` with rank 2's backward 1 ms longer (10 % of a step) among noisy ranks."""
    got = stragglers(NoisyDP(slow_rank=2, slow_us=1000, noise=0.05).events().lazy())
    assert got["ranks"] == [2]
    p = _per(got)[2]
    assert p["significant"] and p["material"] and p["p_value"] < 1e-3 and p["last_units"] == p["units"] == 20
    assert p["chance_last_pct"] == pytest.approx(25.0) and p["lateness_us"] > 900
    assert not any(q["significant"] for r, q in _per(got).items() if r != 2)


def test_consistently_late_but_immaterial_is_not_named(tmp_path):
    """Rank 2 arrives 100 µs after the others at every step of 10 ms: beyond chance, but 1 % of a step."""
    report = build_report(ingest_generated(DataParallel(delay=100 * US, steps=6), tmp_path))
    p = _per(report["stragglers"])[2]
    assert report["stragglers"]["ranks"] == []
    assert p["significant"] and not p["material"] and p["wait_share_pct"] == pytest.approx(1.0, rel=0.02)
    [line] = [v for v in report["verdicts"] if "straggler" in v]
    assert line.startswith("no straggler: rank 2 arrives late consistently (lateness 100 µs, last at 6 of 6 "
                           "steps; p < 0.001) but its wait costs the others 1.0 % of a step, under the 2 % "), line


def test_real_slow_rank_sample_is_named(tmp_path):
    """sample_traces/gloo-ddp-4rank-slow-rank: rank 2 sleeps 100 ms a step; 2 steps are enough."""
    report = analyze(SAMPLES / "gloo-ddp-4rank-slow-rank", cache=tmp_path / "run")
    st = report["stragglers"]
    assert st["ranks"] == [2] and st["unit"] == "step"
    p = _per(st)[2]
    assert p["units"] == 2 and p["last_units"] == 2 and p["p_value"] < 0.01 and p["wait_share_pct"] > 50
    assert not any(q["significant"] for r, q in _per(st).items() if r != 2)


def test_real_dlrm_one_step_counts_instances(ingested):
    """The DLRM sample holds one step: its 8 collectives are the units; rank 7, last at 5 (1 in 8 by
    chance), is named."""
    st = stragglers(ingested("dlrm-8xV100-nccl").events())
    assert st["ranks"] == [7] and st["unit"] == "instance"
    p = _per(st)[7]
    assert (p["units"], p["last_units"]) == (8, 5) and p["p_value"] <= ALPHA and p["material"]


def test_real_two_ranks_taking_turns(ingested):
    st = stragglers(ingested("hta/sendrecv-2-of-128").events())
    assert st["ranks"] == [] and not any(p["significant"] for p in st["per_rank"])


@pytest.fixture(scope="module")
def readme_pipeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("readme-pipeline")
    truth = generate(README_SPEC, out)
    return truth, analyze(out / "traces", cache=out / "run")


def test_readme_pipeline_names_exactly_its_slow_rank(readme_pipeline):
    """Rank 13 (stage 0) is 1.4x slower; ranks 29, 45 and 61, the later stages of its pipeline, reach
    their data-parallel all-reduces last as often, because they waited for its activations: the
    schedule's wait, not theirs."""
    truth, report = readme_pipeline
    st = report["stragglers"]
    assert st["ranks"] == truth["stragglers"]["slow_ranks"] == [13]
    assert st["groups"] == []  # eight hosts: rank 13's host is not slower for it
    per = _per(st)
    first = report["verdicts"][0]
    assert first.startswith("rank 13 is the straggler (compute: ") and "): each of the 7 other ranks spent " in first
    for r in (29, 45, 61):
        assert per[r]["times_last"] == 5 and per[r]["wait_caused_us"] > 0.5 * per[13]["wait_caused_us"]
        assert per[r]["wait_beyond_schedule_us"] < 0.05 * per[r]["wait_caused_us"] and not per[r]["material"]
    assert per[13]["wait_beyond_schedule_us"] == pytest.approx(per[13]["wait_caused_us"])


def test_readme_pipeline_clock_offset_recovered(readme_pipeline):
    """``--clock-offset 3=2500``: host node003 (ranks 24-31, stage 1) shares no collective with node000;
    reached through other hosts, its offset is recovered within the stated bound (≤ 400 µs here), and no
    collective is left with clocks that disagree."""
    _, report = readme_pipeline
    hosts = {h["host"]: h for h in report["clocks"]["hosts"]}
    h3 = hosts.pop("node003")
    assert h3["applied"] and h3["via"] and abs(h3["offset_ns"] - 2_500_000) <= h3["bound_ns"] <= 400_000
    for h in hosts.values():
        assert not h["applied"] and abs(h["offset_ns"]) <= h["bound_ns"], h
    warnings = report["run"]["warnings"]
    assert not any("clocks disagree" in w for w in warnings), warnings
    assert any(w.startswith("clocks: host node003's clock runs 2,500.0 µs ahead of host node000's") for w in warnings)
    assert all(c["clock_aligned"] for c in report.table("collectives").to_dicts())


def test_section_table_title_names_ranks(tmp_path):
    from ddprof.render.text import render_text

    named = render_text(build_report(ingest_generated(DataParallel(), tmp_path / "a")))
    assert "Stragglers: rank 2" in named
    none = render_text(build_report(ingest_generated(DataParallel(slow_rank=None), tmp_path / "b")))
    assert "Stragglers: none" in none


def test_report_fields_typed(tmp_path: Path):
    """Every per-rank figure and the decision's evidence are in the report's declared record."""
    import msgspec

    from ddprof.report.schema import Stragglers

    report = build_report(ingest_generated(DataParallel(), tmp_path))
    st = msgspec.convert(report["stragglers"], Stragglers)
    p = next(p for p in st.per_rank if p.rank == 2)
    assert p.significant and p.material and p.units == 3 and p.last_units == 3 and p.p_value < 1e-6


@pytest.mark.parametrize("gpus_per_host,reached", [(4, True), (2, False)])
def test_pipeline_host_clocks_through_other_hosts(tmp_path, gpus_per_host, reached):
    """Pipeline stages on hosts of their own: node003 shares no collective with node000, yet its 3 ms is
    recovered through node002 (data-parallel all-reduces) and the stage-0/stage-1 send/recv pairs, and
    node001's −0.7 ms directly. With 2 ranks a host and no data parallelism (8 ranks, tp 4, pp 2), hosts
    node001 and node003 only exchange with each other: nothing links them to node000, and the reason says so."""
    ranks, tp = (16, 2) if reached else (8, 4)
    spec = Spec(ranks=ranks, tp=tp, pp=2, micro_batches=4, steps=3, kernels=48, gpus_per_host=gpus_per_host,
                clock_offset_us={1: -700.0, 3: 3000.0}, seed=2)
    generate(spec, tmp_path)
    report = analyze(tmp_path / "traces", cache=tmp_path / "run")
    hosts = {h["host"]: h for h in report["clocks"]["hosts"]}
    for name, true_us in (("node001", -700.0), ("node002", 0.0), ("node003", 3000.0)):
        h = hosts[name]
        if reached or name == "node002":
            assert abs(h["offset_ns"] - true_us * 1000) <= h["bound_ns"], h
            assert h["applied"] == (true_us != 0.0), h
        else:
            assert not h["applied"] and "no other host links it to the reference" in h["reason"], h
    if reached:
        assert hosts["node003"]["via"] == ["node002"] and not hosts["node001"]["via"]
        assert not any("clocks disagree" in w for w in report["run"]["warnings"])


@pytest.mark.parametrize("shape", ["dp", "pp"])
@pytest.mark.parametrize("seed", range(3))
def test_generated_runs_name_their_slow_ranks_only(tmp_path, shape, seed):
    """Generated runs with ±30 % kernel noise: healthy, nobody; with one rank 1.5x slower (in the pipeline, a
    middle stage), that rank alone, whatever its neighbours wait."""
    kw = dict(ranks=16, steps=8, kernels=60) if shape == "dp" else dict(ranks=16, tp=2, pp=4, micro_batches=4,
                                                                        steps=6, kernels=64)
    for slow in ({}, {9: 1.5}):
        out = tmp_path / f"slow{len(slow)}"
        truth = generate(Spec(noise=0.3, seed=seed, slow=slow, **kw), out)
        report = analyze(out / "traces", cache=out / "run")
        assert report["stragglers"]["ranks"] == truth["stragglers"]["slow_ranks"] == sorted(slow), report["verdicts"]
        assert report["stragglers"]["groups"] == []  # two hosts: one slow rank does not make its host slow
