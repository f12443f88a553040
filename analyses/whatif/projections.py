"""What-if projections for a run in the store: the model built and checked
(:mod:`analyses.whatif.store`), the edits asked for replayed (:mod:`analyses.whatif.edits`), the best
first, with a verdict.

The step time is the run's: per step, from the earliest start of the step on any rank to the latest end
on any rank, averaged over the steps. Each projection gives the projected step time, the saving and its
share. Where the replay check fails, no projection is made and ``explained`` is false with the reason.

Edits (each optional): the straggler removed (``stragglers``: ranks, or ``"auto"``: each rank in turn,
the one whose removal saves most kept), communication ``comm_k`` times faster (∞: fully overlapped),
the gradient all-reduces issued after the backward overlapped with it (:mod:`analyses.whatif.overlap`),
host gaps removed (the idle part of the host threads' delays, :mod:`analyses.whatif.store`), data
loading hidden (the data loader's spans take no time: :data:`ddprof.vocabulary.loaders.DATA_LOADER_PATTERN`), the
pipeline stages rebalanced (where send/recv chains reveal stages: :func:`analyses.bubbles.pipeline_stages`;
each stage's compute scaled to the stages' mean), kernels matching a pattern ``k``
times faster. Attribution: by rank and by op type (the collective op or the event kind), as
:func:`analyses.whatif.edits.attribution` defines it; "the same op" on other ranks is the one with the
same name and occurrence in the step (:data:`KEYS`).

Example verdict: "making rank 7 as fast as the others would cut the step from 19.9 ms to 13.1 ms
(−34 %)".
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from ddprof.analyses.bubbles import pipeline_stages
from ddprof.analyses.frames.memo import Events, Prepared, collect
from ddprof.analyses.whatif import edits as E
from ddprof.analyses.whatif.critical import CriticalPath, critical_path, loader_ops
from ddprof.analyses.whatif.model import Model
from ddprof.analyses.whatif.overlap import grad_overlap as grad_overlap_edit
from ddprof.analyses.whatif.replay import Plan, plan, replay
from ddprof.analyses.whatif.store import replay_check, step_times

#: The labels "the same op on the other ranks" is found by: its occurrence in the step, else its name.
KEYS = ("key", "name")
#: Ranks tried one by one for the automatic straggler edit, at most (the largest excess time first).
MAX_STRAGGLER_CANDIDATES = 64


@dataclass
class Projection:
    edit: str
    says: str
    step_s: float
    saving_s: float
    saving_pct: float


@dataclass
class WhatIf:
    explained: bool
    reason: str | None
    replay_error_pct: float
    measured_step_s: float
    step_s: float
    steps: int
    ranks: int
    ops: int
    projections: list[Projection] = field(default_factory=list)
    by_rank: dict[str, float] = field(default_factory=dict)
    by_op_type: dict[str, float] = field(default_factory=dict)
    verdict: str | None = None
    #: Edits not replayed because the CPU budget ran out (``budget_s``), in words.
    left_out: list[str] = field(default_factory=list)
    #: Edits not replayed because their bound shows they cannot matter (:func:`bound`).
    bounded: int = 0
    #: The critical path of each step, from the recorded replay.
    critical: CriticalPath | None = field(default=None, repr=False)


def _ms(s: float) -> str:
    return f"{1e3 * s:,.1f} ms" if s < 10 else f"{s:,.2f} s"


def _sentence(p: Projection, base: float) -> str:
    return f"{p.says} would cut the step from {_ms(base)} to {_ms(p.step_s)} (−{p.saving_pct:.0f} %)"


def _mean_step(model: Model, order: Plan, edit: E.Edit) -> float:
    model, order = edit.graph(model, order)  # an edit of what ops wait for: replayed on its own graph
    r = replay(model, delay=edit.delay, dur=edit.dur, xfer=edit.xfer, order=order)
    return float(step_times(model, r.start, r.end).mean())


def bound(model: Model, edit: E.Edit) -> float:
    """An upper bound of the mean saving of ``edit`` per step, without replaying it: a step's longest path
    crosses each op's delay, duration and transfer at most once, and a max-plus value falls by no more
    than its path's weights fall, so a step saves at most the sum of its ops' decreases; a first op's
    longer delay may move the step's start later (it counts too). Example: a rank whose ops together run
    3 ms shorter per step under the edit saves at most 3 ms a step. An edit with a graph of its own
    (:mod:`analyses.whatif.overlap`) has no such bound: infinite."""
    if edit.model is not None:
        return math.inf
    fall = (np.maximum(model.delay - edit.delay, 0) + np.maximum(model.dur - edit.dur, 0)
            + np.maximum(model.xfer - edit.xfer, 0) + np.where(model.first, np.maximum(edit.delay - model.delay, 0), 0))
    per = np.bincount(model.step_of_op, weights=fall, minlength=len(model.steps))
    return float(per.mean()) if len(per) else 0.0


def _evaluate(model: Model, order: Plan, edits: list[E.Edit], keep: int, floor_s: float,
              deadline: float | None, cost_s: float, out: WhatIf, prior: tuple[float, ...] = ()
              ) -> list[tuple[E.Edit, float]]:
    """The mean step of each edit worth replaying (the largest bound first): one whose bound cannot beat
    the ``keep``-th saving found so far, or is below ``floor_s``, is not replayed (``out.bounded``); with a
    CPU ``deadline`` (``time.process_time``), one that the replay's cost ``cost_s`` would carry past it is
    left out (``out.left_out``). ``prior``: savings already found that count among the best."""
    base = out.step_s
    done: list[tuple[E.Edit, float]] = []
    for e, b in sorted(((e, bound(model, e)) for e in edits), key=lambda eb: -eb[1]):
        savings = sorted([*prior, *(base - t for _, t in done)], reverse=True)
        if b < floor_s or (len(savings) >= keep and b <= savings[keep - 1]):
            out.bounded += 1
            continue
        if deadline is not None and time.process_time() + cost_s > deadline:
            out.left_out.append(e.says)
            continue
        done.append((e, _mean_step(model, order, e)))
    return done


def whatif(events: Events, *, stragglers: str | list[int] | None = "auto", comm_k: list[float] | None = None,
           host_gaps: bool = True, kernels: list[tuple[str, float]] | None = None,
           attribute: bool = True, max_candidates: int = MAX_STRAGGLER_CANDIDATES, rebalance: bool = True,
           budget_s: float | None = None, keep: int | None = None, min_saving: float = 0.0,
           critical: bool = True, typical_links: bool = False,
           groups: list[list[int]] | Callable[[], list[list[int]]] | None = None,
           grad_overlap: bool = True, data_loading: bool = True) -> WhatIf:
    """Project the edits asked for on a run (module doc); ``max_candidates``: the ranks tried for the
    automatic straggler edit, at most. ``budget_s``: the CPU seconds this may take (none: no limit): past
    it after the model is built and replayed as recorded, nothing is projected (``reason`` says so);
    edits that would run past it are left out (``left_out``). ``keep``: only the ``keep`` best edits
    matter (edits whose bound cannot beat them are not replayed); ``min_saving``: nor are edits whose
    bound is below this share of the step. ``critical``: also find each step's critical path.
    ``typical_links``: also every transfer at most its collective's typical (a slow link restored).
    ``groups``: groups of ranks each made as fast as the others as one edit (ranks slower together,
    :mod:`analyses.slow_groups`), or a function that gives them, called once, after every other edit is
    replayed (the report computes its stragglers section meanwhile: :class:`analyses.whatif.section.Beside`). ``grad_overlap``: also the gradient all-reduces that wait for the whole
    backward overlapped with it (:mod:`analyses.whatif.overlap`), where a rank has such a tail.
    ``data_loading``: also the data loader's spans taking no time, where the model holds some."""
    t0 = time.process_time()
    deadline = None if budget_s is None else t0 + budget_s
    # In memory once: the op table, the collectives and the steps each read the events (a scan apiece).
    p = events if isinstance(events, Prepared) else Prepared(collect(events).lazy())
    check = replay_check(p, deadline)
    model = check.model
    if model is None or not check.explained:
        return WhatIf(False, check.reason, 100 * check.error if check.error == check.error else math.nan,
                      check.measured_step_s, math.nan, 0, 0, 0 if model is None else model.ops.height)
    order = check.order or plan(model)
    r0 = check.replayed
    base = float(step_times(model, r0.start, r0.end).mean()) if r0 is not None else _mean_step(
        model, order, E.recorded(model))
    out = WhatIf(True, None, 100 * check.error, check.measured_step_s, base, model.ops["profiler_step"].n_unique(),
                 model.ops["worker"].n_unique(), model.ops.height)
    if critical and r0 is not None and r0.binding is not None:
        out.critical = critical_path(model, r0)
    spent = time.process_time() - t0
    if deadline is not None and time.process_time() > deadline:
        out.explained = False
        out.reason = (f"building and checking the dependency model took {spent:.2f} s of CPU, past the "
                      f"{budget_s:.2f} s the report allows it: run ddprof whatif")
        return out
    # One replay costs about what the recorded one did (the plan is shared): measured, not guessed.
    cost = _replay_cost(model, order) if deadline is not None else 0.0
    floor = min_saving * base
    worker = model.ops["worker"].to_numpy()
    stages = pipeline_stages(p) if (rebalance or stragglers) else None
    stage_of = (dict(zip(stages["rank"].to_list(), stages["stage"].to_list()))
                if stages is not None and stages.height and int(cast(int, stages["stages"].max() or 0)) > 1 else {})
    peers = np.array([stage_of.get(int(w), -1) for w in worker]) if stage_of else None
    candidates: list[E.Edit] = []
    if stragglers == "auto" and len(np.unique(worker)) > 1:
        # The ranks with the most time above their kernels' typical values, tried one by one.
        typ = E.typical_values(model, "key")
        excess = np.nan_to_num(E._values(model) - typ) + np.nan_to_num(
            model.delay - E.typical_values(model, "key", v=model.delay))
        ids, at = np.unique(worker, return_inverse=True)
        per = dict(zip(ids.tolist(), np.bincount(at, weights=excess).tolist()))
        ranks = sorted(per, key=lambda w: -per[w])[:max_candidates]
        if len(ranks) > 1:
            tried = [E.typical_for(model, worker == r, KEYS, f"straggler_rank_{r}",
                                   f"making rank {r} as fast as the others", peers) for r in ranks]
            found = _evaluate(model, order, tried, 1, floor, deadline, cost, out)
            if found:
                best_e, best_t = min(found, key=lambda et: et[1])
                out.projections.append(Projection(best_e.name, best_e.says, best_t, base - best_t,
                                                  100 * (base - best_t) / base if base else 0.0))
    elif stragglers and not isinstance(stragglers, str):  # "auto" on a single rank: no one to compare it with
        candidates.append(_as_fast_as_others(model, worker, list(stragglers), peers))
    for k in comm_k or []:
        candidates.append(E.comm_faster(model, k))
    if typical_links:
        candidates.append(E.typical_transfers(model, peers=peers))
    if grad_overlap and check.deps is not None and (overlapped := grad_overlap_edit(model, check.deps)) is not None:
        candidates.append(overlapped)
    if data_loading:
        loading = loader_ops(model)
        if loading.any():
            candidates.append(E.no_data_loading(model, loading))
    if host_gaps:
        candidates.append(E.no_delays(model, (model.ops["lane"] < 0).to_numpy(), "host gaps",
                                      amount=model.ops["gap"].to_numpy()))
    if rebalance and peers is not None:
        compute = model.ops["optype"].is_in(["compute", "cpu_op"]).to_numpy()
        candidates.append(E.rebalanced(model, peers, compute))
    for pattern, k in kernels or []:
        mask = model.ops["name"].str.contains(pattern).fill_null(False).to_numpy()
        edit = E.ops_faster(model, mask, k, f"kernels matching {pattern!r}")
        edit.name = f"kernels_{re.sub(r'[^A-Za-z0-9]+', '_', pattern).strip('_')}_x{k:g}"
        candidates.append(edit)

    def project(edits: list[E.Edit]) -> None:
        prior = tuple(pr.saving_s for pr in out.projections)  # what was found counts among the best
        for e, t in _evaluate(model, order, edits, keep or len(prior) + len(edits) + 1, floor, deadline, cost, out,
                              prior):
            out.projections.append(Projection(e.name, e.says, t, base - t, 100 * (base - t) / base if base else 0.0))

    project(candidates)
    # The groups' edits last: the report hands their ranks over only now (its stragglers section, computed
    # meanwhile); an edit that cannot beat the best found so far is still not replayed.
    traced = set(np.unique(worker).tolist())
    present = [[r for r in group if r in traced] for group in (groups() if callable(groups) else groups) or []]
    project([_as_fast_as_others(model, worker, ranks, peers) for ranks in present if ranks])
    out.projections.sort(key=lambda pr: -pr.saving_s)
    if attribute:
        out.by_rank = E.attribution(model, order, "worker", KEYS, measure=_mean_step)
        out.by_op_type = E.attribution(model, order, "optype", KEYS, measure=_mean_step)
    best = next((pr for pr in out.projections if pr.saving_pct >= 1.0), None)
    out.verdict = (_sentence(best, base) if best else
                   f"none of the edits tried would cut the step ({_ms(base)}) by 1 % or more")
    return out


