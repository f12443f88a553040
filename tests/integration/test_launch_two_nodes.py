"""Two ``ddprof launch`` processes on loopback standing for two hosts (torchrun ``--nnodes 2``, one rank
each, ``--node-rank`` 0 and 1) write one run dir: both ranks' traces, step measures and statuses, ingested
once, and the report names the slow rank of the other "host". Each launcher says which host it stands for
(``DDPROF_HOST``, as a pod names its node): the manifest keeps them, and every collective is inter-node, over
the network, in the link classes."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

import ddprof  # noqa: E402
from tests.support.jobs import free_port  # noqa: E402
from tests.support.launch_util import PLAIN, job_env, launch_cmd, statuses, wait_ingested  # noqa: E402

pytestmark = pytest.mark.slow


def node(rank: int, port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={rank}", "--nproc-per-node=1",
            "--master-addr=127.0.0.1", f"--master-port={port}", str(PLAIN), "--steps", "6",
            "--slow-rank", "1", "--slow-ms", "60"]


def test_two_launchers_of_one_job_fill_one_run_dir(tmp_path):
    run_dir, port = tmp_path / "run", free_port()
    procs = [subprocess.Popen(launch_cmd(run_dir, [], node(r, port)), env=job_env() | {"DDPROF_HOST": f"node-{r}"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    run = wait_ingested(run_dir)
    assert (run.ranks, run.world_size, run.steps) == ([0, 1], 2, [2, 3, 4])
    assert sorted(statuses(run_dir)) == [0, 1]
    assert sorted(p.name for p in (run_dir / "measures").glob("*.steps.jsonl")) == [
        "rank-00000.steps.jsonl", "rank-00001.steps.jsonl"]
    report = ddprof.analyze(run_dir)
    assert report["status"] == "ok", report["run"]["warnings"]
    assert report["verdicts"][0].startswith("rank 1 is the straggler"), report["verdicts"]
    assert [r["host"] for r in sorted(report["run"]["per_rank"], key=lambda r: r["rank"])] == ["node-0", "node-1"]
    links = report["links"]
    assert links and {(c["span"], c["link"]) for c in links} == {("inter-node", "network")}, links
