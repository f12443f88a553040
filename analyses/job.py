"""The whole job, from its always-on step measures (:mod:`ddprof.store.step_measures`): every step the job
ran, not only the traced window, and its straggler history.

A trace window is a photograph of a few steps; the measures are a line per rank and step of the whole job.
From them (:func:`job_section`):

* the job's **step time** per step: the median over the ranks of their step's wall time (in a synchronous
  job every rank's step lasts as long as the slowest rank's); its median and 90th percentile over the job,
  and its median over the traced steps (the run's profiler steps, numbered as the job numbers its steps);
* the **straggler history**: every stretch of steps at which the live view's rule (:mod:`.live`,
  :func:`.live.slow_episodes`: a rank's own time, its step less its time in collectives, beyond the
  others' by more than its noise and 10 % of a step, at steps in a row lasting a second, 2 to 5 of them)
  named a rank slow, each with whether the trace saw it, the steps where the profiler starts and stops left out
  (:func:`profiler_steps`), stretches of :data:`MIN_STEPS` steps or more. At most :data:`MAX_EPISODES` are kept, the longest, and their count;
* a **timeline** of at most :data:`TIMELINE_POINTS` points: consecutive steps in equal buckets, each with
  its median and largest step time, what the dashboard's job panel draws. The report's size does not grow
  with the job's steps;
* per rank, **where its CPU went** over the traced steps (over every step where none was traced):
  the medians of its training thread's CPU time, of the time that thread was ready to run but waited for a
  CPU (the kernel's run-queue delay), and of its process's other threads' CPU time (:func:`rank_cpu`).
  A rank slowed by CPU contention waits for a CPU; its own threads' time tells whether its own process took
  it or other processes did (``ddprof check`` reads it: :mod:`.compare.cause`).

Verdicts, silent on a healthy job: each episode (the longest :data:`SAID_EPISODES`), saying whether the
traced steps saw it; and a traced window that is not typical of the job: its median step
:data:`ATYPICAL` times the job's or more, or under its inverse (the trace saw a slow or a fast moment).

Example: 2 ranks, 200 steps of 10 ms, rank 1's own time 8 ms more at steps 120-159, the trace window steps
2-25 -> step time 10.0 ms median; one episode, rank 1, steps 120-159, named at step 121, excess 8 ms, not
traced; the verdict: "rank 1 was slow for 40 steps (120-159, named at step 121): its own time 8.0 ms a
step over the others', outside the traced steps 2-25".
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import polars as pl
from ddprof.analyses.live import own_matrix, slow_episodes
from ddprof.analyses.sections import Section

from ddprof.report.display import Column, Table
from ddprof.report.schema import Job, JobEpisode, JobPoint, JobRankCpu
from ddprof.store.rundir import Run
from ddprof.vocabulary.units import fmt_us

#: Episodes the section keeps (the longest), and the verdicts say.
MAX_EPISODES = 20
SAID_EPISODES = 3
#: The fewest steps of a stretch the history keeps: the live rule names a rank of long steps after 2 slow
#: ones, and 2 steps are noise in hindsight (a clean 4-rank gloo run on 2 CPUs had one rank 12 ms over the others'
#: own time at 2 steps in a row).
MIN_STEPS = 3
#: Points of the job's step-time timeline, at most.
TIMELINE_POINTS = 200
#: A traced window this many times the job's median step (or under its inverse) is not typical of the job.
ATYPICAL = 1.5


def job_section(run: Run) -> dict[str, Any]:
    """The ``job`` section of ``run`` (module doc); ``{"measured": false}`` and zeros without measures."""
    return job_of(run.step_measures(), list(run.steps))


def job_of(frame: pl.DataFrame, traced: list[int]) -> dict[str, Any]:
    """The section from a frame of step measures (:meth:`ddprof.store.rundir.Run.step_measures`) and the
    traced step numbers."""
    empty = msgspec.to_builtins(Job())
    if frame.height == 0:
        return empty
    steps, _, wall, _ = own_matrix(frame)
    if len(steps) == 0 or wall.shape[1] < 2:
        return empty
    step_ms = np.median(wall, axis=1)
    lo, hi = (min(traced), max(traced)) if traced else (None, None)
    in_trace = np.array([lo is not None and hi is not None and lo <= s <= hi for s in steps])
    quiet = frame.filter(~pl.col("step").is_in(sorted(profiler_steps(traced))))
    episodes = [JobEpisode(rank=e.rank, first_step=e.first_step, last_step=e.last_step, steps=e.steps,
                           named_step=e.named_step, excess_ms=e.excess_ms,
                           traced=lo is not None and hi is not None and e.first_step <= hi and e.last_step >= lo)
                for e in slow_episodes(quiet) if e.steps >= MIN_STEPS]
    kept = sorted(sorted(episodes, key=lambda e: (-e.steps, e.first_step))[:MAX_EPISODES], key=lambda e: e.first_step)
    buckets = np.array_split(np.arange(len(steps)), min(TIMELINE_POINTS, len(steps)))
    timeline = [JobPoint(first_step=int(steps[b[0]]), last_step=int(steps[b[-1]]),
                         median_ms=float(np.median(step_ms[b])), max_ms=float(np.max(wall[b])))
                for b in buckets if b.size]
    job = Job(measured=True, ranks=int(wall.shape[1]), steps=len(steps), first_step=int(steps[0]),
              last_step=int(steps[-1]), step_ms=float(np.median(step_ms)),
              step_ms_p90=float(np.percentile(step_ms, 90)), traced_first=lo, traced_last=hi,
              traced_step_ms=float(np.median(step_ms[in_trace])) if in_trace.any() else None,
              episodes=kept, episodes_total=len(episodes), timeline=timeline,
              cpu=rank_cpu(frame, _cpu_steps(steps, traced)))
    return msgspec.to_builtins(job)


#: The steps of a rank's longest waits for a CPU kept (``wait_peaks``): enough for the pauses of a rank that
#: pauses now and then (:func:`ddprof.analyses.straggler_cause.host_pauses`), not a row per step.
WAIT_PEAKS = 8
#: A rank's CPU figures are read by the causes (:mod:`.straggler_cause`, :mod:`.compare.cause`) only over this
#: many steps or more: the median of two or three steps is one noisy step.
MIN_CPU_STEPS = 4


def cpu_rows(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The report's ``job.cpu`` rows by rank, those over :data:`MIN_CPU_STEPS` steps or more; empty unless
    every rank's is."""
    rows = {c["rank"]: c for c in (report.get("job") or {}).get("cpu") or []}
    return rows if all(c["steps"] >= MIN_CPU_STEPS for c in rows.values()) else {}


