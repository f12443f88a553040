"""Assemble the JSON report (DESIGN.md §4) from a run: every registered analysis, one dict."""

from __future__ import annotations

from typing import Any

from ddprof.rundir import Run

EMPTY_SECTIONS: dict[str, Any] = {
    "overlap": [],
    "overlap_by_step": [],
    "breakdown": [],
    "idle": [],
    "bubbles": [],
    "stragglers": {"ranks": [], "per_rank": []},
    "collectives": [],
    "bandwidth": [],
    "hang": {"collectives": []},
}


def run_section(run: Run) -> dict[str, Any]:
    m = run.manifest
    warnings = list(m.get("warnings", []))
    for key, src in run.failed.items():
        warnings.append(f"{src.get('path', key)}: {src.get('error')}")
    return {
        "world_size": run.world_size,
        "ranks": run.ranks,
        "backend": m.get("backend"),
        "device": run.device,
        "steps": run.steps,
        "warnings": warnings,
    }


def build_report(run: Run) -> dict[str, Any]:
    report: dict[str, Any] = {"run": run_section(run)}
    report.update({k: (v.copy() if isinstance(v, (list, dict)) else v) for k, v in EMPTY_SECTIONS.items()})
    return report
