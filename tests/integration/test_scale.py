"""Analyses a group of ranks at a time (``ddprof.analyses.rank_groups``): the report is the same, byte for
byte, whatever the group size, and no step reads more than one group's events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ddprof.analyses import rank_groups
from ddprof.analyses.report import analyse, build_report, read_events
from ddprof.analyses.sections import DETAIL

from ddprof.errors import UsageError
from ddprof.ingestion import ingest
from ddprof.report.tables import rounded
from ddprof.store.atomic import json_text
from ddprof.store.rundir import Run, open_run
from ddprof.synth import Spec, generate
from tests.support.paths import SAMPLES, TRACES

RUNS = {
    "synth-dp-tp-hosts": lambda d: generate(Spec(ranks=24, tp=2, steps=2, kernels=36, gpus_per_host=8,
                                                 clock_offset_us={2: 3000.0}, slow={13: 1.4}), d) and d / "traces",
    "synth-pp-1f1b": lambda d: generate(Spec(ranks=16, pp=4, micro_batches=4, steps=2, kernels=40), d) and d / "traces",
    "dlrm-8xV100-nccl": lambda d: SAMPLES / "dlrm-8xV100-nccl",
    "gloo-ddp-4rank-slow-rank": lambda d: SAMPLES / "gloo-ddp-4rank-slow-rank",
    "hta-a100-16rank-rank0": lambda d: TRACES / "hta" / "a100-16rank-rank0",
}


@pytest.fixture(scope="module", params=list(RUNS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    d = tmp_path_factory.mktemp(request.param)
    traces = RUNS[request.param](d)
    if not traces.exists():
        pytest.skip(f"{traces} is not here")
    return ingest([traces], d / "run")


def _report(run: Run, budget: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """The JSON text of the report, and its detail tables' rows."""
    monkeypatch.setenv("DDPROF_GROUP_EVENTS", budget)
    report = build_report(open_run(run.path))
    return json_text(report), {name: report.table(name).to_dicts() for name in DETAIL}


def test_same_report_whatever_the_groups(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """One group, groups of a few ranks, and the whole event table at once: the same bytes (and the same
    detail tables)."""
    whole = _report(run, "1000000000", monkeypatch)
    assert _report(run, "1", monkeypatch) == whole
    assert _report(run, str(max(1, sum(run.rank_info(r)["events"] for r in run.ranks) // 3)), monkeypatch) == whole
    sections = analyse(read_events(run), run.world_size)  # the event-table entry point, every rank at once
    report = build_report(open_run(run.path))
    if not report["clocks"]["applied"]:
        assert json_text({k: report[k] for k in sections if k in report}) == json_text(
            rounded({k: v for k, v in sections.items() if k in report}))  # a built report's floats are rounded


def test_each_read_holds_one_group(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of events asks for the ranks of one group, never the run's."""
    asked: list[list[int]] = []
    original = Run.collect_events

    def spy(self: Run, columns: Any = None, ranks: list[int] | None = None, where: Any = None) -> Any:
        asked.append(list(self.ranks if ranks is None else ranks))
        return original(self, columns, ranks, where)

    monkeypatch.setattr(Run, "collect_events", spy)
    monkeypatch.setenv("DDPROF_GROUP_EVENTS", "1")
    build_report(open_run(run.path))
    groups = rank_groups.rank_groups(run)
    assert asked and all(a in groups for a in asked)
    if len(run.ranks) >= 2 * rank_groups.MIN_GROUP_RANKS:
        assert max(len(a) for a in asked) < len(run.ranks)


def test_groups_follow_the_budget(tmp_path: Path) -> None:
    run = ingest([generate(Spec(ranks=10, steps=1, kernels=12), tmp_path) and tmp_path / "traces"], tmp_path / "run")
    per_rank = run.rank_info(0)["events"]
    assert rank_groups.rank_groups(run, 1) == [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9]]  # 4 ranks at least; no short tail
    assert rank_groups.rank_groups(run, 5 * per_rank) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert rank_groups.rank_groups(run, 10**9) == [list(range(10))]


def test_budget_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPROF_GROUP_EVENTS", "2500")
    assert rank_groups.group_budget() == 2500
    monkeypatch.setenv("DDPROF_GROUP_EVENTS", "lots")
    with pytest.raises(UsageError, match="DDPROF_GROUP_EVENTS"):
        rank_groups.group_budget()
    monkeypatch.delenv("DDPROF_GROUP_EVENTS")
    assert rank_groups.group_budget() == rank_groups.GROUP_EVENTS
