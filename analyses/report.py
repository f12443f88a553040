"""The one report builder (DESIGN.md §4): a run and its Flight Recorder dumps in, the complete report out.

:func:`build_report` returns one dict of plain JSON values: the ``run`` summary (with ``per_rank`` and
``failed``), every section, the ``hang`` section from the dumps, the verdicts in their final order and
the ``status`` the exit code follows. ``ddprof analyze --format json`` prints exactly this dict, and every
other output (text, HTML, dashboard, check) renders or reads it. :func:`analyze` opens what a user names
(:func:`ddprof.sources.open_source`) and builds its report: ``ddprof.analyze(path)``.

Contract sections are filled with their contract keys (plus extra keys); ``breakdown_by_step``,
``idle_by_step``, ``pipeline``, ``step_times`` (step time and work counts per rank and step:
:mod:`.steptimes`), ``kernels`` and ``kernels_by_step`` (the top kernels: :mod:`.kernels`), ``clocks``
(per-host clock offsets, estimated and applied before the analyses when the evidence holds: :mod:`.clocks`),
``verdicts`` and ``status`` are additions.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
from ddprof.analyses.breakdown import breakdown_by_step, temporal_breakdown
from ddprof.analyses.bubbles import bubbles, pipeline_stages
from ddprof.analyses.clocks import NOT_ESTIMATED, align, run_hosts
from ddprof.analyses.clocks import estimate as estimate_clocks
from ddprof.analyses.collectives import bandwidth, collective_warnings, collectives
from ddprof.analyses.frames.memo import Events, Prepared, prepare
from ddprof.analyses.frames.sets import rank_spans
from ddprof.analyses.frames.windows import trace_windows, window_counts, windows_frame
from ddprof.analyses.hang.diagnose import backend_of, diagnose
from ddprof.analyses.health import health
from ddprof.analyses.idle import idle_breakdown, idle_by_step
from ddprof.analyses.kernels import kernels_by_step, top_kernels
from ddprof.analyses.overlap import overlap, overlap_by_step
from ddprof.analyses.steptimes import step_times
from ddprof.analyses.stragglers import stragglers
from ddprof.analyses.verdicts import verdicts

from ddprof.errors import UsageError
from ddprof.flightrec.load import DumpSet
from ddprof.memory import collector_paused
from ddprof.rundir import Run
from ddprof.schema import STEP_PREFIX
from ddprof.sources import IngestProgress, open_source

EMPTY_SECTIONS: dict[str, Any] = {
    "overlap": [],
    "overlap_by_step": [],
    "breakdown": [],
    "idle": [],
    "bubbles": [],
    "stragglers": {"ranks": [], "per_rank": []},
    "collectives": [],
    "bandwidth": [],
    "hang": {"collectives": []},
    "step_times": [],
    "kernels": [],
    "kernels_by_step": [],
    "clocks": NOT_ESTIMATED.section(),
    "health": [],
}

#: Columns the analyses read; the run's events are loaded once with only these.
COLUMNS = ["rank", "ts_ns", "dur_ns", "tid", "stream", "kind", "name", "step", "correlation",
           "coll_op", "pg", "group_size", "bytes", "peer", "seq"]


def read_events(run: Run) -> Prepared:
    """The run's events as the analyses use them: :data:`COLUMNS`, and not every row.

    The CPU ops and annotations of a rank with GPU kernels (half of a typical trace) serve no analysis:
    its work is on the GPU, its steps come from its ``ProfilerStep#N`` rows (kept), and its trace span
    (first start, last end over every row: :func:`frames.rank_spans`) is in the manifest, computed at
    ingest from every row. So those rows are not read and the spans are taken from the manifest. Where
    the manifest lacks a rank's kernel count, span or profiling windows, every row is read (the windows
    are then derived from them: :mod:`.frames.windows`). Read with Polars' default
    engine (fastest on Parquet); an unreadable part is a SchemaError, not a Polars error.
    """
    info = [run.rank_info(r) for r in run.ranks]
    if not info or any(i.get("first_ns") is None or i.get("last_ns") is None or "kernels" not in i
                       or "windows" not in i for i in info):
        return with_windows(prepare(run.collect_events(COLUMNS).lazy()), run)
    gpu = [r for r, i in zip(run.ranks, info) if i["kernels"] > 0]  # compute/comm kernels: GPU work rows
    unused = (pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("stream").is_null()
              & pl.col("rank").is_in(gpu) & ~pl.col("name").str.starts_with(STEP_PREFIX))
    p = prepare(run.collect_events(COLUMNS, where=~unused).lazy())
    p.provide(rank_spans, pl.DataFrame({"rank": run.ranks, "first_ns": [i["first_ns"] for i in info],
                                        "last_ns": [i["last_ns"] for i in info]},
                                       schema={"rank": pl.Int32(), "first_ns": pl.Int64(), "last_ns": pl.Int64()}))
    return with_windows(p, run)


def with_windows(p: Prepared, run: Run) -> Prepared:
    """``p`` given the profiling windows the manifest holds (cut at ingest, where every row was seen), when
    it holds them for every rank."""
    info = {r: run.rank_info(r).get("windows") for r in run.ranks}
    if info and all(w for w in info.values()):
        p.provide(trace_windows, windows_frame({r: w for r, w in info.items() if w}))
    return p


def _rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: NaN/inf (in float columns) become null. Converted column by column."""
    floats = [pl.when(pl.col(n).is_finite()).then(n).alias(n) for n, t in df.schema.items() if t.is_float()]
    columns = (df.with_columns(floats) if floats else df).to_dict(as_series=False)
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def _interval_sections(p: Prepared) -> dict[str, Any]:
    return {
        "overlap": _rows(overlap(p)),
        "overlap_by_step": _rows(overlap_by_step(p)),
        "breakdown": _rows(temporal_breakdown(p)),
    }


