"""What kind of change a run shows against its baseline: a cause class with its evidence.

``classify(base, run)`` returns None when nothing changed beyond the noise, else::

    {"class": "environment" | "code" | "communication" | "rank" | "workload" | "input" | "unclear",
     "rank": int | None, "summary": str, "evidence": [str, ...]}

It reads from each report (a change is beyond the noise when its 99 % Hodges–Lehmann interval,
:mod:`.stats`, excludes zero):

* **each rank's own time** per step: the step minus its exposed communication (:func:`.samples.own_us`).
  A slow rank raises its own time; the others wait for it in the collectives, so theirs stays. A rank
  *rose* when its shift is at least the step-time tolerance (``tolerance_pct`` of its median, at least
  ``min_change_us``) and beyond the noise, its own or, since one rank's few steps rarely tell, that of
  the ranks' own (or step) times pooled;
* **each op's time per step** (``kernels_by_step``: GPU kernels on GPU ranks, CPU ops on CPU ranks;
  communication left out), as the factor run / baseline of the medians. An op *slowed* when it is beyond
  the noise and ×1.1 (``OP_CHANGE``) or more, *kept its time* when it is within the noise or within 5 %
  (``OP_SAME``). Ops under 2 % (``OP_MIN_SHARE``) of the compared time are too short to tell;
* **bus bandwidth** per collective op and message size (of at least the busbw rule's ``min_bytes``, 1 MiB:
  below, a collective's time is mostly its fixed cost), and the communication kernels' time.

The classes, decided in this order:

1. **workload**: other collectives per step or other message sizes (:func:`.job.workload_changes`), or
   more or fewer ops per step of the same names. Ops of other names are **code**: an op of at least 1 % of
   the step that the other side does not hold, when that side kept all its ops; when it kept only its top
   N, only with the ops per step changed too (on a busy machine one op can grow past the others' top N);
1a. **environment**, the machine's load, where both runs carry the collector's step measures (the
   report's ``job.cpu``: :mod:`ddprof.analyses.job`): something rose, and a rank's training thread waited
   for a CPU (the kernel's run-queue delay) more than in the baseline by at least half of the rise
   (``WAIT_EXPLAINS``: of the rank whose own time rose most, its own; where no rank rose alone, the
   step's, and any rank), while its own process's other threads, and the thread itself, took less than
   half as much more CPU (``OWN_THREADS``), and its host's ranks together waited more than they ran more
   (the job's own extra work makes its ranks wait for each other's CPUs): other processes on its host took
   the CPU, not the rank's work (a busy thread of its own process is that rank's: rule 2); not where the
   ops ran on other recorded input shapes (more work of the job's own: rule 1b);
2. **rank** (with ``rank``): one rank rose beyond its own noise, and every other rank's own time moved
   less than the tolerance and a quarter of that rank's shift, or less than a tenth of it, or less than the
   tolerance and within its own noise (a clean pipeline's first stage, 826 µs a step against a tolerance of
   1.03 ms, beside its last stage's rise of 3.07 ms, is not a second rank that slowed). Not when all
   ranks slowed together, nor where both runs' step measures say every rank's training thread needed more
   CPU for its step, the others at least half as much more as that rank and that rank's extra CPU at least
   half its rise (:func:`every_thread_busier`: their rise went into their wait for it). On a CPU run where that rank is a new straggler, the others' rise less the
   extra wait it causes each of them per step (the stragglers section's): a gloo rank waits for a late
   peer inside the host op that needs the collective's result, so its own time holds that wait;
   **rank** too when the run says a rank pauses now and then (its straggler cause *stalls*; the
   environment instead where rule 1a's test of the machine's load holds for that rank, the rise to
   explain its own time's shift or the rise of its mean, which holds the pauses, whichever is larger,
   :mod:`ddprof.analyses.straggler_cause`) and the baseline does not: a few steps far longer, apart from
   every other rank's longest (a busy machine pauses every rank alike, and names none);
   **environment** when that rank is a CPU rank (no device work) the run's own straggler analysis sets
   aside as its host's doing, or that names no cause of its own and rose under ``CONTENTION_MIN`` (1.5×):
   a host shares its cores unevenly from run to run (:func:`_host_shared`); and when no rank rose and one
   CPU rank alone got faster under that factor: the baseline's host served it slower; and when no rank's
   own time rose beyond its noise (it holds the others' waits) but one CPU rank holds the rise of the
   ranks' compute per step (:func:`_lone_compute`) and the host explains it so;
   **workload** too, after the one-rank test, when the top CPU ops ran on other recorded input shapes
   (:func:`.job.other_shapes`: a batch or a model resized; one rank alone slowing with them is **rank**, its
   evidence saying so: an uneven batch, when the run names it a new straggler);
**input**, after these: the data loader's time per rank and step (:func:`.samples.loading_us`, the host
   time in the spans named like a data loader) rose beyond the noise by the step-time tolerance or more,
   and by at least half of what rose beyond the noise (the ranks' own time, or the step): fewer loader
   workers, slower storage or preprocessing, not the model's code (a step in a loader launches nothing, so
   a GPU run's kernels keep their times, which would otherwise read as the environment);
3. **environment**, unevenly: two or more ranks rose, by factors apart by at least 0.5 and 3 times
   (×1.1 on one, ×1.5 on another): a change of the code moves every rank of a data-parallel job alike, a
   busy machine does not (not for pipeline runs, whose stages do different work); so too when two or more
   ranks rose and another's own time moved less than a quarter of theirs (:func:`_held`: a clean 4-rank
   gloo run against another had ranks 0-2 ×1.13–×1.28 and rank 3 ×1.02, its backward matmuls ×2.1 where
   they shared a core with the gloo threads);
   On a CPU data-parallel run, also when the ranks' compute per step moved so (:func:`_uneven_compute`,
   from ``UNEVEN_COMPUTE`` = 0.2 apart): ranks on a busy core slow, the others less or not;
4. **code**: the ops that slowed account for at least half the rise of the own time per step
   (``EXPLAINED``) while the others kept their time: they hold at least 25 % (``SAME_SHARE``) of the
   compared time, or half of the ops, and their time per step together is within 5 % (``OP_SAME``) of the
   baseline's, or within 10 % and the noise (a busy machine slows ops unevenly: ops each within their
   noise may all have risen); **environment** instead where rule 1a's test of the machine's load holds for
   the ops' rise (4a: a clean DDP re-run, ``AccumulateGrad`` ×1.73 and ``c10d::allreduce_`` ×4.00, +1.41 ms a
   step, while both ranks' training threads waited 1.3–1.6 ms a step more for a CPU), and on a CPU run where
   every op that slowed ran the same calls per step on the same recorded input shapes and types
   (:func:`.job.same_work_told`, 4b; ops whose inputs cannot be told, as the autograd engine's span around
   a DDP ``AccumulateGrad``, argue neither way, where those told hold half the rise or more): the same work
   took longer, and nothing in the trace says the code changed
   what runs (the forward's ``aten::linear``/``aten::addmm`` ×1.28 of a clean re-run, its backward ×1.07: a
   host slows its matrix products most, which share its caches and memory bandwidth with other processes);
   without recorded shapes a subset of the ops slowing stays the code's;
5. **environment**: two or more ranks rose, and no subset of the ops explains it, or one rose and every
   rank's training thread needed more CPU for its step as rule 2 leaves it (:func:`every_thread_busier`): every op slowed by a
   similar factor (on a CPU run everything is host work, the gloo transfers too, so this is what a busier
   machine does), or the device kernels kept their times (the GPUs wait for the host); on a CPU run also
   where ops slowed beyond the noise and no rank's own time did, when three quarters of the op time or more
   slowed by 5 % or more and every rank's training thread needed ×1.1 more CPU or more (a clean 2-rank gloo
   run against another: the ops ×1.11–×1.41, the threads ×1.15 and ×1.19, its step within its noise), or
   when the ranks' threads needed CPU in opposite directions for their ops, one ×0.95 or less and another
   ×1.05 or more (a clean 2-stage pipeline pair: ×0.93 and ×1.08, its backward matmuls +10–13 %): the host
   served them unevenly, and a change of the code does not make a rank's work need less;
6. **communication**: no rank rose (or those that did only with the step's rise lending them significance,
   each by less than half of it: the step rose by its communication), and busbw fell by at least 10 %
   (``BW_CHANGE``) beyond the noise, or
   the communication kernels slowed; **environment** instead on a CPU run whose ranks all ran on one host
   (gloo there moves the bytes with the host's CPUs and memory: no interconnect to blame), **unclear** on
   a CPU run that does not record its ranks' hosts (traces of plain ``torch.profiler``: one host's load
   and a network between hosts look alike);
7. **environment**: a new straggler while no rank rose: it arrives late without doing more work;
8. **environment** when the step time rose in its slow steps only: its fastest tenth (the 10th percentile,
   pooled over the ranks) rose by less than half as much as its median (:data:`LOW_SHARE`): a host's load
   comes and goes from step to step, where a change of the code moves every step alike (a clean gloo run
   against another: p10 +0.9 ms, median +1.9 ms, its fastest step 0.4 ms faster than the baseline's);
   **environment** too where the ranks' training threads needed CPU in opposite directions (rule 5c's test,
   where no op slowed beyond its noise: a clean 2-stage pipeline, ×0.93 and ×1.11, its step +3 ms);
9. **environment** where the step rose and the run did the baseline's work on one host: of the CPU op time,
   half or more is told by recorded input shapes that repeat every step, and 80 % or more of that ran the
   same calls on the same shapes and types (:func:`same_program`). By then no op was added, removed or
   resized, no subset of the ops explains the change and no rank alone does: nothing in the trace says the
   code changed what runs, and gloo's waits are the host's CPUs (two clean 2-stage pipeline runs: the step
   +2.46 ms, every op within its noise, gloo's ``recv`` ×1.33); **unclear** otherwise: the step time
   changed beyond its tolerance and none of the above fits (a GPU run, a trace without shapes, ranks on
   several hosts or hosts not recorded).

Where no rule above finds a cause (nothing moved beyond the noise) but rules failed, ``check`` asks
:func:`shares_only` (only shares of the step moved, on one host), :func:`same_work_only` (only per-op rules
failed, each op on the same inputs: rule 4b's reading), :func:`tail_only` (only p90 step-time rules failed,
the fastest steps held, on one host: rule 8's reading of the tail) and :func:`program_only` (rule 9's test);
where rule 8 found the step fell and a p90 failed, it asks :func:`tail_only` and :func:`program_only`.

Example (a CPU run, a busier machine): every op ×1.48–×1.49, all 4 ranks' own time ×1.47–×1.49, busbw
×0.67 -> environment: "every CPU op slower by a similar factor (×1.48–×1.49, 4 CPU ops) on every rank".
The same run with only ``aten::mm`` ×1.3 -> code: "aten::mm ×1.30 (+1.52 ms per rank and step) while
aten::addmm, aten::copy_, aten::add_ kept their time (together ×1.00, 54 % of the CPU op time)".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from ddprof.analyses.compare import samples as S
from ddprof.analyses.compare.job import (
    same_program_work,
    same_work_told,
    shapes_changes,
    stage_count,
    untold,
    workload_changes,
)
from ddprof.analyses.compare.samples import op_word
from ddprof.analyses.compare.stats import hodges_lehmann
from ddprof.analyses.compare.words import direction, ratio_range, ratio_text, signed
from ddprof.analyses.job import cpu_rows
from ddprof.analyses.straggler_cause import CONTENTION_MIN, host_paused, set_aside

from ddprof.report.schema import KernelRow, RunSection, StragglerCause, Stragglers, rows
from ddprof.vocabulary.units import fmt_bytes, fmt_us

CLASSES = ("environment", "code", "communication", "rank", "workload", "input", "unclear")
OP_CHANGE = 0.10
OP_SAME = 0.05
OP_MIN_SHARE = 0.02
SAME_SHARE = 0.25
BW_CHANGE = 0.10
OTHERS_SHARE = 0.25
DOMINANT = 0.1
UNEVEN = 0.5
UNEVEN_RATIO = 3.0
UNEVEN_COMPUTE = 0.2
HELD_SHARE = 0.25
EXPLAINED = 0.5
NEW_SHARE = 0.05
LONE_SHARE = 0.75
#: The machine's load (rule 1a): a rank's thread waited for a CPU this share of the rise more, and its own
#: process's other threads took under ``OWN_THREADS`` of that wait more CPU.
WAIT_EXPLAINS = 0.5
OWN_THREADS = 0.5
#: One rank alone (rule 2) not where every other rank's training thread needed at least this share of its
#: extra CPU more too (:func:`every_thread_busier`).
OTHERS_CPU = 0.5
#: The step's low tail must rise by at least this share of its median's rise to be the code's (rule 8).
LOW_SHARE = 0.5
LOW_Q = 0.1


#: Per op (name, kind): its time in each step (:func:`.samples.kernel_steps`).
OpSteps = dict[tuple[str, str], np.ndarray]


@dataclass(frozen=True)
class Moved:
    """One quantity in both reports: medians, the shift (run − baseline) and whether it is beyond the noise."""

    subject: str
    base: float
    run: float
    shift: float
    beyond_noise: bool

    @property
    def ratio(self) -> float:
        return self.run / self.base if self.base else math.inf


def moved(subject: str, base: np.ndarray, run: np.ndarray, confidence: float) -> Moved | None:
    """The medians and Hodges–Lehmann shift of two samples; None when a side is empty. Too few values for an
    interval: beyond the noise when the shift is (judged by size alone)."""
    if not base.size or not run.size:
        return None
    shift = hodges_lehmann(base, run, confidence)
    iv = shift.interval
    beyond = (iv[0] > 0 or iv[1] < 0) if iv is not None else shift.estimate != 0
    return Moved(subject, float(np.median(base)), float(np.median(run)), shift.estimate, beyond)


def _cause(klass: str, summary: str, evidence: list[str], rank: int | None = None) -> dict[str, Any]:
    return {"class": klass, "rank": rank, "summary": summary, "evidence": evidence}




def _ranks_own(base: dict[str, Any], run: dict[str, Any], confidence: float, pct: float,
               min_us: float) -> tuple[dict[int, Moved], dict[int, float]]:
    """Each rank's own time moved, and its tolerance (module doc)."""
    b, r = S.own_us(base), S.own_us(run)
    out, tol = {}, {}
    for rank in sorted(set(b) & set(r)):
        m = moved(f"rank {rank}", b[rank], r[rank], confidence)
        if m is not None:
            out[rank] = m
            tol[rank] = max(pct / 100 * m.base, min_us)
    return out, tol


