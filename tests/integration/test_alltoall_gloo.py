"""All-to-all traffic on a real gloo run: a mixture-of-experts layer whose router sends 60 % of every
rank's tokens to rank 1's expert (4 local ranks, ``all_to_all_single`` with uneven splits)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

from ddprof.analyses.report import build_report  # noqa: E402

import ddprof  # noqa: E402
from tests.support.distributed_util import run_example  # noqa: E402

pytestmark = pytest.mark.slow
WORLD, TOKENS, HOT, SHARE, WIDTH = 4, 600, 1, 0.6, 64


#: Runs of the job at most, until its hot rank arrives last at a combine at least once (below).
RUNS = 3


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """The job and its report. The hot rank's expert computes on 2.4x the tokens, so it arrives last at the
    combines, but 4 ranks share 2 cores: the scheduler may put another rank last at every combine of a run
    (locally 3 to 6 of 6 are the hot rank's; CI saw 2 of 6, and once none). Such a run has nothing for the
    load rule to tell apart, so the job runs again, up to :data:`RUNS` times."""
    for attempt in range(RUNS):
        run_dir = tmp_path_factory.mktemp(f"moe{attempt}") / "run"
        job = run_example("moe", run_dir, WORLD, "--steps", "5", "--wait", "1", "--warmup", "1", "--active", "3",
                          "--tokens", str(TOKENS), "--hot-rank", str(HOT), "--hot-share", str(SHARE),
                          "--moe-width", str(WIDTH), "--wait-ingest")
        report = build_report(ddprof.open_run(run_dir))
        if report["alltoall"]["explained"] >= 1:
            break
    return job, report


def test_splits_are_read_from_the_trace(moe):
    job, report = moe
    row = WIDTH * 4
    facts = job.facts
    pairs = report.table("alltoall").to_dicts()
    steps = len(report["run"]["steps"])
    assert len(pairs) == 2 * steps  # a dispatch and a combine per traced step
    assert all(p["with_splits"] for p in pairs)
    # the router's splits, known in advance: 360 tokens to rank 1, 80 to each other rank
    send = facts[0]["send_splits"]
    assert send == [80, 360, 80, 80]
    dispatch = [p for p in pairs if p["index"] % 2 == 0]
    combine = [p for p in pairs if p["index"] % 2 == 1]
    for p in dispatch:  # rank 1 receives 4 · 360 tokens, the mean rank 600: 2.4 exactly; sends even
        assert p["max_recv_rank"] == HOT and p["recv_imbalance"] == pytest.approx(2.4)
        assert p["send_imbalance"] == pytest.approx(1.0) and p["bytes"] == WORLD * TOKENS * row
    for p in combine:  # the way back: rank 1 sends 2.4× the mean
        assert p["max_send_rank"] == HOT and p["send_imbalance"] == pytest.approx(2.4)
        assert p["recv_imbalance"] == pytest.approx(1.0)
    s = report["alltoall"]
    assert s["instances"] == len(pairs) and s["ranks"] == list(range(WORLD))
    inst = len(pairs) // 2
    # summed over the traced steps: dispatch row -> column plus combine (its transpose)
    for src in range(WORLD):
        for dst in range(WORLD):
            want = (send[dst] + send[src]) * row * inst
            assert s["matrix"][src][dst] == want, (src, dst)
    assert all(st["recv_imbalance"] == pytest.approx((360 * 4 + 600) / 1200) for st in s["by_step"])


def test_load_imbalance_is_not_a_straggler(moe):
    _, report = moe
    # the hot rank's expert computes on 2.4× the tokens: it arrives last at combines, for its load (at how many
    # depends on the scheduling of 4 ranks on 2 shared cores: the fixture's runs)
    assert report["alltoall"]["explained"] >= 1, f"the hot rank was last at no combine in {RUNS} runs"
    assert HOT not in report["stragglers"]["ranks"]
    lines = [v for v in report["verdicts"] if "all-to-all" in v]
    assert lines and lines[0].startswith(f"rank {HOT} receives") and "expert load imbalance" in lines[0]
    assert s_hot(report) == (HOT, len(report.table("alltoall")) // 2, pytest.approx(2.4))
    assert lines[0].startswith(f"rank {HOT} receives 2.4× the mean at ")
    # without the load rule the hot rank, last at most combines, would be named; it is not (another rank may
    # be, by the scheduling noise of 4 ranks on a shared machine: not asserted)
    assert not any(v.startswith(f"rank {HOT} is the straggler") for v in report["verdicts"])


def s_hot(report):
    s = report["alltoall"]
    return s["hot_rank"], s["hot_instances"], s["hot_recv_imbalance"]
