"""The check's rules beyond the basics: failures grouped with the straggler first, p90 per rank, busbw per
point-to-point link, bubble per pipeline stage, and absolute rules judged on an interval."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from statistics import median

import numpy as np
import pytest
from ddprof.analyses.compare.check import DifferentJobError, check
from ddprof.analyses.compare.group import family_line, grouped_summary
from ddprof.analyses.compare.rules import merge_rules
from ddprof.analyses.compare.stats import quantile_interval

from ddprof.errors import UsageError
from ddprof.inputs.reports import load_report
from ddprof.render.compare import check_text, junit_xml
from ddprof.synth import NoisyDP, NoisyPipeline, ingest_generated
from ddprof.vocabulary.units import fmt_us
from tests.support.paths import SAMPLES


@pytest.fixture(scope="module")
def dp(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    runs = {"base": NoisyDP(seed=11), "slow": NoisyDP(seed=12, slow_rank=1, slow_us=3000),
            "bw": NoisyDP(seed=13, bw=0.7),
            "base8": NoisyDP(seed=21, ranks=8), "slow8": NoisyDP(seed=22, ranks=8, slow_rank=5, slow_us=3000)}
    return {k: load_report(ingest_generated(sc, root / k / "traces", root / k / "run").path) for k, sc in runs.items()}


SLOT = {"tf": NoisyPipeline.tf, "tb": NoisyPipeline.tb}


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipe")
    runs = {"base": NoisyPipeline(seed=1), "noise": NoisyPipeline(seed=2),
            "thin": NoisyPipeline(seed=3, thin_stage=2),
            "slow": NoisyPipeline(seed=4, tf=SLOT["tf"] * 3 // 2, tb=SLOT["tb"] * 3 // 2, fill=0.6)}
    return {k: load_report(ingest_generated(sc, root / k / "traces", root / k / "run").path) for k, sc in runs.items()}


def by_id(result):
    return {o["id"]: o for o in result["outcomes"]}


def test_a_straggler_in_8_ranks_is_told_first_and_the_per_rank_rules_in_one_line(dp):
    result = check(dp["slow8"], dp["base8"])
    summary = result["summary"]
    assert summary[0].startswith("rank 5 became a straggler: the others wait ")
    per_rank = [o for o in result["outcomes"] if o["rule"] == "step_time" and o["subject"].startswith("rank ")]
    assert len(per_rank) == 8 and all(o["outcome"] == "fail" for o in per_rank)
    shifts = sorted(o["change"] for o in per_rank)
    line = (f"median step time rose on all 8 ranks by {fmt_us(median(shifts))} (median of the per-rank shifts; "
            f"+{fmt_us(shifts[0])} … +{fmt_us(shifts[-1])})")
    assert line in summary
    assert median(shifts) == pytest.approx(3000, rel=0.2)  # µs: the slow rank's 3 ms, less the others' spread
    assert not any(s.startswith("median step time (rank ") for s in summary)  # no line per rank
    assert summary.index(line) > summary.index(next(s for s in summary if s.startswith("median step time (all")))
    assert sum("likely cause: rank 5 became a straggler" in s for s in summary) == 1  # the cause said once
    text = check_text(result)
    assert text.index("rank 5 became a straggler") < text.index("median step time rose on all 8 ranks")
    assert text.count("median step time (rank ") == 0
    # JUnit still has one test case per rule, each per-rank rule failing on its own
    cases = ET.fromstring(junit_xml(result).split("\n", 1)[1]).find("testsuite").findall("testcase")
    failed_ranks = {c.get("name") for c in cases
                    if c.get("classname") == "ddprof.check.step_time" and c.find("failure") is not None}
    assert failed_ranks == {"all ranks", *(f"rank {r}" for r in range(8))}


def test_family_line_names_the_ranks_when_not_all_failed():
    outs = [{"rule": "step_time", "subject": f"rank {r}", "outcome": "fail" if r in (1, 2, 3, 6) else "pass",
             "change": c, "message": f"m{r}", "cause": None} for r, c in enumerate([0, 900, 1000, 1100, 0, 0, 1200, 0])]
    fails = [o for o in outs if o["outcome"] == "fail"]
    assert family_line("step_time", fails, 8) == ("median step time rose on 4 of 8 ranks (1–3, 6) by 1.05 ms "
                                                  "(median of the per-rank shifts; +900 µs … +1.2 ms)")
    assert grouped_summary(outs) == [family_line("step_time", fails, 8)]
    assert grouped_summary(outs[:2]) == ["m1"]  # one failed rank keeps its own sentence


def test_p90_per_rank(dp):
    result = check(dp["slow"], dp["base"])
    ids = by_id(result)
    for r in range(4):
        o = ids[f"step_time_p90[rank {r}]"]
        assert o["samples"] == [20, 20] and o["outcome"] == "fail" and o["interval"][0] > 0
    assert all(ids[f"step_time_p90[rank {r}]"]["outcome"] == "pass" for r in range(4)
               for ids in [by_id(check(dp["base"], dp["base"]))])


def test_busbw_per_point_to_point_link_and_bubble_per_stage(pipe):
    same = check(pipe["noise"], pipe["base"])
    assert same["status"] == "ok", same["summary"]
    ids = by_id(same)
    stages = [i for i in ids if i.startswith("bubble[")]
    assert stages == [f"bubble[stage {p}]" for p in range(4)]
    assert ids["bubble[stage 2]"]["baseline"] == pytest.approx(40, abs=1)  # 1 − 6·0.9/9
    links = {o["subject"] for o in same["outcomes"] if o["rule"] == "busbw" and "→" in o["subject"]}
    assert links == {f"sendrecv 4 MiB rank {a}→{b}" for a, b in ((0, 1), (1, 2), (2, 3), (1, 0), (2, 1), (3, 2))}
    thin = check(pipe["thin"], pipe["base"])  # stage 2's kernels fill 0.6 of their slots, not 0.9
    bubble = by_id(thin)["bubble[stage 2]"]
    assert bubble["run"] == pytest.approx(60, abs=1) and bubble["change"] == pytest.approx(20, abs=1.5)  # 1 − 6·0.6/9
    assert bubble["message"].startswith("pipeline bubble (stage 2) rose 19.") or bubble["message"].startswith(
        "pipeline bubble (stage 2) rose 20.")  # the amount after the direction word, without a second sign
    # its compute fell and its step held: it waits more because it got faster, and the pipeline is no slower
    assert bubble["outcome"] == "pass" and "it waits more for the other stages because it got faster" in \
        bubble["message"] and thin["status"] == "ok", thin["summary"]
    slow = check(pipe["slow"], pipe["base"])  # slots 1.5x longer, the same compute in them: a slower schedule
    failed = {o["subject"] for o in slow["outcomes"] if o["rule"] == "bubble" and o["outcome"] == "fail"}
    # the gate fails (its cause: the kernels kept their times, so the environment: environment_changed)
    assert slow["status"] in ("regression", "environment_changed") and failed == {f"stage {p}" for p in range(4)}
    assert by_id(slow)["bubble[stage 2]"]["run"] == pytest.approx(60, abs=1.5)


def test_the_real_pipeline_run_per_stage(pipe, tmp_path):
    real = load_report(SAMPLES / "gloo-pipeline-4stage", cache=tmp_path / "c")
    result = check(real, real)
    bubbles = [o for o in result["outcomes"] if o["rule"] == "bubble"]
    assert [o["subject"] for o in bubbles] == [f"stage {p}" for p in range(4)]
    assert result["status"] == "ok" and all(o["outcome"] == "pass" and o["change"] == 0 for o in bubbles)
    # the generated pipeline is another job (GPU and NCCL, not CPU and gloo): refused with the reason
    with pytest.raises(DifferentJobError, match="device"):
        check(pipe["thin"], real)


def test_quantile_interval_known_answer_and_coverage():
    s = quantile_interval(np.arange(1, 21), 0.5, 0.95)
    assert (s.low, s.high) == (6.0, 15.0)  # the order statistics of the binomial table
    assert quantile_interval([1, 2, 3, 4, 5], 0.5, 0.95).interval is None
    rng = np.random.default_rng(3)
    covered = sum(lo <= 0 <= hi for lo, hi in
                  (quantile_interval(rng.normal(0, 1, 40), 0.5, 0.9).interval for _ in range(400)))
    assert covered / 400 >= 0.87  # at least the confidence, give or take the 400 trials' own spread


def absolute_rule(result, metric):
    (o,) = [o for o in result["outcomes"] if o["rule"] == "absolute" and o["id"].startswith(f"absolute[{metric}")]
    return o


def test_absolute_busbw_is_judged_on_its_interval(dp):
    def rule(**kw):
        return merge_rules({"absolute": [{"metric": "busbw_gbps", "op": "all_reduce", "bytes": "64MiB", **kw}]})
    ok = absolute_rule(check(dp["base"], dp["base"], rule(min=75)), "busbw_gbps")
    # 1.5 · 64 MiB / 1.2 ms = 83.9 GB/s, give or take the noise
    assert ok["outcome"] == "pass" and ok["run"] == pytest.approx(83.9, rel=0.05) and ok["interval"][0] >= 75
    assert ok["message"].endswith("required ≥ 75 GB/s: the whole interval meets the bound")
    assert "99 % interval" in ok["message"] and "20 instances" in ok["message"]
    low = absolute_rule(check(dp["bw"], dp["base"], rule(min=75)), "busbw_gbps")
    assert low["outcome"] == "fail" and low["interval"][1] < 75 and low["run"] == pytest.approx(0.7 * 83.9, rel=0.05)
    assert low["message"].endswith("the whole interval violates the bound: beyond the noise")
    mid = (ok["interval"][0] + ok["interval"][1]) / 2  # a bound inside the interval: the noise cannot tell
    assert absolute_rule(check(dp["base"], dp["base"], rule(min=mid)), "busbw_gbps")["outcome"] == "pass"
    strict = absolute_rule(check(dp["base"], dp["base"], rule(min=mid, strict=True)), "busbw_gbps")
    assert strict["outcome"] == "fail" and "strict" in strict["message"]
    with pytest.raises(UsageError, match="strict must be true or false"):
        rule(min=1, strict="yes")


def test_absolute_exposed_communication(dp):
    rules = merge_rules({"absolute": [{"metric": "exposed_comm_pct", "max": 20}]})
    ok = absolute_rule(check(dp["base"], dp["base"], rules), "exposed_comm_pct")
    assert ok["outcome"] == "pass" and ok["interval"][1] <= 20 and ok["samples"] == [0, 80]
    slow = absolute_rule(check(dp["slow"], dp["base"], rules), "exposed_comm_pct")
    # three ranks of four wait 3 ms more per step in the all-reduce: their exposed share is about 30 %
    assert slow["outcome"] == "fail" and slow["interval"][0] > 20 and slow["run"] == pytest.approx(30, abs=5)
    assert slow["message"].startswith("exposed_comm_pct (all ranks): median ")
    assert "required ≤ 20.0 %: the whole interval violates the bound" in slow["message"]
    none = merge_rules({"absolute": [{"metric": "busbw_gbps", "op": "all_gather", "bytes": 1, "min": 1}]})
    gone = absolute_rule(check(dp["base"], dp["base"], none), "busbw_gbps")
    assert gone["outcome"] == "fail" and "the run has no such value" in gone["message"]
