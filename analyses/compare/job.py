"""Same job, same workload? What must agree before timings are compared.

* **The job** (:func:`job_differences`): world size, ranks, device (GPU/CPU), backend, the set of collective
  ops, and the pipeline's stage count. A baseline of another job is refused (exit 2) unless the user allows it.
* **The workload** (:func:`workload_changes`): the median count of collectives and of kernels (CPU ops on a
  CPU run) per step and rank, where that median held the kernels per step of each rank (one pipeline stage
  given more layers moves its own count alone), the (op, message size) pairs, and the input shapes the top CPU ops ran on where the
  trace recorded them (:func:`other_shapes`). A change here means the job does other work per step: timings
  that depend on it are not compared as a slowdown, and the change is reported as what it is.

Example: baseline 1 all_reduce of 64 MiB per step, run 2 -> "collectives per step and rank: 1 → 2 (median)".
"""

from __future__ import annotations

from statistics import median
from typing import Any

import msgspec
from ddprof.analyses.compare.samples import op_word

from ddprof.report.schema import (
    BandwidthRow,
    CollectiveRow,
    KernelRow,
    PipelineRow,
    RunSection,
    StepTimeRow,
    rows,
)
from ddprof.report.tables import detail_rows
from ddprof.vocabulary.units import fmt_bytes


def collective_ops(report: dict[str, Any]) -> list[str]:
    return sorted({c.op for c in rows(detail_rows(report, "collectives"), CollectiveRow)}
                  | {b.op for b in rows(report["bandwidth"], BandwidthRow)})


def stage_count(report: dict[str, Any]) -> int:
    return len({p.stage for p in rows(report.get("pipeline", []), PipelineRow)})


