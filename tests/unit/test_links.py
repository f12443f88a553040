"""Link classes: collective instances classified by the hosts their ranks span and the device link their GPU
model implies; busbw per class beside the class's reference peak, and the finding below half of it."""

from __future__ import annotations

import pytest
from ddprof.analyses.links import PEAK_BUSBW_GBPS, device_link, link_classes
from ddprof.analyses.report import build_report

import ddprof
from ddprof.synth import Spec, generate
from tests.support.paths import SAMPLES


def test_device_links():
    assert device_link("NVIDIA H100 80GB HBM3") == ("NVLink4", "H100")
    assert device_link("Tesla V100-SXM2-16GB") == ("NVLink2", "V100")
    assert device_link("NVIDIA A100-SXM4-80GB") == ("NVLink3", "A100")
    assert device_link("NVIDIA H100 PCIe") == ("PCIe gen5", "H100 PCIe")
    assert device_link("AMD Instinct MI250X") == ("xGMI", "MI250")
    assert device_link("NVIDIA L4") == ("PCIe gen4", "L4")
    assert device_link("some accelerator") is None and device_link(None) is None
    assert PEAK_BUSBW_GBPS["NVLink4"] == 360 and PEAK_BUSBW_GBPS["PCIe gen4"] == 24


def _report(tmp_path, **spec):
    generate(Spec(steps=2, kernels=60, **spec), tmp_path, with_truth=False)
    return build_report(ddprof.ingest([tmp_path / "traces"], tmp_path / "run"))


def test_generated_two_hosts(tmp_path):
    # 16 H100 ranks, 8 a host: tensor-parallel groups of 8 stay on a host (NVLink4), data-parallel pairs
    # cross hosts (the network). Every transfer runs at 100 GB/s algbw: a tensor-parallel all-reduce of
    # 32 MiB reaches 100 · 2 · 7/8 = 175 GB/s busbw, 48.6 % of NVLink4's 360: below half, a finding
    report = _report(tmp_path, ranks=16, tp=8, gpus_per_host=8, tp_bytes=32 << 20)
    rows = {(r["span"], r["link"], r["op"], r["bytes"]): r for r in report["links"]}
    tp = rows[("intra-node", "NVLink4", "all_reduce", 32 << 20)]
    assert (tp["n"], tp["device"], tp["busbw_gbps"]) == (8, "H100", pytest.approx(175.0))
    assert tp["pct_of_peak"] == pytest.approx(100 * 175 / 360)
    dp = rows[("inter-node", "network", "all_reduce", 25 << 20)]
    assert dp["n"] == 2 and dp["peak_busbw_gbps"] is None and dp["pct_of_peak"] is None
    assert sum(r["count"] for r in report["links"]) == report["collectives"]["instances"]
    assert ("intra-node NVLink4 all_reduce of 32 MiB reaches 175 GB/s bus bandwidth, 49 % of the ~360 GB/s "
            "reference for NVLink4 (H100)") in report["verdicts"]


def test_one_host_above_half_is_silent(tmp_path):
    # 8 ranks on one host, data-parallel all-reduces of 25 MiB: 175 GB/s; reference lowered by hand to 300
    report = _report(tmp_path, ranks=8, gpus_per_host=8)
    assert {(r["span"], r["link"]) for r in report["links"]} == {("intra-node", "NVLink4")}
    rows = [dict(r, peak_busbw_gbps=300.0, pct_of_peak=100 * r["busbw_gbps"] / 300) for r in report["links"]]
    from ddprof.analyses.links import link_verdicts

    assert link_verdicts({"links": rows}) == []
    assert link_verdicts({"links": report["links"]})  # 175 of 360: below half


def test_cpu_run_has_no_peak(tmp_path):
    run = ddprof.ingest([SAMPLES / "gloo-ddp-4rank-slow-rank"], tmp_path / "run")
    report = build_report(run)
    assert report["links"] and {r["link"] for r in report["links"]} == {"cpu"}
    assert all(r["peak_busbw_gbps"] is None for r in report["links"])
    assert not [v for v in report["verdicts"] if "reference" in v]
    assert link_classes(report.table("collectives").clear(), report["run"]) == []