def _step_sections(p: Prepared) -> dict[str, Any]:
    stages = pipeline_stages(p)
    bub = bubbles(p)
    if stages.height:
        bub = bub.join(stages.select("rank", "stage", "stages", "micro_batches", "theoretical_pct"),
                       on="rank", how="left")
    return {"breakdown_by_step": _rows(breakdown_by_step(p)), "bubbles": _rows(bub), "pipeline": _rows(stages),
            "step_times": _rows(step_times(p))}


def _collective_sections(p: Prepared, world_size: int | None) -> dict[str, Any]:
    coll = collectives(p, world_size)
    return {
        "stragglers": stragglers(p),
        "collectives": _rows(coll.drop("ops_seen")),
        "bandwidth": _rows(bandwidth(coll)),
        "collective_warnings": collective_warnings(coll),
    }


def _idle_sections(p: Prepared) -> dict[str, Any]:
    return {"idle": _rows(idle_breakdown(p)), "idle_by_step": _rows(idle_by_step(p)),
            "kernels": _rows(top_kernels(p)), "kernels_by_step": _rows(kernels_by_step(p))}


SECTION_ORDER = ("overlap", "overlap_by_step", "breakdown", "breakdown_by_step", "idle", "idle_by_step",
                 "bubbles", "pipeline", "stragglers", "collectives", "bandwidth", "collective_warnings",
                 "step_times", "kernels", "kernels_by_step")


def analyse(events: Events, world_size: int | None = None) -> dict[str, Any]:
    """Every section computed from an event table (no run dir needed).

    The frames several sections share (work intervals, their union lengths, step windows, arrivals,
    idle gaps) are computed once (:class:`~ddprof.analyses.frames.memo.Prepared`). The three families of sections (work
    intervals, collectives, idle gaps) run on threads of their own: Polars releases the GIL while it
    computes, so they overlap on a machine with several cores. Same result as one after the other.
    The cyclic collector is paused meanwhile (:func:`ddprof.memory.collector_paused`).
    """
    p = prepare(events)
    with collector_paused(), ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(_interval_sections, p), pool.submit(_step_sections, p),
                   pool.submit(_collective_sections, p, world_size), pool.submit(_idle_sections, p)]
        parts = {k: v for f in futures for k, v in f.result().items()}
    return {k: parts[k] for k in SECTION_ORDER}


