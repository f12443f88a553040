"""What-if edits: new per-op delays, durations and transfers for a dependency model
(:mod:`analyses.whatif.model`), each replayed (:mod:`analyses.whatif.replay`) into a projected step time.

An :class:`Edit` is a name, a sentence and the three arrays; the recorded values are the model's own.
The edits:

* :func:`typical_for` ("the straggler removed"): each op of the chosen ops (a rank, a group of ranks)
  takes its op type's typical value across the *other* ops: the median duration (compute) or transfer
  (communication) of the ops with the same ``key`` (kernel name, op type) outside the group, and the
  others' median delay before them where that is shorter than its own (a rank that sleeps or stalls
  before an op is slow too; a delay is never lengthened: part of it may be a wait the model does not
  see). Ops whose key the others never ran keep their own. Every rank's first host op of a step starts
  no later than its peers' typical start either (the median over the ranks of its pipeline stage), where
  it began the step no later than the chosen ops' ranks did: each step is replayed from its own origin,
  so a rank that began the step late because it waited for the straggler in the previous step would keep
  that wait (a rank that began later still, a sleep of its own, keeps its lateness).
* :func:`comm_faster`: every communication transfer (and the duration of communication that waits for
  nobody) divided by k; k = ∞ is communication fully overlapped (it costs nothing, its dependencies stay).
* :func:`typical_transfers` ("a slow link restored"): every transfer no longer than the median transfer of
  the same collective across the ranks (the k-th of its name on each).
* :func:`ops_faster`: the chosen ops (a kernel class, an op type) k times faster.
* :func:`rebalanced` ("a pipeline stage rebalanced"): the compute of each group (a pipeline stage)
  scaled so that every group computes the groups' mean per step: a stage with 1.3x the mean compute runs
  its compute ops 1/1.3 as long, a light one longer; communication and delays are kept.
* :func:`no_delays`: the measured delays of the chosen ops (host gaps: launch latency, Python) removed,
  or only the part of them given (the idle part of a host's wait).

The attribution of a slowdown to a group G (the OSDI'25 study's sense, :func:`attribution`): with every
op at its key's typical value and delay (medians over all ranks) the step takes T_typ; keeping only G's
ops at their recorded values it takes T_G; G's share is ``T_G / T_typ``: 1.0 when G explains nothing.

Worked example (the model docstring's two workers, the all-reduce transfer 1 s): f0 takes 3 s and f1
8 s, both kernels named ``fwd``. The straggler removed (worker 1's ops typical across worker 0): f1
takes 3 s, the latest arrival is ar0's at 3.5, the step 4.5 s instead of 9 s (−50 %). Communication ×2
faster: the transfer 0.5 s, the step 8.5 s. Attribution by worker, typical ``fwd`` = median(3, 8) = 5.5,
typical delay before ``ar`` = median(0.5, 0) = 0.25: T_typ = 5.5 + 0.25 + 1 = 6.75; only worker 1
recorded: max(8, 5.75) + 1 = 9, share 9/6.75 = 1.33; only worker 0 recorded: max(3.5, 5.75) + 1 = 6.75,
share 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import polars as pl
from ddprof.analyses.whatif.model import Model
from ddprof.analyses.whatif.replay import Plan, plan, replay

#: How much later than the ranks it removes a rank may begin a step and still count as having waited for
#: them (:func:`typical_for`), seconds.
START_SLACK_S = 1e-6


@dataclass
class Edit:
    """New values for a model's ops: ``delay``, ``dur``, ``xfer`` (arrays over the model's ops); an edit
    that changes what ops wait for brings its own ``model`` (the same ops, other edges) and its ``order``
    (:mod:`analyses.whatif.overlap`)."""

    name: str
    says: str
    delay: np.ndarray
    dur: np.ndarray
    xfer: np.ndarray
    model: Model | None = None
    order: Plan | None = None

    def graph(self, model: Model, order: Plan) -> tuple[Model, Plan]:
        """The model and plan this edit replays on: its own where it brings one, else ``model`` and
        ``order``."""
        if self.model is None:
            return model, order
        return self.model, self.order if self.order is not None else plan(self.model)


def recorded(model: Model) -> Edit:
    """No edit: the recorded values."""
    return Edit("recorded", "as recorded", model.delay, model.dur, model.xfer)


def _values(model: Model) -> np.ndarray:
    """Per op, the value an edit of its speed changes: its transfer when it waits for an instance, else
    its duration."""
    return np.where(model.ops["is_comm"].to_numpy(), model.xfer, model.dur)


def _with_values(model: Model, values: np.ndarray, mask: np.ndarray, base: Edit | None = None) -> tuple[
        np.ndarray, np.ndarray]:
    base = base or recorded(model)
    comm = model.ops["is_comm"].to_numpy()
    dur = np.where(mask & ~comm, values, base.dur)
    xfer = np.where(mask & comm, values, base.xfer)
    return dur, xfer


def typical_values(model: Model, key: str, among: np.ndarray | None = None, v: np.ndarray | None = None
                   ) -> np.ndarray:
    """Per op, the median value (:func:`_values`, or ``v``) of the ops with the same ``key`` within
    ``among`` (all ops by default); NaN where ``among`` has no op of that key."""
    v = _values(model) if v is None else v
    return _group_median(model.codes(key), v, among)


def _group_median(codes: np.ndarray, v: np.ndarray, among: np.ndarray | None) -> np.ndarray:
    """Per op, the median of ``v`` over the ops of ``among`` (all by default) with its code (``codes``:
    dense, -1 for none); NaN where there is none."""
    return _group_medians(codes, (v,), among)[0]


def _group_medians(codes: np.ndarray, vs: tuple[np.ndarray, ...], among: np.ndarray | None) -> list[np.ndarray]:
    """:func:`_group_median` of each of ``vs``, in one grouping."""
    if not len(codes):
        return [np.full(0, np.nan) for _ in vs]
    inside = codes >= 0 if among is None else among & (codes >= 0)
    cols = {f"v{i}": v[inside] for i, v in enumerate(vs)}
    med = pl.DataFrame({"k": codes[inside], **cols}).group_by("k").agg(pl.col(*cols).median())
    at, ok = med["k"].to_numpy(), codes >= 0
    out = []
    for c in cols:
        per = np.full(int(codes.max()) + 1, np.nan)
        per[at] = med[c].to_numpy()
        out.append(np.where(ok, per[np.maximum(codes, 0)], np.nan))
    return out


def _typicals(model: Model, keys: tuple[str, ...], among: np.ndarray | None, vs: tuple[np.ndarray, ...]
              ) -> list[np.ndarray]:
    """Of each of ``vs``, :func:`typical_values` by the first of ``keys`` that has one, then the next (a
    finer key, then a coarser one), the op's own value where none has; each key's medians in one grouping."""
    out = [np.full(model.ops.height, np.nan) for _ in vs]
    for key in keys:
        missing = [np.isnan(o) for o in out]
        if not any(m.any() for m in missing):  # the finer key gave every op one
            break
        meds = _group_medians(model.codes(key), vs, among)
        out = [np.where(m, med, o) for m, med, o in zip(missing, meds, out)]
    return [np.where(np.isnan(o), v, o) for o, v in zip(out, vs)]


def typical_for(model: Model, mask: np.ndarray, key: str | tuple[str, ...], name: str, says: str,
                peers: np.ndarray | None = None) -> Edit:
    """The ops in ``mask`` at their key's typical value and delay across the other ops (module doc);
    ``key`` may be several labels, finest first. ``peers``: per op, the group of ranks whose step starts
    are alike (a pipeline stage; one group by default)."""
    keys = (key,) if isinstance(key, str) else key
    typ, typ_delay = _typicals(model, keys, ~mask, (_values(model), model.delay))
    dur, xfer = _with_values(model, typ, mask)
    delay = np.where(mask, np.minimum(typ_delay, model.delay), model.delay)
    # A step is replayed from its origin: a rank whose first op of the step starts late waited, in the
    # previous step, for the ranks in ``mask``; without them it starts no later than its peers typically.
    # Only a rank that began no later than the ranks in ``mask`` did (it may have waited for them; one
    # that began later has a lateness of its own, a sleep, which stays).
    host_first = model.first & (model.ops["lane"] < 0).to_numpy()
    late_mask = np.full(len(model.steps), -np.inf)
    np.maximum.at(late_mask, model.step_of_op[host_first & mask], model.delay[host_first & mask])
    starts = host_first & ~mask & (model.delay <= late_mask[model.step_of_op] + START_SLACK_S)
    return Edit(name, says, _no_later_than_peers(model, starts, delay, keys[-1], peers), dur, xfer)


def _no_later_than_peers(model: Model, starts: np.ndarray, delay: np.ndarray, key: str,
                         peers: np.ndarray | None, among: np.ndarray | None = None) -> np.ndarray:
    """``delay`` with each op in ``starts`` (a rank's first host op of a step) no later than the median of
    its ``key`` over ``among`` (default: ``starts`` itself) in its ``peers`` group (a pipeline stage)."""
    if not starts.any():
        return delay
    among = starts if among is None else among
    codes = model.codes(key)
    if peers is not None:  # a code per (key, group): groups are labels from -1 up
        g = np.asarray(peers, np.int64) + 1
        codes = np.where(codes >= 0, codes * (int(g.max()) + 1) + g, -1)
    typ = np.nan_to_num(_group_median(codes, model.delay, among), nan=np.inf)
    return np.where(starts, np.minimum(delay, typ), delay)


def comm_faster(model: Model, k: float, comm: np.ndarray | None = None) -> Edit:
    """Communication ``k`` times faster (``k = inf``: fully overlapped); ``comm`` marks the communication
    ops (default: those that wait for an instance)."""
    comm = model.ops["is_comm"].to_numpy() if comm is None else comm
    values = _values(model) / k if np.isfinite(k) else np.zeros(model.ops.height)
    dur, xfer = _with_values(model, values, comm)
    what = "fully overlapped" if not np.isfinite(k) else f"{k:g}x faster"
    return Edit("comm_overlapped" if not np.isfinite(k) else f"comm_x{k:g}", f"communication {what}",
                model.delay, dur, xfer)


def typical_transfers(model: Model, key: str = "key", peers: np.ndarray | None = None) -> Edit:
    """Every transfer no longer than the typical of its kind: the median transfer of the communication ops
    with the same ``key`` (the k-th collective of a name on every rank), where that is shorter ("a slow
    link restored": a host whose own link is slow transfers its groups' collectives longer than every
    other host's same collective). Durations of communication that waits for nobody are kept. A rank
    whose transfers this shortens begins each step no later than the other ranks of its ``peers`` group
    typically do (it waited for its slow transfers at the end of the step before, :func:`typical_for`)."""
    comm = model.ops["is_comm"].to_numpy()
    typ = typical_values(model, key, among=comm, v=model.xfer)
    xfer = np.where(comm & ~np.isnan(typ), np.minimum(model.xfer, np.nan_to_num(typ, nan=np.inf)), model.xfer)
    worker = model.ops["worker"].to_numpy()
    slowed = np.isin(worker, np.unique(worker[xfer < model.xfer - START_SLACK_S]))
    host_first = model.first & (model.ops["lane"] < 0).to_numpy()
    delay = _no_later_than_peers(model, host_first & slowed, model.delay, key, peers, among=host_first & ~slowed)
    return Edit("comm_typical", "every transfer at most its kind's typical (a slow link restored)", delay,
                model.dur, xfer)


def ops_faster(model: Model, mask: np.ndarray, k: float, what: str) -> Edit:
    """The ops in ``mask`` ``k`` times faster."""
    dur, xfer = _with_values(model, _values(model) / k, mask)
    return Edit(f"{what}_x{k:g}", f"{what} {k:g}x faster", model.delay, dur, xfer)


def rebalanced(model: Model, groups: np.ndarray, compute: np.ndarray, what: str = "pipeline stages") -> Edit:
    """The compute ops (``compute``) of each group (``groups``: a label per op, None/-1 for ops of no group)
    scaled to the groups' mean compute per step (module doc)."""
    frame = pl.DataFrame({"g": groups, "c": compute & (groups >= 0), "d": model.dur, "s": model.ops["step"]})
    per = (frame.filter(pl.col("c")).group_by("g", "s").agg(pl.col("d").sum().alias("t"))
           .group_by("g").agg(pl.col("t").mean()))
    if per.height < 2:
        return Edit("rebalanced", f"{what} rebalanced", model.delay, model.dur, model.xfer)
    target = per["t"].mean()
    scale = frame.join(per.with_columns((target / pl.col("t")).alias("k")).select("g", "k"), on="g", how="left",
                       maintain_order="left")["k"].fill_null(1.0).to_numpy()
    dur = np.where(frame["c"].to_numpy(), model.dur * scale, model.dur)
    return Edit("rebalanced", f"{what} rebalanced (equal compute per step)", model.delay, dur, model.xfer)


def no_delays(model: Model, mask: np.ndarray, what: str = "host gaps", amount: np.ndarray | None = None) -> Edit:
    """The measured delays of the ops in ``mask`` removed, or reduced by ``amount`` (never below 0)."""
    less = model.delay if amount is None else np.minimum(amount, np.maximum(model.delay, 0.0))
    return Edit("no_" + what.replace(" ", "_"), f"{what} removed", np.where(mask, model.delay - less, model.delay),
                model.dur, model.xfer)


def no_data_loading(model: Model, mask: np.ndarray) -> Edit:
    """The data loader's spans (``mask``) take no time (:func:`ops_faster` without end): each step's batch is
    ready when the step asks for it (loader workers or prefetching that keep up). What the host did before it
    still waits."""
    return replace(ops_faster(model, mask, math.inf, "data loading"), name="no_data_loading",
                   says="hiding the data loading (batches ready when the step asks)")


def project(model: Model, order: Plan, edit: Edit) -> np.ndarray:
    """Per step, the replayed step time under ``edit`` (on its own model where it brings one)."""
    model, order = edit.graph(model, order)
    return replay(model, delay=edit.delay, dur=edit.dur, xfer=edit.xfer, order=order).step_time


def attribution(model: Model, order: Plan, by: str, key: str | tuple[str, ...],
                measure: Callable[[Model, Plan, Edit], float] | None = None) -> dict[str, float]:
    """``{group: mean T_G / mean T_typ}`` for each value of label ``by`` (module doc), typical values (and
    delays) the median of each ``key`` over every op (several keys: finest first); ``measure`` gives the
    mean step time of an edit (default: the mean of :func:`project`)."""
    measure = measure or (lambda m, o, e: float(project(m, o, e).mean()))
    keys = (key,) if isinstance(key, str) else key
    typ, typ_delay = _typicals(model, keys, None, (_values(model), model.delay))
    labels = model.ops[by].to_numpy()
    t_typ = measure(model, order, _typical_except(model, typ, typ_delay, np.zeros(len(labels), bool)))
    return {str(g): measure(model, order, _typical_except(model, typ, typ_delay, labels == g)) / t_typ
            for g in np.unique(labels)}


def _typical_except(model: Model, typ: np.ndarray, typ_delay: np.ndarray, keep: np.ndarray) -> Edit:
    dur, xfer = _with_values(model, typ, ~keep)
    return Edit("typical", "typical", np.where(keep, model.delay, typ_delay), dur, xfer)