def _as_fast_as_others(model: Model, worker: np.ndarray, ranks: list[int], peers: np.ndarray | None) -> E.Edit:
    """The edit that makes ``ranks`` as fast as the others, together (:func:`.edits.typical_for`)."""
    names = ", ".join(map(str, ranks))
    return E.typical_for(model, np.isin(worker, np.asarray(ranks)), KEYS, "straggler_ranks_" + "_".join(map(str, ranks)),
                         f"making rank{'s' if len(ranks) > 1 else ''} {names} as fast as the others", peers)


def _replay_cost(model: Model, order: Plan) -> float:
    """CPU seconds of one replay of ``model`` (timed on the recorded values)."""
    t = time.process_time()
    replay(model, order=order)
    return time.process_time() - t


def as_dict(w: WhatIf) -> dict[str, Any]:
    """A :class:`WhatIf` as plain JSON values (NaN as null)."""
    def clean(v: Any) -> Any:
        if isinstance(v, float):
            return None if v != v else v
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        if isinstance(v, CriticalPath):
            return {"by_kind": v.by_kind().to_dicts(), "top_ops": v.top_ops().to_dicts()}
        if hasattr(v, "__dataclass_fields__"):
            return {k: clean(getattr(v, k)) for k in v.__dataclass_fields__}
        return v
    return clean(w)
