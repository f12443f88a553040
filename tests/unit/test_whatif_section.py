"""The report's ``whatif`` section (analyses/whatif/section.py): the edits worth most on a run, its
sentence, and why it is left out where it is."""

from __future__ import annotations

import threading

import msgspec
import pytest
from ddprof.analyses.report import build_report
from ddprof.analyses.whatif import section

from ddprof.render.text import render_text
from ddprof.vocabulary.units import fmt_ranges


def test_the_gloo_sample_reports_its_sleeping_rank_first(ingested):
    report = build_report(ingested("gloo-ddp-4rank-slow-rank"))
    w = msgspec.convert(report["whatif"], section.WhatIf)
    assert w.computed and w.reason is None and w.replay_error_pct <= 2.0
    assert 1 <= len(w.edits) <= section.KEEP
    assert w.edits[0].edit == "straggler_rank_2" and w.edits[0].saving_pct > 30
    assert [e.saving_us for e in w.edits] == sorted((e.saving_us for e in w.edits), reverse=True)
    assert w.verdict.startswith("making rank 2 as fast as the others would cut the step from ")
    text = render_text(report)
    assert "What if: the step under the edits worth most" in text and w.verdict in text


def test_a_run_whose_step_is_larger_than_the_report_models_is_left_to_ddprof_whatif(ingested, monkeypatch):
    # The gate is the run's size, so a report is the same on every machine (a CPU-time budget was not).
    monkeypatch.setattr(section, "REPORT_STEP_EVENTS", 10)
    monkeypatch.setattr(section, "REPORT_MAX_EVENTS", 10)
    run = ingested("gloo-ddp-4rank-slow-rank")
    w = msgspec.convert(build_report(run)["whatif"], section.WhatIf)
    assert not w.computed and w.edits == [] and w.reason.startswith("a step of this run has ")
    assert len(w.steps_modelled) == 1 and f"run ddprof whatif RUN --steps {w.steps_modelled[0]} for one" in w.reason
    assert w.steps_in_run == len(run.steps)


def test_the_steps_modelled_are_spread_over_the_step_times():
    # Ten steps of 40 k events, a budget of 100 k: two steps, at the 25th and 75th percentiles of the time.
    times = {s: 10.0 + s for s in range(10)}
    assert section.chosen_steps({s: 40_000 for s in range(10)}, times, 100_000) == [2, 7]
    # Every step where they fit; one at least (the median one) where none does.
    assert section.chosen_steps({s: 10 for s in range(10)}, times, 100_000) == list(range(10))
    assert section.chosen_steps({s: 10**6 for s in range(9)}, times, 100_000) == [4]
    # One step in four is slow (gradient accumulation): with four steps modelled of eight, one is a slow one.
    times = {s: 30.0 if s % 4 == 3 else 10.0 for s in range(8)}
    assert section.chosen_steps({s: 25_000 for s in range(8)}, times, 100_000) == [1, 4, 6, 7]
    # A step without a time counts as the slowest.
    assert section.chosen_steps({0: 60_000, 1: 60_000, 2: 60_000}, {0: 5.0, 1: 4.0}, 100_000) == [0]
    assert section.chosen_steps({0: 60_000, 1: 60_000, 2: 60_000}, {0: None, 1: float("nan"), 2: 4.0},
                                100_000) == [0]


