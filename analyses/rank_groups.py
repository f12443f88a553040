"""The report's analyses a group of ranks at a time: memory bounded by a group, not by the run.

Every per-rank section (overlap, breakdown, idle, bubbles, step times, per step or not) is a function of
one rank's events, sorted by rank first; so it is computed on the events of a group of ranks
(:func:`rank_groups`: consecutive ranks holding at most :data:`GROUP_EVENTS` events together, at least
:data:`MIN_GROUP_RANKS` ranks), and the groups' rows, concatenated in rank order, are exactly the rows the whole run gives.
Each group also leaves small per-rank summaries (:data:`SUMMARIES`: its collective rows, profiler steps,
trace spans and windows, per-step bubbles, kernel totals, each rank's time blocked on point-to-point
transfers) from which the cross-rank sections
(collectives, bandwidth, stragglers, pipeline stages, top kernels) are computed
(:func:`cross_rank_sections`). Peak memory: one group's events and frames, plus the summaries.

Example: 1,024 ranks of 50,000 events each, 500,000 events per group -> 102 groups of 10 ranks and
a last one of 4; each is read, analysed and dropped before the next.

:func:`group_frames` is the unit of work an executor runs (:mod:`ddprof.runtime.executors`): it opens the run
dir itself, so it runs in another process or on another machine that sees the same storage.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from ddprof.analyses import sections
from ddprof.analyses.bubbles import bubbles
from ddprof.analyses.clocks import ClockEstimate, align, estimate, run_hosts
from ddprof.analyses.collectives import collective_warnings, collectives, comm_rows
from ddprof.analyses.comm_kernels import comm_kernel_counts
from ddprof.analyses.frames.memo import Prepared, prepare
from ddprof.analyses.frames.sets import rank_spans, steps
from ddprof.analyses.frames.windows import trace_windows, window_counts, windows_frame
from ddprof.analyses.kernels import add_totals, kernel_step_totals, kernel_totals
from ddprof.analyses.summaries import json_rows, summary

from ddprof.errors import UsageError
from ddprof.report.tables import AnalysisReport, null_nonfinite
from ddprof.runtime.executors import Executor, run_each
from ddprof.runtime.memory import collector_paused
from ddprof.store.rundir import MANIFEST, Run, open_run
from ddprof.store.schema import EVENT_SCHEMA, STEP_PREFIX
from ddprof.vocabulary.loaders import DATA_LOADER_PREFIX

#: Events (the manifest's count per rank) read at once, at most, unless a group would hold fewer than
#: :data:`MIN_GROUP_RANKS` ranks; ``DDPROF_GROUP_EVENTS`` sets another bound. Half a million: on 1,024
#: ranks of 1.7 k events, analyze peaks at 545 MB (630 MB with a million; 540 MB with a quarter of one, the
#: floor being the imports, the manifest and the summaries), as fast (``benchmarks/report_size.py``).
GROUP_EVENTS = 500_000
#: Ranks per group, at least (fewer when the run has fewer). Polars divides a column of one or two rows
#: exactly and a longer one by the reciprocal (the last digit may differ): with a few ranks per group,
#: every per-rank frame is long enough to be computed as the whole run's is, to the last bit.
MIN_GROUP_RANKS = 4


def group_budget() -> int:
    """:data:`GROUP_EVENTS`, or ``DDPROF_GROUP_EVENTS`` when set (a positive integer)."""
    raw = os.environ.get("DDPROF_GROUP_EVENTS", "")
    try:
        value = int(raw) if raw else GROUP_EVENTS
    except ValueError:
        raise UsageError(f"DDPROF_GROUP_EVENTS={raw!r}: expected a positive number of events") from None
    if value < 1:
        raise UsageError(f"DDPROF_GROUP_EVENTS={raw!r}: expected a positive number of events")
    return value

#: Columns the analyses read.
COLUMNS = ["rank", "ts_ns", "dur_ns", "tid", "stream", "kind", "name", "step", "correlation",
           "coll_op", "pg", "group_size", "bytes", "peer", "seq", "send_splits", "recv_splits", "shapes"]

#: Derived frames the cross-rank sections read, kept per group and concatenated in rank order.
SUMMARIES = {"comm_rows": comm_rows, "steps": steps, "rank_spans": rank_spans, "bubbles": bubbles,
             "trace_windows": trace_windows}


def summaries() -> dict[str, Any]:
    """:data:`SUMMARIES` and the frames the sections declare they keep (``Section.keeps``), by name."""
    return {**SUMMARIES, **sections.KEPT}


def rank_groups(run: Run, budget: int | None = None) -> list[list[int]]:
    """Consecutive ranks, at most ``budget`` (default :func:`group_budget`) events per group by the
    manifest's counts, and at least :data:`MIN_GROUP_RANKS` ranks per group (module doc)."""
    budget = group_budget() if budget is None else budget
    groups: list[list[int]] = []
    current: list[int] = []
    held = 0
    for r in run.ranks:
        n = int(run.rank_info(r).get("events") or 0)
        if len(current) >= MIN_GROUP_RANKS and held + n > budget:
            groups.append(current)
            current, held = [], 0
        current.append(r)
        held += n
    if current and groups and len(current) < MIN_GROUP_RANKS:
        groups[-1].extend(current)  # a short last group joins the one before
    elif current:
        groups.append(current)
    return groups


