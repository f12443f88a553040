"""What-if on a real gloo run: a 2-rank DDP job whose rank 1 fetches every other batch 40 ms late, its late
steps projected with rank 1 as fast as the others, against its other steps, the same job without the delay
run at the same time (:mod:`tests.support.alternate`), each rank on a core of its own. The shape of
``benchmarks/whatif_gloo.py``'s input fault, whose medians over repetitions are the figure that counts
(within 5 %); one run guards the mechanism: the delay is projected away, and not more than it.

Two runs one after the other are no truth on a shared machine: a CI runner's clean run once took 98 ms a
step against the 88 ms of the run before it, and the projection, which keeps the faulty run's recorded
durations, fell 16 % below the faster one. Steps interleaved in one run see the same machine."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

from tests.support.alternate import measure  # noqa: E402
from tests.support.distributed_util import run_example  # noqa: E402

pytestmark = pytest.mark.slow
#: The benchmark's job (a step of about 75 ms, outweighing the machine's scheduling noise), 48 steps of each
#: kind (one step in several takes up to twice its usual time on a busy machine: their mean averages it out).
JOB = ("--steps", "100", "--wait", "1", "--warmup", "1", "--active", "96", "--wait-ingest",
       "--hidden", "2048", "--batch", "128", "--loader", "--pin")
#: Twice the benchmark's 20 ms: one run's noise (below) must not hide whether the delay was projected away.
DELAY_MS = 40
#: One run's tolerance. One run's error moves with what its two ranks shared that run: over about 60 runs of
#: this job (20 to 40 ms delays, 24 to 98 steps of each kind, bound to a core or not), -22 … +14 % (a run whose
#: rank 1 was 5 ms a step slower than rank 0 without any delay; a run whose machine slowed by half between its
#: first and second half), most within -11 … +5 %. Projecting away twice the delay would be -40 %.
TOLERANCE = 0.25
#: One run's tolerance for the late steps with the data loading hidden (below).
HIDDEN_TOLERANCE = 0.10


def test_a_slow_rank_projected_away_meets_the_steps_without_it(tmp_path):
    run_example("ddp", tmp_path / "alternate", 2, *JOB, "--fault", "input", "--fault-rank", "1",
                "--fault-ms", str(DELAY_MS), "--alternate", timeout=300)
    m = measure(tmp_path / "alternate", 1)
    assert m.steps >= 40, m
    late = m.faulty_s - m.clean_s
    # The delay shows in the late steps, if not whole: the other rank computes alone meanwhile (20-41 ms seen).
    assert late > 0.25 * DELAY_MS / 1e3, m
    assert abs(m.projected_s - m.clean_s) <= TOLERANCE * m.clean_s, (m, m.error_pct)
    assert m.projected_s < m.faulty_s - 0.5 * late, m  # most of the delay is projected away
    # The fault itself removed (the data loading hidden) leaves neither rank's speed to the other's: -5.8 …
    # +2.0 % over 13 runs of this job (-22 … +15 % for "as fast as the others" on the same runs).
    assert m.unloaded_s is not None, m
    assert abs(m.unloaded_s - m.clean_s) <= HIDDEN_TOLERANCE * m.clean_s, (m, m.unloaded_error_pct)
