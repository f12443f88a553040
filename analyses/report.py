"""Assemble the JSON report (DESIGN.md §4) from a run: every analysis, one dict of plain JSON values.

Contract sections are filled with their contract keys (plus extra keys); extra sections:
``overlap_by_step`` is contract, ``breakdown_by_step``, ``idle_by_step``, ``pipeline`` and ``verdicts``
are additions. ``hang`` stays empty here: it comes from Flight Recorder dumps (:mod:`analyses.hang`),
whose report :func:`hang_report` builds.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl
from ddprof.analyses.breakdown import breakdown_by_step, temporal_breakdown
from ddprof.analyses.bubbles import bubbles, pipeline_stages
from ddprof.analyses.collectives import bandwidth, collective_warnings, collectives
from ddprof.analyses.frames import rank_spans
from ddprof.analyses.idle import idle_breakdown, idle_by_step
from ddprof.analyses.overlap import overlap, overlap_by_step
from ddprof.analyses.prepared import Events, Prepared, prepare
from ddprof.analyses.stragglers import stragglers
from ddprof.analyses.verdicts import verdicts

from ddprof.memory import collector_paused
from ddprof.rundir import Run
from ddprof.schema import STEP_PREFIX

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
    the manifest lacks a rank's kernel count or span, every row is read. Read with Polars' default
    engine (fastest on Parquet); an unreadable part is a SchemaError, not a Polars error.
    """
    info = [run.rank_info(r) for r in run.ranks]
    if not info or any(i.get("first_ns") is None or i.get("last_ns") is None or "kernels" not in i for i in info):
        return prepare(run.collect_events(COLUMNS).lazy())
    gpu = [r for r, i in zip(run.ranks, info) if i["kernels"] > 0]  # compute/comm kernels: GPU work rows
    unused = (pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("stream").is_null()
              & pl.col("rank").is_in(gpu) & ~pl.col("name").str.starts_with(STEP_PREFIX))
    p = prepare(run.collect_events(COLUMNS, where=~unused).lazy())
    p.provide(rank_spans, pl.DataFrame({"rank": run.ranks, "first_ns": [i["first_ns"] for i in info],
                                        "last_ns": [i["last_ns"] for i in info]},
                                       schema={"rank": pl.Int32(), "first_ns": pl.Int64(), "last_ns": pl.Int64()}))
    return p


def run_section(run: Run) -> dict[str, Any]:
    """The ``run`` section. ``warnings`` are the manifest's: they already hold one line per input that
    failed to ingest (its error, which names the file); the failures themselves are in ``run.failed``."""
    m = run.manifest
    warnings = list(m.get("warnings", []))
    return {
        "world_size": run.world_size,
        "ranks": run.ranks,
        "backend": m.get("backend"),
        "device": run.device,
        "steps": run.steps,
        "warnings": warnings,
    }


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
    return {"breakdown_by_step": _rows(breakdown_by_step(p)), "bubbles": _rows(bub), "pipeline": _rows(stages)}


def _collective_sections(p: Prepared, world_size: int | None) -> dict[str, Any]:
    coll = collectives(p, world_size)
    return {
        "stragglers": stragglers(p),
        "collectives": _rows(coll.drop("ops_seen")),
        "bandwidth": _rows(bandwidth(coll)),
        "collective_warnings": collective_warnings(coll),
    }


def _idle_sections(p: Prepared) -> dict[str, Any]:
    return {"idle": _rows(idle_breakdown(p)), "idle_by_step": _rows(idle_by_step(p))}


SECTION_ORDER = ("overlap", "overlap_by_step", "breakdown", "breakdown_by_step", "idle", "idle_by_step",
                 "bubbles", "pipeline", "stragglers", "collectives", "bandwidth", "collective_warnings")


def analyse(events: Events, world_size: int | None = None) -> dict[str, Any]:
    """Every section computed from an event table (no run dir needed).

    The frames several sections share (work intervals, their union lengths, step windows, arrivals,
    idle gaps) are computed once (:class:`~prepared.Prepared`). The three families of sections (work
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


def _empty_sections() -> dict[str, Any]:
    return copy.deepcopy(EMPTY_SECTIONS)


def hang_report(hang: dict[str, Any]) -> dict[str, Any]:
    """The whole report for a directory of Flight Recorder dumps, from ``diagnose_hang(path)``.

    Every contract section is present (empty but ``hang``); ``run`` comes from the hang result: its
    world size and ranks, backend ``nccl``, device ``gpu``, no steps, and as warnings the hang's own
    followed by one line per unreadable dump (``path, rank N: reason``). ``verdicts`` holds the hang
    verdict when a hang was found, else nothing.
    """
    failed = []
    for f in hang.get("failed", []):
        where = ", ".join(w for w in (f.get("path"), None if f.get("rank") is None else f"rank {f['rank']}") if w)
        failed.append(f"{where}: {f.get('reason')}" if where else str(f.get("reason")))
    report: dict[str, Any] = {"run": {
        "world_size": hang.get("world_size"),
        "ranks": list(hang.get("ranks", [])),
        "backend": "nccl",
        "device": "gpu",
        "steps": [],
        "warnings": [*hang.get("warnings", []), *failed],
    }}
    report.update(_empty_sections())
    report["hang"] = hang
    report["verdicts"] = [hang["verdict"]] if hang.get("collectives") and hang.get("verdict") else []
    return report


def build_report(run: Run) -> dict[str, Any]:
    report: dict[str, Any] = {"run": run_section(run)}
    report.update(_empty_sections())
    sections = analyse(read_events(run), run.world_size)
    report["run"]["warnings"].extend(sections.pop("collective_warnings"))
    report.update(sections)
    report["verdicts"] = verdicts(report)
    return report
