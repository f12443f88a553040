"""``ddprof diff RUN BASE [--rank FILE=N] [--format text|json] [-o FILE]``: first what kind of change it is (the cause class
and its evidence, as ``ddprof check`` tells it), then per kernel (CPU op on a CPU run) and collective, count,
total and per-step time side by side, sorted by change; every kernel when both sides have a store (run dirs
or traces), a saved report's top kernels otherwise. Exit 0 whatever changed (``ddprof check`` judges)."""

from __future__ import annotations

import click

from ddprof.cli.common import emit, parse_rank_map, rank_option


@click.command()
@click.argument("run", type=click.Path(exists=True))
@click.argument("base", type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the table here (atomically).")
@click.option("--cache", type=click.Path(file_okay=False), help="Where to ingest raw traces (as for analyze).")
@rank_option
def diff(run: str, base: str, fmt: str, output: str | None, cache: str | None, ranks: tuple[str, ...] = ()) -> int:
    """Compare two runs side by side: per kernel and collective, count, total and per-step time."""
    from ddprof.analyses.compare.diff import diff as make_diff
    from ddprof.inputs.reports import load_with_kernels
    from ddprof.render.compare import diff_text
    from ddprof.store.atomic import json_text

    rank_map = parse_rank_map(ranks)  # one map for both sides: a trace's name says which side it is on
    run_report, run_kernels = load_with_kernels(run, cache=cache, rank_map=rank_map)
    base_report, base_kernels = load_with_kernels(base, cache=cache, rank_map=rank_map)
    d = make_diff(run_report, base_report, run_source=run, base_source=base, run_kernels=run_kernels,
                  base_kernels=base_kernels)
    emit(json_text(d) if fmt == "json" else diff_text(d), output)
    return 0
