"""Communication kernels that are not NCCL's: the built-in families, the user's rules (command line and
project file), the cache they shape, and the report section that shows the classification.

The traces are the generated data-parallel job of :mod:`gen` (answers in ``DataParallel.truth``) with
its NCCL kernel renamed to another library's and stripped of collective metadata: the only evidence left
is the kernel's name, as in a real DeepEP or vLLM job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ddprof
from ddprof.cli import main
from ddprof.errors import UsageError
from ddprof.inputs.analyze import analyze
from ddprof.inputs.reports import load_report
from ddprof.synth import DataParallel
from ddprof.vocabulary.collective_ops import (
    KERNEL_FAMILIES,
    RuleError,
    kernel_rules,
    match_kernel,
    parse_rule,
)

SC = DataParallel()
DEEP_EP = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long const*)"
#: DeepEP as DeepSeek's public profile traces name it (its own namespace)
DPSK_EP = "void dpsk::ep::internode::dispatch<false, 8, 16, 2>(int4*, float*, int*, long const*)"
VLLM = "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)"
META_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name")


def _renamed(name: str) -> dict[int, dict[str, Any]]:
    """The job's traces with its communication kernel called ``name`` and no collective metadata
    anywhere (the c10d op that carried it is gone too)."""
    traces = SC.kineto()
    for trace in traces.values():
        events = []
        for e in trace["traceEvents"]:
            if e["name"] == "c10d::allreduce_":
                continue
            if e["name"].startswith("ncclKernel"):
                e["name"] = name
                for k in META_KEYS:
                    e["args"].pop(k, None)
            events.append(e)
        trace["traceEvents"] = events
    return traces


def _write(traces: dict[int, Any], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, trace in traces.items():
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(trace))
    return folder


def _overlap_is_right(report: dict[str, Any]) -> None:
    truth = SC.truth()["overlap"]
    assert len(report["overlap"]) == SC.ranks
    for row in report["overlap"]:
        want = truth[row["rank"]]
        assert row["comm_us"] == pytest.approx(want["comm_us"])
        assert row["overlap_pct"] == pytest.approx(want["overlap_pct"])
        assert row["exposed_comm_us"] == pytest.approx(want["exposed_comm_us"])


# ------------------------------------------------------------------ the vocabulary


@pytest.mark.parametrize("name, family, op", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "nccl", "all_reduce"),
    ("ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)", "nccl", "unknown"),
    (DEEP_EP, "deep_ep", "all_to_all"),
    ("void deep_ep::internode::combine<true, 8>(int4*, float*)", "deep_ep", "all_to_all"),
    ("void deep_ep::internode::notify_dispatch<8>(int const*, int*)", "deep_ep", "all_to_all"),
    ("void deep_ep::internode_ll::dispatch<false, 7168>(void*)", "deep_ep", "all_to_all"),
    ("void deep_ep::intranode::cached_notify_dispatch<8>(int*, int)", "deep_ep", "all_to_all"),
    # DeepSeek's public profile traces: DeepEP built in its own namespace
    ("void dpsk::ep::internode::dispatch<false, 8, 16>(int4*, float*)", "deep_ep", "all_to_all"),
    ("void dpsk::ep::internode::combine<__nv_bfloat16, 8>(int4*)", "deep_ep", "all_to_all"),
    ("void dpsk::ep::internode::notify_dispatch<8>(int const*, int*)", "deep_ep", "all_to_all"),
    ("void dpsk::ep::internode::cached_notify(int, int, int, void*)", "deep_ep", "all_to_all"),
    ("void dpsk::ep::internode_ll::dispatch<false, 7168>(void*)", "deep_ep", "all_to_all"),
    ("void dpsk::ep::internode_ll::combine<7168>(void*)", "deep_ep", "all_to_all"),
    ("void nvshmemi_alltoall_kernel<float>(int, float*)", "nvshmem", "all_to_all"),
    ("nvshmemx_barrier_all_on_stream_kernel", "nvshmem", "barrier"),
    ("void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*)", "custom_all_reduce", "all_reduce"),
    (VLLM, "custom_all_reduce", "all_reduce"),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(float**)", "custom_all_reduce",
     "all_reduce"),
    ("void two_shot_all_reduce_kernel<__nv_bfloat16>(void*)", "custom_all_reduce", "all_reduce"),
    ("void multimem_all_reduce_kernel<float, 16>(float*)", "symm_mem_multimem", "all_reduce"),
    ("void multimem_all_gather_kernel<16>(float*)", "symm_mem_multimem", "all_gather"),
    ("userbuffers_fp16_sum_inplace_gpu_rr_rs(int, int, int, void**)", "userbuffers", "reduce_scatter"),
    ("userbuffers_fp16_sum_inplace_gpu_rw_ag(int, int, int, void**)", "userbuffers", "all_gather"),
    ("userbuffers_fp16_sum_inplace_gpu_rw(int, int, int, void**)", "userbuffers", "all_reduce"),
    ("kuserbuffers_pushrecv(int, int, int*)", "userbuffers", "recv"),
    ("mscclKernel_Sum_float_Simple_false(ncclDevComm*)", "msccl", "unknown"),
    ("void mscclpp::allgather6<false>(void*, void*)", "msccl", "all_gather"),
])
def test_known_families_and_the_op_their_names_state(name, family, op):
    rule, got = match_kernel(name, KERNEL_FAMILIES)  # type: ignore[misc]
    assert (rule.name, rule.source, got) == (family, "built-in", op)


@pytest.mark.parametrize("name", [
    "void deep_ep::layout::get_dispatch_layout<256>(long*, int*)",  # layout: computation, not transfer
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)",  # DeepSeek's build, the same
    "void cdpsk::ep::CUB_DeviceScanKernel<int>(int*, int*)",  # sampling scans
    "void cdpsk::ep::CUB_DeviceRadixSortOnesweepKernel<int>(int*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "void flash_fwd_kernel<Flash_fwd_params>()",
])
def test_computation_kernels_are_no_family(name):
    assert match_kernel(name, KERNEL_FAMILIES) is None


def test_user_rules_come_first_and_none_takes_a_kernel_out():
    rules = kernel_rules(["my_exchange=alltoall", "deep_ep::intranode::dispatch=none", "fused_ar"])
    assert match_kernel("void my_exchange_kernel<4>()", rules)[1] == "all_to_all"  # type: ignore[index]
    assert match_kernel(DEEP_EP, rules) is None
    assert match_kernel("fused_ar_bf16", rules)[1] == "unknown"  # type: ignore[index]
    assert match_kernel("void deep_ep::intranode::combine<8>()", rules)[0].name == "deep_ep"  # type: ignore[index]


@pytest.mark.parametrize("text, words", [
    ("my_kernel=bogus", "unknown op 'bogus'"), ("(unclosed=all_reduce", "invalid regular expression"),
    ("=all_reduce", "regular expression is empty"), ("", "regular expression is empty"),
])
def test_a_bad_rule_says_what_is_wrong(text, words):
    with pytest.raises(RuleError, match=words):
        parse_rule(text)


def test_a_regex_with_equals_signs_is_not_cut_at_them():
    assert (parse_rule("a(?=b)").pattern, parse_rule("a(?=b)").op) == ("a(?=b)", None)


# ------------------------------------------------------------------ through ingest and the report


@pytest.mark.parametrize("name, rule, op", [(DEEP_EP, "deep_ep", "all_to_all"),
                                            (DPSK_EP, "deep_ep", "all_to_all"),
                                            (VLLM, "custom_all_reduce", "all_reduce")])
def test_a_family_without_metadata_is_communication(tmp_path, name, rule, op):
    report = analyze(_write(_renamed(name), tmp_path / "traces"), cache=tmp_path / "cache")
    _overlap_is_right(report)
    assert report["comm_kernels"] == [{"rule": rule, "source": "built-in", "pattern": report["comm_kernels"][0]["pattern"],
                                       "op": op, "name": name, "count": SC.steps * SC.ranks, "ranks": SC.ranks}]


def test_the_nccl_job_is_attributed_to_its_family(tmp_path):
    report = analyze(_write(SC.kineto(), tmp_path / "traces"), cache=tmp_path / "cache")
    [row] = report["comm_kernels"]
    assert (row["rule"], row["op"], row["count"]) == ("nccl", "all_reduce", SC.steps * SC.ranks)


def test_a_user_rule_on_the_command_line_finds_the_communication(tmp_path, capsys):
    traces = _write(_renamed("void my_fused_exchange<8>(float*)"), tmp_path / "traces")
    out = tmp_path / "report.json"
    assert main(["analyze", str(traces), "--cache", str(tmp_path / "c1"), "--format", "json", "-o", str(out)]) == 0
    before = json.loads(out.read_text())
    assert all(r["comm_us"] == 0 for r in before["overlap"]) and before["comm_kernels"] == []

    rule = "my_fused_exchange=all_to_all"
    assert main(["analyze", str(traces), "--cache", str(tmp_path / "c1"), "--comm-kernel", rule,
                 "--comm-kernel", "never_seen_kernel", "--format", "json", "-o", str(out)]) == 0
    after = json.loads(out.read_text())
    _overlap_is_right(after)
    assert [(r["rule"], r["source"], r["op"], r["count"]) for r in after["comm_kernels"]] == [
        (rule, "user", "all_to_all", SC.steps * SC.ranks), ("never_seen_kernel", "user", None, 0)]
    instances = load_report(out).table("collectives").to_dicts()  # every instance: the detail table beside it
    assert instances and {c["op"] for c in instances} == {"all_to_all"}

    assert main(["analyze", str(traces), "--cache", str(tmp_path / "c1"), "--comm-kernel", rule,
                 "--comm-kernel", "never_seen_kernel"]) == 0
    text = capsys.readouterr().out
    assert "Communication kernels, by the rule that classified them" in text and "(matched no kernel)" in text


def test_a_rule_change_rebuilds_the_cache(tmp_path):
    traces = _write(_renamed(DEEP_EP), tmp_path / "traces")
    run = ddprof.ingest([traces], tmp_path / "run")
    assert run.manifest["comm_kernel_rules"] == []
    assert run.rank_info(0)["comm_kernels"] == SC.steps
    run = ddprof.ingest([traces], tmp_path / "run", comm_kernels=["deep_ep::intranode::dispatch=none"])
    assert run.manifest["comm_kernel_rules"] == ["deep_ep::intranode::dispatch=none"]
    assert run.rank_info(0)["comm_kernels"] == 0  # re-parsed under the new rule, not served from the cache
    run = ddprof.ingest([traces], tmp_path / "run")
    assert run.rank_info(0)["comm_kernels"] == SC.steps


def test_a_run_dir_made_with_other_rules_is_refused(tmp_path):
    traces = _write(_renamed(DEEP_EP), tmp_path / "traces")
    ddprof.ingest([traces], tmp_path / "run")
    with pytest.raises(UsageError, match="ingested with the communication kernel rules"):
        analyze(tmp_path / "run", comm_kernels=["x=none"])
    assert analyze(tmp_path / "run", comm_kernels=[])["comm_kernels"][0]["rule"] == "deep_ep"


@pytest.mark.parametrize("layout", ["ddprof.toml", "pyproject.toml"])
def test_rules_from_the_project_file(tmp_path, monkeypatch, layout):
    traces = _write(_renamed("void my_fused_exchange<8>(float*)"), tmp_path / "traces")
    project = tmp_path / "project" / "sub"
    project.mkdir(parents=True)
    rules = '["my_fused_exchange=all_to_all"]'
    if layout == "ddprof.toml":
        (project.parent / "ddprof.toml").write_text(f"comm_kernels = {rules}\n")
    else:
        (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no [tool.ddprof]: passed over
        (project.parent / "pyproject.toml").write_text(f"[tool.ddprof]\ncomm_kernels = {rules}\n")
    monkeypatch.chdir(project)
    out = tmp_path / "report.json"
    assert main(["analyze", str(traces), "--cache", str(tmp_path / "c"), "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    _overlap_is_right(report)
    assert report["comm_kernels"][0]["rule"] == "my_fused_exchange=all_to_all"
    assert main(["ingest", str(traces), "-o", str(tmp_path / "run"), "-q"]) == 0
    assert ddprof.open_run(tmp_path / "run").manifest["comm_kernel_rules"] == ["my_fused_exchange=all_to_all"]


def test_a_bad_rule_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    traces = _write(_renamed(DEEP_EP), tmp_path / "traces")
    monkeypatch.chdir(tmp_path)
    for cmd in (["analyze", str(traces)], ["ingest", str(traces), "-o", str(tmp_path / "run")]):
        assert main([*cmd, "--comm-kernel", "ep_kernel=sideways"]) == 2
        assert "ep_kernel=sideways" in capsys.readouterr().err
        assert main([*cmd, "--comm-kernel", "ep_(kernel=all_to_all"]) == 2
        assert "invalid regular expression" in capsys.readouterr().err
    (tmp_path / "ddprof.toml").write_text('comm_kernels = ["ok_kernel", "[bad=all_reduce"]\n')
    assert main(["analyze", str(traces)]) == 2
    err = capsys.readouterr().err
    assert "ddprof.toml" in err and "[bad=all_reduce" in err
    (tmp_path / "ddprof.toml").write_text("comm_kernels = 'not a list'\n")
    assert main(["analyze", str(traces)]) == 2
    assert "must be a list" in capsys.readouterr().err


def test_a_run_dir_ingested_with_rules_is_read_as_it_stands(tmp_path, monkeypatch):
    """Rules shape the store once, at ingest: analyse, html, dashboard and export of that run dir without
    naming the rules again use it as classified; only rules named that differ are refused."""
    traces = _write(_renamed("void my_fused_exchange<8>(float*)"), tmp_path / "traces")
    monkeypatch.chdir(tmp_path)  # no project file here
    rule = "my_fused_exchange=all_to_all"
    assert main(["ingest", str(traces), "-o", str(tmp_path / "run"), "-q", "--comm-kernel", rule]) == 0
    out = tmp_path / "report.json"
    assert main(["analyze", str(tmp_path / "run"), "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    _overlap_is_right(report)
    assert report["comm_kernels"][0]["rule"] == rule
    assert main(["export", str(tmp_path / "run"), "--perfetto", str(tmp_path / "t.json")]) == 0
    assert main(["analyze", str(tmp_path / "run"), "--comm-kernel", "other=none"]) == 2


def test_metadata_is_spread_onto_its_rows_the_last_of_a_row_counting():
    """Each row takes its own metadata (nulls where it has none): written into null columns, split sizes
    (a list column) gathered, a column no row has a value in left null; a row given metadata twice keeps
    the last."""
    import polars as pl

    from ddprof.readers.kineto.build import _apply_meta
    from ddprof.readers.kineto.link import STORED
    from ddprof.store.schema import Kind

    df = pl.DataFrame({"_row": [0, 1, 2, 3], "cat": ["kernel", "cpu_op", "kernel", "kernel"],
                       "name": ["ncclKernel", "op", "ncclKernel", "gemm"], "_marker": [False] * 4,
                       "kind": pl.Series(["compute"] * 4)})
    meta = {f: pl.Series(f, [None] * 3, dtype=t) for f, t in STORED.items()}
    meta |= {"coll_op": pl.Series(["all_reduce", "broadcast", "all_to_all"]),
             "in_bytes": pl.Series([8, 16, 32], dtype=pl.Int64),
             "send_splits": pl.Series([None, None, [1, 2]], dtype=pl.List(pl.Int64))}
    comm = pl.DataFrame({"_row": pl.Series([0, 2, 2], dtype=pl.UInt32), **meta})
    out = _apply_meta(df.with_columns(pl.col("kind").cast(Kind)), comm)
    assert out.get_column("coll_op").to_list() == ["all_reduce", None, "all_to_all", None]
    assert out.get_column("in_bytes").to_list() == [8, None, 32, None]
    assert out.get_column("send_splits").to_list() == [None, None, [1, 2], None]
    assert out.get_column("pg").null_count() == 4 and out.schema["pg"] == STORED["pg"]
    assert [out.schema[f] for f in STORED] == list(STORED.values())
    assert out.get_column("kind").to_list() == ["comm", "compute", "comm", "compute"]  # kernels with an op


def test_each_rows_own_metadata_is_the_same_told_apart_in_python_or_by_polars(monkeypatch):
    """A row's own metadata is derived once per distinct key: keys told apart in Python (few rows) or by a
    Polars unique and join (many) give the same frame, nulls and raw bytes among the keys, on a real trace's
    8,080 marker rows and on rows made to repeat and differ by one field."""
    import polars as pl
    from polars.testing import assert_frame_equal

    from ddprof.readers.kineto import link
    from ddprof.readers.kineto.decode import decode
    from ddprof.readers.kineto.events import META_SCHEMA
    from tests.support.paths import trace_set

    dec = decode(next(trace_set("hta/v100-2rank-rank1-large").glob("*.json.gz")))
    real = dec.meta.with_columns(name=dec.frame.get_column("name").gather(dec.meta.get_column("_row")))
    base = {"name": "record_param_comms", "coll_name": "allreduce", "dtype": "Float", "in_nelems": 1024,
            "out_nelems": 1024, "group_size": 8, "pg": "0", "seq": 1, "src_rank": None, "dst_rank": None,
            "input_dims": b"[[1024]]", "input_type": b'["float"]', "concrete_inputs": None, "in_split": None,
            "out_split": None}
    variants = [{}, {"dtype": None}, {"in_nelems": None, "out_nelems": None}, {"coll_name": "send", "dst_rank": 3},
                {"input_dims": None}, {"name": "nccl:all_to_all", "coll_name": None, "in_split": b"[1, 2]"}]
    made = pl.DataFrame([{**base, **variants[i % len(variants)], "seq": i, "_row": i} for i in range(300)],
                        schema={**META_SCHEMA, "name": pl.String()})
    for rows in (real, made):
        monkeypatch.setattr(link, "MANY_META", 10**9)
        in_python = link.own_meta(rows)
        monkeypatch.setattr(link, "MANY_META", 0)
        assert_frame_equal(link.own_meta(rows), in_python)
    assert real.height > 8000 and in_python.height == made.height
    assert in_python.get_column("coll_op").n_unique() > 2
