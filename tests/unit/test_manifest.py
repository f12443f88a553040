"""The manifest keeps each process group once: a file's record names its groups, the groups are the
manifest's ``process_groups``; so its size grows with ranks, not with their square, and a run ingested again
from its cache has the same groups."""

from __future__ import annotations

import json

import ddprof
from ddprof.synth import Spec, generate


def _ingest(tmp_path, ranks):
    generate(Spec(ranks=ranks, steps=1, kernels=4, layers=1, buckets=1), tmp_path / f"g{ranks}", with_truth=False)
    return ddprof.ingest([tmp_path / f"g{ranks}" / "traces"], tmp_path / f"run{ranks}")


def test_each_group_is_kept_once_and_files_name_theirs(tmp_path):
    run = _ingest(tmp_path, 16)
    groups = run.manifest["process_groups"]
    default = next(g for g in groups if g["pg_size"] == 16)
    assert default["ranks"] == list(range(16))
    for record in run.manifest["sources"].values():
        assert "pg_config" not in record
        assert default["pg_name"] in record["pg_names"]


def test_the_manifest_grows_with_ranks_not_their_square(tmp_path):
    size = {n: len(json.dumps(_ingest(tmp_path, n).manifest)) for n in (32, 256)}
    assert size[256] < 10 * size[32]  # 8x the ranks; 14x with a copy of the default group per file


def test_a_run_ingested_again_from_its_cache_keeps_its_groups(tmp_path):
    first = _ingest(tmp_path, 8)
    again = ddprof.ingest([tmp_path / "g8" / "traces"], tmp_path / "run8")  # every file reused
    assert again.manifest["process_groups"] == first.manifest["process_groups"]
    assert again.manifest["sources"] == first.manifest["sources"]