def test_a_run_above_the_budget_is_projected_on_some_of_its_steps(tmp_path, monkeypatch):
    # The generated slow rank makes every step 3 ms longer: two steps of the run project what all of them do.
    from ddprof.synth import NoisyDP, ingest_generated

    run = ingest_generated(NoisyDP(slow_rank=1, slow_us=3000), tmp_path / "slow")
    whole = build_report(run)["whatif"]
    monkeypatch.setattr(section, "REPORT_STEP_EVENTS", 2 * max(run.rank_info(r)["events"] for r in run.ranks)
                        * len(run.ranks) // len(run.steps))
    report = build_report(run)
    some = msgspec.convert(report["whatif"], section.WhatIf)
    assert some.computed and 1 < len(some.steps_modelled) < len(run.steps) == some.steps_in_run
    assert set(some.steps_modelled) <= set(run.steps)
    assert some.edits[0].edit == whole["edits"][0]["edit"] == "straggler_rank_1"
    assert some.edits[0].saving_us == pytest.approx(whole["edits"][0]["saving_us"], rel=0.1)
    assert whole["steps_modelled"] == sorted(run.steps) and whole["steps_in_run"] == len(run.steps)
    text = render_text(report)
    assert f"What if, on steps {fmt_ranges(some.steps_modelled)} of {len(run.steps)}: " in text


def test_a_run_whose_model_would_not_fit_in_memory_says_so(ingested, monkeypatch):
    monkeypatch.setattr(section, "available_memory", lambda: 1 << 20)  # 1 MiB free
    w = msgspec.convert(build_report(ingested("gloo-ddp-4rank-slow-rank"))["whatif"], section.WhatIf)
    assert not w.computed and "of the memory available" in w.reason and "run ddprof whatif" in w.reason


def test_the_section_can_be_switched_off(ingested, monkeypatch):
    monkeypatch.setenv("DDPROF_WHATIF", "off")
    report = build_report(ingested("gloo-ddp-4rank-slow-rank"))
    assert not report["whatif"]["computed"] and "DDPROF_WHATIF=off" in report["whatif"]["reason"]
    assert not any("as fast as the others would cut" in v for v in report["verdicts"])


def test_the_verdict_leads_with_a_material_saving_and_is_silent_on_a_healthy_run(tmp_path):
    from ddprof.synth import NoisyDP, ingest_generated

    slow = build_report(ingest_generated(NoisyDP(slow_rank=1, slow_us=3000), tmp_path / "slow"))
    said = [v for v in slow["verdicts"] if v.startswith("making rank 1 as fast as the others would cut the step")]
    assert len(said) == 1 and slow["whatif"]["edits"][0]["saving_pct"] >= section.MATERIAL_PCT
    # right after the straggler's own sentence
    assert slow["verdicts"].index(said[0]) == 1 and slow["verdicts"][0].startswith("rank 1 is the straggler")
    healthy = build_report(ingest_generated(NoisyDP(), tmp_path / "healthy"))
    assert healthy["whatif"]["computed"]
    assert section.whatif_verdicts(healthy) == []
    assert not any("would cut the step" in v for v in healthy["verdicts"])


def test_hosts_whose_clocks_disagree_are_put_on_one_clock_first(tmp_path):
    # Ranks 4-7 on a host whose clock reads 5 ms ahead. Named hosts: the report takes the offset off and
    # projects what it projects on one clock. Hosts not named: the all-reduces end on ranks 4-7 before
    # ranks 0-3 arrive, which the model cannot explain: no projection.
    from ddprof.synth import US, DataParallel
    from tests.support.clock_runs import HOSTS8, constant, hosts_run

    sc = DataParallel(ranks=8, steps=12, slow_rank=2, delay=300 * US, jitter=40 * US)
    plain = build_report(hosts_run(sc, tmp_path / "plain", HOSTS8, None))["whatif"]
    shifted = build_report(hosts_run(sc, tmp_path / "shifted", HOSTS8, constant({"node-b": 5_000 * US})))
    assert shifted["clocks"]["applied"] and shifted["whatif"]["computed"]
    assert [e["edit"] for e in shifted["whatif"]["edits"]] == [e["edit"] for e in plain["edits"]]
    for got, want in zip(shifted["whatif"]["edits"], plain["edits"]):
        assert got["saving_us"] == pytest.approx(want["saving_us"])
    blind = build_report(hosts_run(sc, tmp_path / "blind", HOSTS8, constant({"node-b": 5_000 * US}),
                                   sidecars=False))["whatif"]
    assert not blind["computed"] and "clocks disagree" in blind["reason"] and blind["edits"] == []


def test_a_projection_alone_names_no_rank_on_a_healthy_pipeline(ingested):
    """The bundled 4-stage gloo pipeline has no fault: no straggler, no stage holding it back. Its stages do
    different work, so making rank 2 "as fast as the others" projects a 23 % shorter step; the section lists
    that edit, but the verdicts do not lead with a fault the report did not find."""
    report = build_report(ingested("gloo-pipeline-4stage"))
    assert report["stragglers"]["ranks"] == [] and not report["stragglers"].get("causes")
    edits = {e["edit"]: e for e in report["whatif"]["edits"]}
    assert edits["straggler_rank_2"]["saving_pct"] > section.MATERIAL_PCT
    assert section.whatif_verdicts(report) == []
    assert not any("as fast as the others" in v for v in report["verdicts"])


def test_all_reduces_held_back_until_the_backward_ended_lead_the_verdicts(tmp_path):
    """A generated data-parallel run whose all-reduces all wait for the end of the backward: the report says
    what overlapping them would buy (the run that overlaps them is truth.json's); the same run overlapping
    gets no such sentence."""
    import ddprof
    from ddprof.synth import Spec, generate

    for name, poor in (("poor", True), ("good", False)):
        truth = generate(Spec(ranks=8, steps=3, poor_overlap=poor), tmp_path / name)["without_fault"]
        report = build_report(ddprof.ingest([tmp_path / name / "traces"], tmp_path / f"{name}-run"))
        said = [v for v in section.whatif_verdicts(report) if v.startswith("all-reduces overlapped")]
        if poor:
            assert said == [f"all-reduces overlapped with the backward would cut the step from "
                            f"{truth['step_us'] / 1e3:.1f} ms to {truth['without_fault_step_us'] / 1e3:.1f} ms "
                            f"(−{100 * (1 - truth['without_fault_step_us'] / truth['step_us']):.0f} %)"]
        else:
            assert truth is None and said == []


def test_the_section_computed_beside_the_report_is_the_section_computed_after_it(ingested, monkeypatch):
    # The report starts the section once the clock is known and hands it the stragglers' groups at the end:
    # the same section as computed in one go, the groups asked for once, after the other edits.
    run = ingested("gloo-ddp-4rank-slow-rank")
    asked = []
    with section.Beside(run) as beside:
        beside.start(None)
        got = beside.result([[2, 3]])
    assert got == section.whatif_section(run, None, groups=[[2, 3]])
    real = section.whatif

    def counting(*args, **kw):
        groups = kw["groups"]
        kw["groups"] = lambda: asked.append(1) or (groups() if callable(groups) else groups)
        return real(*args, **kw)

    monkeypatch.setattr(section, "whatif", counting)
    with section.Beside(run) as beside:
        beside.start(None)
        assert beside.result([[2, 3]]) == got and asked == [1]
    # Not started (no clock was handed over): computed when asked for.
    assert section.Beside(run).result([[2, 3]]) == got


def test_a_failure_beside_the_report_is_raised_where_the_section_is_asked_for(ingested, monkeypatch):
    run = ingested("gloo-ddp-4rank-slow-rank")

    def broken(*args, **kw):
        raise RuntimeError("model broke")

    monkeypatch.setattr(section, "whatif", broken)
    with section.Beside(run) as beside:
        beside.start(None)
        with pytest.raises(RuntimeError, match="model broke"):
            beside.result([])
    # A report that fails before it asks: leaving the block hands over no groups, and the section ends.
    monkeypatch.undo()
    with pytest.raises(ValueError), section.Beside(run) as beside:
        beside.start(None)
        raise ValueError("the report failed")
    for thread in threading.enumerate():
        if thread.name == "ddprof-whatif":
            thread.join(timeout=60)
    assert not any(t.name == "ddprof-whatif" and t.is_alive() for t in threading.enumerate())


def test_groups_given_late_are_the_groups_given_at_once(tmp_path):
    from ddprof.analyses.whatif.projections import whatif

    from ddprof.synth import NoisyDP, ingest_generated

    run = ingest_generated(NoisyDP(slow_rank=1, slow_us=3000), tmp_path / "slow")
    at_once = whatif(run.events(), groups=[[0, 1]], attribute=False)
    late = whatif(run.events(), groups=lambda: [[0, 1]], attribute=False)
    assert [(p.edit, p.step_s) for p in late.projections] == [(p.edit, p.step_s) for p in at_once.projections]
    assert "straggler_ranks_0_1" in [p.edit for p in late.projections]
