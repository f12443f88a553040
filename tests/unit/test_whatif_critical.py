"""Each step's critical path (analyses/whatif/critical.py) on generated runs whose path is known (a slow
rank's compute; a communication-bound run's all-reduce) and on real traces, and as the report shows it."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from ddprof.analyses.report import build_report
from ddprof.analyses.whatif.critical import KINDS, _net_overlaps, critical_path
from ddprof.analyses.whatif.model import build
from ddprof.analyses.whatif.projections import whatif
from ddprof.analyses.whatif.replay import replay
from ddprof.analyses.whatif.store import _handoffs, _waits, replay_check

import ddprof
from ddprof.synth import Spec, generate


def _run(spec: Spec, tmp_path):
    generate(spec, tmp_path / "gen")
    return ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")


def _path(run):
    check = replay_check(run.events())
    assert check.explained, check.reason
    return check, critical_path(check.model, check.replayed)


def test_a_slow_ranks_compute_is_the_critical_path(tmp_path):
    # Rank 2's kernels take 1.5x as long: every all-reduce waits for it, so the path runs through its compute.
    check, cp = _path(_run(Spec(ranks=4, steps=3, slow={2: 1.5}, noise=0.0), tmp_path))
    kinds = dict(zip(cp.by_kind()["kind"], cp.by_kind()["share"]))
    assert kinds["compute"] > 0.8
    top = cp.top_ops(5)
    assert set(top["rank"]) == {2} and set(top["kind"]) == {"compute"}
    # The path's links add up to each step's replayed end: the step as recorded.
    per_step = cp.links.group_by("step").agg(pl.col("s").sum().alias("t")).sort("step")
    assert per_step["t"].to_list() == pytest.approx(cp.steps.sort("step")["length"].to_list(), rel=1e-9)


def test_a_communication_bound_runs_all_reduce_is_the_critical_path(tmp_path):
    # 25 MB buckets at 2 GB/s: each all-reduce takes 12.5 ms against a few hundred µs of compute.
    check, cp = _path(_run(Spec(ranks=4, steps=3, bus_gbps=2.0, noise=0.0), tmp_path))
    kinds = dict(zip(cp.by_kind()["kind"], cp.by_kind()["share"]))
    assert kinds["communication"] > 0.9
    assert cp.top_ops(1)["kind"].item() == "communication" and "AllReduce" in cp.top_ops(1)["name"].item()


@pytest.mark.parametrize("name", ["gloo-ddp-4rank-slow-rank", "hta/v100-2rank-rank1-large"])
def test_a_real_traces_critical_path_adds_up_to_its_steps(ingested, name):
    w = whatif(ingested(name).events(), stragglers=None, comm_k=[], host_gaps=False, rebalance=False,
               attribute=False)
    assert w.explained and w.critical is not None
    by = w.critical.by_kind()
    assert by["kind"].to_list() == list(KINDS) and sum(by["share"]) == pytest.approx(1.0)
    # The path ends with each step's last end, from the step's origin: the run's step (first op at 0).
    assert float(w.critical.steps["length"].mean()) == pytest.approx(w.step_s, rel=1e-6)


def test_the_gloo_samples_sleeping_rank_is_on_the_path_and_in_the_report(ingested):
    report = build_report(ingested("gloo-ddp-4rank-slow-rank"))
    cp = report["whatif"]["critical_path"]
    assert cp["length_us"] == pytest.approx(report["whatif"]["step_us"], rel=1e-6)
    assert sum(k["pct"] for k in cp["by_kind"]) == pytest.approx(100.0)
    # Rank 2 sleeps 100 ms before each forward pass: an idle host gap of rank 2 leads the path.
    assert cp["top_ops"][0]["rank"] == 2 and cp["top_ops"][0]["kind"] == "idle"


def cp_ms(report):
    return report["whatif"]["critical_path"]["length_us"] / 1e3


def test_the_dashboard_panel_draws_the_top_ops_by_kind(ingested):
    from ddprof.dashboards.figures.critical import critical_path_figure
    from ddprof.dashboards.panels import panel_ids

    report = build_report(ingested("gloo-ddp-4rank-slow-rank"))
    fig = critical_path_figure(report)
    assert "critical_path" in panel_ids()
    assert fig.layout.title.text == f"Critical path: {cp_ms(report):,.2f} ms a step"
    idle_pct = next(k["pct"] for k in report["whatif"]["critical_path"]["by_kind"] if k["kind"] == "idle")
    idle = next(t for t in fig.data if t.name == f"idle {idle_pct:.0f} %")
    # the sleep before rank 2's forward: the delay of its first op, on the main thread (the all-reduce on
    # gloo's thread waits for the backward that issued it, no longer idle of its own)
    assert idle.y[0].startswith("rank 2 host: aten::linear") and idle.customdata[0][0] == 2
    off = {**report, "whatif": {**report["whatif"], "computed": False, "reason": "switched off"}}
    assert "switched off" in str(critical_path_figure(off).layout.annotations[0].text)


def _rows(lanes: dict[int, list[tuple[float, float]]]) -> pl.DataFrame:
    """Host rows of one rank and step (ms), in the op table's order, as :func:`op_rows` numbers them."""
    rows = [(lane, a / 1e3, b / 1e3) for lane, spans in sorted(lanes.items()) for a, b in spans]
    df = pl.DataFrame(rows, schema={"lane": pl.Int64, "start": pl.Float64, "end": pl.Float64}, orient="row")
    return (df.with_columns(pl.lit(0, pl.Int64).alias("worker"), pl.lit(1, pl.Int64).alias("step"))
            .with_row_index("__op").with_columns(pl.col("__op").cast(pl.Int64),
                                                 pl.col("end").shift(1).over("lane").alias("__prev_end")))


