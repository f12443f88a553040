"""The counterfactual of a run whose fault is in its odd steps only (``jobs.py --alternate``): its even steps
are the same job without the fault, run at the same time, so the machine's drift from one run to the next
(on a shared 2-core machine, a clean run's step moved from 70 to 102 ms within minutes) does not move the
truth.

Per step, the run's step time (its first start to its last end over all ranks, as ``ddprof whatif``
measures "the step") replayed as recorded, and projected with one rank as fast as the others (the edit
``ddprof whatif`` calls "making rank R as fast as the others"); the means over the faulty (odd) steps and
over the clean (even) ones, and the trimmed means (the middle 60 % of the steps of each kind: a busy
machine's outlier steps, one in several taking twice its usual time, move them less; on a CI runner the means
of one run were 12.6 % apart where the medians were 3.3 %, the faulty steps' mean carried by a few of them).
The projection of a faulty step should meet the clean steps.

The clean steps are that truth only where the machine gave each rank its core. On a busy machine (another
process busy on a rank's core) a rank that sleeps in its late batch is given the CPU back first when it
wakes, so the rest of its late step runs faster than a clean step does: with the fault itself removed from
the trace, the late steps came out 12-17 % below the clean ones over nine runs whose ranks waited 16-29 %
of a step for a CPU, against -8 … +7 % over the runs whose ranks waited 1-6 %. ``cpu_wait`` is that wait:
the run-queue delay of a rank's training thread a step (the collector's step measures), the largest of the
ranks' medians, as a share of that rank's median step.

Beside it, the late steps with the data loader's spans taking no time (``ddprof whatif``'s "hiding the data
loading"): for an ``input`` fault, the fault itself removed and nothing else. "As fast as the others" also
gives the slow rank the other's speed in all it does: a rank a little slower than the other without any
fault is made faster too, and the others' typical durations are medians over the whole run, which a machine
whose speed drifts within the run moves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from ddprof.analyses.frames.memo import Prepared, collect
from ddprof.analyses.whatif import edits as E
from ddprof.analyses.whatif.critical import loader_ops
from ddprof.analyses.whatif.projections import KEYS
from ddprof.analyses.whatif.replay import plan, replay
from ddprof.analyses.whatif.store import replay_check, step_times

import ddprof
from ddprof.store.rundir import Run


def _pct(x: float, truth: float) -> float:
    """``x``'s error, in % of ``truth``."""
    return 100 * (x - truth) / truth


@dataclass
class Alternate:
    steps: int  # steps of each kind, the fewer
    faulty_s: float  # the faulty steps' mean, replayed as recorded
    clean_s: float  # the clean steps' mean, replayed as recorded: the truth
    projected_s: float  # the faulty steps' mean, projected with the rank as fast as the others
    faulty_trimmed_s: float  # the same three, trimmed means (module doc)
    clean_trimmed_s: float
    projected_trimmed_s: float
    projected_clean_trimmed_s: float  # the clean steps projected with the same edit, trimmed mean
    unloaded_s: float | None  # the faulty steps' mean with the data loading hidden (None: no loader)
    unloaded_trimmed_s: float | None
    cpu_wait: float | None  # the ranks' wait for a CPU, a share of the step (module doc); None: not measured

    @property
    def error_pct(self) -> float:
        """The projection's error, in % of the truth, of the means."""
        return _pct(self.projected_s, self.clean_s)

    @property
    def trimmed_error_pct(self) -> float:
        """The projection's error, in % of the truth, of the trimmed means."""
        return _pct(self.projected_trimmed_s, self.clean_trimmed_s)

    @property
    def premise_pct(self) -> float:
        """How far the edit moves the clean steps, in % of them (trimmed means): 0 where the rank, without its
        fault, is as fast as the others (module doc)."""
        return _pct(self.projected_clean_trimmed_s, self.clean_trimmed_s)

    @property
    def unloaded_error_pct(self) -> float | None:
        """The error, in % of the truth, of the faulty steps with the data loading hidden."""
        return None if self.unloaded_s is None else _pct(self.unloaded_s, self.clean_s)

    @property
    def unloaded_trimmed_error_pct(self) -> float | None:
        """The error, in % of the truth, of the trimmed means with the data loading hidden."""
        return None if self.unloaded_trimmed_s is None else _pct(self.unloaded_trimmed_s, self.clean_trimmed_s)


def trimmed_mean(x: np.ndarray, cut: float = 0.2) -> float:
    """The mean of ``x`` without its ``cut`` lowest and ``cut`` highest values."""
    x = np.sort(x)
    k = int(cut * len(x))
    return float(x[k:len(x) - k].mean())


def cpu_wait(run: Run, first_step: int = 3) -> float | None:
    """The largest over the ranks of a rank's median wait for a CPU a step (the run-queue delay of its
    training thread) over its median step, from the collector's step measures; None where none was measured."""
    f = run.step_measures()
    if not {"wait_ms", "wall_ms"} <= set(f.columns):
        return None
    f = f.filter(pl.col("step") >= first_step).drop_nulls(["wait_ms", "wall_ms"])
    per_rank = f.group_by("rank").agg(pl.col("wait_ms").median() / pl.col("wall_ms").median())
    return float(per_rank.get_column("wait_ms").max()) if per_rank.height else None


def measure(run_dir: Path, rank: int) -> Alternate:
    """The faulty steps projected with ``rank`` as fast as the others, beside the clean steps."""
    run = ddprof.open_run(run_dir)
    check = replay_check(Prepared(collect(run.events()).lazy()))
    model = check.model
    assert model is not None and check.explained, check.reason
    order = check.order or plan(model)
    worker = model.ops["worker"].to_numpy()

    def per_step(edit: E.Edit) -> np.ndarray:
        r = replay(model, delay=edit.delay, dur=edit.dur, xfer=edit.xfer, order=order)
        return step_times(model, r.start, r.end)

    r0 = check.replayed  # the recorded replay, where the check kept it
    as_recorded = step_times(model, r0.start, r0.end) if r0 is not None else per_step(E.recorded(model))
    edited = per_step(E.typical_for(model, worker == rank, KEYS, f"straggler_rank_{rank}", f"making rank {rank} as fast"))
    loading = loader_ops(model)
    unloaded = per_step(E.no_data_loading(model, loading)) if loading.any() else None
    odd = np.asarray(model.steps) % 2 == 1
    assert odd.any() and (~odd).any(), f"steps {list(model.steps)}: faulty and clean ones are both needed"
    return Alternate(
        steps=int(min(odd.sum(), (~odd).sum())),
        faulty_s=float(as_recorded[odd].mean()), clean_s=float(as_recorded[~odd].mean()),
        projected_s=float(edited[odd].mean()),
        faulty_trimmed_s=trimmed_mean(as_recorded[odd]), clean_trimmed_s=trimmed_mean(as_recorded[~odd]),
        projected_trimmed_s=trimmed_mean(edited[odd]), projected_clean_trimmed_s=trimmed_mean(edited[~odd]),
        unloaded_s=None if unloaded is None else float(unloaded[odd].mean()),
        unloaded_trimmed_s=None if unloaded is None else trimmed_mean(unloaded[odd]),
        cpu_wait=cpu_wait(run))
