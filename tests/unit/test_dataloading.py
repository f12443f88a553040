"""Data loading (analyses/dataloading.py): the host time a step spends drawing its batch, whether the device
waits through it, and what the report says of it (its verdict, the idle verdict's cause, the what-if edit and
the critical path's data loading).

Real traces: the PyTorch profiler's own ResNet-50 samples (tests/data/traces/kineto-tb-resnet50): the same
training loop with ``num_workers=0`` (the batch drawn on the main thread, 69 ms of a 175 ms step) and
``num_workers=4`` (about 1 ms). Their numbers are computed here from the JSON itself, independently. Generated
traces with a known answer: a loader of 4 ms at the start of each 10 ms step, the device idle through it,
and the same with the device running behind the host through the loader (exposed through 9.5 % only).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from ddprof.analyses.compare.check import check
from ddprof.analyses.compare.diff import diff
from ddprof.analyses.dataloading import DataLoadingRow, exposed, loading_verdicts
from ddprof.analyses.report import build_report
from ddprof.analyses.whatif.projections import whatif

import ddprof
from ddprof.render.compare import diff_text
from tests.support.paths import TRACES

RESNET = TRACES / "kineto-tb-resnet50"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _raw(folder: Path) -> list[dict[str, Any]]:
    (path,) = folder.glob("*.json.gz")
    with gzip.open(path) as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _covered(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """|U(a) ∩ U(b)|."""
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in _union(a) for s2, e2 in _union(b))


def _oracle(folder: Path) -> dict[str, float]:
    """The numbers of the data loading section, straight from the JSON: the loader spans inside the steps,
    the steps, and the device rows (kernels, copies, memsets) within the first to last device row."""
    ev = _raw(folder)
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
    loaders = [(e["ts"], e["ts"] + e["dur"]) for e in ev if "DataLoader" in e["name"]
               and any(s <= e["ts"] < t for s, t in steps)]
    device = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("Kernel", "Memcpy", "Memset", "kernel")]
    lo, hi = min(s for s, _ in device), max(e for _, e in device)
    inside = [(max(s, lo), min(e, hi)) for s, e in loaders if min(e, hi) > max(s, lo)]
    in_span = sum(e - s for s, e in _union(inside))
    busy = _covered(inside, device)
    loading = sum(e - s for s, e in _union(loaders))
    return {"steps": len(steps), "step_us": sum(t - s for s, t in steps) / len(steps),
            "loading_us": loading / len(steps), "loading_pct": 100 * loading / sum(t - s for s, t in steps),
            "device_idle_pct": 100 * (in_span - busy) / in_span}


@pytest.fixture(scope="module")
def resnet(tmp_path_factory) -> dict[str, dict[str, Any]]:
    out = {}
    for name in ("num-workers-0", "num-workers-4"):
        run = ddprof.ingest([RESNET / name], tmp_path_factory.mktemp(name))
        out[name] = build_report(run)
    return out


@pytest.mark.parametrize("name", ["num-workers-0", "num-workers-4"])
def test_the_real_resnet_loaders_measured_as_the_json_says(resnet, name):
    (row,) = resnet[name]["data_loading"]
    want = _oracle(RESNET / name)
    assert row["rank"] == 0 and row["steps"] == want["steps"] == 6
    for key in ("step_us", "loading_us", "loading_pct", "device_idle_pct"):
        assert row[key] == pytest.approx(want[key], rel=1e-6, abs=1e-6), key
    assert "DataLoader" in row["op"]


def test_a_batch_drawn_on_the_main_thread_is_the_headline(resnet):
    """num_workers=0: 40 % of each step in the loader, the GPU idle through 83 % of it (the GPU finishes the
    previous step's kernels at its start). The verdicts say so, the idle verdict blames the loader rather
    than the launch rate, the what-if leads with hiding it, and the critical path holds it."""
    rep = resnet["num-workers-0"]
    (row,) = rep["data_loading"]
    assert row["op"] == LOADER and 39 < row["loading_pct"] < 41 and 80 < row["device_idle_pct"] < 86
    verdicts = rep["verdicts"]
    assert verdicts[0].startswith("hiding the data loading (batches ready when the step asks) would cut the step")
    saving = rep["whatif"]["edits"][0]
    assert saving["edit"] == "no_data_loading"
    assert saving["saving_us"] == pytest.approx(row["loading_us"], rel=0.02)  # the loader is on the path, whole
    assert any(v.startswith("data loading takes 40 % of each step (" + LOADER) and "GPU is idle through 83 %" in v
               for v in verdicts)
    idle = next(v for v in verdicts if v.startswith("the GPUs are idle"))
    assert "while the host was loading data" in idle and "does not launch work fast enough" not in idle
    kinds = {k["kind"]: k for k in rep["whatif"]["critical_path"]["by_kind"]}
    assert kinds["data loading"]["us"] == pytest.approx(row["loading_us"], rel=0.02)
    assert kinds["idle"]["pct"] < 5  # before the loader was modelled the step began after it
    assert rep["whatif"]["replay_error_pct"] < 1e-6


def test_the_badge_is_no_green_ok_beside_a_starving_input_pipeline(resnet):
    """The HTML report's badge: attention, with the data loading verdict, on the num_workers=0 run; OK on the
    num_workers=4 run (its status ok either way: the exit code follows inputs and hangs)."""
    from ddprof.analyses.verdicts import badge

    slow, fine = resnet["num-workers-0"], resnet["num-workers-4"]
    assert slow["status"] == fine["status"] == "ok"
    shown = badge(slow)
    assert shown.label == "ATTENTION" and any(w.startswith("data loading takes 40 % of each step") for w in shown.why)
    assert badge(fine).label == "OK"


def test_workers_that_keep_up_say_nothing(resnet):
    """num_workers=4: 1 % of the step in the loader: no data loading verdict, no such edit among the report's;
    the idle time is the launch rate's (the step is bound by the host's launches)."""
    rep = resnet["num-workers-4"]
    (row,) = rep["data_loading"]
    assert row["loading_pct"] < 2
    assert not any("data loading" in v for v in rep["verdicts"])
    assert "no_data_loading" not in {e["edit"] for e in rep["whatif"]["edits"]}
    assert any("does not launch work fast enough" in v for v in rep["verdicts"])


#: PyTorch Lightning's span around each batch drawn (``record_function``: a user annotation).
LIGHTNING = "[_TrainingEpochLoop].train_dataloader_next"


def test_a_loader_span_of_another_name_on_a_gpu_rank(resnet, tmp_path):
    """The real num_workers=0 sample with its loader spans renamed as Lightning names its own and recorded as
    user annotations: the same row, the same numbers and the same verdict as PyTorch's own name gets. A GPU
    rank's CPU ops and annotations are not read by ``analyze`` (half a trace); its loader spans are, by
    PyTorch's prefix or by the names ingest found (the manifest's ``loader_names``)."""
    (src,) = (RESNET / "num-workers-0").glob("*.json.gz")
    with gzip.open(src) as fh:
        doc = json.load(fh)
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("name") == LOADER:
            e["name"], e["cat"] = LIGHTNING, "user_annotation"
            renamed += 1
    assert renamed == 6
    folder = tmp_path / "lightning"
    folder.mkdir()
    (folder / "worker0.pt.trace.json").write_text(json.dumps(doc))
    run = ddprof.ingest([folder], tmp_path / "run")
    rep = build_report(run)
    (row,) = rep["data_loading"]
    (want,) = resnet["num-workers-0"]["data_loading"]
    assert row["op"] == LIGHTNING
    for key in ("steps", "step_us", "loading_us", "loading_pct", "device_idle_pct"):
        assert row[key] == pytest.approx(want[key], rel=1e-9), key
    assert any(v.startswith(f"data loading takes 40 % of each step ({LIGHTNING}") for v in rep["verdicts"])
    assert ddprof.open_run(tmp_path / "run").rank_info(0)["loader_names"] == [LIGHTNING]


def _loader_trace(kernel_us: float, loader_us: float = 4_000.0, steps: int = 5) -> dict[str, Any]:
    """``steps`` steps on one GPU, each ``loader_us`` + 6 ms long: each draws its batch in a DataLoader span [t,
    t+loader_us), then launches 12 kernels 0.5 ms apart, each queued on stream 7 behind the previous one and
    lasting ``kernel_us``. With a 4 ms loader (10 ms steps): at 400 µs the device is idle from the step's
    last kernel (t+9.92 ms) through the next loader; at 800 µs a step's kernels run until t+13.62 ms, 3.62 ms
    into the next step's loader."""
    ev: list[dict[str, Any]] = []
    device_free = 0.0
    corr = 0
    step = loader_us + 6_000.0
    for k in range(steps):
        t = 1_000_000.0 + step * k
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{k + 1}", "pid": 1, "tid": 1, "ts": t,
                   "dur": step})
        ev.append({"ph": "X", "cat": "cpu_op", "name": LOADER, "pid": 1, "tid": 1, "ts": t, "dur": loader_us})
        for i in range(12):
            corr += 1
            launch = t + loader_us + 500.0 * i
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": launch, "dur": 10.0, "args": {"correlation": corr}})
            start = max(launch + 20.0, device_free)
            device_free = start + kernel_us
            ev.append({"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7, "ts": start,
                       "dur": kernel_us, "args": {"stream": 7, "device": 0, "correlation": corr}})
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}], "traceEvents": ev}


