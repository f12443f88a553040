"""What-if on a real gloo run: a 2-rank DDP job whose rank 1 fetches every other batch 40 ms late, its late
steps projected with rank 1 as fast as the others, against its other steps, the same job without the delay
run at the same time (:mod:`tests.support.alternate`), each rank on a core of its own. The shape of
``benchmarks/whatif_gloo.py``'s input fault, whose medians over repetitions are the figure that counts
(within 5 %); one run guards the mechanism: the delay is projected away, and not more than it.

Two runs one after the other are no truth on a shared machine: a CI runner's clean run once took 98 ms a
step against the 88 ms of the run before it, and the projection, which keeps the faulty run's recorded
durations, fell 16 % below the faster one. Steps interleaved in one run see the same machine. On a machine
busy with other work (the ranks waiting for a CPU, :data:`BUSY`) the steps without the delay are no truth
either (:mod:`tests.support.alternate`): the mechanism is asserted and the accuracy skipped, saying why. Nor
are they the truth of "rank 1 as fast as the others" where rank 1 without its delay did not run at the speed of rank
0 (:data:`PREMISE`, measured on the clean steps themselves): there the projection is held to the clean steps
under the same edit, and the fault itself removed (the data loading hidden) to the clean steps."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

from tests.support.alternate import measure  # noqa: E402
from tests.support.distributed_util import run_example  # noqa: E402

pytestmark = pytest.mark.slow
#: The benchmark's job (a step of about 75 ms, outweighing the machine's scheduling noise), 48 steps of each
#: kind (one step in several takes up to twice its usual time on a busy machine: trimmed means leave it out).
JOB = ("--steps", "100", "--wait", "1", "--warmup", "1", "--active", "96", "--wait-ingest",
       "--hidden", "2048", "--batch", "128", "--loader", "--pin")
#: Twice the benchmark's 20 ms: one run's noise (below) must not hide whether the delay was projected away.
DELAY_MS = 40
#: One run's tolerance for the late steps projected with rank 1 as fast as the others, where rank 1 without its
#: delay was as fast as rank 0 (:data:`PREMISE`): -10.0 … +2.5 % of the trimmed means over the 15 such runs of 25
#: of this job and its 24-step variant on a free machine. Projecting away twice the delay would be -40 %.
TOLERANCE = 0.15
#: One run's tolerance for the late steps with the data loading hidden (the fault itself removed): -8.3 … +6.8 %
#: over the same 25 runs, whatever the ranks' speeds.
HIDDEN_TOLERANCE = 0.10
#: "As fast as the others" gives rank 1 rank 0's typical durations in all it does: where rank 1 without its
#: delay was faster or slower than rank 0 (the same edit moves the clean steps by more than this share), the clean
#: steps are not that edit's truth. The edit's error tracked that move on a free machine: -20.1 % with the
#: clean steps moved -20.4 %, +13.2 % with +12.9 %, -11.6 % with -10.8 % (unbound and bound runs alike).
PREMISE = 0.05
#: The ranks' wait for a CPU (a share of the step, :func:`tests.support.alternate.cpu_wait`) above which the
#: machine, not the job, decides the late steps' speed: 1-6 % on runs with each rank on a free core, 16-29 % with
#: one or two other busy processes on the machine.
BUSY = 0.10


def test_a_slow_rank_projected_away_meets_the_steps_without_it(tmp_path):
    run_example("ddp", tmp_path / "alternate", 2, *JOB, "--fault", "input", "--fault-rank", "1",
                "--fault-ms", str(DELAY_MS), "--alternate", timeout=300)
    m = measure(tmp_path / "alternate", 1)
    said = (f"{m}: error {m.trimmed_error_pct:+.1f} %, with the data loading hidden "
            f"{m.unloaded_trimmed_error_pct:+.1f} %, the clean steps moved by the edit {m.premise_pct:+.1f} % "
            "(trimmed means)")
    assert m.steps >= 40, said
    late = m.faulty_trimmed_s - m.clean_trimmed_s
    # The delay shows in the late steps, if not whole: the other rank computes alone meanwhile (13-41 ms seen).
    assert late > 0.25 * DELAY_MS / 1e3, said
    # Whatever the machine: the edit takes most of the late steps' excess off, against the same edit on the
    # clean steps (at most 17 % of the excess left over 25 runs on a free machine, less than none on a busy one), and hiding the
    # data loading takes time off the late steps.
    assert m.projected_trimmed_s - m.projected_clean_trimmed_s < 0.5 * late, said
    assert m.unloaded_trimmed_s is not None and m.unloaded_trimmed_s < m.faulty_trimmed_s, said
    if m.cpu_wait is None or m.cpu_wait > BUSY:
        pytest.skip(f"the machine was busy: a rank waited for a CPU {100 * (m.cpu_wait or 0):.0f} % of a step (or no "
                    f"wait was measured), so its steps without the delay are no truth for the projection: {said}")
    # The fault itself removed leaves neither rank's speed to the other's.
    assert abs(m.unloaded_trimmed_s - m.clean_trimmed_s) <= HIDDEN_TOLERANCE * m.clean_trimmed_s, said
    # Where rank 1 without its delay ran at another speed than rank 0, "as fast as the others" moves the clean steps
    # too: their truth for that edit is then the clean steps under the same edit (the delay the only difference).
    moved = abs(m.premise_pct) > 100 * PREMISE
    truth = m.projected_clean_trimmed_s if moved else m.clean_trimmed_s
    assert abs(m.projected_trimmed_s - truth) <= TOLERANCE * truth, said
    assert m.projected_trimmed_s < truth + 0.5 * late, said  # most of the delay is projected away