def _ops(b: OpSteps, r: OpSteps, confidence: float) -> list[Moved]:
    """The non-communication ops in both reports' per-step tables, with at least OP_MIN_SHARE of the time."""
    keys = [k for k in b if k in r and k[1] != "comm" and b[k].size and r[k].size]
    meds = {k: float(np.median(b[k])) for k in keys}
    total = sum(meds.values())
    out = []
    for k in sorted(keys, key=lambda k: -meds[k]):
        if total and meds[k] >= OP_MIN_SHARE * total:
            m = moved(k[0], b[k], r[k], confidence)
            if m is not None and m.base > 0:
                out.append(m)
    return out


def _kept(b: OpSteps, r: OpSteps, same: list[Moved], confidence: float) -> float | None:
    """The ratio run / baseline of the medians of the ``same`` ops' time per step together, when they kept
    it together: within ``OP_SAME`` of 1, or within ``OP_CHANGE`` and the noise; else None. Each op alone
    may be within its noise on a busy machine (a few steps of a noisy op give a wide interval) while all of
    them rose: their sum has less noise and tells."""
    names = {m.subject for m in same}
    keys = [k for k in b if k[0] in names and k[1] != "comm" and k in r]
    if not keys:
        return None
    m = moved("kept", np.sum([b[k] for k in keys], axis=0), np.sum([r[k] for k in keys], axis=0), confidence)
    if m is None or m.base <= 0:
        return None
    off = abs(m.ratio - 1)
    return m.ratio if off < OP_SAME or (off < OP_CHANGE and not m.beyond_noise) else None