def _generated(tmp_path: Path, kernel_us: float, loader_us: float = 4_000.0, steps: int = 5) -> dict[str, Any]:
    folder = tmp_path / f"traces-{kernel_us:g}-{loader_us:g}-{steps}"
    folder.mkdir()
    (folder / "rank0.pt.trace.json").write_text(json.dumps(_loader_trace(kernel_us, loader_us, steps)))
    return build_report(ddprof.ingest([folder], folder.with_suffix(".run")))


def test_a_generated_loader_the_device_waits_through(tmp_path):
    """Truth: 4 ms of each 10 ms step (40 %); the device idle through all of it (steps 2-5: step 1's loader
    lies before the first kernel and tells nothing). Hiding it saves exactly the 4 ms a step: the replayed
    step (first start to last end, 9.92 ms) becomes 5.92 ms."""
    rep = _generated(tmp_path, 400.0)
    (row,) = rep["data_loading"]
    assert row["steps"] == 5 and row["step_us"] == pytest.approx(10_000.0)
    assert row["loading_us"] == pytest.approx(4_000.0) and row["loading_pct"] == pytest.approx(40.0)
    assert row["device_idle_pct"] == pytest.approx(100.0)
    assert row["device_idle_us"] == pytest.approx(4 * 4_000.0 / 5)  # steps 2-5 inside the device's span
    assert any(v.startswith("data loading takes 40 % of each step") for v in rep["verdicts"])
    edit = next(e for e in rep["whatif"]["edits"] if e["edit"] == "no_data_loading")
    assert rep["whatif"]["step_us"] == pytest.approx(9_920.0)
    assert edit["step_us"] == pytest.approx(5_920.0) and edit["saving_us"] == pytest.approx(4_000.0)


