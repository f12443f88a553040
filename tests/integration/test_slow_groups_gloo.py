"""Ranks slower together on a real job (analyses/slow_groups.py): the fault matrix's contention fault at 4
gloo ranks, every rank bound to CPU ``rank mod cpus`` and a busy thread in the last rank's process. The
collector records each rank's CPUs; where ranks share a CPU (4 ranks on 2 CPUs: ranks 1 and 3 share the busy
one) they are one candidate group, and the first verdict names that group, or one of its ranks, with CPU
contention, never a rank off the busy CPU. The benchmark's 10 repetitions at 4 and 8 ranks measure the rate
(README, "The fault matrix")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

import ddprof  # noqa: E402
from ddprof.render.text import render_text  # noqa: E402
from tests.support.paths import REPO  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from fault_matrix import faulty_ranks, named  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("slow-groups")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fault_matrix.py"), "--ranks", "4", "--reps", "2",
                           "--faults", "contention", "--no-check", "--keep", str(out / "runs"),
                           "--json", str(out / "outcomes.json")],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "runs", json.loads((out / "outcomes.json").read_text())["outcomes"], proc.stdout


def test_the_collector_records_each_ranks_cpus(runs):
    root, _, _ = runs
    cpus = sorted(os.sched_getaffinity(0))
    for rep in range(2):
        manifest = json.loads((root / f"contention-{rep:02d}" / "manifest.json").read_text())
        assert manifest["cpus"] == {str(r): str(cpus[r % len(cpus)]) for r in range(4)}
    # the rank table says where each rank was bound, where they were bound apart
    text = render_text(ddprof.analyze(root / "contention-00"))
    head = next(ln for ln in text.splitlines() if ln.lstrip().startswith("rank "))
    assert (" cpus " in head) == (len(cpus) > 1), head  # one CPU: every rank bound alike, nothing to show


def test_the_busy_cpus_ranks_are_named_with_contention(runs):
    """No run names a rank off the busy CPU; at least one of the two names its ranks (as a group where they
    share it) with CPU contention first (a machine busy with other work can blur one run)."""
    _, outcomes, printed = runs
    busy = faulty_ranks("contention", 4)
    right = 0
    for o in outcomes:
        who, cls = named(o["first"])
        assert who is None or set(who) <= busy, (o["first"], printed)
        right += bool(who) and cls == "contention"
        if len(busy) > 1 and who and len(who) > 1:
            assert o["first"].startswith(f"ranks {', '.join(map(str, sorted(busy)))} (CPUs "), o["first"]
    assert right >= 1, printed