def _top(report: dict[str, Any]) -> list[KernelRow]:
    return rows(report["kernels"], KernelRow)


def _other_names(base: dict[str, Any], run: dict[str, Any], step_us: float,
                 counts_changed: bool) -> tuple[list[str], list[str]]:
    """(new ops, ops gone): names in one side's top ops the other side does not hold, of at least 1 % of the
    median step (per rank and step). When the other side kept only its top N, an op missing there may have
    run below them, and on a busy machine one op can grow past them: it counts only when the ops per step
    changed too (``counts_changed``) and it is at least twice the other side's smallest and ``NEW_SHARE``
    (5 %) of the step."""
    from ddprof.analyses.kernels import TOP_N

    def absent(side: list[KernelRow], other: list[KernelRow]) -> list[str]:
        names = {k.name for k in other}
        full = len(other) >= TOP_N
        if full and not counts_changed:
            return []
        smallest = min((k.per_step_us or 0.0 for k in other), default=0.0)
        floor = max(NEW_SHARE * step_us, 2 * smallest) if full else 0.01 * step_us
        return [k.name for k in side if k.kind != "comm" and k.name not in names and (k.per_step_us or 0.0) >= floor]

    b, r = _top(base), _top(run)
    return absent(r, b), absent(b, r)


def _busbw(base: dict[str, Any], run: dict[str, Any], confidence: float, min_bytes: int) -> list[Moved]:
    """busbw per collective op and message size of at least ``min_bytes`` (smaller ones are latency)."""
    b, r = S.busbw(base), S.busbw(run)
    out = []
    for key in sorted(k for k in set(b) & set(r) if k[1] >= min_bytes):
        m = moved(f"{key[0]} {fmt_bytes(key[1])}", b[key], r[key], confidence)
        if m is not None:
            out.append(m)
    return out


def _new_pauses(base: dict[str, Any], run: dict[str, Any]) -> list[StragglerCause]:
    """The ranks the run says pause now and then (straggler cause *stalls*) that the baseline does not."""
    def stalls(report: dict[str, Any]) -> list[StragglerCause]:  # not pauses that were the host's
        return [c for c in msgspec.convert(report["stragglers"], Stragglers).causes
                if c.cause == "stalls" and not host_paused(c)]

    before = {c.rank for c in stalls(base)}
    return [c for c in stalls(run) if c.rank not in before]


def _wait_per_step(report: dict[str, Any], rank: int) -> float:
    """The wait ``rank`` caused each rank that waited for it, per step (µs; 0 when it caused none)."""
    row = next((r for r in msgspec.convert(report["stragglers"], Stragglers).per_rank if r.rank == rank), None)
    steps = S.step_us(report).get(rank, np.empty(0)).size
    if row is None or not row.waiting_ranks or not steps:
        return 0.0
    return row.wait_caused_us / row.waiting_ranks / steps


def _host_shared(run: dict[str, Any], rank: int, own: Moved) -> str | None:
    """Why one CPU rank's slowdown is its host's, or None when it is the rank's own: the run's straggler
    analysis sets the rank aside as the host's doing (late, but its measures match the others' or its ops
    take under :data:`~ddprof.analyses.straggler_cause.CONTENTION_MIN` times theirs), or names no cause
    of the rank's own while its own time rose under that factor. A CPU rank shares its host's cores, and
    a host shares them unevenly, run to run: on real clean 2-rank gloo runs of one job on a 2-CPU machine,
    one rank's ops ran 1.2-1.5x slower for a whole run in 4 of 36 (a busy thread on a rank's core makes
    them 1.55-2.4x, a slow compute fault 1.5-1.8x)."""
    st = msgspec.convert(run["stragglers"], Stragglers)
    aside = set_aside(st).get(rank)
    if aside is not None:
        return ("the run itself sets it aside as its host's doing (late at its collectives, "
                + ("its measures the others'" if aside.cause == "undecided" else
                   "its ops a little slower than the others' in all") + ")")
    if all(c.rank != rank for c in st.causes) and rank not in st.ranks and own.ratio < CONTENTION_MIN:
        return (f"under the {CONTENTION_MIN:g}× that singles out a CPU rank, and the run names no cause of its own "
                "(a host shares its cores unevenly from run to run)")
    return None


def _rank_compute(base: dict[str, Any], run: dict[str, Any], confidence: float) -> dict[int, Moved]:
    """Per rank in both reports: its compute per step moved (``breakdown_by_step``), where it computed."""
    b, r = S.compute_us(base), S.compute_us(run)
    return {k: m for k in sorted(set(b) & set(r)) for m in [moved(f"rank {k}", b[k], r[k], confidence)]
            if m is not None and m.base > 0}


def _lone_compute(ms: dict[int, Moved], pooled: Moved | None) -> tuple[int, Moved] | None:
    """The one rank that holds the rise of the ranks' compute per step (``ms``, :func:`_rank_compute`): their
    compute summed per step (``pooled``) rose beyond the noise, that rank's by ``OP_CHANGE`` or more and at
    least ``LONE_SHARE`` (3/4) of the ranks' rises together (one rank's steps alone are often too few to
    tell); None otherwise. Example: rank 0 +1.2 ms (×1.29), rank 1 +0.19 ms -> rank 0 (86 % of the rise)."""
    if len(ms) < 2 or pooled is None or not pooled.beyond_noise or pooled.shift <= 0:
        return None
    top = max(ms, key=lambda k: ms[k].shift)
    rises = sum(max(m.shift, 0.0) for m in ms.values())
    m = ms[top]
    return (top, m) if m.ratio >= 1 + OP_CHANGE and m.shift >= LONE_SHARE * rises else None


def _held(ranks: dict[int, Moved], rose: list[int]) -> str | None:
    """Two ranks or more rose while another's own time moved less than ``HELD_SHARE`` (a quarter) of the
    median riser's shift: as text, or None. Example (a clean 4-rank gloo run against another on 2 CPUs):
    ranks 0-2 +2.05 to +2.33 ms a step (×1.13–×1.28), rank 3 +0.29 ms (×1.02) -> "ranks 0, 1, 2 ×1.13–×1.28,
    rank 3 ×1.02"; a change of the code, every rank +2 ms -> None."""
    if len(rose) < 2:
        return None
    typical = float(np.median([ranks[r].shift for r in rose]))
    still = [r for r, m in ranks.items() if r not in rose and m.shift < HELD_SHARE * typical]
    if typical <= 0 or not still:
        return None
    risen = ", ".join(map(str, sorted(rose)))
    kept = ", ".join(map(str, sorted(still)))
    return (f"ranks {risen} {ratio_range([ranks[r].ratio for r in rose])}, "
            f"rank{'s' if len(still) > 1 else ''} {kept} {ratio_range([ranks[r].ratio for r in still])}")