def test_a_thread_that_hands_its_work_to_another_waits_for_it():
    """The main thread (lane -1) stops at 1 ms; the autograd thread (lane -2) runs from 1.1 to 49.5 ms; the
    main thread resumes at 50 ms: the backward's first row waits for the main thread's last, and the main
    thread's next row for the backward's last. Where the other thread ends long before the resumption (a
    sleep of the main thread's own), the backward still waits for the main thread's stop, but the main thread
    does not wait for the backward's end; nothing for a stop under a millisecond. The resumption may come
    up to 5 % of the stop after the other thread's end (a real ResNet-50 step: 0.71 ms after a 36 ms stop)."""
    handed = _handoffs(_rows({-1: [(0, 1), (50, 51)], -2: [(1.1, 10), (12, 49.5)]}))
    assert sorted(handed.rows()) == [(1, 3, "end"), (2, 0, "end")]  # ops: lane -2 first (0, 1), then -1 (2, 3)
    late = _handoffs(_rows({-1: [(0, 1), (37, 38)], -2: [(1.3, 10), (12, 36.3)]}))
    assert sorted(late.rows()) == [(1, 3, "end"), (2, 0, "end")]
    assert _handoffs(_rows({-1: [(0, 1), (50, 51)], -2: [(1.1, 10), (12, 30)]})).rows() == [(2, 0, "end")]
    assert _handoffs(_rows({-1: [(0, 1), (1.5, 2)], -2: [(1.01, 1.2), (1.3, 1.49)]})).is_empty()


def _with_instances(rows: pl.DataFrame, comm: set[int]) -> pl.DataFrame:
    return rows.with_columns(pl.when(pl.col("__op").is_in(list(comm))).then(pl.format("g/{}", pl.col("__op")))
                             .otherwise(None).alias("instance"))


