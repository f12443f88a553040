"""Clean re-runs of one job on one machine, checked one against another: the machine's doing, never the
code's. Real saved reports (``tests/data/reports/gloo-clean-reruns``) where the same ops ran on the same inputs
and took longer, or the ranks waited for a CPU, and generated runs whose ops carry their recorded shapes."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from ddprof.analyses.compare.cause import classify, program_only, same_program, same_work_only, tail_only
from ddprof.analyses.compare.check import check
from ddprof.analyses.compare.job import (
    same_inputs,
    same_program_work,
    same_work_share,
    same_work_told,
    untold,
)
from ddprof.analyses.compare.stats import quantile_shift

from ddprof.inputs.reports import load_report
from ddprof.synth import NoisyDP, ingest_generated
from tests.support.paths import CLEAN_RERUNS

#: (baseline, run): what the cause says first.
PAIRS = {
    ("clean-04", "ddp-check-1"): "the same CPU ops on the same inputs took longer (aten::linear ×1.28, aten::addmm ×1.29)",
    ("clean-08", "clean-00"): "the machine's load: rank 0's training thread waited for a CPU 1.57 ms a step more",
    ("clean-09", "pipeline-check-0"): "the same CPU ops on the same inputs took longer (AddmmBackward0 ×1.17, aten::mm ×1.18",
    ("clean-11", "clean-07"): "the ranks' training threads needed CPU in opposite directions for their CPU ops",
    ("ddp-clean-14", "ddp-clean-10"): "only the slow steps got slower: the p90 step time +3.45 ms, the median +232 µs",
    # the median fell beyond its noise (classify: the step changed), the p90 alone failed: the tail's reading
    ("pipeline8-clean-05", "pipeline8-clean-01"): "only the slow steps got slower: the p90 step time +215 ms, "
                                                  "the median −18.5 ms",
    # the step rose, every op within its noise, the time in gloo's waits: nothing the code runs changed
    ("pipe-check-0", "pipe-clean-05"): "the same program: 100 % of the CPU op time ran the same calls per step",
    ("pipe-clean-05", "pipe-clean-11"): "the same program: 99 % of the CPU op time ran the same calls per step",
    # DDP: the span around AccumulateGrad (the reducer's hook) records no shapes; the rest of the run tells
    ("ddp5-clean-14", "ddp5-clean-04"): "the same CPU ops on the same inputs took longer (aten::linear ×1.10, "
                                        "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad ×1.71",
    # the whole distribution of steps moved (its p90 failed alone), each op within its noise
    ("pipe-clean-03", "pipe-clean-15"): "the same program: 99 % of the CPU op time ran the same calls per step",
}


def report(name: str) -> dict[str, Any]:
    return load_report(CLEAN_RERUNS / f"{name}.json")


@pytest.mark.parametrize("pair", list(PAIRS), ids=lambda p: f"{p[1]}-vs-{p[0]}")
def test_a_clean_rerun_is_the_environment_not_a_regression(pair):
    base, run = report(pair[0]), report(pair[1])
    result = check(run, base)
    assert result["status"] == "environment_changed", result["summary"]
    assert result["cause"]["class"] == "environment" and result["cause"]["summary"].startswith(PAIRS[pair]), \
        result["cause"]
    assert check(run, base, environment="warn")["status"] == "ok"


def test_same_inputs_reads_the_recorded_shapes_and_calls():
    base, run = report("clean-04"), report("ddp-check-1")
    assert same_inputs(base, run, ["aten::addmm", "aten::linear"])
    # the autograd engine's span stands for its node, which records its shapes
    assert same_inputs(base, run, ["autograd::engine::evaluate_function: AddmmBackward0"])
    assert not same_inputs(base, run, [])
    assert not same_inputs(base, run, ["aten::no_such_op"])
    assert not same_inputs(base, run, ["gloo:all_reduce"])  # a collective: its sizes are the workload rule's
    # a pipeline's op against a data-parallel run's: other shapes
    assert not same_inputs(report("clean-09"), run, ["aten::mm"])


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A CPU run, a re-run with its backward ×1.6, each with and without recorded shapes."""
    root = tmp_path_factory.mktemp("reruns")
    out = {}
    for shapes in (True, False):
        for name, factors in (("base", ()), ("slower", (("bwd", 1.6),))):
            sc = NoisyDP(device="cpu", host_us=2000, seed=40 + len(out), factors=factors, shapes=shapes)
            out[(name, shapes)] = load_report(ingest_generated(sc, root / f"{name}-{shapes}" / "t",
                                                               root / f"{name}-{shapes}" / "r").path)
    return out