def test_a_generated_loader_the_device_runs_under_is_no_finding(tmp_path):
    """Truth: the same 40 % of the step in the loader, but the device still runs the previous step's 9.6 ms of
    kernels through 3.62 of its 4 ms (idle through 0.38 ms, 9.5 % of it, steps 2-5): the host loads ahead,
    nothing to fix there. No verdict."""
    rep = _generated(tmp_path, 800.0)
    (row,) = rep["data_loading"]
    assert row["loading_pct"] == pytest.approx(40.0)
    assert row["device_idle_pct"] == pytest.approx(9.5)
    assert not any("data loading" in v for v in rep["verdicts"])


def _without_steps(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "traceEvents": [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]}


def _sample_without_steps(name: str, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real ResNet sample with its ProfilerStep#N rows left out, and its report."""
    (src,) = (RESNET / name).glob("*.json.gz")
    with gzip.open(src) as fh:
        doc = _without_steps(json.load(fh))
    folder = tmp_path / "nosteps"
    folder.mkdir()
    (folder / "worker0.pt.trace.json").write_text(json.dumps(doc))
    return doc, build_report(ddprof.ingest([folder], tmp_path / "run"))


def test_a_generated_loader_in_a_trace_without_steps(tmp_path):
    """A trace taken without ``prof.step()`` (no ProfilerStep#N): the loader is measured over the traced span.
    Truth (the 400 µs trace above, its step annotations left out): 5 loaders of 4 ms in 49.92 ms from the first
    loader to the last kernel's end (40.06 %); 4 of them inside the device's span [1,004.02, 1,049.92) ms, the
    device idle through all 16 ms; the device is idle 21.9 ms of its 45.9 ms span (60 kernels of 400 µs), 73 %
    of it while the host loaded."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank0.pt.trace.json").write_text(json.dumps(_without_steps(_loader_trace(400.0))))
    rep = build_report(ddprof.ingest([folder], tmp_path / "run"))
    (row,) = rep["data_loading"]
    assert row["steps"] == 0 and row["op"] == LOADER
    assert row["step_us"] == pytest.approx(49_920.0) and row["loading_us"] == pytest.approx(20_000.0)
    assert row["loading_pct"] == pytest.approx(100 * 20_000.0 / 49_920.0)
    assert row["device_idle_us"] == pytest.approx(16_000.0) and row["device_idle_pct"] == pytest.approx(100.0)
    verdicts = rep["verdicts"]
    assert (f"data loading takes 40 % of the traced time ({LOADER}, 20 ms of 49.9 ms; the trace has no profiler "
            "steps), and the GPU is idle through 100 % of it") in " ".join(verdicts)
    idle = next(v for v in verdicts if v.startswith("the GPUs are idle"))
    assert "73 % of the idle time fell while the host was loading data" in idle


def test_the_real_sample_without_its_steps(tmp_path):
    """The real num_workers=0 sample with its ProfilerStep#N rows left out (as a trace taken without
    ``prof.step()``): the loader over the traced span, against numbers computed here from the JSON (the
    loaders' union over the first to last event; the part of it within the first to last device row that no
    device row covers); the verdict still names the input pipeline, not the launch rate."""
    doc, rep = _sample_without_steps("num-workers-0", tmp_path)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    loaders = [(e["ts"], e["ts"] + e["dur"]) for e in ev if "DataLoader" in e["name"]]
    device = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("Kernel", "Memcpy", "Memset", "kernel")]
    lo, hi = min(s for s, _ in device), max(e for _, e in device)
    span = max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)
    inside = [(max(s, lo), min(e, hi)) for s, e in loaders if min(e, hi) > max(s, lo)]
    loading = sum(e - s for s, e in _union(loaders))
    bare = sum(e - s for s, e in _union(inside)) - _covered(inside, device)
    (row,) = rep["data_loading"]
    assert row["steps"] == 0 and row["op"] == LOADER
    assert row["step_us"] == pytest.approx(span, rel=1e-6)
    assert row["loading_us"] == pytest.approx(loading, rel=1e-6)
    assert row["device_idle_us"] == pytest.approx(bare, rel=1e-6)
    assert any(v.startswith("data loading takes ") and "the trace has no profiler steps" in v for v in rep["verdicts"])
    idle = next(v for v in rep["verdicts"] if v.startswith("the GPUs are idle"))
    assert "while the host was loading data" in idle and "does not launch work fast enough" not in idle


def test_workers_that_keep_up_say_nothing_without_steps_either(tmp_path):
    """The real num_workers=4 sample, its ProfilerStep#N rows left out: 1 % of the traced time in the loader,
    no data loading verdict; the idle time stays the launch rate's."""
    _, rep = _sample_without_steps("num-workers-4", tmp_path)
    (row,) = rep["data_loading"]
    assert row["steps"] == 0 and row["loading_pct"] < 2
    assert not any("data loading" in v for v in rep["verdicts"])
    assert any("does not launch work fast enough" in v for v in rep["verdicts"])