def test_a_thread_blocked_on_a_gloo_collective_waits_for_it_however_late_it_wakes():
    """The main thread (lane -1) stops at 45 ms, blocked in DDP's wait for its buckets' all-reduces, which
    gloo runs on its own threads (lanes -3 and -2, ending at 97 and 111 ms); the main thread wakes at 108
    ms (a loaded machine: the later bucket's row closed after it woke, the earlier one's ended 11 ms before
    it): it waited for the all-reduce that ended in its stop, the last one, however late it woke. A stop
    under a millisecond keeps the slack of 200 µs; a row on a device lane is no collective a host thread
    blocks on."""
    rows = _with_instances(_rows({-1: [(0, 45), (108, 110)], -2: [(42.5, 111.2)], -3: [(45.2, 97.2)]}), {0, 1})
    assert _waits(rows).filter(pl.col("dst_op") == 3).rows() == [(0, 3, "end")]  # ops: lane -3, -2, then -1
    short = _with_instances(_rows({-1: [(0, 45), (45.8, 46)], -3: [(10, 45.5)]}), {0})
    assert _waits(short).filter(pl.col("dst_op") == 2).is_empty()
    soon = _with_instances(_rows({-1: [(0, 45), (45.6, 46)], -3: [(10, 45.5)]}), {0})
    assert _waits(soon).filter(pl.col("dst_op") == 2).rows() == [(0, 2, "end")]
    device = _with_instances(_rows({-1: [(0, 45), (108, 110)], 0: [(45.2, 97.2)]}), {2})
    assert _waits(device).filter(pl.col("dst_op") == 1).is_empty()


def test_the_v100_critical_path_runs_through_the_backward_thread(ingested):
    """A real V100 trace: each step the main thread launches the forward, then waits 266 ms outside any op
    while the autograd thread launches the backward. With the hand-off modelled, the path is the host's
    launches (HTA: host-bound, 100 %), not the main thread's idle (76.5 % without it), and removing host
    gaps no longer projects the main thread's wait away."""
    w = whatif(ingested("hta/v100-2rank-rank1-large").events(), stragglers=None, comm_k=[], host_gaps=True,
               rebalance=False, attribute=False)
    assert w.explained and w.replay_error_pct < 1e-6
    kinds = dict(zip(w.critical.by_kind()["kind"], w.critical.by_kind()["share"]))
    assert kinds["host launch"] > 0.9 and kinds["idle"] < 0.1
    assert w.projections[0].edit == "no_host_gaps" and w.projections[0].saving_pct < 10


def test_rows_that_overlap_on_their_lane_count_once_and_never_negative():
    """Two rows of one host lane that overlap (asynchronous gloo collectives on one thread, as FSDP issues
    them): the later one's delay is negative (it started 2 s before the earlier ended). On the path the
    overlap is the earlier op's time cut short, not a negative host launch: A 8 s, B 4 s, 12 s in all."""
    ops = pl.DataFrame({"step": [0, 0], "worker": [0, 0], "lane": [-1, -1], "start": [0.0, 8.0],
                        "end": [10.0, 12.0], "instance": [None, None], "kind": ["comm", "comm"],
                        "name": ["gloo:all_gather", "gloo:all_reduce"]},
                       schema_overrides={"instance": pl.String})
    model = build(ops)
    cp = critical_path(model, replay(model, binding=True))
    assert (cp.links["s"] >= 0).all(), cp.links
    assert dict(zip(cp.links["name"], cp.links["s"])) == pytest.approx({"gloo:all_gather": 8.0, "gloo:all_reduce": 4.0})
    assert cp.steps["length"].to_list() == pytest.approx([12.0])
    # walked back from the end: B's duration, B's delay, A's duration, A's delay after the origin
    assert _net_overlaps(np.array([4.0, -2.0, 10.0, 0.0]), np.zeros(4, np.int64)).tolist() == [4.0, 0.0, 8.0, 0.0]
    assert _net_overlaps(np.array([1.0, -3.0, 2.0, 5.0]), np.array([0, 0, 0, 1])).tolist() == [1.0, -1.0, 0.0, 5.0]


