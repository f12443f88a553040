"""The report (DESIGN.md §4) as plain text for a terminal: verdicts first, then compact tables.

Standard library (and :mod:`ddprof.units`, the formatters the verdicts share) only; every line fits in
100 columns. Long tables show their first rows and say how many more the JSON report holds.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from ddprof.units import fmt_bytes, fmt_us

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


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 0) -> str:
    """A titled table; the first ``left`` columns are left-aligned, the others right-aligned."""
    if not rows:
        return ""
    shown = [[str(c)[:40] for c in r] for r in rows[:MAX_ROWS]]
    widths = [max(len(h), *(len(r[i]) for r in shown)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()[:WIDTH]

    out = [title, "-" * min(WIDTH, max(len(title), len(line(headers)))), line(headers)]
    out += [line(r) for r in shown]
    if len(rows) > MAX_ROWS:
        out.append(f"... {len(rows) - MAX_ROWS} more row(s) in the JSON report (--format json)")
    return "\n".join(out)


def _idle_rows(idle: list[dict[str, Any]]) -> list[list[str]]:
    by_stream: dict[tuple[int, int], dict[str, float]] = {}
    for row in idle:
        by_stream.setdefault((row["rank"], row["stream"]), {})[row["category"]] = row["idle_us"]
    return [[str(r), str(s), fmt_us(c.get("host_wait")), fmt_us(c.get("kernel_wait")), fmt_us(c.get("other"))]
            for (r, s), c in sorted(by_stream.items())]


def _bubble_rows(report: dict[str, Any]) -> list[list[str]]:
    per: dict[int, list[dict[str, Any]]] = {}
    for row in report["bubbles"]:
        per.setdefault(row["rank"], []).append(row)
    stage = {p["rank"]: p for p in report.get("pipeline", [])}
    rows = []
    for r, steps in sorted(per.items()):
        pcts = [s["bubble_pct"] for s in steps if s["bubble_pct"] is not None]
        p = stage.get(r, {})
        rows.append([str(r), str(len(steps)), fmt_us(sum(s["bubble_us"] for s in steps) / len(steps)),
                     _pct(sum(pcts) / len(pcts) if pcts else None), _num(p.get("stage"), "{}"),
                     _pct(p.get("theoretical_pct"))])
    return rows


def _hang_section(hang: dict[str, Any]) -> str:
    """Flight Recorder findings: the suspect ranks, then per group the first collective (or send/recv) some
    members never entered (missing) or entered and never completed (for send/recv: the ranks waiting)."""
    rows = hang.get("collectives") or []
    text = table("Hang: per process group, the first collective not entered or not completed by all",
                 ["pg", "group", "op", "#", "missing", "not completed"],
                 [[str(h.get("pg")), str(h.get("pg_desc") or "-"), str(h.get("op")), str(h.get("index")),
                   _ranks(h.get("missing_ranks")), _ranks(h.get("not_completed_ranks", h.get("waiting_ranks")))]
                  for h in rows], left=3)
    if not text:
        return ""
    lines = text.split("\n")
    suspects = f"suspect ranks (the hang started there): {_ranks(hang.get('suspect_ranks'))}"
    if hang.get("unaccounted_ranks"):
        suspects += f"; waited for, no usable dump: {_ranks(hang['unaccounted_ranks'])}"
    return "\n".join([*lines[:2], suspects[:WIDTH], "", *lines[2:]])


def render_text(report: dict[str, Any]) -> str:
    """The whole report as text: verdicts, then one table per non-empty section, then warnings."""
    parts: list[str] = []
    hang = report.get("hang") or {}
    verdicts = list(report.get("verdicts") or [])
    if hang.get("verdict") and hang["verdict"] not in verdicts:
        # A hang comes first; "no hang found" (a healthy capture's dumps) is worth a line, last.
        verdicts.insert(0 if hang.get("collectives") else len(verdicts), hang["verdict"])
    if verdicts:
        lines = ["Verdicts", "--------"]
        for v in verdicts:
            lines += textwrap.wrap(v, WIDTH, initial_indent="* ", subsequent_indent="  ")
        parts.append("\n".join(lines))
    parts.append(table("Communication / computation overlap (whole trace)",
                       ["rank", "device", "overlap", "comm", "overlapped", "exposed comm"],
                       [[str(o["rank"]), o.get("device", "-"), _pct(o["overlap_pct"]), fmt_us(o["comm_us"]),
                         fmt_us(o["overlapped_us"]), fmt_us(o["exposed_comm_us"])] for o in report["overlap"]]))
    parts.append(table("Temporal breakdown (first to last kernel)",
                       ["rank", "span", "idle", "compute", "non-compute", "idle %", "compute %", "non-comp %"],
                       [[str(b["rank"]), fmt_us(b.get("span_us")), fmt_us(b["idle_us"]), fmt_us(b["compute_us"]),
                         fmt_us(b["non_compute_us"]), _pct(b["idle_pct"]), _pct(b["compute_pct"]),
                         _pct(b["non_compute_pct"])] for b in report["breakdown"]]))
    parts.append(table("Idle time by stream and cause", ["rank", "stream", "host wait", "kernel wait", "other"],
                       _idle_rows(report["idle"])))
    st = report["stragglers"]
    parts.append(table(f"Stragglers: {_ranks(st['ranks']) if st['ranks'] else 'none'}",
                       ["rank", "times last", "collectives", "wait caused", "mean step"],
                       [[str(p["rank"]), str(p["times_last"]), str(p.get("instances", "-")),
                         fmt_us(p["wait_caused_us"]), fmt_us(p["step_us"])] for p in st["per_rank"]
                        if p.get("instances")]))
    parts.append(table("Bubbles (mean over steps)", ["rank", "steps", "bubble", "bubble %", "stage", "theory"],
                       _bubble_rows(report)))
    coll = sorted(report["collectives"], key=lambda c: -(c.get("arrival_skew_us") or 0))
    parts.append(table("Collectives, largest arrival skew first",
                       ["pg", "#", "op", "size", "ranks", "skew", "duration", "busbw GB/s", "last"],
                       [[str(c["pg"]), str(c["index"]), c["op"], fmt_bytes(c["bytes"]), _ranks(c["ranks_seen"]),
                         fmt_us(c["arrival_skew_us"]), fmt_us(c["duration_us"]), _num(c["busbw_gbps"]),
                         _num(c.get("last_rank"), "{}")] for c in coll], left=3))
    parts.append(table("Bandwidth per op and size (nccl-tests definitions)",
                       ["op", "size", "ranks", "count", "mean time", "algbw GB/s", "busbw GB/s"],
                       [[b["op"], fmt_bytes(b["bytes"]), _num(b.get("n"), "{}"), str(b["count"]), fmt_us(b["duration_us"]),
                         _num(b["algbw_gbps"]), _num(b["busbw_gbps"])] for b in report["bandwidth"]], left=1))
    parts.append(_hang_section(hang))
    warnings = report.get("run", {}).get("warnings") or []
    if warnings:
        lines = ["Warnings", "--------"]
        for w in warnings:
            lines += textwrap.wrap(str(w), WIDTH, initial_indent="! ", subsequent_indent="  ")
        parts.append("\n".join(lines))
    return "\n\n".join(p for p in parts if p)
