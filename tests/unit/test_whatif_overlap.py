"""The edit "all-reduces overlapped with the backward" (analyses/whatif/overlap.py) on the op table of its
docstring's worked example, two workers alike: a 4 ms forward kernel, 8 backward kernels of 1 ms, then
two all-reduces of equal size, 1.5 ms each, issued after the backward."""

from __future__ import annotations

import polars as pl
import pytest
from ddprof.analyses.whatif.edits import project, recorded
from ddprof.analyses.whatif.model import build
from ddprof.analyses.whatif.overlap import grad_overlap
from ddprof.analyses.whatif.replay import plan, replay

COMPUTE, COMM = 7, 20


def _example(ar_bytes: tuple[int | None, int | None] = (1 << 20, 1 << 20), sends: bool = False
             ) -> tuple[pl.DataFrame, pl.DataFrame]:
    rows = []
    for w in (0, 1):
        rows.append((w, COMPUTE, 0.0, 4.0, None, "compute", None))
        rows += [(w, COMPUTE, 4.0 + k, 5.0 + k, None, "compute", None) for k in range(8)]
        rows.append((w, COMM, 12.0, 13.5, "a", "send" if sends else "all_reduce", ar_bytes[0]))
        rows.append((w, COMM, 13.5, 15.0, "b", "send" if sends else "all_reduce", ar_bytes[1]))
    ops = pl.DataFrame(rows, schema=["worker", "lane", "start", "end", "instance", "optype", "bytes"], orient="row"
                       ).with_columns(pl.lit(0).alias("step"))
    # The first all-reduce waited for the backward's last kernel (rows 8 and 19 of the sorted table).
    m = build(ops)
    last = m.ops.filter((pl.col("optype") == "compute") & (pl.col("end") == 12.0))["op"].to_list()
    first_ar = m.ops.filter(pl.col("instance") == "a")["op"].to_list()
    deps = pl.DataFrame({"src_op": last, "dst_op": first_ar, "on": ["end", "end"]})
    return ops, deps


def test_the_worked_example():
    ops, deps = _example()
    m = build(ops, deps)
    assert project(m, plan(m), recorded(m)).tolist() == [pytest.approx(15.0)]
    e = grad_overlap(m, deps)
    assert e is not None and e.model is not None and e.name == "grad_overlap"
    # The first all-reduce waits for the backward's 4th kernel (half its time, 8 ms): 8-9.5 ms; the second
    # for the end of the backward: 12-13.5 ms.
    r = replay(e.model, delay=e.delay, dur=e.dur, xfer=e.xfer, order=e.order)
    starts = dict(zip(e.model.ops["instance"].to_list(), r.start.tolist()))
    assert starts["a"] == pytest.approx(8.0) and starts["b"] == pytest.approx(12.0)
    assert project(m, plan(m), e).tolist() == [pytest.approx(13.5)]


def test_shares_follow_the_bytes():
    """The first all-reduce holds 3/4 of the bytes: it waits for the backward's 6th kernel (10 ms), runs
    10–11.5, and the second, after the backward (12), 12–13.5."""
    ops, deps = _example((3 << 20, 1 << 20))
    m = build(ops, deps)
    e = grad_overlap(m, deps)
    assert e is not None
    r = replay(e.model, delay=e.delay, dur=e.dur, xfer=e.xfer, order=e.order)
    starts = dict(zip(e.model.ops["instance"].to_list(), r.start.tolist()))
    assert starts["a"] == pytest.approx(10.0) and starts["b"] == pytest.approx(12.0)


def test_no_edit_where_it_cannot_apply():
    ops, deps = _example(sends=True)  # point-to-point transfers: a pipeline
    m = build(ops, deps)
    assert grad_overlap(m, deps) is None
    one = _example()[0].filter(pl.col("instance") != "b")  # a single all-reduce after the backward
    m = build(one)
    assert grad_overlap(m, pl.DataFrame(schema={"src_op": pl.Int64, "dst_op": pl.Int64, "on": pl.String})) is None


def test_shares_count_the_buckets_that_already_overlap():
    """Two all-reduces of group g overlap the backward (6–7.5 and 9–10.5 ms), two more of equal size
    start after it (12–13.5, 13.5–15): of the step's gradients the third holds 3/4, so it waits for the
    backward's 6th kernel (10 ms), and for the second on its stream (10.5): 10.5–12; the fourth for the end
    of the backward (12): 12–13.5. Shares of the tail alone would have moved the third to 8 ms."""
    rows = []
    for w in (0, 1):
        rows.append((w, COMPUTE, 0.0, 4.0, None))
        rows += [(w, COMPUTE, 4.0 + k, 5.0 + k, None) for k in range(8)]
        rows += [(w, COMM, a, a + 1.5, f"g/{i}") for i, a in enumerate((6.0, 9.0, 12.0, 13.5))]
    ops = pl.DataFrame(rows, schema=["worker", "lane", "start", "end", "instance"], orient="row").with_columns(
        pl.lit(0).alias("step"), pl.lit(1 << 20).alias("bytes"),
        pl.when(pl.col("instance").is_null()).then(pl.lit("compute")).otherwise(pl.lit("all_reduce")).alias("optype"))
    m = build(ops)
    o = m.ops
    deps = []
    for end, inst in ((6.0, "g/0"), (9.0, "g/1"), (12.0, "g/2")):  # each waited for the kernel ending then
        src = o.filter((pl.col("optype") == "compute") & (pl.col("end") == end))["op"].to_list()
        dst = o.filter(pl.col("instance") == inst)["op"].to_list()
        deps += [(s, d, "end") for s, d in zip(src, dst)]
    deps_df = pl.DataFrame(deps, schema=["src_op", "dst_op", "on"], orient="row")
    m = build(ops, deps_df)
    assert project(m, plan(m), recorded(m)).tolist() == [pytest.approx(15.0)]
    e = grad_overlap(m, deps_df)
    assert e is not None
    r = replay(e.model, delay=e.delay, dur=e.dur, xfer=e.xfer, order=e.order)
    starts = dict(zip(e.model.ops["instance"].to_list(), r.start.tolist()))
    assert starts["g/2"] == pytest.approx(10.5) and starts["g/3"] == pytest.approx(12.0)
    assert starts["g/0"] == pytest.approx(6.0) and starts["g/1"] == pytest.approx(9.0)
    assert project(m, plan(m), e).tolist() == [pytest.approx(13.5)]