def _dumps_summary(dumps: DumpSet, hang: dict[str, Any]) -> dict[str, Any]:
    """The ``run`` section of a report on Flight Recorder dumps alone: the job's world size and ranks as
    the dumps tell them, its backend and device from the dumps' op names, no steps and no traced ranks;
    each unreadable dump in ``failed`` and, as ``path, rank N: reason``, among the warnings."""
    backend, device = backend_of(dumps)
    failed = _dump_failures(dumps)
    return {
        "world_size": hang["world_size"],
        "ranks": list(hang["ranks"]),
        "backend": backend,
        "device": device,
        "steps": [],
        "warnings": [*hang["warnings"], *(f["error"] for f in failed)],
        "per_rank": [],
        "failed": failed,
    }


def _dump_failures(dumps: DumpSet) -> list[dict[str, Any]]:
    """Each dump that could not be read, as an entry of the run's ``failed`` list (the error names the file)."""
    return [{"path": f.path, "rank": f.rank, "error": str(f)} for f in dumps.failures]


def status(report: dict[str, Any]) -> str:
    """``problem`` when an analysis found one (a hang), else ``partial`` when inputs failed (the rest was
    analysed), else ``ok``. The CLI's exit code follows it: 1, 3, 0."""
    if report["hang"].get("collectives"):
        return "problem"
    return "partial" if report["run"]["failed"] else "ok"


def build_report(run: Run | None, *, dumps: DumpSet | None = None) -> dict[str, Any]:
    """The complete report of a run (None: of Flight Recorder dumps alone) and its dumps (module doc)."""
    hang = diagnose(dumps) if dumps is not None else None
    if run is not None:
        report: dict[str, Any] = {"run": run.summary(), **copy.deepcopy(EMPTY_SECTIONS)}
        events = read_events(run)
        clock = estimate_clocks(events, run_hosts(run.manifest))  # before the cross-rank analyses
        report["clocks"] = clock.section()
        aligned = with_windows(align(events, clock), run)
        sections = analyse(aligned, run.world_size)
        counts = window_counts(aligned)
        for row in report["run"]["per_rank"]:
            row["windows"] = counts.get(row["rank"], 0)
        report["health"] = health(events, ranks=run.ranks, world_size=run.world_size, clocks=report["clocks"],
                                  ingest={r: run.rank_info(r) for r in run.ranks})
        report["run"]["warnings"].extend(clock.warnings())
        report["run"]["warnings"].extend(sections.pop("collective_warnings"))
        report.update(sections)
        if dumps is not None:  # a dump that cannot be read is a failed input, like a trace that cannot
            failed = _dump_failures(dumps)
            report["run"]["failed"].extend(failed)
            report["run"]["warnings"].extend(f["error"] for f in failed)
    elif dumps is not None and hang is not None:
        report = {"run": _dumps_summary(dumps, hang), **copy.deepcopy(EMPTY_SECTIONS)}
    else:
        raise UsageError("nothing to report on: give a run, Flight Recorder dumps, or both")
    if hang is not None:
        report["hang"] = hang
    report["verdicts"] = verdicts(report)
    report["status"] = status(report)
    return report


def analyze(*sources: str | Path, cache: str | Path | None = None, rank_map: dict[str, int] | None = None,
            progress: IngestProgress | None = None) -> dict[str, Any]:
    """The report of what the user names: raw traces (ingested into ``cache``, by default beside them),
    a run dir, or a directory of Flight Recorder dumps; exactly what ``ddprof analyze SOURCES --format json``
    prints. ``rank_map`` gives the rank of traces that do not say (``{"trace.json": 3}``)."""
    with open_source(sources, cache=cache, rank_map=rank_map, progress=progress) as src:
        return build_report(src.run, dumps=src.dumps)
