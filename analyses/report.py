"""The one report builder (docs/DESIGN.md §4): a run and its Flight Recorder dumps in, the complete report out.

:func:`build_report` returns one dict of plain JSON values: the ``run`` summary (with ``per_rank`` and
``failed``), every section, the ``hang`` section from the dumps, the verdicts in their final order and
the ``status`` the exit code follows. ``ddprof analyze --format json`` prints exactly this dict, and every
other output (text, HTML, dashboard, check) renders or reads it. The dict is small: the sections with a
row per step or per collective instance hold summaries (:mod:`.summaries`), and their rows are its detail
tables (:class:`ddprof.report.tables.AnalysisReport`: ``report.table("bubbles")``), written as Parquet
beside the JSON. :func:`analyze` opens what a user names
(:func:`ddprof.inputs.sources.open_source`) and builds its report: ``ddprof.analyze(path)``.

Contract sections are filled with their contract keys (plus extra keys); ``breakdown_by_step``,
``idle_by_step``, ``pipeline``, ``step_times`` (step time and work counts per rank and step:
:mod:`.steptimes`), ``kernels`` and ``kernels_by_step`` (the top kernels: :mod:`.kernels`), ``clocks``
(per-host clock offsets, estimated and applied before the analyses when the evidence holds: :mod:`.clocks`),
``verdicts`` and ``status`` are additions. Every float of the report is rounded once, when it is built, to
:data:`ddprof.report.tables.FLOAT_DIGITS` significant digits (the detail tables keep every bit). ``report_version`` (:data:`ddprof.report.schema.REPORT_VERSION`,
just before the verdicts) says which contract the report follows: its every section and row is declared in
:mod:`ddprof.report.schema` (a report without it is version 1).
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import polars as pl
from ddprof.analyses import sections as registry
from ddprof.analyses.comm_kernels import comm_kernels, rules_of
from ddprof.analyses.frames.memo import Events, Prepared, prepare
from ddprof.analyses.hang.diagnose import backend_of, diagnose
from ddprof.analyses.health import ORDER as HEALTH_ORDER
from ddprof.analyses.health import health
from ddprof.analyses.job import cpu_rows, job_section
from ddprof.analyses.links import link_classes
from ddprof.analyses.rank_groups import COLUMNS, analyse_run, cross_rank_sections, per_rank_frames, read_ranks
from ddprof.analyses.rank_groups import json_rows as _rows  # noqa: F401 - callers format frames as the report does
from ddprof.analyses.verdicts import verdicts
from ddprof.analyses.whatif.section import Beside

from ddprof.errors import UsageError
from ddprof.readers.flightrec.load import DumpSet
from ddprof.report.schema import REPORT_VERSION, Hang, RunSection
from ddprof.report.tables import AnalysisReport, rounded
from ddprof.runtime.executors import Executor
from ddprof.store.rundir import Run
from ddprof.store.schema import EVENT_SCHEMA


def read_events(run: Run) -> Prepared:
    """Every rank's events as the analyses use them (:func:`.rank_groups.read_ranks`): for a small run,
    or a consumer that wants the whole event table at once; the report reads a group of ranks at a time."""
    return read_ranks(run, run.ranks)


def analyse(events: Events, world_size: int | None = None) -> AnalysisReport:
    """Every section computed from an event table (no run dir needed): its per-rank frames and summaries
    (:func:`.rank_groups.per_rank_frames`, computed once each and shared by the sections), then the
    cross-rank sections on the summaries, exactly as a run analysed a group of ranks at a time (every bit of
    their floats: :func:`build_report` rounds a report's); with the detail tables (``.table(name)``)."""
    sections = cross_rank_sections(per_rank_frames(prepare(events)), world_size)
    return AnalysisReport({k: sections[k] for k in registry.SECTION_ORDER}, sections.tables, names=registry.DETAIL)


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
    if msgspec.convert(report["hang"], Hang).collectives:
        return "problem"
    return "partial" if msgspec.convert(report["run"], RunSection).failed else "ok"


def _health_order(finding: dict[str, Any]) -> tuple[int, int]:
    """Health findings in :data:`.health.ORDER`, then by rank (run-wide ones first)."""
    return HEALTH_ORDER.index(finding["finding"]), -1 if finding["rank"] is None else finding["rank"]


def build_report(run: Run | None, *, dumps: DumpSet | None = None, executor: Executor | None = None) -> AnalysisReport:
    """The complete report of a run (None: of Flight Recorder dumps alone) and its dumps (module doc), with
    its detail tables (:mod:`ddprof.report.tables`; empty for dumps alone).

    The run is analysed a group of ranks at a time (:mod:`.rank_groups`), on ``executor`` (default: in
    this process); health findings are per rank, found in each group's events as traced, and run-wide."""
    hang = diagnose(dumps) if dumps is not None else None
    tables = {name: pl.DataFrame() for name in registry.DETAIL}
    if run is not None:
        report: dict[str, Any] = {"run": run.summary(), **copy.deepcopy(registry.EMPTY_SECTIONS)}
        job = job_section(run)  # first: the straggler causes read its CPU figures
        with Beside(run) as whatif:  # the what-if section, beside the groups' frames once the clock is known
            analysis = analyse_run(run, executor=executor, per_group=health,  # clocks aligned before cross-rank work
                                   cpu=cpu_rows({"job": job}), on_clock=whatif.start)
            clock = analysis.clock
            report["clocks"] = clock.section()
            sections = {k: analysis.sections[k] for k in registry.SECTION_ORDER}
            tables = analysis.sections.tables
            for row in report["run"]["per_rank"]:
                row["windows"] = analysis.windows.get(row["rank"], 0)
            whole_run = health(pl.LazyFrame(schema={c: EVENT_SCHEMA[c] for c in COLUMNS}), ranks=run.ranks,
                               world_size=run.world_size, clocks=report["clocks"],
                               ingest={r: run.rank_info(r) for r in run.ranks})
            report["health"] = sorted([*(f for part in analysis.extra for f in part), *whole_run], key=_health_order)
            report["run"]["warnings"].extend(clock.warnings())
            report["run"]["warnings"].extend(sections.pop("collective_warnings"))
            report.update(sections)
            report["comm_kernels"] = comm_kernels(analysis.comm_kernel_counts, rules_of(run.manifest))
            report["whatif"] = whatif.result([g["ranks"] for g in report["stragglers"]["groups"]])
        report["links"] = link_classes(tables["collectives"], report["run"])
        report["job"] = job
        if dumps is not None:  # a dump that cannot be read is a failed input, like a trace that cannot
            failed = _dump_failures(dumps)
            report["run"]["failed"].extend(failed)
            report["run"]["warnings"].extend(f["error"] for f in failed)
    elif dumps is not None and hang is not None:
        report = {"run": _dumps_summary(dumps, hang), **copy.deepcopy(registry.EMPTY_SECTIONS)}
    else:
        raise UsageError("nothing to report on: give a run, Flight Recorder dumps, or both")
    if hang is not None:
        report["hang"] = hang
    report = rounded(report)  # once, here: the report in memory is its JSON, however it was computed
    report["report_version"] = REPORT_VERSION
    report["verdicts"] = verdicts(report)
    report["status"] = status(report)
    return AnalysisReport(report, tables, names=registry.DETAIL)


def __getattr__(name: str) -> Any:
    """The report's sections as the registry declares them, also read from here: ``EMPTY_SECTIONS``,
    ``SECTION_ORDER`` (:mod:`.sections`)."""
    if name in ("EMPTY_SECTIONS", "SECTION_ORDER"):
        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
