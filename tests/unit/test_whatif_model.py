"""The dependency model and its replay (analyses/whatif/model.py, replay.py) on small tables whose answers
are worked out by hand in the modules' docstrings."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from ddprof.analyses.whatif.model import build
from ddprof.analyses.whatif.replay import CycleError, plan, recorded_step_times, replay


def _two_workers() -> pl.DataFrame:
    # The model docstring's example: f0 [0,3) then ar0 [3.5,9) on worker 0; f1 [0,8) then ar1 [8,9).
    return pl.DataFrame({"step": [0, 0, 0, 0], "worker": [0, 0, 1, 1], "start": [0.0, 3.5, 0.0, 8.0],
                         "end": [3.0, 9.0, 8.0, 9.0], "instance": [None, "ar", None, "ar"]})


def test_recorded_values_of_the_worked_example():
    m = build(_two_workers())
    assert m.delay.tolist() == [0.0, 0.5, 0.0, 0.0]
    assert m.dur.tolist() == [3.0, 0.0, 8.0, 0.0]
    assert m.xfer.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert m.inconsistent == 0


def test_replay_reproduces_the_recording_and_answers_an_edit():
    m = build(_two_workers())
    r = replay(m)
    assert r.start.tolist() == [0.0, 3.5, 0.0, 8.0] and r.end.tolist() == [3.0, 9.0, 8.0, 9.0]
    assert r.step_time.tolist() == [9.0] == recorded_step_times(m).tolist()
    dur = m.dur.copy()
    dur[2] = 3.0  # f1 as fast as f0: the latest arrival becomes ar0's, at 3.5
    assert replay(m, dur=dur).step_time.tolist() == [4.5]
    assert replay(m, dur=dur, delay=np.zeros(4)).step_time.tolist() == [4.0]


def test_launch_group_waits_for_all_of_its_ops():
    # Worker 0 launches a send and a receive together (one batched group), then computes c.
    # The receive's peer (worker 1) sends late, at 5: c starts only after both ended.
    ops = pl.DataFrame({
        "step": [0] * 5, "worker": [0, 0, 0, 1, 1],
        "start": [1.0, 1.0, 6.5, 1.0, 5.0], "end": [2.0, 6.0, 7.0, 2.0, 6.0],
        "instance": ["a", "b", None, "a", "b"],
    })
    m = build(ops)
    assert m.ops.filter(pl.col("worker") == 0)["group"].to_list() == [0, 0, 1]
    assert m.delay.tolist()[2] == pytest.approx(0.5)
    r = replay(m)  # times from the step's origin, the earliest start (1.0)
    assert r.end.tolist() == pytest.approx([1.0, 5.0, 6.0, 1.0, 5.0])
    delay = m.delay.copy()
    delay[4] = 0.0  # worker 1 sends as soon as its previous op ended (at 1): b ends at 2, c at 2.5 + 0.5
    assert replay(m, delay=delay).end[2] == pytest.approx(3.0)


def test_steps_replay_from_their_own_origin():
    ops = pl.DataFrame({"step": [1, 1, 2], "worker": [0, 0, 0], "start": [100.0, 101.0, 200.0],
                        "end": [101.0, 103.0, 204.0]})
    m = build(ops)
    r = replay(m)
    assert r.steps.tolist() == [1, 2] and r.step_time.tolist() == [3.0, 4.0]


def test_extra_dependency_edges_order_lanes():
    # A host op (lane 0) launches a kernel (lane 1) that may start only after the launch ended.
    ops = pl.DataFrame({"step": [0, 0], "worker": [0, 0], "lane": [0, 1], "start": [0.0, 2.5],
                        "end": [2.0, 3.5]})
    deps = pl.DataFrame({"src_op": [0], "dst_op": [1]})
    m = build(ops, deps)
    assert m.delay.tolist() == [0.0, 0.5]
    dur = m.dur.copy()
    dur[0] = 1.0
    assert replay(m, dur=dur).end.tolist() == [1.0, 2.5]


def test_a_matching_the_order_contradicts_is_a_cycle():
    # Worker 0 does a then b, worker 1 does b then a: each waits for the other.
    ops = pl.DataFrame({"step": [0] * 4, "worker": [0, 0, 1, 1], "start": [0.0, 1.0, 0.0, 1.0],
                        "end": [1.0, 2.0, 1.0, 2.0], "instance": ["a", "b", "b", "a"]})
    with pytest.raises(CycleError, match="cycle"):
        plan(build(ops))


def test_a_send_that_returned_before_its_receive_started_did_not_wait():
    # Worker 0 sends [0, 1) (buffered: it returns at 1); worker 1 receives [4, 5). The send arrives and
    # ends on its own; the receive ends at the latest arrival (4) plus its transfer (1).
    ops = pl.DataFrame({"step": [0, 0, 0], "worker": [0, 1, 1], "start": [0.0, 0.0, 4.0],
                        "end": [1.0, 4.0, 5.0], "instance": ["p", None, "p"]})
    m = build(ops)
    assert m.inconsistent == 1
    assert replay(m).end.tolist() == [1.0, 4.0, 5.0]
    dur = m.dur.copy()
    dur[1] = 0.5  # the receiver computes for 0.5 instead of 4: it receives at 0.5, done at 1.5
    assert replay(m, dur=dur).end.tolist() == [1.0, 0.5, 1.5]


def test_a_start_edge_waits_for_the_launch_to_begin():
    ops = pl.DataFrame({"step": [0, 0], "worker": [0, 0], "lane": [0, 1], "start": [0.0, 0.5],
                        "end": [2.0, 1.5]})
    m = build(ops, pl.DataFrame({"src_op": [0], "dst_op": [1], "on": ["start"]}))
    assert m.delay.tolist() == [0.0, 0.5]
    delay = m.delay.copy()
    delay[0] = 1.0  # the launch begins 1 later: so does its kernel
    assert replay(m, delay=delay).start.tolist() == [1.0, 1.5]


def test_the_contracted_replay_equals_the_longest_path_edge_by_edge():
    # Two workers, one lane each, an all-reduce between two computes, plus a launch edge across lanes (a
    # chain that crosses lanes: a segment whose head hangs off a chain node): the contracted replay
    # (segments' cumulative sums, levels over the core nodes) gives every node the value that relaxing
    # every edge until nothing changes gives.
    import numpy as np
    import polars as pl
    from ddprof.analyses.whatif.model import build
    from ddprof.analyses.whatif.replay import edge_weights, plan, replay

    ops = pl.DataFrame({"step": [0] * 7, "worker": [0, 0, 0, 1, 1, 1, 1], "lane": [0, 0, 0, 0, 0, 0, 1],
                        "start": [0.0, 3.5, 9.5, 0.0, 8.0, 9.2, 9.4],
                        "end": [3.0, 9.0, 10.0, 8.0, 9.0, 12.0, 9.9], "instance": [None, 1, None, None, 1, None, None]})
    deps = pl.DataFrame({"src_op": [5], "dst_op": [6], "on": ["start"]})
    m = build(ops, deps)
    order = plan(m)
    assert order.seq.size and order.seg_first.size >= 2
    dur = m.dur * np.linspace(0.5, 1.5, m.ops.height)
    got = replay(m, dur=dur, order=order, binding=True).value
    w = edge_weights(m, m.delay, dur, m.xfer)
    want = np.full(m.n_nodes, -np.inf)
    want[m.start_node[m.first]] = m.delay[m.first]
    for _ in range(m.n_nodes):
        want = np.maximum(want, np.array([max([want[s] + x for s, d2, x in zip(m.src, m.dst, w) if d2 == v],
                                               default=-np.inf) for v in range(m.n_nodes)]))
    assert np.allclose(got, want, rtol=0, atol=1e-12)


def test_label_codes_are_dense_and_computed_once():
    ops = pl.DataFrame({"step": [0, 0, 0, 0], "worker": [0, 0, 1, 1], "start": [0.0, 1.0, 0.0, 1.0],
                        "end": [1.0, 2.0, 1.0, 2.0], "name": ["a", None, "b", "a"]})
    m = build(ops)
    codes = m.codes("name")
    assert codes is m.codes("name")  # cached
    names = m.ops["name"].to_list()
    assert sorted(set(codes.tolist())) == [-1, 0, 1]
    assert all((c == -1) == (n is None) for c, n in zip(codes.tolist(), names))
    assert len({c for c, n in zip(codes.tolist(), names) if n == "a"}) == 1


def test_typical_values_are_medians_among_the_ops_asked_for():
    from ddprof.analyses.whatif.edits import typical_values

    # f then g on each worker: f lasts 1, 2, 4; g lasts 2, 1, 1
    ops = pl.DataFrame({"step": [0] * 6, "worker": [0, 0, 1, 1, 2, 2], "start": [0.0, 1.0, 0.0, 2.0, 0.0, 4.0],
                        "end": [1.0, 3.0, 2.0, 3.0, 4.0, 5.0], "name": ["f", "g"] * 3})
    m = build(ops)
    by_name = dict(zip(m.ops["name"].to_list(), typical_values(m, "name").tolist()))
    assert by_name == {"f": 2.0, "g": 1.0}
    others = typical_values(m, "name", among=(m.ops["worker"] != 2).to_numpy())  # workers 0 and 1
    assert dict(zip(m.ops["name"].to_list(), others.tolist())) == {"f": 1.5, "g": 1.5}
    none = typical_values(m, "name", among=np.zeros(m.ops.height, bool))
    assert np.isnan(none).all()


def test_a_table_already_in_the_models_order_is_kept_as_it_is_and_any_other_sorted():
    from ddprof.analyses.whatif.model import sort_ops

    rng = np.random.default_rng(3)
    n = 2_000
    shuffled = pl.DataFrame({"step": rng.integers(0, 3, n), "worker": rng.integers(0, 4, n),
                             "lane": rng.integers(-2, 2, n), "start": rng.integers(0, 50, n).astype(float),
                             "end": np.zeros(n), "id": np.arange(n)})
    want = shuffled.sort("step", "worker", "lane", "start", maintain_order=True)
    once = sort_ops(shuffled)
    assert once["id"].to_list() == want["id"].to_list()
    # sorted already: the same rows in the same order (ties keep theirs), not a new sort
    assert sort_ops(once)["id"].to_list() == want["id"].to_list()
    # one pair out of order deep in the keys is found
    swapped = once.with_columns(once["start"].scatter([n - 1], [-1.0]))
    again = sort_ops(swapped)
    assert again.equals(swapped.sort("step", "worker", "lane", "start", maintain_order=True))
    assert again["id"][-1] != once["id"][-1]  # the last row moved up within its (step, worker, lane)
    # a NaN start: sorted as a sort would place it (last)
    nan = once.with_columns(once["start"].scatter([0], [float("nan")]))
    assert sort_ops(nan).equals(nan.sort("step", "worker", "lane", "start", maintain_order=True))