def read_ranks(run: Run, ranks: list[int]) -> Prepared:
    """The events of ``ranks`` as the analyses use them: :data:`COLUMNS`, and not every row.

    The CPU ops and annotations of a rank with GPU kernels (half of a typical trace) serve no analysis:
    its work is on the GPU, its steps come from its ``ProfilerStep#N`` rows, its data loading from its spans
    named like a loader (:mod:`.dataloading`: PyTorch's ``enumerate(DataLoader)#…`` kept by prefix, any other
    by the names ingest found over every row, the rank's ``loader_names`` in the manifest; a regular
    expression over every row here would cost more than the rest of the read), and its trace span
    (first start, last end over every row: :func:`frames.rank_spans`) is in the manifest, computed at
    ingest from every row. So those rows are not read and the spans are taken from the manifest. Where
    the manifest lacks a rank's kernel count, span or profiling windows, every row is read (the windows
    are then derived from them: :mod:`.frames.windows`). Read with Polars' default engine (fastest on
    Parquet); an unreadable part is a SchemaError, not a Polars error.
    """
    info = [run.rank_info(r) for r in ranks]
    if not info or any(i.get("first_ns") is None or i.get("last_ns") is None or "kernels" not in i
                       or "windows" not in i for i in info):
        return with_windows(prepare(run.collect_events(COLUMNS, ranks=ranks).lazy()), run, ranks)
    gpu = [r for r, i in zip(ranks, info) if i["kernels"] > 0]  # compute/comm kernels: GPU work rows
    unused = (pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("stream").is_null()
              & pl.col("rank").is_in(gpu) & ~pl.col("name").str.starts_with(STEP_PREFIX)
              & ~pl.col("name").str.starts_with(DATA_LOADER_PREFIX))
    others = sorted({n for r, i in zip(ranks, info) if r in gpu for n in i.get("loader_names") or []
                     if not n.startswith(DATA_LOADER_PREFIX)})
    if others:  # a loader's spans of another name (Lightning's, a loop's own): kept by the names ingest found
        unused = unused & ~pl.col("name").is_in(others)
    p = prepare(run.collect_events(COLUMNS, ranks=ranks, where=~unused).lazy())
    p.provide(rank_spans, pl.DataFrame({"rank": ranks, "first_ns": [i["first_ns"] for i in info],
                                        "last_ns": [i["last_ns"] for i in info]},
                                       schema={"rank": pl.Int32(), "first_ns": pl.Int64(), "last_ns": pl.Int64()}))
    return with_windows(p, run, ranks)


def with_windows(p: Prepared, run: Run, ranks: list[int] | None = None) -> Prepared:
    """``p`` given the profiling windows the manifest holds for ``ranks`` (default: the run's) (cut at
    ingest, where every row was seen), when it holds them for every one of them."""
    info = {r: run.rank_info(r).get("windows") for r in (run.ranks if ranks is None else ranks)}
    if info and all(w for w in info.values()):
        p.provide(trace_windows, windows_frame({r: w for r, w in info.items() if w}))
    return p


def _intervals(p: Prepared) -> dict[str, Any]:
    return sections.family_frames(p, "intervals")


def _steps(p: Prepared) -> dict[str, Any]:
    return {**sections.family_frames(p, "steps"), "bubbles": bubbles(p)}


