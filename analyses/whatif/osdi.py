"""The OSDI'25 straggler study's traces as an op table of the dependency model, and the study's metrics
computed by our own replay.

The study ("Understanding Stragglers in Large Model Training Using What-if Analysis", Lin et al., OSDI'25)
publishes Megatron-style jobs as one Parquet table of operation timings: one row per operation of one
worker (``dp_rank``, ``stage``, ``rank``), ``step``, ``optype``, ``start_ts``/``duration`` (seconds,
from the step's start), ``seq_id`` (the order of that op type within the step on that worker), ``mc``/
``gmc`` (model chunk), ``mb_id`` (micro-batch of compute ops). Tensor- and sequence-parallel peers are
folded into one worker (one row stands for the TP group).

**Adapter** (:func:`op_table`): one lane per worker, the worker's recorded order; op types are
*communication* or *compute* by name (:data:`COMM_TYPES`). Instances, read from the data's coordinates:

* point-to-point: the k-th ``forward-send`` of stage s is received by the k-th ``forward-recv`` of stage
  s+1 (mod P) of the same ``dp_rank`` in the same step; the k-th ``backward-send`` of stage s by the
  k-th ``backward-recv`` of stage s−1 (mod P);
* data-parallel collectives (``grads-reduce-scatter``, ``params-all-gather``,
  ``separate-grads-all-reduce``): the k-th of the step of every worker of one ``stage``;
* ``embedding-grads-all-reduce``: the k-th of the step of every worker of one ``dp_rank`` that has it
  (the first and last stages, which hold the tied embedding);
* ``layernorm-grads-all-reduce`` runs within the folded tensor-parallel group: no peer among the
  workers, so it is a local op (replayed with its recorded duration).

**Metrics** (the study's definitions, computed with :mod:`analyses.whatif.replay`):

* ``T_base``: each step's recorded time; ``T_nodelay``: replayed with every host delay removed (every
  op starts as soon as what it depends on is done, every worker starts the step at 0);
  ``T_ideal`` (the study's ``noblk``): also every compute op at its op type's mean duration and every
  communication op at its op type's median transfer (over all workers and steps);
* ``launch_slowdown = mean T_base / mean T_nodelay``; ``blocking_slowdown = mean T_nodelay / mean
  T_ideal``, and per step;
* attribution to a group X (a ``dp_rank``, a ``stage``, an ``optype``): the slowdown that remains when
  only X's ops keep their recorded durations (no delays): ``mean T_ideal_but_X / mean T_ideal``.

Worked example: two data-parallel workers, each computing once per step, then all-reducing (transfer
1 s). Step 1: the workers compute for 1 s and 3 s; step 2: 1 s and 1 s. The compute type's mean is 1.5 s.
T_nodelay = (3 + 1, 1 + 1) = (4, 2), mean 3; T_ideal = 1.5 + 1 = 2.5 in both steps:
``blocking_slowdown = 3 / 2.5 = 1.2``. Only worker 1 recorded (worker 0 at 1.5): (3 + 1, 1.5 + 1), mean
3.25, attribution 1.3; only worker 0 recorded: (1.5 + 1, 1.5 + 1), attribution 1.0: worker 1 is the
straggler.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import polars as pl
from ddprof.analyses.whatif.model import Model, build
from ddprof.analyses.whatif.replay import Plan, plan, recorded_step_times, replay

P2P = {"forward-send": ("forward-recv", 1), "backward-send": ("backward-recv", -1)}
P2P_RECV = {"forward-recv", "backward-recv"}
DP_COLLECTIVES = ("grads-reduce-scatter", "params-all-gather", "separate-grads-all-reduce")
STAGE_COLLECTIVES = ("embedding-grads-all-reduce",)
WORLD_COLLECTIVES = ("optimizer-clip-main-grad",)
#: Op types that communicate (replaced by their median transfer in the ideal); the others compute.
COMM_TYPES = frozenset({*P2P, *P2P_RECV, *DP_COLLECTIVES, *STAGE_COLLECTIVES, "layernorm-grads-all-reduce"})


@dataclass
class Job:
    """One of the study's traces: its op table (model input), its layout and the published answers."""

    name: str
    ops: pl.DataFrame
    meta: dict[str, Any]
    published: dict[str, Any]


