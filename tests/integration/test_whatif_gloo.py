"""What-if on a real gloo run: a 2-rank DDP job whose rank 1 fetches every other batch 20 ms late, its late
steps projected with rank 1 as fast as the others, against its other steps, the same job without the delay
run at the same time (:mod:`tests.support.alternate`), each rank on a core of its own. One repetition of
``benchmarks/whatif_gloo.py``, whose medians over repetitions are the figure that counts.

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
DELAY_MS = 20
#: One run's tolerance: the benchmark's medians meet 5 %; one run carries its own noise (-5.5 … -1.8 % over
#: the benchmark's 5 repetitions of this shape; -12 … +7 % with 24 steps of each kind and the ranks unpinned).
TOLERANCE = 0.15


def test_a_slow_rank_projected_away_meets_the_steps_without_it(tmp_path):
    run_example("ddp", tmp_path / "alternate", 2, *JOB, "--fault", "input", "--fault-rank", "1",
                "--fault-ms", str(DELAY_MS), "--alternate", timeout=300)
    m = measure(tmp_path / "alternate", 1)
    assert m.steps >= 40, m
    late = m.faulty_s - m.clean_s
    assert late > 0.5 * DELAY_MS / 1e3, m  # the delay shows in the late steps
    assert abs(m.projected_s - m.clean_s) <= TOLERANCE * m.clean_s, (m, m.error_pct)
    assert m.projected_s < m.faulty_s - 0.5 * late, m  # most of the delay is projected away
