"""Ranks slower together (analyses/slow_groups.py): candidates from where the ranks ran, never from their
arrivals; a slow host's ranks named as one group, a slow rank alone never its host; healthy runs on several
hosts name no group. Generated runs with known truth; the real gloo case (ranks bound to a busy CPU) is the
fault matrix's ``contention`` at 4 and 8 ranks (benchmarks/fault_matrix.py) and
tests/integration/test_slow_groups_gloo.py."""

from __future__ import annotations

import pytest
from ddprof.analyses.chance import at_least
from ddprof.analyses.slow_groups import placement_groups
from ddprof.analyses.verdicts import badge
from ddprof.collectors.meta import cpu_ranges

from ddprof.inputs.analyze import analyze
from ddprof.render.text import render_text
from ddprof.synth import Spec, generate


def test_at_least():
    assert at_least(2, [0.5, 0.5]) == pytest.approx(0.25)
    assert at_least(0, [0.1]) == 1.0 and at_least(3, [0.5, 0.5]) == 0.0
    assert at_least(1, [0.5, 0.25]) == pytest.approx(1 - 0.5 * 0.75)


def test_cpu_ranges():
    assert cpu_ranges([0, 1, 2, 3, 8]) == "0-3,8"
    assert cpu_ranges([1]) == "1" and cpu_ranges([0, 2, 4, 5]) == "0,2,4-5" and cpu_ranges([]) == ""


def test_candidates_come_from_placement():
    hosts = {r: ("a" if r < 4 else "b", None) for r in range(8)}
    assert placement_groups(hosts, list(range(8))) == [("host a", [0, 1, 2, 3]), ("host b", [4, 5, 6, 7])]
    bound = {r: ("h", str(r % 2)) for r in range(8)}
    assert placement_groups(bound, list(range(8))) == [("CPUs 0", [0, 2, 4, 6]), ("CPUs 1", [1, 3, 5, 7])]
    # both: hosts, then each host's CPU sets, named with their host (largest first, then by rank)
    both = {r: ("a" if r < 4 else "b", str(r % 2)) for r in range(8)}
    assert placement_groups(both, list(range(8))) == [
        ("host a", [0, 1, 2, 3]), ("host b", [4, 5, 6, 7]), ("CPUs 0 of host a", [0, 2]),
        ("CPUs 1 of host a", [1, 3]), ("CPUs 0 of host b", [4, 6]), ("CPUs 1 of host b", [5, 7])]
    # one host, every rank on every CPU; a rank whose placement is unknown; groups of one; over half
    assert placement_groups({r: ("h", "0-1") for r in range(4)}, list(range(4))) == []
    assert placement_groups({**hosts, 7: (None, None)}, list(range(8))) == []
    assert placement_groups({r: (str(r), None) for r in range(4)}, list(range(4))) == []
    assert placement_groups({r: ("a" if r < 3 else "b", None) for r in range(4)}, list(range(4))) == []


def _report(tmp_path, **kw):
    truth = generate(Spec(**kw), tmp_path)
    return truth, analyze(tmp_path / "traces", cache=tmp_path / "run")


@pytest.mark.parametrize("factor", [1.15, 1.5])
def test_slow_host_is_one_group(tmp_path, factor):
    """16 ranks on 4 hosts, every rank of host node001 (ranks 4-7) slower by ``factor``: the last arrival
    rotates among its ranks; the group is named first, with its placement and cause, and its ranks are
    not repeated one by one."""
    truth, report = _report(tmp_path, ranks=16, gpus_per_host=4, steps=8, noise=0.1,
                            slow={r: factor for r in range(4, 8)})
    groups = report["stragglers"]["groups"]
    assert [(g["ranks"], g["placement"]) for g in groups] == [([4, 5, 6, 7], "host node001")]
    g = groups[0]
    assert g["p_value"] <= 0.05 and g["wait_share_pct"] >= 2.0 and g["last_units"] > g["chance_last"]
    assert g["cause"]["cause"] == "compute" and g["cause"]["rank"] in g["ranks"]
    first = report["verdicts"][0]
    assert first.startswith("ranks 4, 5, 6, 7 (host node001) are slower together (rank ")
    assert " of them: compute: " in first and " of 8 steps, " in first
    assert not any(v.startswith(("rank 4 is", "rank 5 is", "rank 6 is", "rank 7 is")) for v in report["verdicts"])
    assert "ranks 4, 5, 6, 7 (host node001) are slower together" in render_text(report)
    shown = badge(report)  # not a green OK beside it
    assert shown.label == "ATTENTION" and shown.why[0].startswith("ranks 4, 5, 6, 7 (host node001)")
    assert "Ranks slower together" in render_text(report)  # its table
    # the what-if section tries the group as one edit, and its answer is the run without the slow host's
    edits = {e["edit"]: e for e in report["whatif"]["edits"]}
    assert "straggler_ranks_4_5_6_7" in edits
    without = truth["without_fault"]["without_fault_step_us"]
    assert edits["straggler_ranks_4_5_6_7"]["step_us"] == pytest.approx(without, rel=0.02)
    assert any(v.startswith("making ranks 4, 5, 6, 7 as fast as the others would cut the step from ")
               for v in report["verdicts"])


def test_one_slow_rank_is_not_its_host(tmp_path):
    _, report = _report(tmp_path, ranks=16, gpus_per_host=4, steps=8, noise=0.1, slow={5: 1.3})
    assert report["stragglers"]["ranks"] == [5] and report["stragglers"]["groups"] == []
    assert report["verdicts"][0].startswith("rank 5 is the straggler")


@pytest.mark.parametrize("seed", range(6))
def test_healthy_hosts_name_no_group(tmp_path, seed):
    """±30 % kernel noise on 16 ranks of 4 hosts, nothing slow: no group, no rank."""
    _, report = _report(tmp_path, ranks=16, gpus_per_host=4, steps=8, noise=0.3, seed=seed)
    assert report["stragglers"]["groups"] == [] and report["stragglers"]["ranks"] == []