def _read_yaml_flat(path: Path) -> dict[str, Any]:
    """The study's meta file: flat ``key: value`` lines (no YAML library needed)."""
    out: dict[str, Any] = {}
    for line in path.read_text().splitlines():
        if ":" in line and not line.lstrip().startswith("#"):
            k, v = line.split(":", 1)
            v = v.strip()
            out[k.strip()] = int(v) if v.lstrip("-").isdigit() else v
    return out


def load(folder: str | Path, name: str) -> Job:
    """``trace-NAME.parquet``, ``meta-NAME.yaml`` and the published ``result``/``ms``/``mw`` of a job."""
    folder = Path(folder)
    raw = pl.read_parquet(folder / f"trace-{name}.parquet")
    meta = _read_yaml_flat(folder / f"meta-{name}.yaml")
    published: dict[str, Any] = {}
    for kind in ("result", "ms", "mw"):
        p = folder / f"{kind}-{name}.json"
        if p.exists():
            published[kind] = json.loads(p.read_text())
    return Job(name=name, ops=op_table(raw, pp_size=int(meta.get("pp_size", int(cast(int, raw["stage"].max())) + 1))),
               meta=meta, published=published)


def op_table(raw: pl.DataFrame, pp_size: int) -> pl.DataFrame:
    """The study's table as the model's op table (module doc): ``step``, ``worker``, ``start``, ``end``,
    ``instance`` (a string key), ``is_comm_type`` and the labels ``optype``, ``stage``, ``dp_rank``."""
    df = raw.with_columns(
        pl.col("optype").cast(pl.String),
        pl.col("start_ts").cast(pl.Float64).alias("start"),
        (pl.col("start_ts").cast(pl.Float64) + pl.col("duration").cast(pl.Float64)).alias("end"),
        pl.col("rank").cast(pl.Int64).alias("worker"),
        pl.col("stage").cast(pl.Int64), pl.col("dp_rank").cast(pl.Int64),
    )
    op, st, dp, k, step = (pl.col(c) for c in ("optype", "stage", "dp_rank", "seq_id", "step"))
    s = lambda e: e.cast(pl.String)  # noqa: E731
    # A send names the pair by (sender stage); a receive by the stage that sent to it.
    send_key = pl.concat_str([pl.lit("p2p"), s(step), s(dp), op, s(st), s(k)], separator="/")
    fwd_from = ((st - 1) % pp_size)
    bwd_from = ((st + 1) % pp_size)
    recv_key = pl.concat_str([
        pl.lit("p2p"), s(step), s(dp),
        pl.when(op == "forward-recv").then(pl.lit("forward-send")).otherwise(pl.lit("backward-send")),
        s(pl.when(op == "forward-recv").then(fwd_from).otherwise(bwd_from)), s(k)], separator="/")
    instance = (
        pl.when(op.is_in(list(P2P))).then(send_key)
        .when(op.is_in(list(P2P_RECV))).then(recv_key)
        .when(op.is_in(list(DP_COLLECTIVES))).then(
            pl.concat_str([pl.lit("dp"), s(step), op, s(st), s(k)], separator="/"))
        .when(op.is_in(list(STAGE_COLLECTIVES))).then(
            pl.concat_str([pl.lit("pp"), s(step), op, s(dp), s(k)], separator="/"))
        .when(op.is_in(list(WORLD_COLLECTIVES))).then(
            pl.concat_str([pl.lit("world"), s(step), op, s(k)], separator="/"))
        .otherwise(pl.lit(None, pl.String))
    )
    df = df.with_columns(instance.alias("instance"), op.is_in(list(COMM_TYPES)).alias("is_comm_type"))
    # An instance seen on one worker only (its peer not traced) synchronises nothing.
    df = df.with_columns(pl.when(pl.len().over("instance") > 1).then(pl.col("instance")).alias("instance"))
    df = df.with_columns(
        pl.when(op.str.starts_with("forward-") & op.is_in([*P2P, *P2P_RECV])).then(pl.lit("forward-pp-comm"))
        .when(op.str.starts_with("backward-") & op.is_in([*P2P, *P2P_RECV])).then(pl.lit("backward-pp-comm"))
        .otherwise(op).alias("op_class"))
    return df.select("step", "worker", "start", "end", "instance", "is_comm_type", "optype", "op_class", "stage",
                     "dp_rank", "seq_id", "mb_id")


