"""The Ray executor: a local Ray cluster on 127.0.0.1 ingests and analyses generated and real runs, and
its reports equal the local executor's, byte for byte."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ddprof.analyses.report import build_report

from ddprof.cli import main
from ddprof.errors import UsageError
from ddprof.ingestion import ingest
from ddprof.runtime.executors import LocalExecutor, get_executor, run_each
from ddprof.store.atomic import json_text
from ddprof.store.rundir import open_run
from ddprof.synth import Spec, generate
from tests.support.paths import SAMPLES

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'ddprof[ray]')")



@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A Ray cluster of this machine alone, on loopback, no dashboard; shut down after the module."""
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1")
    except Exception as exc:  # Ray's own startup (its agents must start within ~30 s): say so plainly
        pytest.fail(f"a local Ray cluster did not start on 127.0.0.1 ({exc}); on a machine this busy, Ray's "
                    "agents miss its startup deadline")
    try:
        yield ray
    finally:
        ray.shutdown()


def _report(run_dir: Path, executor: Any, monkeypatch: pytest.MonkeyPatch, budget: str) -> str:
    monkeypatch.setenv("DDPROF_GROUP_EVENTS", budget)
    return json_text(build_report(open_run(run_dir), executor=executor))


@pytest.mark.parametrize("case", ["synth-tp2-offsets", "dlrm-8xV100-nccl", "gloo-pipeline-4stage"])
def test_ray_ingest_and_analyze_equal_local(case: str, tmp_path: Path, ray_cluster: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if case.startswith("synth"):
        generate(Spec(ranks=16, tp=2, steps=2, kernels=36, gpus_per_host=8, clock_offset_us={1: 4000.0},
                      slow={11: 1.4}), tmp_path / "synth")
        traces = tmp_path / "synth" / "traces"
    else:
        traces = tmp_path / case
        shutil.copytree(SAMPLES / case, traces)
    remote = get_executor("ray")
    local_run = ingest([traces], tmp_path / "local-run")
    ray_run = ingest([traces], tmp_path / "ray-run", executor=remote)
    assert ray_run.ranks == local_run.ranks
    local = _report(local_run.path, None, monkeypatch, "1")  # four ranks per group: several groups
    assert _report(ray_run.path, remote, monkeypatch, "1") == local
    assert _report(ray_run.path, remote, monkeypatch, "1000000000") == local  # one group: the same bytes


def test_cli_executor_ray(tmp_path: Path, ray_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    generate(Spec(ranks=8, steps=2, kernels=30, slow={3: 1.5}), tmp_path / "s")
    assert main(["ingest", str(tmp_path / "s" / "traces"), "-o", str(tmp_path / "run"), "-q",
                 "--executor", "ray"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "run"), "--format", "json", "--executor", "ray"]) == 0
    on_ray = capsys.readouterr().out
    assert main(["analyze", str(tmp_path / "run"), "--format", "json"]) == 0
    assert capsys.readouterr().out == on_ray and json.loads(on_ray)["stragglers"]["ranks"] == [3]
    # raw traces named to analyze are parsed on the executor too, into the cache, with the same report
    assert main(["analyze", str(tmp_path / "s" / "traces"), "--cache", str(tmp_path / "c"), "--format", "json",
                 "--executor", "ray"]) == 0
    assert capsys.readouterr().out == on_ray


def test_executor_choice_is_checked() -> None:
    with pytest.raises(UsageError, match="unknown executor"):
        get_executor("dask")
    with pytest.raises(UsageError, match="--address is for --executor ray"):
        get_executor("local", address="head:6379")
    assert run_each(LocalExecutor(), divmod, [(7, 2), (9, 4)]) == [(3, 1), (2, 1)]