def _uneven_compute(ms: dict[int, Moved]) -> str | None:
    """The ranks' compute-per-step factors (``ms``, :func:`_rank_compute`: run / baseline medians) as text
    when they are uneven: the highest is ×(1 + ``OP_CHANGE``) or more, and its excess over 1 is at least
    ``UNEVEN_COMPUTE`` (0.2) above the lowest's and ``UNEVEN_RATIO`` (3) times it; None otherwise. Example:
    ×1.07, ×1.18, ×1.29, ×1.40 on 4 ranks (4 ranks on 2 CPUs, a clean run against another) -> uneven; a
    change of the code, ×1.25-×1.35 -> not."""
    if len(ms) < 2:
        return None
    excess = sorted(m.ratio - 1 for m in ms.values())
    if excess[-1] >= OP_CHANGE and excess[-1] - excess[0] >= UNEVEN_COMPUTE and \
            excess[-1] >= UNEVEN_RATIO * max(excess[0], 0.0):
        return f"{ratio_range([m.ratio for m in ms.values()])} on {len(ms)} ranks"
    return None


def _one_host(report: dict[str, Any]) -> str | None:
    """The one host every rank of the run ran on, when the run names each rank's host and they agree."""
    hosts = {r.host for r in msgspec.convert(report["run"], RunSection).per_rank}
    return next(iter(hosts)) if len(hosts) == 1 and None not in hosts else None


#: Said where a CPU run's ranks have no recorded host.
HOSTS_UNKNOWN = ("the ranks' hosts are not recorded (traces captured without ddprof's collector, which writes "
                 "them in its meta files)")


def _hosts_unknown(report: dict[str, Any]) -> bool:
    """Whether some rank of the run has no recorded host."""
    return any(r.host is None for r in msgspec.convert(report["run"], RunSection).per_rank)


def _new_stragglers(base: dict[str, Any], run: dict[str, Any]) -> list[int]:
    before = set(msgspec.convert(base["stragglers"], Stragglers).ranks)
    return [r for r in msgspec.convert(run["stragglers"], Stragglers).ranks if r not in before]


def slow_steps_only(base: np.ndarray, run: np.ndarray) -> str | None:
    """Where the run's step times rose in their slow steps only (rule 8): their 10th percentile rose by less
    than :data:`LOW_SHARE` of their median's rise, said as evidence; None otherwise (or with no rise).
    Example: p10 5.28 -> 6.19 ms, median 7.77 -> 9.66 ms: +0.91 ms against +1.89 ms -> the slow steps."""
    if not base.size or not run.size:
        return None
    low_b, low_r = float(np.quantile(base, LOW_Q)), float(np.quantile(run, LOW_Q))
    med_shift = float(np.median(run)) - float(np.median(base))
    if med_shift <= 0 or low_r - low_b >= LOW_SHARE * med_shift:
        return None
    return (f"the fastest tenth of the steps moved {signed(low_r - low_b, 'us')} ({fmt_us(low_b)} → {fmt_us(low_r)} "
            f"at the 10th percentile) where the median rose {fmt_us(med_shift)}")


def machine_load(base: dict[str, Any], run: dict[str, Any], rise_us: float, only: int | None = None) -> list[str]:
    """Rule 1a's evidence (module doc): per rank (``only`` that one: the rank whose own time rose most)
    whose training thread waited for a CPU more than in the baseline by ``WAIT_EXPLAINS`` of ``rise_us``
    or more, its own process's other threads taking under ``OWN_THREADS`` of that more CPU and its thread
    running under that much more itself (more work of its own makes it wait too), a sentence;
    the rank that waited most first. Empty where either run lacks the figures or nothing rose.

    Ranks of one host share its CPUs: a job that does more (a bigger batch on 4 ranks of a 2-CPU machine)
    makes its own ranks wait for each other. So a rank counts only where its host's ranks together waited
    for a CPU more than they themselves ran more (their threads' CPU a step, all threads): the rest of the
    waiting is others' (``run.per_rank``'s hosts; ranks of no recorded host are one host)."""
    b, r = cpu_rows(base), cpu_rows(run)
    if rise_us <= 0 or not b or b.keys() != r.keys():
        return []
    hosts = {p["rank"]: p.get("host") for p in (run.get("run") or {}).get("per_rank") or []}

    def rise(k: int, key: str) -> float:
        return (r[k][key] - b[k][key]) * 1e3

    found = []
    for k in sorted(b) if only is None else [only] if only in b else []:
        waited, own, ran = rise(k, "wait_ms"), rise(k, "other_threads_ms"), rise(k, "thread_cpu_ms")
        mates = [m for m in b if hosts.get(m) == hosts.get(k)]
        more_wait = sum(rise(m, "wait_ms") for m in mates)
        more_work = sum(rise(m, "thread_cpu_ms") + rise(m, "other_threads_ms") for m in mates)
        if (waited >= WAIT_EXPLAINS * rise_us and max(own, ran) < OWN_THREADS * waited
                and more_wait > more_work):
            found.append((waited, k, f"rank {k}'s training thread waited for a CPU {fmt_us(waited)} a step more "
                                     f"than in the baseline ({fmt_us(b[k]['wait_ms'] * 1e3)} → "
                                     f"{fmt_us(r[k]['wait_ms'] * 1e3)}), its process's other threads "
                                     f"{signed(own, 'us')} of CPU a step"))
    return [text for _, _, text in sorted(found, key=lambda f: (-f[0], f[1]))]


def thread_cpu_ratios(base: dict[str, Any], run: dict[str, Any]) -> dict[int, float]:
    """Per rank in both runs' step measures (the report's ``job.cpu``), its training thread's CPU time a step,
    run / baseline; empty where either lacks them."""
    b = {k: c["thread_cpu_ms"] for k, c in cpu_rows(base).items()}
    r = {k: c["thread_cpu_ms"] for k, c in cpu_rows(run).items()}
    return {k: r[k] / b[k] for k in sorted(b) if k in r and b[k] > 0} if b.keys() == r.keys() else {}