def typical(model: Model) -> np.ndarray:
    """Per op, the op type's typical value: the mean duration of a compute type, the median transfer of a
    communication type (the recorded duration where a communication op has no peer), over all workers
    and steps."""
    ops = model.ops.with_columns(
        pl.when(pl.col("is_comm")).then(pl.col("xfer")).otherwise(pl.col("dur")).alias("__v"))
    return ops.select(
        pl.when(pl.col("is_comm_type")).then(pl.col("__v").median().over("optype"))
        .otherwise(pl.col("__v").mean().over("optype"))
    ).to_series().to_numpy()


@dataclass
class Analysis:
    """A job's model, its plan and the values the study's metrics are built from."""

    model: Model
    order: Plan
    ideal_dur: np.ndarray
    ideal_xfer: np.ndarray
    t_base: np.ndarray
    t_nodelay: np.ndarray
    t_ideal: np.ndarray

    def keep(self, mask: np.ndarray, *, delays: bool = False) -> np.ndarray:
        """Step times with the ops in ``mask`` at their recorded durations, the others ideal; without
        delays unless ``delays``."""
        m = self.model
        dur = np.where(mask, m.dur, self.ideal_dur)
        xfer = np.where(mask, m.xfer, self.ideal_xfer)
        delay = m.delay if delays else np.zeros_like(m.delay)
        return replay(m, delay=delay, dur=dur, xfer=xfer, order=self.order).step_time

    @property
    def launch_slowdown(self) -> float:
        return float(self.t_base.mean() / self.t_nodelay.mean())

    @property
    def blocking_slowdown(self) -> float:
        return float(self.t_nodelay.mean() / self.t_ideal.mean())

    def decompose(self, by: str) -> dict[str, float]:
        """``{group: mean T_ideal_but_group / mean T_ideal}`` for each value of label ``by``."""
        labels = self.model.ops[by].to_numpy()
        base = self.t_ideal.mean()
        return {str(v): float(self.keep(labels == v).mean() / base) for v in np.unique(labels)}


def analyse(ops: pl.DataFrame) -> Analysis:
    """Build the model of a job's op table and replay it recorded, without delays and ideal."""
    model = build(ops)
    order = plan(model)
    typ = typical(model)
    is_comm = model.ops["is_comm"].to_numpy()
    ideal_dur = np.where(is_comm, model.dur, typ)
    ideal_xfer = np.where(is_comm, typ, model.xfer)
    zero = np.zeros(model.ops.height)
    t_base = recorded_step_times(model)
    t_nodelay = replay(model, delay=zero, order=order).step_time
    t_ideal = replay(model, delay=zero, dur=ideal_dur, xfer=ideal_xfer, order=order).step_time
    return Analysis(model, order, ideal_dur, ideal_xfer, t_base, t_nodelay, t_ideal)


@dataclass
class Share:
    """How much of the slowdown one group explains (the study's M_S and M_W): ``t_rem`` the mean step
    with only the group made typical (the others recorded), ``t_add`` with only the group recorded (the
    others typical), against ``t_ori`` (mean T_nodelay) and ``t_ideal``:
    ``rem = (t_ori − t_rem) / (t_ori − t_ideal)``, ``add = (t_add − t_ideal) / (t_ori − t_ideal)``."""

    group: str
    t_rem: float
    t_add: float
    t_ori: float
    t_ideal: float

    @property
    def rem(self) -> float:
        return (self.t_ori - self.t_rem) / (self.t_ori - self.t_ideal)

    @property
    def add(self) -> float:
        return (self.t_add - self.t_ideal) / (self.t_ori - self.t_ideal)


