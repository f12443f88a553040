"""``ddprof analyze SRC|RUN_DIR [--format text|json|html] [-o FILE]``: picks the source, builds the one report,
renders it, and maps its status to the exit code."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ddprof.cli.common import (
    comm_kernel_option,
    emit,
    executor_option,
    exit_for_status,
    parse_rank_map,
    rank_option,
    rules_in_force,
)
from ddprof.cli.progress import ingest_progress

if TYPE_CHECKING:
    from ddprof.runtime.executors import Executor


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here (atomically).")
@click.option("--cache", type=click.Path(file_okay=False),
              help="Where to keep the ingested store of raw traces (default: SRC/.ddprof-cache, or a "
                   "temporary directory when SRC is read-only).")
@rank_option
@comm_kernel_option
@executor_option
def analyze(sources: tuple[str, ...], fmt: str, output: str | None, cache: str | None,
            ranks: tuple[str, ...], comm_kernels: tuple[str, ...] = (), executor: str = "local",
            address: str | None = None) -> int:
    """Analyse a run: raw traces, a run dir, or a directory of NCCL Flight Recorder dumps."""
    from ddprof.runtime.executors import get_executor

    runner = get_executor(executor, address)
    if fmt == "html":
        return _html(sources, output, cache, ranks, rules_in_force(comm_kernels), runner)
    from ddprof.analyses.report import build_report
    from ddprof.inputs.cache import writable  # the rule that keeps a read-only source untouched
    from ddprof.inputs.sources import open_source
    from ddprof.report.tables import run_tables_dir, tables_dir

    with open_source(sources, cache=cache, rank_map=parse_rank_map(ranks), comm_kernels=rules_in_force(comm_kernels),
                     progress=ingest_progress(fmt == "text" and output is None), executor=runner) as src:
        report = build_report(src.run, dumps=src.dumps, executor=runner)
        if src.run is not None and writable(src.run.path):  # the run dir keeps its report's detail tables
            report.write_tables(run_tables_dir(src.run.path))
    if fmt == "json":
        from ddprof.report.tables import report_json

        emit(report_json(report), output)  # first: a file that cannot be written is named as before
        if output and output != "-":  # then the detail tables beside it; without them, no report either
            try:
                report.write_tables(tables_dir(output))
            except BaseException:
                Path(output).unlink(missing_ok=True)
                raise
    else:
        from ddprof.render.text import render_text

        emit(render_text(report), output)
    return exit_for_status(report)


def _html(sources: tuple[str, ...], output: str | None, cache: str | None, ranks: tuple[str, ...],
          comm_kernels: tuple[str, ...] | None, runner: Executor | None = None) -> int:
    """One self-contained HTML file (the ``dash`` extra's plotly draws it): the report and the run's timeline."""
    from ddprof.dashboards.extra import require

    require("plotly", what="--format html")
    from ddprof.analyses.report import build_report
    from ddprof.dashboards.html_report import render_html
    from ddprof.inputs.sources import open_source

    with open_source(sources, cache=cache, rank_map=parse_rank_map(ranks), progress=ingest_progress(False),
                     comm_kernels=comm_kernels, executor=runner) as src:
        report = build_report(src.run, dumps=src.dumps, executor=runner)
        emit(render_html(report, src.run, title="ddprof report: " + " ".join(sources)), output)
    return exit_for_status(report)
