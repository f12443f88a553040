"""Two ``ddprof launch`` processes on loopback standing for two hosts (torchrun ``--nnodes 2``, one rank
each, ``--node-rank`` 0 and 1) write one run dir: both ranks' traces, step measures and statuses, ingested
once, and the report names the slow rank of the other "host"; and when one node's rank is killed, what
each rank wrote of its step measures stays readable. Each launcher says which host it stands for
(``DDPROF_HOST``, as a pod names its node): the manifest keeps them, and every collective is inter-node, over
the network, in the link classes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

from ddprof.collectors.measures import FLUSH_S  # noqa: E402

import ddprof  # noqa: E402
from ddprof.store.step_measures import read_step_measures  # noqa: E402
from tests.support.jobs import free_port  # noqa: E402
from tests.support.launch_util import PLAIN, job_env, launch_cmd, statuses, wait_for, wait_ingested  # noqa: E402

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


def test_the_measures_outlive_a_crashed_node(tmp_path):
    """Node 1's rank is killed (SIGKILL: nothing of it exits cleanly) while both write their step measures;
    node 0's rank loses its peer and its launcher ends. What each rank wrote stays readable from the one run
    dir: every whole record up to the crash (a torn last line is left out), and ``ddprof top --once`` shows
    both ranks."""
    run_dir, port = tmp_path / "run", free_port()
    job = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--master-addr=127.0.0.1", f"--master-port={port}", str(PLAIN), "--steps", "3000", "--step-ms", "10"]
    procs = [subprocess.Popen(launch_cmd(run_dir, ["--active", "0"], [*job[:3], f"--node-rank={r}", *job[3:]]),
                              env=job_env() | {"DDPROF_HOST": f"node-{r}"}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    try:
        got = wait_for("both ranks 20 steps in", lambda: (s := statuses(run_dir)) and len(s) == 2
                       and all((v.get("step") or 0) >= 20 for v in s.values()) and s, timeout=180)
        os.kill(got[1]["pid"], signal.SIGKILL)
        t0 = time.monotonic()
        for p in procs:
            p.communicate(timeout=300)
        ended_s = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[0].returncode != 0 and procs[1].returncode != 0
    frame = read_step_measures(run_dir)
    steps = {r: frame.filter(frame["rank"] == r)["step"].to_list() for r in (0, 1)}
    assert all(len(v) >= 19 and v == sorted(set(v)) for v in steps.values()), steps
    # the killed rank loses at most what it had not flushed: the writer appends every FLUSH_S (0.2 s, about
    # 15 steps of 13 ms here); its peer ran on until it noticed (one step with a live peer at most)
    assert max(steps[1]) >= 19 and max(steps[0]) < 3000
    assert max(steps[0]) - max(steps[1]) <= FLUSH_S / 0.010 + 5, steps
    top = subprocess.run([sys.executable, "-m", "ddprof", "top", str(run_dir), "--once"], capture_output=True,
                         text=True, timeout=120)
    assert top.returncode == 0, top.stderr[-2000:]
    rows = [ln.split() for ln in top.stdout.splitlines() if ln[:4].strip().isdigit()]
    assert [int(r[0]) for r in rows] == [0, 1] and [int(r[1]) for r in rows] == [max(steps[0]), max(steps[1])]
    assert ended_s < 240, f"node 0 took {ended_s:.0f} s to notice its peer was gone"