def test_the_same_work_slower_is_the_host_where_shapes_say_so(generated):
    # with the ops' shapes recorded and unchanged, the backward ×1.6 is the same work taking longer
    cause = classify(generated[("base", True)], generated[("slower", True)])
    assert cause["class"] == "environment", cause
    assert cause["summary"].startswith("the same CPU ops on the same inputs took longer (aten::mm ×1.6")
    # without recorded shapes nothing says what it ran on: a subset of the ops slowed, the code
    cause = classify(generated[("base", False)], generated[("slower", False)])
    assert cause["class"] == "code" and cause["summary"].startswith("some CPU ops slowed, the others did not: aten::mm ×1.6")


def test_same_work_only_needs_per_op_rules_alone_on_the_same_inputs(generated):
    base, run = generated[("base", True)], generated[("slower", True)]
    failed = [o for o in check(run, base)["outcomes"] if o["outcome"] == "fail" and o["rule"] == "kernels"]
    assert failed and {o["subject"] for o in failed} == {"aten::mm"}
    cause = same_work_only(base, run, failed)
    assert cause is not None and cause["class"] == "environment" and "aten::mm ×1.6" in cause["summary"]
    step = {**failed[0], "rule": "step_time", "subject": "all ranks"}
    assert same_work_only(base, run, [*failed, step]) is None  # a step-time rule failed too: classify's to tell
    assert same_work_only(generated[("base", False)], generated[("slower", False)], failed) is None


def test_tail_only_needs_p90_rules_alone_on_one_host_with_the_fast_steps_held():
    base, run = report("ddp-clean-14"), report("ddp-clean-10")
    failed = [o for o in check(run, base)["outcomes"] if o["outcome"] == "fail"]
    assert [o["id"] for o in failed] == ["step_time_p90[all ranks]"]
    assert tail_only(base, run, failed)["class"] == "environment"
    assert tail_only(base, run, [{**failed[0], "rule": "step_time"}]) is None  # the median: classify's to tell
    assert tail_only(base, run, []) is None
    # the other way round the tail fell: nothing to explain
    assert tail_only(run, base, failed) is None
    # ranks on two hosts: a tail is not one host's load
    two_hosts = copy.deepcopy(run)
    for i, row in enumerate(two_hosts["run"]["per_rank"]):
        row["host"] = f"host{i}"
    assert tail_only(base, two_hosts, failed) is None


def test_same_work_share_weighs_the_ops_told_by_their_shapes(generated):
    # a pipeline's ops against a data-parallel run's: told, and other work
    told, same = same_work_share(report("clean-09"), report("ddp-check-1"))
    assert told > 0.5 and same < 0.2
    told, same = same_work_share(report("pipe-check-0"), report("pipe-clean-05"))
    assert told > 0.9 and same == 1.0
    # the backward ×1.6 on the same recorded shapes: the same work; without shapes nothing is told
    assert same_work_share(generated[("base", True)], generated[("slower", True)]) == (1.0, 1.0)
    assert same_work_share(generated[("base", False)], generated[("slower", False)]) == (0.0, 0.0)


