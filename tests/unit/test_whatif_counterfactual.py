"""Counterfactual checks: ``ddprof synth`` writes, beside a run with slow ranks, the step of the same run
simulated without them (truth.json's ``without_fault``); the what-if projection of the straggler removed
lands within 2 % of it, on data-parallel, tensor × data-parallel and pipeline × data-parallel (1F1B) runs,
and with a whole pipeline stage slow (a heavy stage); and beside a run with a host's slow link (its own link
between its GPUs: its tensor-parallel groups', or its pipeline stage's data-parallel, collectives transfer
longer), the run without it, which the projection of every transfer at its typical lands within 2 % of.
``benchmarks/whatif_counterfactual.py`` runs the same on 8 to 256 ranks."""

from __future__ import annotations

import json

import pytest
from ddprof.analyses.whatif.projections import whatif

import ddprof
from ddprof.synth import Spec, generate

SHAPES = {
    "dp8, rank 3 slow": Spec(ranks=8, slow={3: 1.3}),
    "tp2 x dp4, rank 5 slow": Spec(ranks=8, tp=2, slow={5: 1.3}),
    "pp2 x dp4 1f1b, rank 6 slow": Spec(ranks=8, pp=2, slow={6: 1.3}),
    "pp4 x dp2 1f1b, stage 1 heavy": Spec(ranks=8, pp=4, slow={2: 1.3, 3: 1.3}),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_straggler_removed_is_projected_within_2_percent_of_the_run_without_it(tmp_path, name):
    spec = SHAPES[name]
    generate(spec, tmp_path / "gen")
    truth = json.loads((tmp_path / "gen" / "truth.json").read_text())["without_fault"]
    assert truth["slow_ranks"] == sorted(spec.slow) and truth["without_fault_step_us"] < truth["step_us"]
    run = ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")
    w = whatif(run.events(), stragglers=sorted(spec.slow), comm_k=[], host_gaps=False, rebalance=False,
               attribute=False)
    assert w.explained, w.reason
    # The recorded run's step is the truth's (the same rows, the same definition).
    assert w.step_s * 1e6 == pytest.approx(truth["step_us"], rel=1e-6)
    projected = w.projections[0].step_s * 1e6
    assert projected == pytest.approx(truth["without_fault_step_us"], rel=0.02)


def test_a_run_without_a_fault_has_no_counterfactual(tmp_path):
    assert generate(Spec(ranks=4, steps=2), tmp_path)["without_fault"] is None


LINKS = {
    "tp2 x dp16, host 1's link 3x slower": Spec(ranks=32, steps=3, tp=2, slow_link={1: 3.0}),
    "pp4 x dp8 1f1b (a stage a host), host 1's link 3x slower": Spec(ranks=32, steps=3, pp=4, slow_link={1: 3.0}),
}


@pytest.mark.parametrize("name", list(LINKS))
def test_a_slow_link_restored_is_projected_within_2_percent_of_the_run_without_it(tmp_path, name):
    spec = LINKS[name]
    truth = generate(spec, tmp_path / "gen")["without_fault"]
    assert truth["slow_link_hosts"] == [1] and truth["without_fault_step_us"] < 0.95 * truth["step_us"]
    run = ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")
    w = whatif(run.events(), stragglers=None, comm_k=[], host_gaps=False, rebalance=False, attribute=False,
               critical=False, typical_links=True)
    assert w.explained, w.reason
    assert [p.edit for p in w.projections] == ["comm_typical"]
    assert w.projections[0].step_s * 1e6 == pytest.approx(truth["without_fault_step_us"], rel=0.02)


def test_a_slow_link_between_hosts_is_no_link_of_one_host(tmp_path):
    """Data-parallel groups spanning every host: no collective runs on one host's own link, so the run is
    its own counterfactual."""
    truth = generate(Spec(ranks=8, steps=2, gpus_per_host=2, slow_link={1: 3.0}), tmp_path)["without_fault"]
    assert truth["step_us"] == truth["without_fault_step_us"]


OVERLAP = {
    "dp8, all-reduces after the backward": Spec(ranks=8, steps=3, poor_overlap=True),
    # 64 MB buckets outlast a chunk of the backward: they queue, so where each is ready sets the step
    "tp2 x dp8, 64 MB all-reduces after the backward": Spec(ranks=16, steps=3, tp=2, poor_overlap=True,
                                                            bucket_bytes=64 << 20),
}


@pytest.mark.parametrize("name", list(OVERLAP))
def test_poor_overlap_fixed_is_projected_within_2_percent_of_the_run_that_overlaps(tmp_path, name):
    spec = OVERLAP[name]
    truth = generate(spec, tmp_path / "gen")["without_fault"]
    assert truth["poor_overlap"] and truth["without_fault_step_us"] < 0.9 * truth["step_us"]
    run = ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")
    w = whatif(run.events(), stragglers=None, comm_k=[], host_gaps=False, rebalance=False, attribute=False,
               critical=False)
    assert w.explained, w.reason
    assert [p.edit for p in w.projections] == ["grad_overlap"]
    assert w.projections[0].step_s * 1e6 == pytest.approx(truth["without_fault_step_us"], rel=0.02)


@pytest.mark.parametrize("spec", [Spec(ranks=8, steps=2), Spec(ranks=16, steps=2, tp=2, pp=2, poor_overlap=False)],
                         ids=["dp8 overlapping", "pp2 x tp2 x dp4"])
def test_a_run_that_overlaps_or_a_pipeline_gets_no_overlap_projection(tmp_path, spec):
    """A data-parallel run whose buckets already overlap has one all-reduce after its backward (the last),
    which nothing can move; a pipeline's gradients are final only after its last micro-batch."""
    generate(spec, tmp_path / "gen")
    run = ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")
    w = whatif(run.events(), stragglers=None, comm_k=[], host_gaps=False, rebalance=False, attribute=False,
               critical=False)
    assert w.explained and w.projections == []


def test_poor_overlap_is_of_data_parallel_runs_without_a_pipeline():
    from ddprof.errors import UsageError

    with pytest.raises(UsageError, match="poor overlap"):
        Spec(ranks=8, pp=2, poor_overlap=True)
    with pytest.raises(UsageError, match="poor overlap"):
        Spec(ranks=2, tp=2, poor_overlap=True)


def test_buckets_that_queue_behind_each_other_are_not_moved(tmp_path):
    """A run that overlaps, with 64 MB buckets longer than a chunk of the backward: the last ones start
    after the backward because the stream is busy, not because they wait for it; counting the buckets that
    already overlapped, their gradients are ready late, and the projection is the run itself."""
    generate(Spec(ranks=8, steps=3, bucket_bytes=64 << 20), tmp_path / "gen")
    run = ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")
    w = whatif(run.events(), stragglers=None, comm_k=[], host_gaps=False, rebalance=False, attribute=False,
               critical=False)
    assert w.explained and [p.edit for p in w.projections] == ["grad_overlap"]
    assert w.projections[0].step_s == pytest.approx(w.step_s, rel=1e-3)