def test_the_rule_on_rows():
    """The verdict's rule alone: 10 % of the step and, on device ranks, idle devices through half of it; a
    device rank whose loaders all lie before its first kernel tells nothing; a CPU rank's loader is exposed."""
    def row(pct: float, idle: float | None, device: bool = True, rank: int = 0) -> DataLoadingRow:
        return DataLoadingRow(rank=rank, steps=4, step_us=100.0, loading_us=pct, loading_pct=pct,
                              device_idle_us=(idle or 0.0) if device else None, device_idle_pct=idle, op=LOADER)
    assert exposed([row(12, 80)]) and not exposed([row(8, 80)]) and not exposed([row(12, 30)])
    assert not exposed([row(40, None)])  # a GPU rank, its loaders outside the traced device work
    assert exposed([row(25, None, device=False)])
    assert not exposed([])
    rep = {"data_loading": [{"rank": 0, "steps": 4, "step_us": 100.0, "loading_us": 25.0, "loading_pct": 25.0,
                             "device_idle_us": None, "device_idle_pct": None, "op": LOADER}]}
    assert loading_verdicts(rep) == [f"data loading takes 25 % of each step ({LOADER}, 25 µs of a 100 µs host step): "
                                     "the input pipeline holds the step back (more DataLoader workers, prefetching)"]
    rows = [{**rep["data_loading"][0], "rank": r, "loading_pct": p} for r, p in ((0, 5.0), (1, 35.0))]
    (said,) = loading_verdicts({"data_loading": rows})
    assert said.startswith("data loading takes 20 % of the step on average over 2 ranks (rank 1 most: 35 %")


