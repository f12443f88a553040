"""What-if on real gloo runs: a 2-rank DDP job whose rank 1 fetches each batch 20 ms late, projected without
that rank, against the same job run again without the delay. One pair, the CI shape of
``benchmarks/whatif_gloo.py`` (whose medians over repetitions are the figure that counts: one run of this
2-core machine differs from the next by up to 8 % at this size)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

from ddprof.analyses.whatif.projections import whatif  # noqa: E402

import ddprof  # noqa: E402
from tests.support.distributed_util import run_example  # noqa: E402

pytestmark = pytest.mark.slow
#: The benchmark's job (a step of about 75 ms, outweighing the machine's scheduling noise), fewer steps.
JOB = ("--steps", "16", "--wait", "1", "--warmup", "1", "--active", "12", "--wait-ingest",
       "--hidden", "2048", "--batch", "128", "--loader")
#: One pair's tolerance: the benchmark's medians meet 5 %; one pair carries both runs' noise.
TOLERANCE = 0.15


def _step(run_dir, slow: int | None) -> tuple[float, float | None]:
    w = whatif(ddprof.open_run(run_dir).events(), stragglers=[slow] if slow is not None else None, comm_k=[],
               host_gaps=False, rebalance=False, data_loading=False, attribute=False, critical=False)
    assert w.explained, w.reason
    return w.step_s, (w.projections[0].step_s if slow is not None else None)


def test_a_slow_rank_projected_away_meets_the_run_without_it(tmp_path):
    """The job without the delay runs before and after the faulty one. The machine's speed moves between
    runs (a CI runner's clean run once took 98 ms a step against its usual 75; the faulty run, whose
    recorded durations the projection keeps, is as exposed), so the truth is the clean runs' range: the
    projection must fall within the tolerance of one of them."""
    run_example("ddp", tmp_path / "clean-0", 2, *JOB, "--fault", "none")
    run_example("ddp", tmp_path / "slow", 2, *JOB, "--fault", "input", "--fault-rank", "1", "--fault-ms", "20")
    run_example("ddp", tmp_path / "clean-1", 2, *JOB, "--fault", "none")
    faulty, projected = _step(tmp_path / "slow", 1)
    cleans = sorted(_step(tmp_path / f"clean-{i}", None)[0] for i in (0, 1))
    assert projected is not None
    assert faulty > 1.1 * cleans[0], (faulty, cleans)  # the 20 ms a batch shows in the step
    assert (1 - TOLERANCE) * cleans[0] <= projected <= (1 + TOLERANCE) * cleans[-1], (faulty, projected, cleans)
    assert projected < faulty - 0.5 * (faulty - cleans[-1])  # most of the delay is projected away