def peer_medians(cpu: dict[int, dict[str, Any]], rank: int) -> dict[str, float] | None:
    """Of ``job.cpu`` rows by rank, the median over the ranks other than ``rank`` of each CPU figure (ms:
    ``thread_cpu_ms``, ``wait_ms``, ``other_threads_ms``); None without another rank."""
    peers = [c for r, c in cpu.items() if r != rank]
    if not peers:
        return None
    return {k: float(np.median([c[k] for c in peers])) for k in ("thread_cpu_ms", "wait_ms", "other_threads_ms")}


def _cpu_steps(steps: list[int], traced: list[int]) -> list[int]:
    """The steps whose CPU figures describe the traced run: the traced steps (from the first traced to the
    last) less those where the profiler starts and stops (:func:`profiler_steps`) where 3 or more are left,
    else the traced ones, else all."""
    mine = [s for s in steps if traced and min(traced) <= s <= max(traced)]
    quiet = [s for s in mine if s not in profiler_steps(traced)]
    return quiet if len(quiet) >= 3 else mine or steps


def rank_cpu(frame: pl.DataFrame, steps: list[int]) -> list[JobRankCpu]:
    """Per rank, the medians over ``steps`` of its step time, its training thread's CPU time and run-queue
    wait, and its other threads' CPU time (module doc), and the steps of its longest waits (``wait_peaks``); ranks whose measures hold no such figures (a
    collector that did not record them, a kernel without schedstat) left out."""
    if not {"thread_cpu_ms", "wait_ms", "cpu_ms"} <= set(frame.columns):
        return []
    have = (frame.filter(pl.col("step").is_in(steps) & pl.col("thread_cpu_ms").is_not_null()
                         & pl.col("wait_ms").is_not_null() & pl.col("cpu_ms").is_not_null())
            .unique(["rank", "step"], keep="last"))
    if have.height == 0:
        return []
    per = (have.group_by("rank")
           .agg(pl.len().alias("steps"), pl.col("wall_ms").median().alias("step_ms"),
                pl.col("thread_cpu_ms").median(), pl.col("wait_ms").median(),
                (pl.col("cpu_ms") - pl.col("thread_cpu_ms")).clip(lower_bound=0.0).median().alias("other_threads_ms"),
                pl.struct("step", "wait_ms").sort_by("wait_ms", "step", descending=[True, False]).head(WAIT_PEAKS)
                .alias("__peaks"))
           .sort("rank"))
    return [JobRankCpu(**{k: v for k, v in row.items() if k != "__peaks"},
                       wait_peaks=[(int(x["step"]), float(x["wait_ms"])) for x in row["__peaks"]])
            for row in per.iter_rows(named=True)]


