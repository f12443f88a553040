"""``ddprof analyze SRC|RUN_DIR [--format text|json] [-o FILE]``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ddprof.atomic import json_text
from ddprof.cli.common import emit, open_source, partial_failure, rank_option
from ddprof.errors import BadInputError, PartialRunError, ProblemFound
from ddprof.rundir import is_run_dir
from ddprof.summary import render_summary, run_summary


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here (atomically).")
@click.option("--cache", type=click.Path(file_okay=False),
              help="Where to keep the ingested store of raw traces (default: SRC/.ddprof-cache, or a "
                   "temporary directory when SRC is read-only).")
@rank_option
def analyze(sources: tuple[str, ...], fmt: str, output: str | None, cache: str | None,
            ranks: tuple[str, ...]) -> int:
    """Analyse a run: raw traces, a run dir, or a directory of NCCL Flight Recorder dumps."""
    from ddprof.analyses.hang import diagnose_captured, diagnose_hang, is_flight_recorder_dir
    from ddprof.analyses.report import hang_report

    if len(sources) == 1 and not is_run_dir(sources[0]) and is_flight_recorder_dir(Path(sources[0])):
        report = hang_report(diagnose_hang(Path(sources[0])))
        hang = report["hang"]
        _emit(report, None, fmt, output)
        if hang.get("collectives"):
            raise ProblemFound(hang.get("verdict") or "a hang was found (see the report)")
        if hang.get("failed"):
            raise PartialRunError([BadInputError(f.get("reason", "unreadable"), path=f.get("path"), rank=f.get("rank"))
                                   for f in hang["failed"]])
        return 0
    with open_source(sources, cache, ranks, progress=fmt == "text" and output is None) as run:
        from ddprof.analyses.report import build_report

        report = build_report(run)
        hang = _captured_hang(run.path, sources, diagnose_captured)
        if hang is not None:
            report["hang"] = hang
            if hang.get("collectives"):
                report["verdicts"].insert(0, hang["verdict"])
        summary = run_summary(run)
        report["run"]["per_rank"] = summary["per_rank"]
        report["run"]["failed"] = summary["failed"]
        _emit(report, summary, fmt, output)
        if run.failed:
            raise partial_failure(run, "the other ranks were analysed")
        if report["hang"].get("collectives"):
            raise ProblemFound(report["hang"].get("verdict") or "a hang was found (see the report)")
    return 0


def _captured_hang(run_dir: Path, sources: tuple[str, ...], diagnose: Any) -> dict[str, Any] | None:
    """Flight Recorder dumps a capture left beside its traces (``raw/rank-NNNNN/fr_trace_rank_N``)."""
    roots = [run_dir / "raw"] + [Path(s) for s in sources if Path(s).is_dir()]
    for root in roots:
        if root.is_dir():
            hang = diagnose(root)
            if hang is not None:
                return hang
    return None


def _emit(report: dict[str, Any], summary: dict[str, Any] | None, fmt: str, output: str | None) -> None:
    if fmt == "json":
        emit(json_text(report), output)
        return
    from ddprof.render_text import render_text

    parts = [render_summary(summary)] if summary else []
    parts.append(render_text(report))
    emit("\n\n".join(p for p in parts if p), output)