def _idle(p: Prepared) -> dict[str, Any]:
    return {**sections.family_frames(p, "idle"), "kernel_totals": kernel_totals(p),
            "kernel_step_totals": kernel_step_totals(p), "comm_kernel_counts": comm_kernel_counts(p)}


def _summaries(p: Prepared) -> dict[str, Any]:
    return {name: frame(p) for name, frame in summaries().items() if name != "bubbles"}


def per_rank_frames(p: Prepared) -> dict[str, pl.DataFrame]:
    """The per-rank sections and the summaries of one event table (a group of ranks, or a whole run).

    The families of frames run on threads of their own: Polars releases the GIL while it computes, so
    they overlap on a machine with several cores. The cyclic collector is paused meanwhile
    (:func:`ddprof.runtime.memory.collector_paused`).
    """
    with collector_paused(), ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(f, p) for f in (_intervals, _steps, _idle, _summaries)]
        return {k: v for f in futures for k, v in f.result().items()}


@dataclass(frozen=True)
class GroupResult:
    """What one group of ranks leaves: its frames (:func:`per_rank_frames`), profiling window counts, and
    what ``per_group`` found in its events as traced (None without one)."""

    frames: dict[str, pl.DataFrame]
    windows: dict[int, int]
    extra: Any = None


_OPENED: dict[tuple[str, int], Run] = {}


def _open(run_dir: str | Path) -> Run:
    """The run at ``run_dir``, opened once per process while its manifest is unchanged: every group of a
    thousand ranks would otherwise read the whole manifest again."""
    key = (str(run_dir), (Path(run_dir) / MANIFEST).stat().st_mtime_ns)
    if key not in _OPENED:
        _OPENED.clear()
        _OPENED[key] = open_run(run_dir)
    return _OPENED[key]


def group_frames(run_dir: str | Path, ranks: list[int], clock: ClockEstimate,
                 per_group: Callable[[Prepared], Any] | None = None) -> GroupResult:
    """Open the run, read ``ranks``' events, take the clock corrections off and compute their frames;
    ``per_group(events as traced)`` beside them."""
    run = _open(run_dir)
    traced = read_ranks(run, ranks)
    extra = per_group(traced) if per_group is not None else None
    aligned = align(with_windows(traced, run, ranks), clock)  # the manifest's windows move with the clocks
    return GroupResult(per_rank_frames(aligned), window_counts(aligned), extra)


