"""The distributions a report holds, as NumPy arrays: what a check compares.

Each value is one (rank, step) unless said otherwise:

* ``step_us``: the step time (``step_times``), per rank and pooled over ranks (key None); ``loading_us`` the
  host time in the step's data-loader spans, likewise;
* ``exposed_pct``: exposed communication in the step over its length, ``100 · exposed_comm_us / step_us``
  (``overlap_by_step`` joined to ``step_times``; on a GPU rank to its device step's length, ``breakdown_by_step``,
  the window the exposed time was measured in). Example: 1.2 ms exposed in a 10 ms step -> 12 %;
* ``own_us``: per rank, the step time minus its exposed communication, ``step_us − exposed_comm_us``: the
  time the rank spent on its own work (compute, host work, idle), not waiting in communication for the
  others. Example: a 10 ms step with 1.2 ms exposed -> 8.8 ms. One slow rank raises its own; the others
  wait longer in the collectives, so theirs stays;
* ``overlap_pct`` (``overlap_by_step``), ``idle_pct``, per rank ``compute_us`` and per step ``compute_summed``
  over the ranks (``breakdown_by_step``);
* ``bubble_pct`` per pipeline stage (``bubbles`` with the stage of each rank);
* ``busbw``: one value per collective instance, per (op, message size) (``collectives``);
* ``busbw_links``: the same for point-to-point transfers per (op, message size, src, dst): the only busbw
  the report ties to ranks (a collective's busbw is one number for its whole group);
* ``kernel_steps``: per top kernel (name, kind), its time in each step of the run summed over ranks, or
  per rank (``kernels_by_step``; 0 in a step where it did not run).

Each section's rows are read from the report's detail tables (a report of version 1: from its JSON;
:func:`ddprof.report.tables.detail_rows`) as their declared records (:mod:`ddprof.report.schema`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, TypeVar

import msgspec
import numpy as np

from ddprof.report.schema import (
    BreakdownStepRow,
    BubbleRow,
    CollectiveRow,
    KernelStepRow,
    OverlapStepRow,
    RunSection,
    StepTimeRow,
    rows,
)
from ddprof.report.tables import detail_rows

T = TypeVar("T")


def op_word(report: dict[str, Any]) -> str:
    """What the report's per-op tables (``kernels``, ``kernels_by_step``) hold: "CPU op" on a CPU run (its
    CPU ops and gloo rows), "kernel" on a GPU run."""
    return "CPU op" if msgspec.convert(report["run"], RunSection).device == "cpu" else "kernel"


def _arr(values: list[Any]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None], dtype=np.float64)


def _detail(report: dict[str, Any], name: str, record: type[T]) -> list[T]:
    return rows(detail_rows(report, name), record)


def _step_times(report: dict[str, Any]) -> list[StepTimeRow]:
    return _detail(report, "step_times", StepTimeRow)


def _per_rank_and_pooled(report: dict[str, Any], field: str) -> dict[int | None, np.ndarray]:
    """A ``step_times`` field per rank and pooled over the ranks (key None), its nulls left out."""
    per: dict[int | None, list[float]] = defaultdict(list)
    for s in _step_times(report):
        value = getattr(s, field)
        if value is not None:
            per[s.rank].append(value)
            per[None].append(value)
    return {k: _arr(v) for k, v in per.items()}


def step_us(report: dict[str, Any]) -> dict[int | None, np.ndarray]:
    return _per_rank_and_pooled(report, "step_us")


def step_labels(report: dict[str, Any]) -> np.ndarray:
    """The step of each value of ``step_us(report)[None]`` (pooled over the ranks, in its order): what groups
    the ranks' values of one step."""
    return np.asarray([s.step for s in _step_times(report) if s.step_us is not None], dtype=np.int64)


def loading_us(report: dict[str, Any]) -> dict[int | None, np.ndarray]:
    """Per rank and pooled (key None): the host time in each step's data-loader spans (``step_times``; a report
    written before it was recorded has none)."""
    return _per_rank_and_pooled(report, "loading_us")


def exposed_pct(report: dict[str, Any]) -> np.ndarray:
    """Per rank and step: exposed communication over the step's length, in the window it was measured in:
    a device step's (``breakdown_by_step``'s span where its basis is ``device``), else the step time."""
    step = {(s.rank, s.step): s.step_us for s in _step_times(report)}
    step |= {(b.rank, b.step): b.span_us for b in _detail(report, "breakdown_by_step", BreakdownStepRow)
             if b.basis == "device"}
    return _arr([100 * o.exposed_comm_us / step[(o.rank, o.step)] for o in _detail(report, "overlap_by_step", OverlapStepRow)
                 if step.get((o.rank, o.step))])


