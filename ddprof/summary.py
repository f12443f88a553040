"""The run summary: what was ingested, per rank, read from the manifest (no event scan)."""

from __future__ import annotations

import textwrap
from typing import Any

from ddprof.rundir import Run

WIDTH = 100


def run_summary(run: Run) -> dict[str, Any]:
    """Ranks, steps, event and kernel counts and span per rank, failures and warnings."""
    per_rank = []
    for r in run.ranks:
        info = run.rank_info(r)
        first, last = info.get("first_ns"), info.get("last_ns")
        per_rank.append({
            "rank": r,
            "events": info.get("events", 0),
            "kernels": info.get("kernels", 0),
            "comm_kernels": info.get("comm_kernels", 0),
            "comm_events": info.get("comm_events", info.get("comm_kernels", 0)),
            "steps": info.get("steps", []),
            "span_us": round((last - first) / 1e3, 3) if first is not None and last is not None else None,
            "device_names": sorted(set(info.get("device_names", []))),
            "host": run.manifest.get("hosts", {}).get(str(r)),
            "warnings": info.get("warnings", []),
        })
    return {
        "world_size": run.world_size,
        "ranks": run.ranks,
        "backend": run.manifest.get("backend"),
        "device": run.device,
        "steps": run.steps,
        "per_rank": per_rank,
        "failed": [{"path": v.get("path"), "rank": v.get("rank"), "error": v.get("error")}
                   for v in run.failed.values()],
        "warnings": list(run.manifest.get("warnings", [])),
    }


def render_summary(summary: dict[str, Any]) -> str:
    """Plain-text run summary, at most 100 columns wide."""
    ranks = summary["ranks"]
    world = summary["world_size"]
    head = (f"run: {len(ranks)} rank(s)" + (f" of {world}" if world else "")
            + f", backend {summary['backend'] or '?'}, {summary['device'].upper()} trace"
            + (f", steps {_ranges(summary['steps'])}" if summary["steps"] else ", no ProfilerStep"))
    hosts = any(p["host"] for p in summary["per_rank"])
    host_head = f" {'host':<16}" if hosts else ""
    lines = [head, "", f"{'rank':>5}{host_head} {'events':>9} {'kernels':>8} {'comm':>6} {'span ms':>10}  steps"]
    for p in summary["per_rank"]:
        span = f"{p['span_us'] / 1e3:10.3f}" if p["span_us"] is not None else f"{'-':>10}"
        host = f" {(p['host'] or '-')[:16]:<16}" if hosts else ""
        lines.append(f"{p['rank']:>5}{host} {p['events']:>9} {p['kernels']:>8} {p['comm_events']:>6} {span}  "
                     f"{_ranges(p['steps']) or '-'}")
    if summary["failed"]:
        lines += ["", f"failed inputs ({len(summary['failed'])}):"]
        lines += [_item(f["error"]) for f in summary["failed"]]
    other = [w for w in summary["warnings"] if not any(w == f["error"] for f in summary["failed"])]
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
    spans: list[list[int]] = []
    for x in sorted(xs):
        if spans and spans[-1][1] == x - 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
