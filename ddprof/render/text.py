"""The report (docs/DESIGN.md §4) as plain text for a terminal: verdicts first, then compact tables.

Standard library (and :mod:`ddprof.vocabulary.units`, the formatters the verdicts share) only; every line fits in
100 columns. Long tables show their first rows and say how many more the JSON report holds. Each section
is read as its declared records (:mod:`ddprof.report.schema`), its fields as attributes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import msgspec

from ddprof.report.schema import (
    BandwidthRow,
    BreakdownRow,
    BubbleStepSummary,
    Collectives,
    CommKernelRow,
    Hang,
    HealthFinding,
    IdleRow,
    OverlapRow,
    PipelineRow,
    Stragglers,
    rows,
)
from ddprof.vocabulary.units import fmt_bytes, fmt_us, step_ranges

WIDTH = 100
MAX_ROWS = 40


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.2f} %"


def _num(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _ranks(v: Sequence[int] | None) -> str:
    if not v:
        return "-"
    return ",".join(map(str, v)) if len(v) <= 6 else f"{len(v)} ranks"


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 0,
          more: tuple[int, str] | None = None) -> str:
    """A titled table; the first ``left`` columns are left-aligned, the others right-aligned. ``more``:
    (rows in all, where they are) when ``rows`` are the first of a longer table kept elsewhere."""
    if not rows:
        return ""
    shown = [[str(c)[:40] for c in r] for r in rows[:MAX_ROWS]]
    widths = [max(len(h), *(len(r[i]) for r in shown)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()[:WIDTH]

    out = [title, "-" * min(WIDTH, max(len(title), len(line(headers)))), line(headers)]
    out += [line(r) for r in shown]
    total, where = more or (len(rows), "the JSON report (--format json)")
    if total > len(shown):
        out.append(f"... {total - len(shown)} more row(s) in {where}")
    return "\n".join(out)


def _idle_rows(idle: list[IdleRow]) -> list[list[str]]:
    by_stream: dict[tuple[int, int], dict[str, float]] = {}
    for row in idle:
        by_stream.setdefault((row.rank, row.stream), {})[row.category] = row.idle_us
    return [[str(r), str(s), fmt_us(c.get("host_wait")), fmt_us(c.get("kernel_wait")), fmt_us(c.get("other"))]
            for (r, s), c in sorted(by_stream.items())]


def _bubble_rows(report: dict[str, Any]) -> list[list[str]]:
    stage = {p.rank: p for p in rows(report.get("pipeline", []), PipelineRow)}
    out = []
    for b in sorted(msgspec.convert(report["bubbles"], BubbleStepSummary).per_rank, key=lambda b: b.rank):
        p = stage.get(b.rank)
        out.append([str(b.rank), str(b.steps), fmt_us(b.bubble_us.mean), _pct(b.bubble_pct.mean),
                    _num(p.stage if p else None, "{}"), _pct(p.theoretical_pct if p else None)])
    return out


def _hang_section(section: dict[str, Any]) -> str:
    """Flight Recorder findings: the suspect ranks, then per group the first collective (or send/recv) some
    members never entered (missing) or entered and never completed (for send/recv: the ranks waiting)."""
    hang = msgspec.convert(section, Hang)
    text = table("Hang: per process group, the first collective not entered or not completed by all",
                 ["pg", "group", "op", "#", "missing", "not completed"],
                 [[h.pg, h.pg_desc or "-", h.op, str(h.index), _ranks(h.missing_ranks),
                   _ranks(h.not_completed_ranks if h.kind == "collective" else h.waiting_ranks)]
                  for h in hang.collectives], left=3)
    if not text:
        return ""
    lines = text.split("\n")
    suspects = f"suspect ranks (the hang started there): {_ranks(hang.suspect_ranks)}"
    if hang.unaccounted_ranks:
        suspects += f"; waited for, no usable dump: {_ranks(hang.unaccounted_ranks)}"
    return "\n".join([*lines[:2], suspects[:WIDTH], "", *lines[2:]])


def render_run(summary: dict[str, Any], run_warnings: bool = True) -> str:
    """The ``run`` section (:meth:`ddprof.store.rundir.Run.summary`) as text: one line about the run, a row
    per rank, the failed inputs and the warnings (the run's own only with ``run_warnings``: the whole
    report lists them once, at its end)."""
    ranks = summary["ranks"]
    world = summary["world_size"]
    head = (f"run: {len(ranks)} rank(s)" + (f" of {world}" if world else "")
            + f", backend {summary['backend'] or '?'}, {summary['device'].upper()} trace"
            + (f", steps {_ranges(summary['steps'])}" if summary["steps"] else ", no ProfilerStep"))
    hosts = any(p["host"] for p in summary["per_rank"])
    host_head = f" {'host':<16}" if hosts else ""
    windows = any((p.get("windows") or 1) > 1 for p in summary["per_rank"])  # profiling windows, where several
    win_head = f" {'windows':>7}" if windows else ""
    lines = [head, "", f"{'rank':>5}{host_head} {'events':>9} {'kernels':>8} {'comm':>6} {'span ms':>10}{win_head}  steps"]
    for p in summary["per_rank"]:
        span = f"{p['span_us'] / 1e3:10.3f}" if p["span_us"] is not None else f"{'-':>10}"
        host = f" {(p['host'] or '-')[:16]:<16}" if hosts else ""
        win = f" {p.get('windows') or '-':>7}" if windows else ""
        lines.append(f"{p['rank']:>5}{host} {p['events']:>9} {p['kernels']:>8} {p['comm_events']:>6} {span}{win}  "
                     f"{_spans(p['step_ranges']) or '-'}")
    if summary["failed"]:
        lines += ["", f"failed inputs ({len(summary['failed'])}):"]
        lines += [_item(f["error"]) for f in summary["failed"]]
    other = [w for w in summary["warnings"] if run_warnings and not any(w == f["error"] for f in summary["failed"])]
    rank_w = [(p["rank"], w) for p in summary["per_rank"] for w in p["warnings"]]
    if other or rank_w:
        lines += ["", "warnings:"]
        lines += [_item(w) for w in other]
        lines += [_item(f"rank {r}: {w}") for r, w in rank_w]
    return "\n".join(lines)


def _item(text: str) -> str:
    """A bullet wrapped to 100 columns (long paths are not broken)."""
    return textwrap.fill(text, width=WIDTH, initial_indent="  - ", subsequent_indent="    ",
                         break_long_words=False, break_on_hyphens=False)


def _ranges(xs: list[int]) -> str:
    """[1,2,3,7] -> '1-3, 7'."""
    return _spans(step_ranges(xs))


def _spans(spans: list[list[int]]) -> str:
    """[[1, 3], [7, 7]] -> '1-3, 7'."""
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _health_section(findings: list[HealthFinding]) -> str:
    """The ``health`` findings, one bullet per finding over all its ranks: what the trace cannot tell,
    printed before the numbers."""
    by: dict[str, list[HealthFinding]] = {}
    for row in findings:
        by.setdefault(row.finding, []).append(row)
    if not by:
        return ""
    lines = ["Trace health: what this trace cannot tell (read before the numbers)",
             "-------------------------------------------------------------------"]
    for finding, group in by.items():
        ranks = sorted({r for row in group for r in row.ranks})
        where = ("rank " if len(ranks) == 1 else "ranks ") + (_ranges(ranks) or "-")
        example = f"; e.g. {group[0].example}" if group[0].example else ""
        lines.append(_item(f"{finding} ({where}, {sum(r.count for r in group)}){example}. "
                           f"Affects {group[0].affects}"))
    return "\n".join(lines)


def _comm_kernel_section(found: list[CommKernelRow]) -> str:
    """Which kernel names each rule (built-in family, user rule, or collective metadata) made
    communication, so a user can check the classification and correct it with ``--comm-kernel``."""
    return table("Communication kernels, by the rule that classified them (--comm-kernel REGEX[=op] to correct)",
                 ["rule", "source", "op", "kernel", "count", "ranks"],
                 [[r.rule, r.source, r.op or "-", r.name or "(matched no kernel)", str(r.count), str(r.ranks)]
                  for r in found], left=4)


def render_text(report: dict[str, Any]) -> str:
    """The whole report (the dict :func:`ddprof.analyses.report.build_report` returns) as text: the run,
    the trace's health (what it cannot tell), the verdicts, one table per non-empty section, then the
    warnings."""
    run = report.get("run") or {}
    parts: list[str] = [render_run(run, run_warnings=False) if run.get("per_rank") else "",
                        _health_section(rows(report.get("health") or [], HealthFinding))]
    verdicts = report.get("verdicts") or []
    if verdicts:
        lines = ["Verdicts", "--------"]
        for v in verdicts:
            lines += textwrap.wrap(v, WIDTH, initial_indent="* ", subsequent_indent="  ")
        parts.append("\n".join(lines))
    parts.append(table("Communication / computation overlap (whole trace)",
                       ["rank", "device", "overlap", "comm", "overlapped", "exposed comm"],
                       [[str(o.rank), o.device, _pct(o.overlap_pct), fmt_us(o.comm_us), fmt_us(o.overlapped_us),
                         fmt_us(o.exposed_comm_us)] for o in rows(report["overlap"], OverlapRow)]))
    parts.append(table("Temporal breakdown (first to last kernel)",
                       ["rank", "span", "idle", "compute", "non-compute", "idle %", "compute %", "non-comp %"],
                       [[str(b.rank), fmt_us(b.span_us), fmt_us(b.idle_us), fmt_us(b.compute_us),
                         fmt_us(b.non_compute_us), _pct(b.idle_pct), _pct(b.compute_pct), _pct(b.non_compute_pct)]
                        for b in rows(report["breakdown"], BreakdownRow)]))
    parts.append(table("Idle time by stream and cause", ["rank", "stream", "host wait", "kernel wait", "other"],
                       _idle_rows(rows(report["idle"], IdleRow))))
    st = msgspec.convert(report["stragglers"], Stragglers)
    parts.append(table(f"Stragglers: {_ranks(st.ranks) if st.ranks else 'none'}",
                       ["rank", "times last", "collectives", "wait caused", "mean step"],
                       [[str(p.rank), str(p.times_last), str(p.instances), fmt_us(p.wait_caused_us),
                         fmt_us(p.step_us)] for p in st.per_rank if p.instances]))
    if report.get("pipeline"):  # "bubble" is pipeline vocabulary: only where pipeline stages were found
        parts.append(table("Pipeline bubbles (mean over steps)",
                           ["rank", "steps", "bubble", "bubble %", "stage", "theory"], _bubble_rows(report)))
    else:
        parts.append(table("Time without compute in a step (mean over steps)",
                           ["rank", "steps", "no compute", "no compute %"], [r[:4] for r in _bubble_rows(report)]))
    coll = msgspec.convert(report["collectives"], Collectives)
    parts.append(table("Collectives, largest arrival skew first",
                       ["pg", "#", "op", "size", "ranks", "skew", "duration", "busbw GB/s", "last"],
                       [[c.pg, str(c.index), c.op, fmt_bytes(c.bytes), _ranks(c.ranks_seen), fmt_us(c.arrival_skew_us),
                         fmt_us(c.duration_us), _num(c.busbw_gbps), _num(c.last_rank, "{}")] for c in coll.worst],
                       left=3, more=(coll.instances, "the detail table collectives.parquet")))
    parts.append(table("Bandwidth per op and size (nccl-tests definitions)",
                       ["op", "size", "ranks", "count", "mean time", "algbw GB/s", "busbw GB/s"],
                       [[b.op, fmt_bytes(b.bytes), _num(b.n, "{}"), str(b.count), fmt_us(b.duration_us),
                         _num(b.algbw_gbps), _num(b.busbw_gbps)] for b in rows(report["bandwidth"], BandwidthRow)],
                       left=1))
    parts.append(_comm_kernel_section(rows(report.get("comm_kernels") or [], CommKernelRow)))
    parts.append(_hang_section(report.get("hang") or {}))
    warnings = run.get("warnings") or []
    if warnings:
        lines = ["Warnings", "--------"]
        for w in warnings:
            lines += textwrap.wrap(str(w), WIDTH, initial_indent="! ", subsequent_indent="  ")
        parts.append("\n".join(lines))
    return "\n\n".join(p for p in parts if p)
