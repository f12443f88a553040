"""All-to-all traffic by rank pair: the split sizes as the readers find them, a generated mixture-of-experts
run whose matrices and imbalance are known (ddprof.synth.MoE), load imbalance told apart from a slow rank,
the heat map panel, and runs without all-to-all left as they were."""

from __future__ import annotations

import pytest
from ddprof.analyses.report import build_report

from ddprof.readers.kineto.comms import split_bytes
from ddprof.synth import DataParallel, MoE, ingest_generated


def test_split_sizes_in_bytes():
    # NCCL's record_param_comms: rows of dim 0 per rank, the message's bytes divide among them
    assert split_bytes("record_param_comms", b'"[1, 3]"', b'"[2, 2]"', 16, 16, None, None, None) == ([4, 12], [8, 8])
    # even splits (empty lists) and truncated ones say nothing: the message size does
    assert split_bytes("record_param_comms", b'"[]"', b'"[]"', 16, 16, None, None, None) == (None, None)
    assert split_bytes("record_param_comms", b'"[1, 2, ...]"', None, 16, 16, None, None, None) == (None, None)
    # rows that do not divide the bytes are refused, not rounded
    assert split_bytes("record_param_comms", b'"[1, 2]"', None, 16, None, None, None, None) == (None, None)
    # a gloo trace: the issuing op's split arguments and tensor shapes (output first, then input)
    got = split_bytes("c10d::alltoall_base_", None, None, None, None, b'[[30, 8], [21, 8], []]',
                      b'["float", "float", ""]', b'["", "", "", "[10, 20]", "[10, 11]", "False", "-1"]')
    assert got == ([320, 352], [320, 640])


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    sc = MoE(ranks=8, steps=3, tokens=1024, hot_rank=5, hot_share=0.4, gpus_per_host=4)
    run = ingest_generated(sc, tmp_path_factory.mktemp("moe"))
    return sc, build_report(run)


def test_generated_moe_matrices_are_exact(moe):
    sc, report = moe
    truth = sc.truth()
    rows = report.table("alltoall").to_dicts()
    assert len(rows) == truth["instances"] and all(r["with_splits"] for r in rows)
    for r in rows:
        dispatch = r["index"] % 2 == 0
        assert r["bytes"] == sc.ranks * sc.tokens * sc.row_bytes
        if dispatch:
            assert (r["max_recv_rank"], r["recv_imbalance"]) == (5, truth["dispatch_recv_imbalance"])
            assert r["send_imbalance"] == truth["dispatch_send_imbalance"]
        else:
            assert (r["max_send_rank"], r["send_imbalance"]) == (5, truth["combine_send_imbalance"])
            assert r["recv_imbalance"] == truth["combine_recv_imbalance"]
    s = report["alltoall"]
    assert s["ranks"] == list(range(8)) and s["matrix"] == truth["matrix"]
    # 0.4 · 1024 = 410 tokens to rank 5 from each of 8 ranks: 3,280 of a mean 1,024 received
    assert truth["dispatch_recv_imbalance"] == 8 * 410 / 1024
    assert s["hot_rank"] == 5 and s["hot_instances"] == 3 and s["hot_recv_imbalance"] == pytest.approx(8 * 410 / 1024)
    per = {p["rank"]: p for p in s["per_rank"]}
    assert per[5]["received_bytes"] == 3 * (8 * 410 + 1024) * sc.row_bytes
    assert [st["step"] for st in s["by_step"]] == [0, 1, 2]


def test_load_imbalance_is_named_not_a_straggler(moe):
    sc, report = moe
    combines = [r for r in report.table("alltoall").to_dicts() if r["index"] % 2 == 1]
    assert all(r["last_rank"] == 5 and r["explained"] for r in combines)  # the hot expert enters last
    assert report["stragglers"]["ranks"] == sc.truth()["stragglers"]
    line = next(v for v in report["verdicts"] if "all-to-all" in v)
    assert line.startswith("rank 5 receives 3.2× the mean at 3 of 6 all-to-all instances: expert load imbalance")
    assert not any(v.startswith("rank 5 is the straggler") for v in report["verdicts"])


def test_a_run_without_all_to_all_is_unchanged(tmp_path):
    report = build_report(ingest_generated(DataParallel(ranks=4, slow_rank=2), tmp_path))
    assert report["alltoall"]["instances"] == 0 and report["alltoall"]["matrix"] == []
    assert report.table("alltoall").height == 0
    assert report["stragglers"]["ranks"] == [2]  # the slow rank is still the straggler
    assert not [v for v in report["verdicts"] if "all-to-all" in v]


def test_heat_map_panel(moe):
    pytest.importorskip("plotly")
    from ddprof.dashboards.figures.alltoall import alltoall_figure
    from ddprof.dashboards.panels import panel_ids

    assert "alltoall" in panel_ids()
    sc, report = moe
    fig = alltoall_figure(report)
    heat = fig.data[0]
    assert heat.type == "heatmap" and [list(r) for r in heat.z] == sc.truth()["matrix"]
    assert "receive imbalance" in fig.layout.title.text
    # one instance of each kind a step, every step alike: each step's matrix is a third of the run's, and the
    # figure's menu shows the run or one step
    steps = report["alltoall"]["step_matrices"]
    assert [m["step"] for m in steps] == [0, 1, 2] and all(m["instances"] == 2 for m in steps)
    assert all([[3 * b for b in row] for row in m["matrix"]] == sc.truth()["matrix"] for m in steps)
    assert report["alltoall"]["step_matrices_left_out"] == 0
    assert len(fig.data) == 4 and [d.visible for d in fig.data] == [True, False, False, False]
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["every traced instance", *(f"step {i} (2 instances)" for i in range(3))]
    assert buttons[2].args[0]["visible"] == [False, False, True, False]
    assert buttons[2].args[1]["title.text"].endswith("step 1: 2 instances</sup>")
    assert [list(r) for r in fig.data[2].z] == steps[1]["matrix"]
    empty = alltoall_figure({"alltoall": None})
    assert not empty.data and "no all-to-all" in empty.layout.annotations[0].text


def test_synth_moe_command_writes_its_truth(tmp_path):
    import json

    import ddprof
    from ddprof.cli import main

    assert main(["synth", str(tmp_path / "out"), "--moe", "--ranks", "4", "--steps", "2", "--hot-rank", "2",
                 "--hot-share", "0.5", "--tokens", "100", "--gpus-per-host", "2"]) == 0
    truth = json.loads((tmp_path / "out" / "truth.json").read_text())
    report = build_report(ddprof.ingest([tmp_path / "out" / "traces"], tmp_path / "run"))
    assert report["alltoall"]["matrix"] == truth["matrix"] and report["alltoall"]["hot_rank"] == 2
    # 50 of 100 tokens from each of 4 ranks to rank 2: 200 of a mean 100 received
    assert truth["dispatch_recv_imbalance"] == 2.0 == report["alltoall"]["hot_recv_imbalance"]
    assert {r["span"] for r in report["links"]} == {"inter-node"}  # 2 ranks a host: the all-to-alls span 2 hosts
    assert main(["synth", str(tmp_path / "bad"), "--moe", "--ranks", "4", "--hot-rank", "4"]) == 2