def test_whatif_without_the_edit_asked(tmp_path):
    """``data_loading=False`` leaves the edit out; the model still holds the loader (the step is the same)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank0.pt.trace.json").write_text(json.dumps(_loader_trace(400.0)))
    events = ddprof.ingest([folder], tmp_path / "run").events()
    on, off = whatif(events, attribute=False), whatif(events, attribute=False, data_loading=False)
    assert "no_data_loading" in {p.edit for p in on.projections}
    assert "no_data_loading" not in {p.edit for p in off.projections}
    assert on.step_s == off.step_s == pytest.approx(9.92e-3)


def test_check_names_the_input_pipeline(resnet):
    """``check`` of the num_workers=0 run against the num_workers=4 one: the data loading rule fails (1.4 ms
    -> 69 ms a step) and the cause is the input pipeline, although the step time, with 6 steps a side, is
    within its noise and one cuDNN kernel (another algorithm chosen) moved too. The other way round: no
    data loading failure."""
    res = check(resnet["num-workers-0"], resnet["num-workers-4"])
    assert res["status"] == "regression" and res["cause"]["class"] == "input"
    assert res["cause"]["summary"].startswith("the data loader's time per rank and step rose 6")
    (rule,) = [o for o in res["outcomes"] if o["rule"] == "data_loading"]
    assert rule["outcome"] == "fail" and rule["baseline"] < 2_000 and rule["run"] > 60_000
    d = diff(resnet["num-workers-0"], resnet["num-workers-4"])
    assert d["cause"]["class"] == "input" and d["data_loading"]["run_median_us"] > 60_000
    assert "median data loading per rank and step: " in diff_text(d)
    back = check(resnet["num-workers-4"], resnet["num-workers-0"])
    (rule,) = [o for o in back["outcomes"] if o["rule"] == "data_loading"]
    assert rule["outcome"] == "pass" and (back["cause"] or {}).get("class") != "input"


def test_check_of_a_generated_slower_loader(tmp_path):
    """Truth: the loader takes 4 ms a step against 0.4 ms in the baseline, all else equal (12 steps a side,
    enough for a 99 % interval): the step rose 3.6 ms, all of it the loader's: cause input. The same run against itself: ok, the rule passes; runs
    with no loader span have no such rule."""
    slow, fast = _generated(tmp_path, 400.0, 4_000.0, 12), _generated(tmp_path, 400.0, 400.0, 12)
    res = check(slow, fast)
    assert res["status"] == "regression" and res["cause"]["class"] == "input"
    (rule,) = [o for o in res["outcomes"] if o["rule"] == "data_loading"]
    assert rule["outcome"] == "fail" and rule["change"] == pytest.approx(3_600.0)
    same = check(slow, slow)
    assert same["status"] == "ok" and [o["outcome"] for o in same["outcomes"] if o["rule"] == "data_loading"] == ["pass"]
    none = _generated(tmp_path, 400.0, 0.0)  # a loader span of no time: no loading at all
    assert none["data_loading"] == []
    assert not [o for o in check(none, none)["outcomes"] if o["rule"] == "data_loading"]
    assert diff(none, none)["data_loading"] is None


def test_the_whatif_command_projects_the_loader_hidden_unless_asked_not_to(tmp_path, capsys):
    """``ddprof whatif`` lists the data loading edit (its exact saving on the generated loader: 4 ms a step);
    ``--no-data-loading`` leaves it out."""
    from ddprof.cli import main

    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank0.pt.trace.json").write_text(json.dumps(_loader_trace(400.0)))
    for flag, present in (([], True), (["--no-data-loading"], False)):
        assert main(["whatif", str(folder), "--format", "json", "--no-attribution", *flag]) == 0
        edits = {p["edit"]: p for p in json.loads(capsys.readouterr().out)["projections"]}
        assert ("no_data_loading" in edits) is present
        if present:
            assert edits["no_data_loading"]["saving_s"] == pytest.approx(4e-3)