def profiler_steps(traced: list[int]) -> set[int]:
    """The steps whose time holds the profiler's own work: of each window of consecutive traced steps
    [a, b], a − 1 and a (the profiler warms up and starts) and b and b + 1 (it stops, and the step after
    the window writes the trace: on a real 4-rank gloo run 533 ms against a 116 ms step, on one rank more
    than the others). Left out of the straggler history: they measure the capture, not the job.

    Example: traced steps 2-25 -> {1, 2, 25, 26}."""
    out: set[int] = set()
    steps = sorted(set(traced))
    for i, s in enumerate(steps):
        if i == 0 or steps[i - 1] != s - 1:
            out |= {s - 1, s}
        if i == len(steps) - 1 or steps[i + 1] != s + 1:
            out |= {s, s + 1}
    return out


def _job(report: dict[str, Any]) -> Job:
    return msgspec.convert(report.get("job") or {}, Job)


def _traced_words(j: Job) -> str:
    return f"steps {j.traced_first}-{j.traced_last}" if j.traced_first != j.traced_last else f"step {j.traced_first}"


def job_verdicts(report: dict[str, Any]) -> list[str]:
    """The longest slow stretches, and a traced window not typical of the job (module doc); nothing on a
    healthy job or without measures.

    Example: "rank 1 was slow for 40 steps (120-159, named at step 121): its own time 8.0 ms a step over the
    others', outside the traced steps 2-25"."""
    j = _job(report)
    if not j.measured:
        return []
    out = []
    for e in sorted(j.episodes, key=lambda e: (-e.steps, e.first_step))[:SAID_EPISODES]:
        where = ("within the traced steps" if e.traced else
                 f"outside the traced {_traced_words(j)}" if j.traced_first is not None else "no step was traced")
        span = f"{e.first_step}-{e.last_step}" if e.steps > 1 else f"{e.first_step}"
        out.append(f"rank {e.rank} was slow for {e.steps} steps ({span}, named at step {e.named_step}): its own time "
                   f"{e.excess_ms:.1f} ms a step over the others', {where}")
    if j.episodes_total > SAID_EPISODES:
        out.append(f"{j.episodes_total} slow stretches in all over the job's {j.steps} measured steps: the job "
                   "section lists the longest")
    if j.traced_step_ms and j.step_ms and j.steps >= 2 * max(1, (j.traced_last or 0) - (j.traced_first or 0) + 1):
        ratio = j.traced_step_ms / j.step_ms
        if ratio >= ATYPICAL or ratio <= 1 / ATYPICAL:
            out.append(f"the traced {_traced_words(j)} ran {ratio:.2g}× the job's median step ({j.traced_step_ms:.1f} ms "
                       f"against {j.step_ms:.1f} ms over {j.steps} measured steps): the trace is not typical of "
                       "the job")
    return out + load_verdicts(report)