def test_same_work_told_lets_an_op_without_shapes_argue_neither_way(generated):
    base, run = report("ddp5-clean-14"), report("ddp5-clean-04")
    span = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    rises = {"aten::linear": 160.0, span: 876.0, "aten::copy_": 455.0}
    assert untold(base, run, list(rises)) == [span]
    # told the same: 615 of 1,491 µs, under half; the run as a whole did the baseline's work
    assert same_program_work(base, run) == pytest.approx(0.86, abs=0.01)
    assert same_work_told(base, run, rises)
    assert not same_work_told(base, run, {span: 876.0})  # nothing told
    # an op told to run other inputs: not the same work, whatever the rest
    assert not same_work_told(report("clean-09"), report("ddp-check-1"), {"aten::mm": 100.0})
    # without recorded shapes nothing is told
    gb, gr = generated[("base", False)], generated[("slower", False)]
    assert not same_work_told(gb, gr, {"aten::mm": 3000.0})
    assert same_work_told(generated[("base", True)], generated[("slower", True)], {"aten::mm": 3000.0})


def on_hosts(report_: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(report_)
    for row, host in zip(out["run"]["per_rank"], hosts, strict=True):
        row["host"] = host
    return out


def test_the_same_program_is_the_host_only_on_one_host_with_the_work_told(generated):
    base, run = report("pipe-check-0"), report("pipe-clean-05")
    text = same_program(base, run)
    assert text is not None and "needed ×1.02–×1.09 the CPU" in text and "on one host (vm)" in text
    assert same_program(base, on_hosts(run, ["a", "b"])) is None  # two hosts: gloo between them crosses a network
    # other work (a pipeline's ops against a data-parallel run's), or nothing told (no recorded shapes)
    assert same_program(report("clean-09"), on_hosts(report("ddp-check-1"), ["vm", "vm"])) is None
    gb, gr = generated[("base", False)], generated[("slower", False)]
    assert same_program(on_hosts(gb, ["h"] * 4), on_hosts(gr, ["h"] * 4)) is None
    gb, gr = generated[("base", True)], generated[("slower", True)]
    assert "100 % of the CPU op time" in same_program(on_hosts(gb, ["h"] * 4), on_hosts(gr, ["h"] * 4))
    # the generated runs record no host: not told to be one host
    assert same_program(gb, gr) is None


def test_program_only_reads_rules_that_failed_without_a_cause():
    base, run = report("pipe-clean-03"), report("pipe-clean-15")
    assert classify(base, run) is None  # nothing moved beyond the noise: the p90 rules failed alone
    failed = [o for o in check(run, base)["outcomes"] if o["outcome"] == "fail"]
    assert [o["id"] for o in failed] == ["step_time_p90[all ranks]", "step_time_p90[rank 1]"]
    assert tail_only(base, run, failed) is None  # the fastest tenth rose too: not the tail alone
    cause = program_only(base, run, failed)
    assert cause["class"] == "environment" and cause["evidence"][1].startswith("p90 step time (all ranks) rose 13 %")
    assert program_only(base, run, []) is None
    assert program_only(base, on_hosts(run, ["a", "b"]), failed) is None


def test_a_p90_of_steps_is_resampled_by_step_not_by_rank():
    """Two ranks' values of one step are one draw: a sample of 24 steps with each value twice (two ranks that
    agree) has the interval of the 24 values, not a narrower one of 48 independent values."""
    rng = np.random.default_rng(1)
    base, run = rng.lognormal(3.0, 0.2, 24), rng.lognormal(3.1, 0.2, 24)
    steps = np.arange(24)
    single = quantile_shift(base, run, 0.9, 0.99)
    twice = quantile_shift(np.repeat(base, 2), np.repeat(run, 2), 0.9, 0.99,
                           groups=(np.repeat(steps, 2), np.repeat(steps, 2)))
    def width(shift: Any) -> float:
        return shift.interval[1] - shift.interval[0]

    # the same draws (one per step), the duplicated values' quantiles interpolated a little differently
    assert width(twice) == pytest.approx(width(single), rel=0.1)
    naive = quantile_shift(np.repeat(base, 2), np.repeat(run, 2), 0.9, 0.99)
    assert width(naive) < 0.9 * width(twice)
    with pytest.raises(ValueError, match="one group label per value"):
        quantile_shift(base, run, 0.9, 0.99, groups=(steps[:3], steps))
