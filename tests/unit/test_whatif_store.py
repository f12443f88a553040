"""The dependency model of runs in the store (analyses/whatif/store.py) and the what-if projections on
them (analyses/whatif/projections.py): the replay of the recording within 2 % of the mean measured step
on the bundled runs, the real HTA traces and generated runs; the generated runs' known answers for the
straggler removed and faster communication."""

from __future__ import annotations

import pytest
from ddprof.analyses.whatif.projections import whatif
from ddprof.analyses.whatif.store import MAX_REPLAY_ERROR, replay_check

from ddprof.synth import DataParallel, Pipeline, ingest_generated

US = 1e-6


def test_the_two_traced_ranks_of_128_are_not_explained(ingested):
    # Ranks 0 and 1 of 128 issue their SendRecv kernels in another order (and with untraced peers): the
    # k-th of a group is not one transfer on both, so members end before their "peer" arrived.
    check = replay_check(ingested("hta/sendrecv-2-of-128").events())
    assert not check.explained and "collective instances end on some rank before another rank arrived" in check.reason


@pytest.mark.parametrize("name", ["dlrm-8xV100-nccl", "gloo-ddp-4rank-slow-rank", "gloo-pipeline-4stage",
                                  "hta/nccl-metadata-a100", "hta/a100-16rank-rank0"])
def test_replay_reproduces_the_measured_steps(ingested, name):
    check = replay_check(ingested(name).events())
    assert check.explained, check.reason
    assert check.model is not None and check.model.ops.height > 0
    assert check.error <= MAX_REPLAY_ERROR
    assert check.spans.height == check.model.ops.select("worker", "profiler_step").unique().height


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_the_straggler_removed_and_faster_communication_on_a_generated_run(tmp_path, device):
    sc = DataParallel(ranks=4, slow_rank=2, device=device)
    w = whatif(ingest_generated(sc, tmp_path).events(), comm_k=[2.0, float("inf")])
    assert w.explained and w.replay_error_pct <= 100 * MAX_REPLAY_ERROR
    by = {p.edit: p for p in w.projections}
    # Rank 2's backward runs sc.delay longer: as fast as the others, every step is that much shorter.
    assert w.projections[0].edit == "straggler_rank_2"
    assert by["straggler_rank_2"].saving_s == pytest.approx(sc.delay * 1e-9, rel=0.01)
    assert w.verdict.startswith("making rank 2 as fast as the others would cut the step from")
    # The all-reduce (transfer T) overlaps the backward by X: twice as fast it hides behind it, and so
    # does a free one: T − X is all either can save.
    for edit in ("comm_x2", "comm_overlapped"):
        assert by[edit].saving_s == pytest.approx((sc.T - sc.X) * 1e-9, rel=0.01)
    assert max(w.by_rank, key=w.by_rank.get) == "2"
    assert w.by_rank["0"] == pytest.approx(1.0, abs=1e-6)


def test_a_generated_pipeline_replays_and_its_tiny_transfers_gain_nothing(tmp_path):
    # The transfers take 2 µs: faster or free communication saves nothing. (The generated pipeline's
    # backward starts with the receive it depends on, not after it: that wait is invisible to the model,
    # so the straggler edit is not asserted here.)
    w = whatif(ingest_generated(Pipeline(), tmp_path).events(), stragglers=None, comm_k=[2.0, float("inf")])
    assert w.explained and w.replay_error_pct <= 100 * MAX_REPLAY_ERROR
    by = {p.edit: p for p in w.projections}
    assert by["comm_x2"].saving_pct < 0.1 and by["comm_overlapped"].saving_pct < 0.1


def test_the_sleeping_rank_of_the_gloo_sample_is_the_best_edit(ingested):
    # The sample's rank 2 sleeps 100 ms before every forward pass; the others wait for it.
    w = whatif(ingested("gloo-ddp-4rank-slow-rank").events(), comm_k=[2.0])
    best = w.projections[0]
    assert best.edit == "straggler_rank_2" and best.saving_pct > 30
    assert max(w.by_rank, key=w.by_rank.get) == "2"


def test_a_run_without_steps_gets_no_projection(tmp_path):
    import polars as pl

    events = ingest_generated(DataParallel(ranks=2), tmp_path).events().with_columns(
        pl.lit(None, pl.Int32).alias("step"))
    w = whatif(events)
    assert not w.explained and "no steps" in w.reason and w.projections == []


def test_a_single_rank_has_no_straggler_to_remove(ingested):
    """The automatic straggler edit compares ranks: a one-rank trace gets none (it once became an edit of
    the ranks "a, u, t, o", the letters of "auto")."""
    w = whatif(ingested("hta/v100-2rank-rank1-large").events(), comm_k=[2.0], attribute=False, critical=False)
    assert w.explained and not any(p.edit.startswith("straggler_") for p in w.projections), w.projections