#: The machine's load is said of a rank whose training thread waited for a CPU that other processes took
#: (its wait less what its own process's other threads ran beyond the other ranks') this share of its step or
#: more. Healthy 2-rank gloo runs waited 0.2-1.4 ms of 9-16 ms steps (at most 9 %); pinned ones, a rank's own
#: threads sharing its core, up to 22 %, most of it their own; another process busy on a rank's CPU, 32-50 %.
LOAD_SHARE = 0.25


def load_verdicts(report: dict[str, Any]) -> list[str]:
    """The ranks whose step the machine's load took a material share of (:data:`LOAD_SHARE`), from the
    traced steps' CPU figures (``job.cpu``), those whose straggler verdict already says whose CPU they lost
    (a straggler in CPU contention, :func:`.straggler_cause.cpu_clause`) left out: said whether or not a
    straggler is named, since a load that slows every rank, or two ranks by two causes, names none.

    Example (a busy process on rank 1's CPU, rank 0's core slower that run: no straggler): "the machine's
    load: rank 1's training thread waited for a CPU 4.46 ms a step, 32 % of its step (the other ranks 540 µs),
    its own other threads running 1.36 ms (the others 2.93 ms): other processes on its host took it"."""
    rows = cpu_rows(report)
    st = report.get("stragglers") or {}
    said = {c.get("rank") for c in st.get("causes") or [] if c.get("cause") == "contention"
            and c.get("rank") in (st.get("ranks") or [])}
    out = []
    for rank, c in sorted(rows.items()):
        peers = peer_medians(rows, rank)
        others = peers["other_threads_ms"] if peers else 0.0
        own = min(c["wait_ms"], max(c["other_threads_ms"] - others, 0.0))
        if rank in said or not c["step_ms"] or c["wait_ms"] - own < LOAD_SHARE * c["step_ms"]:
            continue
        theirs = f" (the other ranks {fmt_us(1e3 * peers['wait_ms'])})" if peers else ""
        ran = (f", its own other threads running {fmt_us(1e3 * c['other_threads_ms'])} (the others "
               f"{fmt_us(1e3 * others)})" if peers else "")
        out.append(f"the machine's load: rank {rank}'s training thread waited for a CPU {fmt_us(1e3 * c['wait_ms'])} a "
                   f"step, {100 * c['wait_ms'] / c['step_ms']:.0f} % of its step{theirs}{ran}: other processes on "
                   "its host took it")
    return out


def _title(report: dict[str, Any]) -> str:
    j = _job(report)
    return (f"Whole job (step measures): steps {j.first_step}-{j.last_step} of {j.ranks} ranks, step "
            f"{j.step_ms or 0:.1f} ms median, {j.step_ms_p90 or 0:.1f} ms p90; slow stretches: {j.episodes_total}")


def _fmt_ms(x: float) -> str:
    return f"{x:.1f} ms"


JOB_TABLE = Table(
    _title,
    (Column("rank", "rank"), Column("first step", "first_step"), Column("last step", "last_step"),
     Column("steps", "steps"), Column("named at", "named_step"), Column("own time over others", "excess_ms", _fmt_ms),
     Column("traced", lambda e: "yes" if e.traced else "no")),
    rows=lambda r: _job(r).episodes, when=lambda r: _job(r).measured, at=45)

SECTIONS = (
    Section("job", msgspec.to_builtins(Job()), analysed=False, tables=(JOB_TABLE,), verdict=job_verdicts,
            verdict_at=22, record=Job, order=66),
)
