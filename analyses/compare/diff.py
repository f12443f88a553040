"""The side-by-side table behind a check: per kernel and per collective (op, message size), the count, total
and per-step time in the baseline and the run, sorted by the change of the time per step (largest first).

* kernels (``kernels`` section, top kernels of either report): count, total_us, per_step_us (per rank and
  step); a kernel in the top of one report only shows null on the other side;
* collectives (``collectives`` section): per (op, bytes), count, total_us = Σ duration_us of its instances
  (the transfer, without the wait for late ranks), per_step_us = total_us / steps, and the median busbw;
* step time: the median step time of each.

``change_us`` = run − baseline per step; ``change_pct`` relative to the baseline. Example: gemm at 300 µs
per step in the baseline and 330 µs in the run -> change_us 30, change_pct 10.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

from ddprof.analyses.compare.check import describe


def _change(b: float | None, r: float | None) -> tuple[float | None, float | None]:
    if b is None and r is None:
        return None, None
    d = (r or 0.0) - (b or 0.0)
    return d, (100 * d / b if b else None)


def _collectives(report: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    steps = max(len(report["run"].get("steps") or []), 1)
    per: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for c in report["collectives"]:
        if c.get("bytes") is not None:
            per[(c["op"], c["bytes"])].append(c)
    out = {}
    for key, rows in per.items():
        total = sum(c["duration_us"] or 0.0 for c in rows)
        bw = [c["busbw_gbps"] for c in rows if c.get("busbw_gbps") is not None]
        out[key] = {"count": len(rows), "total_us": total, "per_step_us": total / steps,
                    "busbw_gbps": float(median(bw)) if bw else None}
    return out


def _side_by_side(base: dict[Any, dict[str, Any]], run: dict[Any, dict[str, Any]], fields: tuple[str, ...],
                  keys: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for key in set(base) | set(run):
        b, r = base.get(key, {}), run.get(key, {})
        row: dict[str, Any] = dict(zip(keys, key))
        for f in fields:
            row[f"base_{f}"], row[f"run_{f}"] = b.get(f), r.get(f)
        row["change_us"], row["change_pct"] = _change(b.get("per_step_us"), r.get("per_step_us"))
        rows.append(row)
    return sorted(rows, key=lambda x: (-abs(x["change_us"] or 0.0), *map(str, (x[k] for k in keys))))


def diff(run: dict[str, Any], base: dict[str, Any], *, run_source: str = "run",
         base_source: str = "baseline") -> dict[str, Any]:
    """``{run, baseline, step_time: {base_median_us, run_median_us, change_us, change_pct}, kernels: [..],
    collectives: [..]}`` (module doc)."""
    def kernels(rep: dict[str, Any]) -> dict[Any, dict[str, Any]]:
        return {(k["name"], k["kind"]): k for k in rep["kernels"]}

    bs = [s["step_us"] for s in base["step_times"]]
    rs = [s["step_us"] for s in run["step_times"]]
    bm, rm = (float(median(bs)) if bs else None), (float(median(rs)) if rs else None)
    change, pct = _change(bm, rm) if bm is not None and rm is not None else (None, None)
    return {
        "run": describe(run, run_source), "baseline": describe(base, base_source),
        "step_time": {"base_median_us": bm, "run_median_us": rm, "change_us": change, "change_pct": pct},
        "kernels": _side_by_side(kernels(base), kernels(run), ("count", "total_us", "per_step_us"), ("name", "kind")),
        "collectives": _side_by_side(_collectives(base), _collectives(run),
                                     ("count", "total_us", "per_step_us", "busbw_gbps"), ("op", "bytes")),
    }