def share(a: Analysis, mask: np.ndarray, group: str) -> Share:
    """The :class:`Share` of the ops in ``mask``."""
    return Share(group, t_rem=float(a.keep(~mask).mean()), t_add=float(a.keep(mask).mean()),
                 t_ori=float(a.t_nodelay.mean()), t_ideal=float(a.t_ideal.mean()))


def m_s(a: Analysis) -> Share:
    """M_S, stage imbalance: the share of the last pipeline stage (the one a partitioning leaves heavy:
    it also computes the loss)."""
    stage = a.model.ops["stage"].to_numpy()
    last = int(stage.max())
    return share(a, stage == last, f"stage {last}")


def m_w(a: Analysis) -> Share:
    """M_W, individual worker: the share of the worker whose own recorded durations slow the step most
    (largest ``mean T_ideal_but_w``)."""
    worker = a.model.ops["worker"].to_numpy()
    workers = np.unique(worker)
    t_add = [float(a.keep(worker == w).mean()) for w in workers]
    w = int(workers[int(np.argmax(t_add))])
    return share(a, worker == w, f"worker {w}")


#: The tolerances the published answers are reproduced within: relative for slowdowns, absolute for M_S/M_W.
TOLERANCE = {"blocking_slowdown": 0.005, "launch_slowdown": 0.005, "decompose": 0.01, "M": 0.02}


def reproduce(job: Job, a: Analysis | None = None) -> list[dict[str, Any]]:
    """Our answers beside the study's published ones for one job: one row per number (``metric``,
    ``key``, ``ours``, ``published``, ``error``: relative for slowdowns, absolute for M_S/M_W, and
    ``tolerance``); the decompositions' rows also carry ``rank_ours``/``rank_published`` (1 = largest)."""
    a = a or analyse(job.ops)
    res = job.published.get("result", {})
    rows: list[dict[str, Any]] = []

    def rel(metric: str, key: str, ours: float, pub: float, tol: float, **extra: Any) -> None:
        rows.append({"metric": metric, "key": key, "ours": ours, "published": pub,
                     "error": ours / pub - 1.0, "tolerance": tol, **extra})

    for metric in ("blocking_slowdown", "launch_slowdown"):
        if res.get(metric) is not None:
            ours = a.blocking_slowdown if metric == "blocking_slowdown" else a.launch_slowdown
            rel(metric, "", ours, float(res[metric]), TOLERANCE[metric])
    for by, label in (("dp_rank", "dp_rank"), ("stage", "stage"), ("optype", "op_class")):
        pub = res.get(f"blocking_decompose_by_{by}")
        if not pub:
            continue
        by_group = a.decompose(label)
        rank_o = {k: i + 1 for i, k in enumerate(sorted(by_group, key=lambda k: -by_group[k]))}
        rank_p = {k: i + 1 for i, k in enumerate(sorted(pub, key=lambda k: -pub[k]))}
        for k in sorted(pub, key=lambda k: -pub[k]):
            rel(f"blocking_decompose_by_{by}", k, by_group.get(k, float("nan")), float(pub[k]), TOLERANCE["decompose"],
                rank_ours=rank_o.get(k), rank_published=rank_p[k])
    for key, fn, name in (("ms", m_s, "M_S"), ("mw", m_w, "M_W")):
        if key in job.published:
            s = fn(a)
            pub_v = float(job.published[key]["rem"])
            rows.append({"metric": name, "key": s.group, "ours": s.rem, "published": pub_v,
                         "error": s.rem - pub_v, "tolerance": TOLERANCE["M"]})
    return rows


def stages_rebalanced(a: Analysis) -> float:
    """The mean step without delays with the pipeline stages rebalanced: each stage's compute ops scaled
    so that every stage computes the stages' mean per step (:func:`analyses.whatif.edits.rebalanced`)."""
    from ddprof.analyses.whatif.edits import project, rebalanced

    m = a.model
    edit = rebalanced(m, m.ops["stage"].to_numpy(), ~m.ops["is_comm_type"].to_numpy())
    edit.delay = np.zeros(m.ops.height)
    return float(project(m, a.order, edit).mean())
