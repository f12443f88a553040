"""The fault matrix's quick setting (``benchmarks/fault_matrix.py --quick``): real 2-rank gloo jobs with a
fault of known cause on the last rank (bigger compute, a slow DataLoader, periodic stalls) and clean runs;
the first verdict of ``ddprof analyze`` must name the rank and the cause class, and a clean run no
straggler. The full matrix (every fault, 10 repetitions) is the benchmark's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="real gloo runs need torch (pip install 'ddprof[torch]')")

from tests.support.paths import REPO  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    out = tmp_path_factory.mktemp("fault-matrix")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fault_matrix.py"), "--quick", "--ranks", "2",
                           "--no-check", "--keep", str(out / "runs"), "--json", str(out / "outcomes.json")],
                          capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "outcomes.json").read_text())["outcomes"], proc.stdout


@pytest.mark.parametrize("fault,cause", [("compute", "compute"), ("input", "input"), ("stalls", "stalls")])
def test_the_first_verdict_names_the_faulty_rank_and_its_cause(matrix, fault, cause):
    """Every run names rank 1 the straggler first; none names another cause, and at least one of the two
    names this one (a machine busy with other work can blur one run's evidence into 'undecided': the
    benchmark's ten repetitions on a quiet machine measure the rate)."""
    outcomes, printed = matrix
    runs = [o for o in outcomes if o["fault"] == fault]
    assert len(runs) == 2
    for o in runs:
        assert o["first"].startswith("rank 1 is the straggler"), (o["first"], printed)
        assert [c["cause"] for c in o["causes"] if c["rank"] == 1] in ([cause], ["undecided"]), (o["causes"], printed)
    right = [o for o in runs if o["first"].startswith(f"rank 1 is the straggler ({_said(cause)}: ")]
    assert right, printed


def test_a_clean_run_names_no_straggler(matrix):
    outcomes, printed = matrix
    clean = [o for o in outcomes if o["fault"] == "clean"]
    assert len(clean) == 2
    for o in clean:
        assert not o["alarm"] and o["causes"] == [], (o["first"], printed)
        assert "straggler" not in o["first"] or o["first"].startswith("no straggler")


def test_the_table_is_printed(matrix):
    _, printed = matrix
    assert "| fault | ranks | reps | first verdict right | precision | recall |" in printed
    assert "| compute (compute) | 2 | 2 |" in printed


def _said(cause: str) -> str:
    return "CPU contention" if cause == "contention" else cause