def opposite_threads(base: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Rule 5c's test: the ranks' training threads needed CPU for their ops in opposite directions, one
    ×0.95 or less (``OP_SAME``) and another ×1.05 or more (the collector's step measures), as text; None
    otherwise. Example (a clean 2-stage pipeline against another): ×0.93 and ×1.12."""
    threads = thread_cpu_ratios(base, run)
    if len(threads) < 2 or min(threads.values()) > 1 / (1 + OP_SAME) or max(threads.values()) < 1 + OP_SAME:
        return None
    lo, hi = min(threads, key=lambda k: threads[k]), max(threads, key=lambda k: threads[k])
    return (f"the ranks' training threads needed CPU in opposite directions for their {op_word(run)}s (the "
            f"collector's step measures): rank {lo} {ratio_text(threads[lo])}, rank {hi} {ratio_text(threads[hi])}")


#: Why the same work taking longer on a CPU run is the host's (rule 4b).
SAME_WORK = ("the trace records each CPU op's input shapes and types: these ran the same calls per step on the same "
             "ones, no op was added, removed or resized, so nothing in it says the code changed what runs; a host "
             "slows its matrix products most (they share its caches and memory bandwidth with other processes) "
             "and its small ops least")


def same_work_text(slower: list[tuple[str, float]]) -> str:
    """Rule 4b's summary: the ops ``slower`` ((name, run / baseline)), on the same inputs, took longer."""
    text = ", ".join(f"{name} {ratio_text(ratio)}" for name, ratio in slower[:4])
    return (f"the same CPU ops on the same inputs took longer ({text}): the host ran them slower, not a change of "
            "the code")


def same_program(base: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Rule 9's test: on a CPU run whose ranks share one host, the run's ops did the baseline's work: of
    their time, at least half can be told (recorded input shapes that repeat every step) and of that 80 % or
    more ran the same calls per step on the same shapes and types (:func:`.job.same_program_work`), as
    text; None otherwise. Asked only where no rule above found a cause: then no op was added, removed or
    resized, no subset slowed to explain the change, and no rank alone, so no class but the environment
    fits what the trace shows. Two clean 2-stage pipeline runs on one
    host: the step +2.46 ms, each op within its noise, the time gone into gloo's waits."""
    if op_word(run) != "CPU op":
        return None
    host = _one_host(run)
    share = same_program_work(base, run)
    if host is None or share is None:
        return None
    threads = thread_cpu_ratios(base, run)
    cpu = (f"; the ranks' training threads needed {ratio_range(list(threads.values()))} the CPU for their step "
           "(the collector's step measures)") if threads else ""
    return (f"the same program: {100 * share:.0f} % of the CPU op time ran the same calls per step on the same "
            f"recorded input shapes and types, no op was added, removed or resized, none slowed beyond its noise "
            f"to explain the change{cpu}; on one host ({host}) the ranks' compute and gloo's communication share "
            "its CPUs: its load, not a change of the code")


def _untold_text(base: dict[str, Any], run: dict[str, Any], names: list[str]) -> list[str]:
    """Rule 4b's word on the ops of ``names`` it could not tell by their shapes, or none."""
    blind = untold(base, run, names)
    if not blind:
        return []
    share = same_program_work(base, run)
    whole = f"; {100 * share:.0f} % of the run's CPU op time ran the same calls on the same inputs" if share else ""
    return [f"{', '.join(blind[:3])}: no input shapes recorded to tell{whole}"]


def _served_unevenly(apart: str, evidence: list[str]) -> dict[str, Any]:
    """Rule 5c's cause: the ranks' threads needed CPU in opposite directions (``apart``, :func:`opposite_threads`)."""
    return _cause("environment", f"{apart}: the host served them unevenly, not a change of the code, which does "
                                 "not make a rank's work need less", [apart, *evidence])


def every_thread_busier(base: dict[str, Any], run: dict[str, Any], top: int, rise_us: float | None = None) -> bool:
    """Rank ``top``'s own time rose alone, yet every rank's training thread needed more CPU for its step, the
    others at least half as much more as ``top`` (``OTHERS_CPU``), ``top`` ×1.1 (``OP_CHANGE``) or more:
    not one rank's doing (the others' rise went into their wait for it). A clean 2-rank gloo job re-run:
    rank 0's own time ×1.68 alone, the threads' CPU ×1.49 and ×1.39 on the same ops: the machine ran slower.
    With ``rise_us`` (``top``'s own time's rise a step), only where ``top``'s thread's extra CPU is half of it
    or more (``EXPLAINED``): a rank whose own time rose 42.8 ms a step (a hook that sleeps 20 ms before each
    of its all-reduces) on a machine that made every thread need ×1.25 the CPU (1.7 ms) is that rank's doing."""
    ratios = thread_cpu_ratios(base, run)
    if top not in ratios or len(ratios) < 2 or ratios[top] < 1 + OP_CHANGE:
        return False
    if rise_us is not None:
        b, r = cpu_rows(base)[top]["thread_cpu_ms"], cpu_rows(run)[top]["thread_cpu_ms"]
        if (r - b) * 1e3 < EXPLAINED * rise_us:
            return False
    return all(x - 1 >= OTHERS_CPU * (ratios[top] - 1) for k, x in ratios.items() if k != top)


def _names(ms: list[Moved], limit: int = 3) -> str:
    names = [m.subject for m in ms[:limit]]
    return ", ".join(names) + (f" and {len(ms) - limit} more" if len(ms) > limit else "")


def classify(base: dict[str, Any], run: dict[str, Any], *, confidence: float = 0.99, tolerance_pct: float = 5.0,
             min_change_us: float = 20.0, workload_rule: dict[str, Any] | None = None,
             bw_min_bytes: int | None = None) -> dict[str, Any] | None:
    """The cause class of the change from ``base`` to ``run`` with its evidence, or None when nothing changed
    beyond the noise and the tolerances (module doc). ``tolerance_pct`` and ``min_change_us``: the step-time
    rule's; ``workload_rule``: the workload rule's allowances (default: the check's); ``bw_min_bytes``: the
    smallest message whose busbw tells (default: the busbw rule's ``min_bytes``)."""
    from ddprof.analyses.compare.rules import DEFAULTS

    wl = dict(workload_rule or DEFAULTS["workload"])
    word = op_word(run)
    ops_word = f"{word}s"

    # 1. the workload (the ops' input shapes below: one rank given more work is that rank, not the job's)
    other_work = workload_changes(base, run, {**wl, "kernels_per_step_pct": math.inf, "op_shapes": False})
    if other_work:
        return _cause("workload", "the workload changed: " + "; ".join(other_work), other_work)
    resized = shapes_changes(base, run) if wl.get("op_shapes", True) else []
    step_b = S.step_us(base).get(None, np.empty(0))
    step_med = float(np.median(step_b)) if step_b.size else 0.0
    more_ops = workload_changes(base, run, {**wl, "collectives_per_step": math.inf, "message_sizes": False,
                                            "op_shapes": False})
    new, gone = _other_names(base, run, step_med, bool(more_ops))
    if more_ops and not (new or gone):
        return _cause("workload", "the workload changed: " + "; ".join(more_ops), more_ops)
    if new or gone:
        ev = ([f"new {ops_word}: {', '.join(new[:5])}"] if new else []) + (
            [f"{ops_word} no longer run: {', '.join(gone[:5])}"] if gone else []) + more_ops
        return _cause("code", f"the {ops_word} changed: " + "; ".join(ev), ev)

    # each rank's own time; pooled over the ranks it tells a change the few steps of one rank cannot
    ranks, tol = _ranks_own(base, run, confidence, tolerance_pct, min_change_us)
    own_b, own_r = S.own_us(base), S.own_us(run)
    pooled = moved("all ranks", np.concatenate([own_b[r] for r in ranks]) if ranks else np.empty(0),
                   np.concatenate([own_r[r] for r in ranks]) if ranks else np.empty(0), confidence)
    step = moved("all ranks", step_b, S.step_us(run).get(None, np.empty(0)), confidence)
    pooled_rose = any(m is not None and m.beyond_noise and m.shift >= max(tolerance_pct / 100 * m.base, min_change_us)
                      for m in (pooled, step))
    rose = [r for r, m in ranks.items() if m.shift >= tol[r] and (m.beyond_noise or pooled_rose)]
    steps_b, steps_r = S.kernel_steps(base), S.kernel_steps(run)  # per op (name, kind): its time per step
    ops = _ops(steps_b, steps_r, confidence)
    slower = [m for m in ops if m.beyond_noise and m.ratio >= 1 + OP_CHANGE]
    op_same = [m for m in ops if not m.beyond_noise or abs(m.ratio - 1) < OP_SAME]
    compared = sum(m.base for m in ops) or 1.0
    same_share = sum(m.base for m in op_same) / compared
    bw = _busbw(base, run, confidence, DEFAULTS["busbw"]["min_bytes"] if bw_min_bytes is None else bw_min_bytes)
    bw_fell = [m for m in bw if m.beyond_noise and m.ratio <= 1 - BW_CHANGE]
    comm_rose = [m for k in steps_b if k[1] == "comm" and k in steps_r
                 for m in [moved(k[0], steps_b[k], steps_r[k], confidence)]
                 if m is not None and m.beyond_noise and m.ratio >= 1 + OP_CHANGE]
    stragglers = _new_stragglers(base, run)
    n_ranks = max(len(ranks), 1)
    pipeline = stage_count(base) > 1

    def factors(rs: list[int]) -> str:
        where = f"all {len(ranks)} ranks" if len(rs) == len(ranks) else f"{len(rs)} of {len(ranks)} ranks"
        return f"own time per step (the step minus its exposed communication) {ratio_range([ranks[r].ratio for r in rs])} on {where}"

    def bw_text() -> str:
        return "; ".join(f"busbw ({m.subject}) {ratio_text(m.ratio)}: {m.base:.3g} → {m.run:.3g} GB/s"
                         for m in bw_fell[:2])

    def ops_text() -> str:
        if not ops:
            return f"no {ops_word} to compare"
        ordered = sorted(ops, key=lambda m: m.ratio)
        cum = np.cumsum([m.base for m in ordered])
        ratio = ordered[int(np.searchsorted(cum, cum[-1] / 2))].ratio  # the time-weighted median
        return (f"the {ops_word} together {ratio_text(ratio)} (time-weighted median of {len(ops)}, "
                f"{ratio_range([m.ratio for m in ops])})")

    # 1a. the machine's load: a rank's thread waited for a CPU most of what rose, its own threads took none
    first = max(rose, key=lambda r: ranks[r].shift) if rose else None
    rise = ranks[first].shift if first is not None else step.shift if step is not None and pooled_rose else 0.0
    load = machine_load(base, run, rise, only=first) if not resized else []  # other shapes: more work of its own
    if load:
        many = f" (and on {len(load) - 1} more rank{'s' if len(load) > 2 else ''})" if len(load) > 1 else ""
        return _cause("environment", f"the machine's load: {load[0]}{many}, of a rise of {fmt_us(rise)} a step: "
                                     "other processes on its host took the CPU, not the rank's work",
                      [*load, f"the largest rise to explain: {fmt_us(rise)} a step (the step, or a rank's own time)",
                       "the collector's step measures: the kernel's run-queue delay of each rank's training thread"])

    # 2. one rank alone (with other shapes, only the new straggler: one rank given more work is the one the
    # others wait for; a job-wide batch makes none, whichever rank's own time the noise raised most)
    top = first  # the rank whose own time rose most
    if len(ranks) >= 2 and top is not None and (not resized or top in stragglers):
        t = ranks[top]
        others = {r: m for r, m in ranks.items() if r != top}
        # on a CPU run the others wait for a new straggler inside host ops (a gloo wait blocks the op that
        # needs the result), not in communication: their own time holds that wait, which is its doing
        waited = (max(0.0, _wait_per_step(run, top) - _wait_per_step(base, top))
                  if word == "CPU op" and top in stragglers else 0.0)
        def stayed(r: int, m: Moved) -> bool:  # another rank's own time, less the wait for ``top``, did not rise
            rise = m.shift - waited
            return rise < max(min(tol[r], OTHERS_SHARE * t.shift), DOMINANT * t.shift) or (
                not m.beyond_noise and rise < tol[r])

        if t.beyond_noise and all(stayed(r, m) for r, m in others.items()) and \
                not every_thread_busier(base, run, top, t.shift):
            host = _host_shared(run, top, t) if word == "CPU op" and not resized else None
            if host is not None:
                return _cause("environment", f"rank {top} alone slowed ({ratio_text(t.ratio)}), as a host slows "
                                             "one of its CPU ranks: " + host,
                              [f"rank {top}'s own time per step rose {fmt_us(t.shift)} ({ratio_text(t.ratio)}: "
                               f"{fmt_us(t.base)} → {fmt_us(t.run)})", host])
            shifts = [m.shift for m in others.values()]
            ev = [f"rank {top}'s own time per step (the step minus its exposed communication) rose "
                  f"{fmt_us(t.shift)} ({ratio_text(t.ratio)}: {fmt_us(t.base)} → {fmt_us(t.run)})",
                  f"the other {len(others)} ranks' own time moved {signed(min(shifts), 'us')} … "
                  f"{signed(max(shifts), 'us')}" + ("" if max(shifts) < tol[top] else
                                                    f", a tenth of rank {top}'s at most")
                  + (f", {fmt_us(waited)} of it the wait for rank {top} inside their CPU ops" if waited else "")
                  + ": they wait for it in the collectives"]
            if top in stragglers:
                ev.append(f"rank {top} became a straggler")
            ev += [f"{r}: more work on this rank, as an uneven batch gives" for r in resized]
            return _cause("rank", f"rank {top} alone slowed: its own time per step rose {fmt_us(t.shift)} "
                                  f"({ratio_text(t.ratio)}), the other ranks' did not", ev, rank=top)

    # 1b. the ops ran on other shapes, and not on one rank alone: the job's workload (a batch, a model resized)
    if resized:
        return _cause("workload", "the workload changed: " + "; ".join(resized), resized)

    # 2b. one rank pauses now and then: a few of its steps far longer than its others and than any other
    # rank's (straggler_cause tells it so; a busy machine pauses them all, and names none)
    paused = _new_pauses(base, run)  # pauses apart from every other rank's long steps (a busy machine's are not)
    if paused:
        c = paused[0]
        own = ranks.get(c.rank)
        # the rise to explain holds the pauses: the mean's (a pause every 4th step of 40 ms is 10 ms a step),
        # not only the median's, which the pauses leave where it was (a wait 89 µs a step longer once "explained"
        # a stalls fault's 40 ms pauses)
        paused_b, paused_r = own_b.get(c.rank, np.empty(0)), own_r.get(c.rank, np.empty(0))
        mean_rise = float(paused_r.mean() - paused_b.mean()) if paused_b.size and paused_r.size else 0.0
        load = machine_load(base, run, max(own.shift if own is not None else 0.0, mean_rise, 1.0), only=c.rank)
        if load:  # its long steps are its wait for a CPU that other processes took (rule 1a's test)
            return _cause("environment", f"the machine's load: {load[0]}: rank {c.rank}'s long steps are its wait "
                                         "for a CPU that other processes on its host took, not the rank's pauses",
                          [*load, f"rank {c.rank} makes the others wait now and then (the run's straggler cause: "
                                  "stalls)"])
        measures = {e.measure: e for e in c.evidence}
        n, peak = measures.get("stall_steps"), measures.get("stall_peak")
        said = (f"in {n.rank_value:.0f} of {n.peers_value:.0f} steps it makes the others wait up to "
                f"{fmt_us(peak.rank_value)}" if n is not None and peak is not None else "a few long steps")
        return _cause("rank", f"rank {c.rank} pauses now and then: {said}, its other steps like the other ranks'",
                      [f"rank {c.rank} pauses now and then (the run's straggler cause: stalls): {said}",
                       "the baseline names no such pauses"], rank=c.rank)

    # 2c. one CPU rank alone got faster: the baseline's host had served it slower (what rose, a share of the
    # step, a bubble, is the others' time beside it)
    fell = [r for r, m in ranks.items() if m.beyond_noise and -m.shift >= tol[r]]
    if word == "CPU op" and not rose and len(fell) == 1 and len(ranks) >= 2:
        f = ranks[fell[0]]
        if f.ratio > 1 / CONTENTION_MIN and all(abs(m.shift) < max(tol[r], OTHERS_SHARE * -f.shift)
                                                 for r, m in ranks.items() if r != fell[0]):
            text = (f"rank {fell[0]}'s own time per step fell {fmt_us(-f.shift)} ({ratio_text(f.ratio)}: "
                    f"{fmt_us(f.base)} → {fmt_us(f.run)}), the others' held")
            return _cause("environment", f"rank {fell[0]} alone got faster ({ratio_text(f.ratio)}): the baseline's "
                                         "host served this CPU rank slower, by less than the "
                                         f"{CONTENTION_MIN:g}× that singles one out", [text])

    # 2d. one CPU rank's compute alone rose, its own time too noisy to tell (it holds the waits): the host
    # when the run sets the rank aside or it rose under the factor that singles one out
    compute = functools.cache(lambda: _rank_compute(base, run, confidence))  # 2d and 3b, CPU runs only
    lone = (_lone_compute(compute(), moved("all ranks", S.compute_summed(base), S.compute_summed(run), confidence))
            if word == "CPU op" and not rose else None)
    host = _host_shared(run, lone[0], lone[1]) if lone is not None else None
    if lone is not None and host is not None:
        lone_rank, lc = lone
        text = (f"rank {lone_rank}'s compute per step rose {fmt_us(lc.shift)} ({ratio_text(lc.ratio)}: "
                f"{fmt_us(lc.base)} → {fmt_us(lc.run)}), the other ranks' held")
        return _cause("environment", f"rank {lone_rank}'s compute alone slowed ({ratio_text(lc.ratio)}), as a host slows one "
                                     "of its CPU ranks: " + host, [text, host])

    # 2e. the data loader: its time per step rose beyond the noise and the tolerance, and by half or more of
    # what rose (the own time, or the step): the input pipeline, not the code nor the machine
    feed = moved("data loading", S.loading_us(base).get(None, np.empty(0)), S.loading_us(run).get(None, np.empty(0)),
                 confidence)
    if feed is not None and feed.beyond_noise and feed.shift >= max(tolerance_pct / 100 * step_med, min_change_us):
        grew = max([m.shift for m in (pooled, step) if m is not None and m.beyond_noise] or [0.0])
        if feed.shift >= EXPLAINED * grew:
            text = (f"the data loader's time per rank and step rose {fmt_us(feed.shift)} ({fmt_us(feed.base)} → "
                    f"{fmt_us(feed.run)})")
            return _cause("input", f"{text}: the input pipeline (loader workers, storage, preprocessing), not the "
                                   "model's code", [text, ops_text()])

    # 3. the ranks slowed unevenly: a change of the code moves every rank of a data-parallel job alike
    excess = sorted(ranks[r].ratio - 1 for r in rose)
    if len(rose) >= 2 and not pipeline and excess[-1] - excess[0] >= UNEVEN and excess[-1] >= UNEVEN_RATIO * excess[0]:
        ev = [f"{factors(rose)}: unevenly, as a busy machine slows its processes", ops_text()]
        if bw_fell:
            ev.append(bw_text())
        return _cause("environment", f"every rank slowed, unevenly ({ratio_range([ranks[r].ratio for r in rose])}): "
                                     "the machine, not the code", ev)

    # 3a. some ranks rose and another held: a change of the code moves every data-parallel rank alike
    held = _held(ranks, rose) if not pipeline else None
    if held is not None:
        ev = [held, ops_text()]
        if bw_fell:
            ev.append(bw_text())
        return _cause("environment", f"some ranks slowed and others did not ({held}): the machine, not the code, "
                                     "which moves every data-parallel rank alike", ev)

    # 3b. on a CPU data-parallel run, the ranks' compute moved unevenly: ranks on a busy core slow, the
    # others less or not; a change of the code moves every data-parallel rank alike
    uneven = _uneven_compute(compute()) if word == "CPU op" and not pipeline else None
    if uneven is not None:
        return _cause("environment", f"the ranks' compute per step moved unevenly ({uneven}): the host, "
                                     "not the code, which moves every data-parallel rank alike",
                      [f"compute per step {uneven}", ops_text()])

    # 4. code: a subset of the ops slowed, accounting for most of the change, the others kept their time
    own_shift = pooled.shift if pooled is not None else 0.0
    explained = sum(m.run - m.base for m in slower) / n_ranks
    kept = _kept(steps_b, steps_r, op_same, confidence)
    if slower and own_shift > 0 and explained >= EXPLAINED * own_shift and kept is not None and (
            same_share >= SAME_SHARE or len(op_same) >= max(1, len(ops) / 2)):
        moved_text = ", ".join(f"{m.subject} {ratio_text(m.ratio)}" for m in slower[:4])
        ev = [f"{moved_text} (+{fmt_us(explained)} per rank and step) while {_names(op_same)} kept their time "
              f"(together {ratio_text(kept)}, {100 * same_share:.0f} % of the {word} time)"]
        if rose:
            ev.append(factors(rose))
        if bw_fell:
            ev.append(bw_text())
        # 4a. the ops' rise is the ranks' wait for a CPU that other processes took (rule 1a's test, of this rise)
        load = machine_load(base, run, explained)
        if load:
            return _cause("environment", f"the machine's load: {load[0]}, where {moved_text} rose "
                                         f"{fmt_us(explained)} a step: other processes on its host took the CPU, "
                                         "not a change of the code", [*load, *ev])
        # 4b. the same work took longer: nothing in the trace says the code changed what runs
        if word == "CPU op" and same_work_told(base, run, {m.subject: m.shift for m in slower}):
            return _cause("environment", same_work_text([(m.subject, m.ratio) for m in slower]),
                          [*ev, SAME_WORK, *_untold_text(base, run, [m.subject for m in slower])])
        return _cause("code", f"some {ops_word} slowed, the others did not: {moved_text}", ev)

    # 5. the environment: the ranks' own time rose together, the ops alike or the device kernels unchanged
    if len(rose) >= 2:
        ev = [factors(rose), ops_text()]
        if slower and len(slower) == len(ops):
            summary = (f"every {word} slower by a similar factor ({ratio_range([m.ratio for m in slower])}, "
                       f"{len(slower)} {ops_word}) on {'every rank' if len(rose) == len(ranks) else f'{len(rose)} ranks'}")
        elif word == "kernel" and not slower:
            summary = "the kernels kept their times while every rank's own time grew: the host side, not the code"
            ib, ir = S.idle_pct(base), S.idle_pct(run)
            if ib.size and ir.size:
                ev.append(f"idle share of the step {float(np.median(ib)):.1f} % → {float(np.median(ir)):.1f} % "
                          "(median): the GPUs wait for the host")
        else:
            summary = f"every rank slowed ({ratio_range([ranks[r].ratio for r in rose])}) and no subset of the {ops_word} explains it"
        if bw_fell:
            ev.append(bw_text() + (" (gloo runs on the same host)" if word == "CPU op" else ""))
        return _cause("environment", summary, ev)

    # 5a. one rank's own time rose, but every rank's training thread needed more CPU for the same ops: the
    # machine ran slower (a subset of the ops, the code, was ruled out above)
    if top is not None and every_thread_busier(base, run, top, ranks[top].shift):
        cpu = thread_cpu_ratios(base, run)
        text = (f"every rank's training thread needed more CPU for its step ({ratio_range(list(cpu.values()))}, "
                f"the collector's step measures) on the same {ops_word}")
        return _cause("environment", f"{text}: the machine ran slower, not one rank", [factors(rose), text, ops_text()])

    # 5b. on a CPU run, most of the op time slowed and every rank's training thread needed more CPU for the
    # same ops, though no rank's own time rose beyond its noise: the machine ran slower
    threads = thread_cpu_ratios(base, run) if word == "CPU op" and slower else {}
    if len(threads) >= 2 and min(threads.values()) >= 1 + OP_CHANGE and \
            sum(m.base for m in ops if m.ratio >= 1 + OP_SAME) >= (1 - SAME_SHARE) * compared:
        text = (f"every rank's training thread needed more CPU for its step ({ratio_range(list(threads.values()))}, "
                f"the collector's step measures) on the same {ops_word}")
        return _cause("environment", f"{ops_text()}, and {text}: the machine ran slower, not a subset of the "
                                     f"{ops_word}", [text, ops_text()])

    # 5c. on a CPU run, ops slowed while the ranks' training threads needed CPU in opposite directions for
    # their ops (one rank's less, another's more): the host served them unevenly; a change of the code does
    # not make one rank's thread need less
    apart = opposite_threads(base, run) if threads else None
    if apart is not None:
        return _served_unevenly(apart, [ops_text()])

    # 6. communication
    # the ranks' own times rose only with the step's rise lending them significance, each by less than half
    # of it: the step rose by its communication (a clean gloo pair: the step +2.43 ms, an all-reduce's busbw
    # -55 %, the ranks' own times +222 and +467 µs, within their noise)
    lent = bool(rose) and step is not None and step.beyond_noise and step.shift > 0 and all(
        not ranks[r].beyond_noise and ranks[r].shift < EXPLAINED * step.shift for r in rose)
    if (not rose or lent) and (bw_fell or comm_rose):
        what = bw_text() if bw_fell else "; ".join(f"{m.subject[:60]} {ratio_text(m.ratio)}" for m in comm_rose[:2])
        ev = [what, f"no rank's own time rose beyond its noise ({ratio_range([m.ratio for m in ranks.values()])})"
              if ranks else "no per-rank step times to compare"]
        host = _one_host(run) if word == "CPU op" else None
        if host is not None:  # gloo between ranks of one host: no interconnect, the host's CPUs move the bytes
            return _cause("environment", f"the collectives slowed, compute did not: {what}; every rank runs on "
                                         f"{host}, where gloo moves the bytes with the host's CPUs and memory, "
                                         "no interconnect between them", ev)
        if word == "CPU op" and _hosts_unknown(run):  # one host or several: the host's load or a network
            return _cause("unclear", f"the collectives slowed, compute did not: {what}; the run does not name "
                                     "its ranks' hosts, and gloo moves the bytes with the hosts' CPUs: on one "
                                     "host that is its load (the environment), between hosts it may be the "
                                     "network", ev + [HOSTS_UNKNOWN])
        return _cause("communication", f"the collectives slowed, compute did not: {what}", ev)

    # 7. a straggler that does no more work than before: it arrives late, the machine made it so
    if stragglers and not rose:
        r = stragglers[0]
        m = ranks.get(r)
        ev = [f"rank {r} became a straggler, but no rank's own time rose beyond the noise"
              + (f" (rank {r}: {ratio_text(m.ratio)})" if m else ""), ops_text()]
        return _cause("environment", f"rank {r} arrives late without doing more work: scheduling on the machine, "
                                     "not the rank's code", ev)

    # 8. the slow steps alone got slower: the host; else unclear
    m = step
    if m is not None and m.beyond_noise and abs(m.shift) >= max(tolerance_pct / 100 * m.base, min_change_us):
        ev = [f"median step time {direction(m.shift)} {fmt_us(abs(m.shift))}", ops_text()]
        if rose:
            ev.append(factors(rose))
        tail = slow_steps_only(step_b, S.step_us(run).get(None, np.empty(0))) if m.shift > 0 else None
        if tail is not None:
            return _cause("environment", f"the step time rose in its slow steps only: {tail}: a host's load comes "
                                         "and goes from step to step, where a change of the code moves every "
                                         "step alike", [tail, *ev])
        apart = opposite_threads(base, run) if word == "CPU op" else None
        if apart is not None:  # rule 5c's test, where no op slowed beyond its noise
            return _served_unevenly(apart, ev)
        program = same_program(base, run) if m.shift > 0 else None  # a fall: check reads what failed
        if program is not None:  # 9. nothing the code runs changed: no class but the environment fits
            return _cause("environment", program, [program, *ev])
        return _cause("unclear", "the step time changed, and no single cause fits", ev)
    return None


#: The rules that compare a share of the step (communication exposed or overlapped, idle, a pipeline bubble).
SHARE_RULES = frozenset({"exposed_comm", "overlap", "idle", "bubble"})


def shares_only(run: dict[str, Any], failed: list[str]) -> dict[str, Any] | None:
    """The cause where the rules that failed (``failed``: their names) compare only shares of the step, and
    nothing else moved beyond the noise (:func:`classify` found no cause): on a CPU run whose ranks share one
    host, the environment (gloo's waits, the stages' and the compute's time are all the host's CPUs, and with
    the step time held, time moved from one share to another is its scheduling: a clean 2-rank gloo run
    against another had its exposed communication 38.7 % -> 52.2 % of an unchanged step). None otherwise."""
    if not failed or not set(failed) <= SHARE_RULES or op_word(run) != "CPU op":
        return None
    host = _one_host(run)
    if host is None:
        return None
    names = ", ".join(sorted({"exposed_comm": "exposed communication", "overlap": "overlap", "idle": "idle time",
                              "bubble": "the pipeline bubble"}[r] for r in set(failed)))
    text = (f"only shares of the step moved ({names}), the step time held: on one host ({host}) every rank's "
            "compute and gloo's communication share its CPUs, and time moved from one share to another is its "
            "scheduling")
    return _cause("environment", text, [text])


def tail_only(base: dict[str, Any], run: dict[str, Any], failed: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cause where the rules that failed (``failed``: their outcomes) are p90 step-time rules alone, nothing
    else moved beyond the noise (:func:`classify` found no cause) or only the median step fell (a clean 8-stage
    pipeline against another: the median −17 ms, the p90 186 → 400 ms), on a CPU run whose ranks share one host, and
    the fastest tenth of the steps (pooled over the ranks) rose by less than :data:`LOW_SHARE` of the p90's
    rise: the slow steps alone got slower, a host's load that comes and goes (rule 8's reading of the tail).
    A clean 2-rank DDP pair: p90 14.9 → 18.3 ms, the median 11.8 → 12.0 ms, the 10th percentile held. A change
    of the code that adds work to some steps does this too: it fails the gate all the same (the environment
    fails it by default). None otherwise."""
    if not failed or any(o["rule"] != "step_time_p90" for o in failed) or op_word(run) != "CPU op":
        return None
    host = _one_host(run)
    b, r = S.step_us(base).get(None, np.empty(0)), S.step_us(run).get(None, np.empty(0))
    if host is None or not b.size or not r.size:
        return None
    low = float(np.quantile(r, LOW_Q) - np.quantile(b, LOW_Q))
    high = float(np.quantile(r, 0.9) - np.quantile(b, 0.9))
    med = float(np.median(r) - np.median(b))
    if high <= 0 or low >= LOW_SHARE * high:
        return None
    text = (f"only the slow steps got slower: the p90 step time {signed(high, 'us')}, the median {signed(med, 'us')}, "
            f"the fastest tenth {signed(low, 'us')}: on one host ({host}) a load that comes and "
            "goes from step to step slows some steps, where a change of the code moves every step alike")
    return _cause("environment", text, [text])


def same_work_only(base: dict[str, Any], run: dict[str, Any], failed: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cause where the rules that failed (``failed``: their outcomes) are per-op rules alone, nothing else
    moved beyond the noise (:func:`classify` found no cause), and on a CPU run each of those ops ran the same
    calls per step on the same recorded input shapes as in the baseline (:func:`.job.same_work_told`): the host
    ran the same work slower (rule 4b). A clean 2-stage pipeline against another: ``aten::mm`` and
    ``AddmmBackward0`` ×1.17–×1.18, the step within its noise. None otherwise."""
    if not failed or any(o["rule"] != "kernels" for o in failed) or op_word(run) != "CPU op":
        return None
    rises = {o["subject"]: o["run"] - o["baseline"] for o in failed
             if o.get("run") is not None and o.get("baseline") is not None}
    if len(rises) < len(failed) or not same_work_told(base, run, rises):
        return None
    text = same_work_text([(o["subject"], o["run"] / o["baseline"]) for o in failed if o["baseline"]])
    return _cause("environment", text, [text, SAME_WORK])


def program_only(base: dict[str, Any], run: dict[str, Any], failed: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cause where rules failed (``failed``: their outcomes) and nothing moved beyond the noise
    (:func:`classify` found no cause), none of the readings above fits, and the run did the baseline's work
    on one host (:func:`same_program`, rule 9). A clean 2-stage pipeline against another: its p90 step
    37.9 → 42.9 ms and its median and fastest tenth +2.5–2.7 ms, every op within its noise. None otherwise."""
    program = same_program(base, run) if failed else None
    return None if program is None else _cause("environment", program, [program, *(o["message"] for o in failed[:2])])


def cause_line(cause: dict[str, Any] | None) -> str:
    """The cause as a phrase for a headline: "environment", "one rank (rank 2)", "code"."""
    if cause is None:
        return "none"
    if cause["class"] == "rank":
        return f"one rank (rank {cause['rank']})"
    return str(cause["class"])