def test_an_asynchronous_gloo_collective_waits_for_the_op_that_issued_it(ingested):
    """A DDP step of a gloo rank: the autograd thread issues each bucket's all-reduce (``c10d::allreduce_``
    inside a backward op) and gloo's worker thread runs it. Every such row has an edge from the op-table row
    of another thread of its rank that holds its issuer, started before it; without them the worker
    thread's wait read as idle of its own and led the path (85 % of the sample's step)."""
    from ddprof.analyses.whatif.store import op_rows

    rows, deps = op_rows(ingested("gloo-ddp-4rank-slow-rank").events())
    comm = rows.with_row_index("__i").filter((pl.col("kind") == "comm") & (pl.col("lane") < 0))
    assert comm.height > 0
    edges = deps.join(comm.select(pl.col("__i").cast(pl.Int64).alias("dst_op")), on="dst_op")
    src = rows.with_row_index("__i").select(pl.col("__i").cast(pl.Int64).alias("src_op"), "worker",
                                              pl.col("lane").alias("src_lane"), pl.col("start").alias("src_start"))
    issued = (edges.join(src, on="src_op")
              .join(rows.with_row_index("__i").select(pl.col("__i").cast(pl.Int64).alias("dst_op"),
                                                      pl.col("worker").alias("dst_worker"), "lane", "start"),
                    on="dst_op")
              .filter((pl.col("src_lane") != pl.col("lane")) & (pl.col("worker") == pl.col("dst_worker"))))
    assert issued["dst_op"].n_unique() == comm.height  # each all-reduce row has its issuer's edge
    assert (issued["src_start"] <= issued["start"]).all()
    assert set(issued["on"]) <= {"start", "end"}


def _cpu_events(loader_ms: float) -> pl.LazyFrame:
    """Two ranks of a CPU (gloo) run, two steps each: a step draws its batch through a DataLoader span
    (``loader_ms`` on rank 1, 1 ms on rank 0; the batch's own op at its end, inside it), computes 10 ms and
    all-reduces (1 ms after the later rank arrives)."""
    from ddprof.store.schema import conform

    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    step_ms = loader_ms + 11.0
    rows: list[dict] = []
    for rank in (0, 1):
        load = loader_ms if rank == 1 else 1.0
        for step in (1, 2):
            s0 = (step - 1) * step_ms
            rows += [
                {"rank": rank, "step": step, "tid": 1, "kind": "annotation", "name": f"ProfilerStep#{step}",
                 "ts_ns": s0, "dur_ns": step_ms},
                {"rank": rank, "step": step, "tid": 1, "kind": "annotation", "name": loader, "ts_ns": s0, "dur_ns": load},
                {"rank": rank, "step": step, "tid": 1, "kind": "cpu_op", "name": "aten::randn",
                 "ts_ns": s0 + load - 0.5, "dur_ns": 0.4},
                {"rank": rank, "step": step, "tid": 1, "kind": "cpu_op", "name": "aten::mm", "ts_ns": s0 + load,
                 "dur_ns": 10.0},
                {"rank": rank, "step": step, "tid": 1, "kind": "comm", "name": "gloo:all_reduce",
                 "coll_op": "all_reduce", "pg": "0", "group_size": 2, "seq": step, "ts_ns": s0 + load + 10.0,
                 "dur_ns": step_ms - load - 10.0}]
    df = pl.DataFrame(rows).with_columns((pl.col("ts_ns") * 1e6).cast(pl.Int64), (pl.col("dur_ns") * 1e6).cast(pl.Int64))
    return conform(df).lazy()


def test_a_cpu_ranks_data_loader_span_is_an_op_that_hiding_the_loading_takes_off():
    """On a CPU rank the loader's span is one op, the batch's own ops inside it: a rank that waits 20 ms for
    each batch makes a step of 31 ms, and hiding the data loading projects the 11 ms of a fast one."""
    from ddprof.analyses.whatif.store import op_rows

    events = _cpu_events(20.0)
    rows, _ = op_rows(events)
    names = rows.filter(pl.col("rank") == 1)["name"].to_list()
    assert names.count("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__") == 2
    assert "aten::randn" not in names  # inside the loader's span
    w = whatif(events, stragglers=None, comm_k=[], host_gaps=False, rebalance=False, attribute=False, critical=False)
    assert w.explained, w.reason
    assert w.step_s == pytest.approx(0.031, abs=1e-6)
    hidden = next(p for p in w.projections if p.edit == "no_data_loading")
    assert hidden.step_s == pytest.approx(0.011, abs=1e-6)
