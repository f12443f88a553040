"""The ``run`` section (one line about the run, a row per rank, the failed inputs, the warnings) as plain
text: what ``ddprof ingest`` prints, and the head of the text report (:mod:`.text`). Its own module so that
printing it loads no section of the report."""

from __future__ import annotations

import textwrap
from typing import Any

import msgspec

from ddprof.report.schema import RunSection
from ddprof.vocabulary.units import fmt_ranges, fmt_spans

WIDTH = 100


def render_run(summary: dict[str, Any], run_warnings: bool = True) -> str:
    """The ``run`` section (:meth:`ddprof.store.rundir.Run.summary`) as text: one line about the run, a row
    per rank, the failed inputs and the warnings (the run's own only with ``run_warnings``: the whole
    report lists them once, at its end)."""
    run = msgspec.convert(summary, RunSection)
    world = run.world_size
    head = (f"run: {len(run.ranks)} rank(s)" + (f" of {world}" if world else "")
            + f", backend {run.backend or '?'}, {(run.device or '').upper()} trace"
            + (f", steps {fmt_ranges(run.steps)}" if run.steps else ", no ProfilerStep"))
    hosts = any(p.host for p in run.per_rank)
    host_head = f" {'host':<16}" if hosts else ""
    # the CPUs each rank was bound to, where the ranks were bound apart (ranks sharing a CPU are slowed together)
    cpus = len({p.cpus for p in run.per_rank}) > 1 and all(p.cpus for p in run.per_rank)
    cpus_head = f" {'cpus':<9}" if cpus else ""
    windows = any((p.windows or 1) > 1 for p in run.per_rank)  # profiling windows, where several
    win_head = f" {'windows':>7}" if windows else ""
    # a CPU-only run (gloo) has no kernels: its column would be zeros; "comm" counts its gloo ops
    kernels = run.device != "cpu" or any(p.kernels for p in run.per_rank)
    kern_head = f" {'kernels':>8}" if kernels else ""
    lines = [head, "", f"{'rank':>5}{host_head}{cpus_head} {'events':>9}{kern_head} {'comm':>6} {'span ms':>10}{win_head}  steps"]
    for p in run.per_rank:
        span = f"{p.span_us / 1e3:10.3f}" if p.span_us is not None else f"{'-':>10}"
        host = f" {(p.host or '-')[:16]:<16}" if hosts else ""
        bound = f" {(p.cpus or '-')[:9]:<9}" if cpus else ""
        win = f" {p.windows or '-':>7}" if windows else ""
        kern = f" {p.kernels:>8}" if kernels else ""
        lines.append(f"{p.rank:>5}{host}{bound} {p.events:>9}{kern} {p.comm_events:>6} {span}{win}  "
                     f"{fmt_spans(p.step_ranges) or '-'}")
    if windows:
        lines.append("span: the traced time, each rank's windows added up (the time between two windows was "
                     "not traced)")
    if run.failed:
        lines += ["", f"failed inputs ({len(run.failed)}):"]
        lines += [item(str(f.error)) for f in run.failed]
    other = [w for w in run.warnings if run_warnings and not any(w == f.error for f in run.failed)]
    rank_w = [(p.rank, w) for p in run.per_rank for w in p.warnings]
    if other or rank_w:
        lines += ["", "warnings:"]
        lines += [item(w) for w in other]
        lines += [item(f"rank {r}: {w}") for r, w in rank_w]
    return "\n".join(lines)


def item(text: str) -> str:
    """A bullet wrapped to 100 columns (long paths are not broken)."""
    return textwrap.fill(text, width=WIDTH, initial_indent="  - ", subsequent_indent="    ",
                         break_long_words=False, break_on_hyphens=False)