def concat(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Groups' frames one after the other (groups in rank order); a group's empty frame adds nothing."""
    rows = [f for f in parts if f.height]
    return pl.concat(rows, how="vertical_relaxed") if len(rows) > 1 else (rows or parts)[0]


def merge(results: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """The frames of a run from those of its groups, in rank order."""
    out = {}
    for name in results[0]:
        parts = [r[name] for r in results]
        if name == "kernel_totals":
            out[name] = add_totals(parts, ["name", "kind"])
        elif name == "kernel_step_totals":
            out[name] = add_totals(parts, ["name", "kind", "step"])
        elif name == "comm_kernel_counts":
            out[name] = add_totals(parts, ["name", "coll_op"])
        elif name == "comm_rows":  # one table in time order, as one event table gives it (a stable sort)
            out[name] = concat(parts).sort("ts_ns", maintain_order=True)
        else:
            out[name] = concat(parts)
    return out




def cross_rank_sections(frames: dict[str, pl.DataFrame], world_size: int | None,
                        placement: dict[int, tuple[str | None, str | None]] | None = None,
                        cpu: dict[int, dict[str, Any]] | None = None) -> AnalysisReport:
    """Every section, from a run's per-rank frames and summaries: the per-rank sections as they are, the
    cross-rank ones computed on the summaries alone (no event is read here). The sections with a row per
    step or per collective instance are detail tables (:data:`.sections.DETAIL`, NaN as null)
    and, in the sections, their summaries (:mod:`.summaries`). ``placement``: rank -> (host, CPUs), from the
    run's manifest (:func:`placement`); ``cpu``: rank -> where its CPU went in the traced steps, from the
    step measures (:func:`.job.cpu_rows` of the job section)."""
    p = Prepared(pl.LazyFrame(schema={c: EVENT_SCHEMA[c] for c in COLUMNS}))
    for name, frame in summaries().items():
        p.provide(frame, frames[name])
    p.provide(kernel_totals, frames["kernel_totals"])
    p.provide(kernel_step_totals, frames["kernel_step_totals"])
    cross = sections.CrossRank(p, world_size, frames, {}, placement or {}, cpu or {})
    tables = {k: frames[k] for k in sections.PER_RANK if k in sections.STEP_SECTIONS}
    tables.update({s.name: s.cross_table(cross) for s in sections.SECTIONS if s.cross_table is not None})
    cross.tables.update({k: null_nonfinite(v) for k, v in tables.items()})
    out: dict[str, Any] = {k: json_rows(frames[k]) for k in sections.PER_RANK if k not in sections.STEP_SECTIONS}
    out.update({name: summary(name, cross.tables[name]) for name in sections.STEP_SECTIONS})
    out.update({s.name: s.cross(cross) for s in sections.SECTIONS if s.cross is not None})
    out["collective_warnings"] = collective_warnings(collectives(p, world_size))
    return AnalysisReport(out, dict(cross.tables), names=sections.DETAIL)


def _comm_summary(run_dir: str | Path, ranks: list[int]) -> dict[str, pl.DataFrame]:
    """The collective rows and trace spans of ``ranks``, as traced: what the clock estimate compares."""
    p = read_ranks(_open(run_dir), ranks)
    return {"comm_rows": comm_rows(p), "rank_spans": rank_spans(p)}


def placement(run: Run) -> dict[int, tuple[str | None, str | None]]:
    """Where each rank ran, as the collector recorded it: rank -> (host, the CPUs it was bound to)."""
    hosts, cpus = run.manifest.get("hosts") or {}, run.manifest.get("cpus") or {}
    return {r: (hosts.get(str(r)), cpus.get(str(r))) for r in run.ranks}


def estimate_clock(run: Run, groups: list[list[int]], executor: Executor | None = None) -> ClockEstimate:
    """:func:`clocks.estimate` on the run's collective rows, read a group at a time (only when the run
    names two hosts or more: with fewer there is nothing to compare and nothing is read)."""
    hosts = run_hosts(run.manifest)
    p = Prepared(pl.LazyFrame(schema={c: EVENT_SCHEMA[c] for c in COLUMNS}))
    if len(set(hosts.values())) > 1:
        parts = run_each(executor, _comm_summary, [(str(run.path), g) for g in groups])
        merged = merge(parts)
        p.provide(comm_rows, merged["comm_rows"])
        p.provide(rank_spans, merged["rank_spans"])
    else:
        p.provide(rank_spans, pl.DataFrame({"rank": run.ranks}, schema={"rank": pl.Int32()}))
    return estimate(p, hosts)


@dataclass(frozen=True)
class RunAnalysis:
    """A run's analysis: the clock estimate, every section, each rank's profiling window count, what
    ``per_group`` found, and the communication kernels' counts (:func:`comm_kernel_counts`)."""

    clock: ClockEstimate
    sections: AnalysisReport
    windows: dict[int, int]
    extra: list[Any]
    comm_kernel_counts: pl.DataFrame


def analyse_run(run: Run, *, executor: Executor | None = None, budget: int | None = None,
                per_group: Callable[[Prepared], Any] | None = None,
                cpu: dict[int, dict[str, Any]] | None = None,
                on_clock: Callable[[ClockEstimate], None] | None = None) -> RunAnalysis:
    """Clocks estimated, then each group's frames (on ``executor``; default: here, one group after the
    other), then the cross-rank sections on their summaries (module doc). ``extra``: ``per_group`` of each
    group's events as traced, in rank order (a module-level function, to run on another machine).
    ``cpu``: rank -> where its CPU went in the traced steps (:func:`cross_rank_sections`). ``on_clock``
    is called with the clock estimate as soon as it is known, before the groups' frames (the report starts
    its what-if section then: :class:`analyses.whatif.section.Beside`)."""
    groups = rank_groups(run, budget)
    if not groups:
        groups = [[]]
    clock = estimate_clock(run, groups, executor)
    if on_clock is not None:
        on_clock(clock)
    results = run_each(executor, group_frames, [(str(run.path), g, clock, per_group) for g in groups])
    windows = {r: n for res in results for r, n in res.windows.items()}
    frames = merge([res.frames for res in results])
    return RunAnalysis(clock, cross_rank_sections(frames, run.world_size, placement(run), cpu), windows,
                       [res.extra for res in results],
                       frames["comm_kernel_counts"])
