"""``ddprof export SRC|RUN_DIR --perfetto OUT [--ranks 0,2-5] [--steps 10,11] [--raw-clocks]``: the run's
ranks merged into one Chrome trace / Perfetto JSON file (:mod:`ddprof.render.perfetto`), on one clock:
the per-host offsets :mod:`ddprof.analyses.clocks` estimates are applied where the evidence holds."""

from __future__ import annotations

import click

from ddprof.cli.common import comm_kernel_option, parse_rank_map, parse_selection, rank_option, rules_in_force
from ddprof.cli.progress import ingest_progress


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--perfetto", "out", required=True, type=click.Path(dir_okay=False),
              help="Write the trace here (atomically); gzip-compressed when the name ends in .gz.")
@click.option("--ranks", "rank_sel", metavar="LIST", help="Only these ranks, e.g. 0,2,4-7 (default: all).")
@click.option("--steps", "step_sel", metavar="LIST", help="Only the events of these steps, e.g. 10,11 (default: all).")
@click.option("--raw-clocks", is_flag=True, help="Keep each rank's timestamps as traced (no host clock alignment).")
@click.option("--cache", type=click.Path(file_okay=False),
              help="Where to keep the ingested store of raw traces (default: SRC/.ddprof-cache, or a "
                   "temporary directory when SRC is read-only).")
@rank_option
@comm_kernel_option
def export(sources: tuple[str, ...], out: str, rank_sel: str | None, step_sel: str | None, raw_clocks: bool,
           cache: str | None, ranks: tuple[str, ...], comm_kernels: tuple[str, ...] = ()) -> int:
    """Export a run's ranks merged into one Chrome trace / Perfetto JSON file (open it in ui.perfetto.dev)."""
    from ddprof.analyses.clocks import aligned_ts
    from ddprof.analyses.rank_groups import estimate_clock, rank_groups
    from ddprof.errors import UsageError
    from ddprof.inputs.sources import open_source
    from ddprof.render.perfetto import export_perfetto

    chosen = parse_selection(rank_sel, "ranks") if rank_sel else None
    steps = parse_selection(step_sel, "steps") if step_sel else None
    with open_source(sources, cache=cache, rank_map=parse_rank_map(ranks), progress=ingest_progress(True),
                     comm_kernels=rules_in_force(comm_kernels)) as src:
        if src.run is None:
            raise UsageError("nothing to export: Flight Recorder dumps hold no timeline; name traces or a run dir")
        if raw_clocks:
            ts, note = None, "each rank's trace clock, as traced (--raw-clocks)"
        else:
            clock = estimate_clock(src.run, rank_groups(src.run) or [[]])  # as the report estimates it
            fix = clock.corrections()
            ts = aligned_ts(fix) if fix else None
            note = (f"{clock.reason}: " + "; ".join(
                f"host {h.host} {h.offset_ns / 1000:+,.1f} µs ± {h.bound_ns / 1000:,.1f} µs"
                + (f", drift {h.drift_ppm:+.2f} ppm" if h.drift_ppm else "") for h in clock.hosts if h.applied)
                if fix else f"as traced: {clock.reason}")
        summary = export_perfetto(src.run, out, ranks=chosen, steps=steps, ts=ts, clock_note=note)
    click.echo(f"wrote {out}: {len(summary.ranks)} rank(s), {summary.events:,} events, {summary.flows:,} "
               f"launch arrows; clocks: {note}", err=True)
    return 0
