"""``ddprof ingest SRC... -o RUN_DIR``."""

from __future__ import annotations

import click

from ddprof.cli.common import (
    comm_kernel_option,
    executor_option,
    parse_rank_map,
    partial_failure,
    rank_option,
)
from ddprof.cli.config import comm_kernel_rules
from ddprof.cli.progress import ingest_progress
from ddprof.ingestion import ingest as run_ingest
from ddprof.render.run import render_run


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Run dir to write (created if needed; an existing one is updated, unchanged traces reused).")
@rank_option
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel workers (default: cores).")
@click.option("--force", is_flag=True, help="Re-parse every trace even if the cache is up to date.")
@click.option("-q", "--quiet", is_flag=True, help="No summary, no progress bar.")
@comm_kernel_option
@executor_option
def ingest(sources: tuple[str, ...], out_dir: str, ranks: tuple[str, ...], jobs: int | None, force: bool,
           quiet: bool, comm_kernels: tuple[str, ...] = (), executor: str = "local", address: str | None = None) -> int:
    """Ingest Kineto traces (files, directories, .json or .json.gz) into a run dir."""
    from ddprof.runtime.executors import get_executor

    run = run_ingest(list(sources), out_dir, rank_map=parse_rank_map(ranks), jobs=jobs,
                     progress=ingest_progress(not quiet), force=force,
                     comm_kernels=comm_kernel_rules(comm_kernels), executor=get_executor(executor, address))
    summary = run.summary()
    if not quiet:
        click.echo(render_run(summary))
        click.echo(f"\nrun dir: {run.path}")
    if summary["failed"]:
        raise partial_failure(summary["failed"], "the other ranks were ingested")
    return 0
