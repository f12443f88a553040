"""The side-by-side table behind a check: per kernel and per collective (op, message size), the count, total
and per-step time in the baseline and the run, sorted by the change of the time per step (largest first).

* kernels (CPU ops on a CPU run): count, total_us, per_step_us (per rank and step: the time inside
  profiler steps over the (rank, step) pairs, so the mean over the steps; ``ddprof check`` compares the
  median over the steps of the same per-rank time, and says so). Given every kernel of both sides (read from
  their stores, :mod:`.all_kernels`), every kernel name; a kernel one side never ran shows null there.
  When a side is a saved report, which keeps only its top N (``kernels`` section), the table holds that
  report's top N, each with the other side's exact figures where it has a store; ``kernels_scope`` says
  which, and when both sides are saved reports a null means "not in that report's top N", not "never ran";
* collectives (``collectives`` section): per (op, bytes), count, total_us = Σ duration_us of its instances
  (the transfer, without the wait for late ranks), per_step_us = total_us / steps, and the median busbw;
* step time: the median step time of each; data loading (where a side has a data loader's spans): the median
  of each side's host time per rank and step in them (``step_times``' ``loading_us``), as ``check`` compares it.

``change_us`` = run − baseline per step; ``change_pct`` relative to the baseline. Example: gemm at 300 µs
per step in the baseline and 330 µs in the run -> change_us 30, change_pct 10.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

import msgspec
import numpy as np
from ddprof.analyses.compare.cause import classify
from ddprof.analyses.compare.check import describe
from ddprof.analyses.compare.samples import loading_us, op_word

from ddprof.report.schema import CollectiveRow, KernelRow, RunSection, StepTimeRow, rows
from ddprof.report.tables import detail_rows


def _change(b: float | None, r: float | None) -> tuple[float | None, float | None]:
    if b is None and r is None:
        return None, None
    d = (r or 0.0) - (b or 0.0)
    return d, (100 * d / b if b else None)


def _collectives(report: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    steps = max(len(msgspec.convert(report["run"], RunSection).steps), 1)
    per: dict[tuple[str, int], list[CollectiveRow]] = defaultdict(list)
    for c in rows(detail_rows(report, "collectives"), CollectiveRow):
        if c.bytes is not None:
            per[(c.op, c.bytes)].append(c)
    out = {}
    for key, instances in per.items():
        total = sum(c.duration_us or 0.0 for c in instances)
        bw = [c.busbw_gbps for c in instances if c.busbw_gbps is not None]
        out[key] = {"count": len(instances), "total_us": total, "per_step_us": total / steps,
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


def _kernel_sides(run: dict[str, Any], base: dict[str, Any], run_all: list[dict[str, Any]] | None,
                  base_all: list[dict[str, Any]] | None) -> tuple[dict[Any, Any], dict[Any, Any], dict[str, Any]]:
    """The kernels of each side to put side by side, and the scope said in the diff (module doc)."""
    def keyed(items: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
        return {(k.name, k.kind): msgspec.structs.asdict(k) for k in rows(items, KernelRow)}

    b = keyed(base_all if base_all is not None else base["kernels"])
    r = keyed(run_all if run_all is not None else run["kernels"])
    if run_all is not None and base_all is not None:
        return r, b, {"every_kernel": True, "note": f"every kernel of both runs ({len(set(r) | set(b))} names)"}
    saved = [side for side, items in (("run", run_all), ("baseline", base_all)) if items is None]
    top = {side: len((run if side == "run" else base)["kernels"]) for side in saved}
    keep = set().union(*(keyed((run if side == "run" else base)["kernels"]) for side in saved))
    r, b = {k: v for k, v in r.items() if k in keep}, {k: v for k, v in b.items() if k in keep}
    what = " and ".join(f"the {side}'s top {top[side]}" for side in saved)
    note = (f"only {what} kernels: a saved report keeps no more" + (
        "; a null side means not in that report's top, not absent" if len(saved) == 2 else ""))
    return r, b, {"every_kernel": False, "note": note}


def diff(run: dict[str, Any], base: dict[str, Any], *, run_source: str = "run", base_source: str = "baseline",
         run_kernels: list[dict[str, Any]] | None = None,
         base_kernels: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{run, baseline, cause, op_word, step_time: {base_median_us, run_median_us, change_us, change_pct},
    data_loading: the same or null,
    kernels_scope: {every_kernel, note}, kernels: [..], collectives: [..]}`` (module doc). ``run_kernels``
    and ``base_kernels``: every kernel of each side's store (:func:`.all_kernels.every_kernel`), None for a
    side that is a saved report. ``cause``: what kind of change it is (:func:`.cause.classify`, the check's
    default tolerances), null when nothing changed beyond the noise; ``op_word``: what the kernel rows are,
    "CPU op" on a CPU run, else "kernel"."""
    run_k, base_k, scope = _kernel_sides(run, base, run_kernels, base_kernels)

    bs = [s.step_us for s in rows(detail_rows(base, "step_times"), StepTimeRow)]
    rs = [s.step_us for s in rows(detail_rows(run, "step_times"), StepTimeRow)]
    bm, rm = (float(median(bs)) if bs else None), (float(median(rs)) if rs else None)
    change, pct = _change(bm, rm) if bm is not None and rm is not None else (None, None)
    lb, lr = loading_us(base).get(None), loading_us(run).get(None)
    loading = None
    if lb is not None and lr is not None and lb.size and lr.size and (lb.any() or lr.any()):
        lbm, lrm = float(np.median(lb)), float(np.median(lr))
        dl, dlp = _change(lbm, lrm)
        loading = {"base_median_us": lbm, "run_median_us": lrm, "change_us": dl, "change_pct": dlp}
    return {
        "run": describe(run, run_source), "baseline": describe(base, base_source),
        "cause": classify(base, run),
        "op_word": op_word(run),
        "step_time": {"base_median_us": bm, "run_median_us": rm, "change_us": change, "change_pct": pct},
        "data_loading": loading,
        "kernels_scope": scope,
        "kernels": _side_by_side(base_k, run_k, ("count", "total_us", "per_step_us"), ("name", "kind")),
        "collectives": _side_by_side(_collectives(base), _collectives(run),
                                     ("count", "total_us", "per_step_us", "busbw_gbps"), ("op", "bytes")),
    }