def own_us(report: dict[str, Any]) -> dict[int, np.ndarray]:
    """Per rank: the step time minus the exposed communication of each step (module doc); a step without an
    overlap row counts whole."""
    exposed = {(o.rank, o.step): o.exposed_comm_us for o in _detail(report, "overlap_by_step", OverlapStepRow)}
    per: dict[int, list[float]] = defaultdict(list)
    for s in _step_times(report):
        per[s.rank].append(s.step_us - exposed.get((s.rank, s.step), 0.0))
    return {k: _arr(v) for k, v in sorted(per.items())}


def compute_us(report: dict[str, Any]) -> dict[int, np.ndarray]:
    """Per rank: its compute time in each step (``breakdown_by_step``)."""
    per: dict[int, list[float]] = defaultdict(list)
    for b in _detail(report, "breakdown_by_step", BreakdownStepRow):
        per[b.rank].append(b.compute_us)
    return {k: _arr(v) for k, v in sorted(per.items())}


def compute_summed(report: dict[str, Any]) -> np.ndarray:
    """Per step: the ranks' compute time summed (``breakdown_by_step``; steps every rank ran)."""
    per: dict[int, list[float]] = defaultdict(list)
    for b in _detail(report, "breakdown_by_step", BreakdownStepRow):
        per[b.step].append(b.compute_us)
    n = max((len(v) for v in per.values()), default=0)
    return _arr([sum(v) for _, v in sorted(per.items()) if len(v) == n])


def overlap_pct(report: dict[str, Any]) -> np.ndarray:
    """Per rank and step: the share of communication that overlaps compute (``overlap_by_step``)."""
    return _arr([o.overlap_pct for o in _detail(report, "overlap_by_step", OverlapStepRow)])


def idle_pct(report: dict[str, Any]) -> np.ndarray:
    """Per rank and step: the idle share of the step (``breakdown_by_step``)."""
    return _arr([b.idle_pct for b in _detail(report, "breakdown_by_step", BreakdownStepRow)])


def bubble_pct(report: dict[str, Any]) -> np.ndarray:
    """Per rank and step: the share of the step without compute (``bubbles``)."""
    return _arr([b.bubble_pct for b in _detail(report, "bubbles", BubbleRow)])


def bubble_by_stage(report: dict[str, Any], column: str = "bubble_pct") -> dict[int, np.ndarray]:
    """Per pipeline stage: ``column`` of each (rank, step) of its ranks (``bubbles``): the bubble %, or
    ``compute_us`` or ``window_us`` (the step's length)."""
    per: dict[int, list[float]] = defaultdict(list)
    for b in _detail(report, "bubbles", BubbleRow):
        if b.stage is not None and b.bubble_pct is not None:
            per[b.stage].append(getattr(b, column))
    return {k: _arr(v) for k, v in sorted(per.items())}


def busbw(report: dict[str, Any]) -> dict[tuple[str, int], np.ndarray]:
    per: dict[tuple[str, int], list[float]] = defaultdict(list)
    for c in _detail(report, "collectives", CollectiveRow):
        if c.busbw_gbps is not None and c.bytes is not None:
            per[(c.op, c.bytes)].append(c.busbw_gbps)
    return {k: _arr(v) for k, v in sorted(per.items())}


def busbw_links(report: dict[str, Any]) -> dict[tuple[str, int, int, int], np.ndarray]:
    per: dict[tuple[str, int, int, int], list[float]] = defaultdict(list)
    for c in _detail(report, "collectives", CollectiveRow):
        if c.busbw_gbps is not None and c.bytes is not None and c.src is not None and c.dst is not None:
            per[(c.op, c.bytes, c.src, c.dst)].append(c.busbw_gbps)
    return {k: _arr(v) for k, v in sorted(per.items())}


def kernel_steps(report: dict[str, Any], per_rank: bool = False) -> dict[tuple[str, str], np.ndarray]:
    """Per top kernel (name, kind): its time in each step of the run, summed over ranks; ``per_rank``:
    divided by the ranks that ran the step, the time per rank and step as ``ddprof diff`` and the
    ``kernels`` section give it (their mean over the steps, this a value per step). Example: 300 µs in
    a step on 2 ranks -> 300 (summed) or 150 (per rank)."""
    ranks: dict[int, set[int]] = defaultdict(set)
    for s in _step_times(report):
        ranks[s.step].add(s.rank)
    steps = sorted(ranks)
    per: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for k in _detail(report, "kernels_by_step", KernelStepRow):
        per[(k.name, k.kind)][k.step] = k.total_us
    div = {s: (len(ranks[s]) if per_rank else 1) or 1 for s in steps}
    return {key: np.asarray([v.get(s, 0.0) / div[s] for s in steps], dtype=np.float64) for key, v in per.items()}