def job_differences(base: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """Why ``run`` is not the same job as ``base`` (empty: it is)."""
    out = []
    b, r = msgspec.convert(base["run"], RunSection), msgspec.convert(run["run"], RunSection)
    for key, what in (("world_size", "world size"), ("ranks", "ranks"), ("device", "device"), ("backend", "backend")):
        if getattr(b, key) != getattr(r, key):
            out.append(f"{what} {getattr(b, key)} in the baseline, {getattr(r, key)} in the run")
    bo, ro = collective_ops(base), collective_ops(run)
    if bo != ro:
        out.append(f"collective ops {bo or 'none'} in the baseline, {ro or 'none'} in the run")
    if stage_count(base) != stage_count(run):
        out.append(f"{stage_count(base)} pipeline stages in the baseline, {stage_count(run)} in the run")
    return out


def per_step_median(report: dict[str, Any], key: str) -> float | None:
    """The median over ranks and steps of ``key``, a field of :class:`StepTimeRow` (``collectives``, ...)."""
    values = [getattr(s, key) for s in rows(detail_rows(report, "step_times"), StepTimeRow)]
    return float(median(values)) if values else None


def per_rank_median(report: dict[str, Any], key: str) -> dict[int, float]:
    """Per rank, the median over its steps of ``key``, a field of :class:`StepTimeRow`."""
    by: dict[int, list[float]] = {}
    for s in rows(detail_rows(report, "step_times"), StepTimeRow):
        by.setdefault(s.rank, []).append(getattr(s, key))
    return {r: float(median(v)) for r, v in sorted(by.items())}


def _ops_per_rank(base: dict[str, Any], run: dict[str, Any], pct: float) -> str | None:
    """The ranks whose ops per step moved beyond ``pct`` % while the median over all ranks held, as a line:
    a pipeline's last of 4 stages given 4× the layers runs 552 → 1,128 CPU ops a step, the other three
    stages as before, so the median over the ranks holds."""
    b, r = per_rank_median(base, "kernels"), per_rank_median(run, "kernels")
    moved = [k for k in b if k in r and abs(r[k] - b[k]) > pct / 100 * max(b[k], 1)]
    if not moved:
        return None
    parts = ", ".join(f"rank {k} {b[k]:g} → {r[k]:g}" for k in moved[:4])
    more = f" and {len(moved) - 4} more" if len(moved) > 4 else ""
    return f"{op_word(run)}s per step: {parts}{more} (median), the other ranks as before"


def message_sizes(report: dict[str, Any]) -> set[tuple[str, int]]:
    return {(b.op, b.bytes) for b in rows(report["bandwidth"], BandwidthRow)}


def _static(k: KernelRow) -> bool:
    """An op whose recorded shapes repeat from step to step: no more distinct shapes (every rank's) than its
    calls per rank and step. A sequence length that varies by batch gives new shapes every step, so two
    runs of one job differ in their sets: those ops are not compared."""
    return (k.shapes is not None and k.shapes_distinct is not None and k.per_step_count is not None
            and k.shapes_distinct <= max(1.0, round(k.per_step_count)))


def other_shapes(base: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The top ops both reports hold with recorded input shapes (``shapes`` of the ``kernels`` section: CPU
    ops) that repeat every step on both sides (:func:`_static`) and ran on another set of them in the run:
    other work per call (a batch, a model resized)."""
    b = {(k.name, k.kind): k.shapes for k in rows(base["kernels"], KernelRow) if _static(k)}
    return [k.name for k in rows(run["kernels"], KernelRow)  # a collective's sizes: the message sizes' rule
            if _static(k) and k.kind != "comm" and b.get((k.name, k.kind), k.shapes) != k.shapes]


#: The autograd engine's span around a backward node (``… AddmmBackward0``), recorded without input shapes.
AUTOGRAD_NODE = "autograd::engine::evaluate_function: "


def _top_ops(report: dict[str, Any]) -> dict[str, KernelRow]:
    return {k.name: k for k in rows(report["kernels"], KernelRow) if k.kind != "comm"}


def _same_input(b: dict[str, KernelRow], r: dict[str, KernelRow], name: str) -> bool | None:
    """Whether op ``name`` ran the same calls per rank and step on the same recorded input shapes and types in
    both top-op tables (``b``, ``r``); None where that cannot be told: it is not a top op of both, or either
    side has no recorded shapes or other shapes from step to step (:func:`_static`). The autograd engine's
    span around a backward node stands for the node (its work)."""
    kb, kr = b.get(name), r.get(name)
    if kb is not None and kb.shapes is None and name.startswith(AUTOGRAD_NODE):
        inner = name.removeprefix(AUTOGRAD_NODE)  # the engine's span around the node: its work is the node's
        kb, kr = b.get(inner), r.get(inner)
    if kb is None or kr is None or not (_static(kb) and _static(kr)):
        return None
    return kb.shapes == kr.shapes and round(kb.per_step_count or 0.0) == round(kr.per_step_count or 0.0)


def same_inputs(base: dict[str, Any], run: dict[str, Any], names: list[str]) -> bool:
    """Whether every op of ``names`` is a top op of both reports that ran the same calls per rank and step on
    the same recorded input shapes and types (:func:`_same_input`): the same work, whatever its time. False
    where one has no recorded shapes (a GPU kernel, a trace taken without ``record_shapes``): nothing then
    says what it ran on."""
    b, r = _top_ops(base), _top_ops(run)
    return bool(names) and all(_same_input(b, r, name) for name in names)


#: Rule 4b: the ops told the same must hold at least this share of the slowed ops' rise, unless the whole
#: program is told the same (:func:`same_program_work`).
TOLD_RISE = 0.5
#: The same program: at least this share of the op time told same or not (recorded shapes that repeat every
#: step), and of that, at least ``SAME_PROGRAM`` the same calls on the same inputs.
TOLD_SHARE = 0.5
SAME_PROGRAM = 0.8


def same_work_told(base: dict[str, Any], run: dict[str, Any], rises: dict[str, float]) -> bool:
    """Whether the ops of ``rises`` (name: its rise, µs a step) did the same work in both reports: none that
    can be told ran other calls or inputs (:func:`_same_input`), and those told the same hold at least half
    of the rise (``TOLD_RISE``) or the run as a whole did the baseline's work (:func:`same_program_work`).
    An op that cannot be told argues neither way: the autograd engine's span around a node that is no top
    op, as under DDP, where the span around ``AccumulateGrad`` holds the reducer's hook (its copies and
    collectives, told by their own shapes) and records none. False where nothing is told (a trace without
    shapes)."""
    b, r = _top_ops(base), _top_ops(run)
    told = {name: _same_input(b, r, name) for name in rises}
    if any(answer is False for answer in told.values()):
        return False
    same = sum(max(rises[name], 0.0) for name, answer in told.items() if answer)
    if same <= 0:
        return False
    return same >= TOLD_RISE * sum(max(x, 0.0) for x in rises.values()) or same_program_work(base, run) is not None


def untold(base: dict[str, Any], run: dict[str, Any], names: list[str]) -> list[str]:
    """The ops of ``names`` whose inputs cannot be told same or not (:func:`_same_input`)."""
    b, r = _top_ops(base), _top_ops(run)
    return [name for name in names if _same_input(b, r, name) is None]


def same_program_work(base: dict[str, Any], run: dict[str, Any]) -> float | None:
    """The share of the run's op time that ran the baseline's calls on its inputs where the run did the
    baseline's work as a whole: half or more of the op time told (``TOLD_SHARE``) and 80 % or more of that
    the same (``SAME_PROGRAM``, :func:`same_work_share`); None otherwise."""
    told, same = same_work_share(base, run)
    return same * told if told >= TOLD_SHARE and same >= SAME_PROGRAM else None


def same_work_share(base: dict[str, Any], run: dict[str, Any]) -> tuple[float, float]:
    """Of the run's top ops' time (communication left out), the share whose ops can be told the same or not
    (:func:`_same_input` not None), and of that, the share that ran the same calls on the same inputs as in
    the baseline: ``(told, same)``, ``(0, 0)`` where nothing is told. Ops nest (a span and the ops it
    calls), so this weighs the work where it is recorded, not a sum of disjoint times."""
    b, r = _top_ops(base), _top_ops(run)
    total = told = same = 0.0
    for name, k in r.items():
        total += k.total_us
        answer = _same_input(b, r, name)
        if answer is not None:
            told += k.total_us
            same += k.total_us if answer else 0.0
    return (told / total, same / told) if told else (0.0, 0.0)


def workload_changes(base: dict[str, Any], run: dict[str, Any], rule: dict[str, Any]) -> list[str]:
    """How the work per step changed beyond the rule's allowance (module doc); empty: the same workload."""
    out = []
    bc, rc = per_step_median(base, "collectives"), per_step_median(run, "collectives")
    if bc is not None and rc is not None and abs(rc - bc) > rule["collectives_per_step"]:
        out.append(f"collectives per step and rank: {bc:g} → {rc:g} (median)")
    bk, rk = per_step_median(base, "kernels"), per_step_median(run, "kernels")
    if bk is not None and rk is not None and abs(rk - bk) > rule["kernels_per_step_pct"] / 100 * max(bk, 1):
        out.append(f"{op_word(run)}s per step and rank: {bk:g} → {rk:g} (median)")
    elif bk is not None and rk is not None and (line := _ops_per_rank(base, run, rule["kernels_per_step_pct"])):
        out.append(line)
    if rule["message_sizes"]:
        bs, rs = message_sizes(base), message_sizes(run)
        gone, new = sorted(bs - rs), sorted(rs - bs)
        if gone or new:
            parts = [f"new {op} {fmt_bytes(n)}" for op, n in new] + [f"no more {op} {fmt_bytes(n)}" for op, n in gone]
            out.append("message sizes: " + ", ".join(parts))
    if rule.get("op_shapes", True):
        out += shapes_changes(base, run)
    return out


def shapes_changes(base: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The workload rule's line for the top ops on other input shapes (:func:`other_shapes`), or none."""
    resized = other_shapes(base, run)
    if not resized:
        return []
    more = f" and {len(resized) - 3} more" if len(resized) > 3 else ""
    return [f"{op_word(run)}s on other input shapes: {', '.join(resized[:3])}{more} "
            "(recorded shapes: a batch or a model resized)"]
