"""Dashboard responsiveness on large generated runs: the first view and a zoom, server side.

    python benchmarks/dashboard.py [--ranks-wide 1024] [--events-wide 2000] [--ranks-deep 64]
                                   [--events-deep 1000000] [--keep DIR]

Two runs are built as a captured run is: generated traces (:mod:`ddprof.synth`, gzip), ingested into the
store with the timeline summary of each rank's part (:mod:`ddprof.store.timeline_summary`), the traces then
removed; the time each takes is printed (ingest has its own benchmark). 1,024 ranks × 2,000 GPU events and
64 ranks × 1,000,000 GPU events (64 M): each rank runs 10 data-parallel steps of compute kernels on one
stream, about every 50th kernel an all-reduce on another, each kernel with the CPU op and the launch that
PyTorch records beside it.

* first view, cold (as after a fresh ingest): open the run, assemble the occupancy grid from the ranks'
  summaries (written beside the store), answer the whole run and serialise the figure to the JSON the
  browser receives (:func:`plotly.io.to_json`); warm: the same with the grid already there (every later
  start). ``--lazy`` also times a cold first view of a store without summaries (one ingested by an older
  version: every rank's events read back from the store);
* zoom: one callback's work for windows of 10 %, 1 % and 0.01 % of the run, and the 0.01 % window with a
  rank expanded into its lanes, the answer serialised; the slowest is quoted.

The report (every analysis) is built on a thread while the timeline is already shown; it is not part of
the first view and is not timed here. Targets: first view ≤ 3 s, zoom ≤ 1 s.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import plotly.io as pio
from ddprof.dashboards.timeline.data import GRID_DIR, TimelineData, load
from ddprof.dashboards.timeline.figure import timeline_figure
from ddprof.dashboards.timeline.lod import view

from ddprof.ingestion import ingest
from ddprof.store.rundir import open_run
from ddprof.store.timeline_summary import SUFFIX
from ddprof.synth import Spec, generate

STEPS = 10
#: About one GPU kernel in this many is an all-reduce.
COMM_EVERY = 50


def run_spec(ranks: int, events: int, seed: int = 0) -> Spec:
    """A data-parallel run of ``ranks`` ranks with about ``events`` GPU kernels each over :data:`STEPS`
    steps, one in :data:`COMM_EVERY` an all-reduce (a bucket of the backward pass)."""
    per_step = max(events // STEPS, 13)  # 4 layers and at least 1 bucket need 12 compute kernels
    buckets = max(1, per_step // COMM_EVERY)
    return Spec(ranks=ranks, steps=STEPS, kernels=per_step - buckets, buckets=buckets, layers=4, seed=seed)


def write_run(out: Path, ranks: int, events: int, seed: int = 0) -> tuple[float, float]:
    """The run dir ``out`` of :func:`run_spec`'s run, through ingest; returns the seconds spent generating
    the traces (beside ``out``, removed once ingested) and ingesting them."""
    traces = out.with_name(out.name + "-traces")
    t = time.perf_counter()
    generate(run_spec(ranks, events, seed), traces, with_truth=False, compress=True)
    t1 = time.perf_counter()
    try:
        ingest([traces / "traces"], out)
    finally:
        shutil.rmtree(traces, ignore_errors=True)
    return t1 - t, time.perf_counter() - t1


def first_view(path: Path) -> tuple[float, float, int, str, object]:
    t = time.perf_counter()
    run = open_run(path)
    data = load(run)
    loaded = time.perf_counter() - t
    v = view(data)
    payload = pio.to_json(timeline_figure(v))
    return time.perf_counter() - t, loaded, len(payload), v.mode, data


def measure(path: Path, lazy: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if lazy:  # a store without summaries: set them aside, time the cold view, put them back
        aside = path / "summaries-aside"
        aside.mkdir(exist_ok=True)
        moved = [(p, aside / f"{i}{SUFFIX}") for i, p in enumerate(sorted(path.glob(f"events/*/*{SUFFIX}")))]
        for a, b in moved:
            a.rename(b)
        try:
            shutil.rmtree(path / GRID_DIR, ignore_errors=True)
            out["lazy_s"], out["lazy_load_s"], _, _, data = first_view(path)
            assert isinstance(data, TimelineData) and len(data.from_store) == len(data.ranks)
        finally:
            for a, b in moved:
                b.rename(a)
            aside.rmdir()
    shutil.rmtree(path / GRID_DIR, ignore_errors=True)  # cold: no grid yet
    cold, cold_load, _, _, data = first_view(path)
    assert isinstance(data, TimelineData) and data.built and not data.from_store
    first, loaded, size, mode, data = first_view(path)
    assert isinstance(data, TimelineData) and not data.built
    out.update({"cold_s": cold, "cold_load_s": cold_load, "load_s": loaded, "first_view_s": first,
                "first_view_kb": size / 1e3, "mode": mode})
    zooms = []
    for frac, expand in ((0.1, None), (0.01, None), (0.0001, None), (0.0001, data.ranks[1])):
        lo = data.span_ns * 0.45
        t = time.perf_counter()
        z = view(data, lo, lo + data.span_ns * frac, expand=expand)
        size = len(pio.to_json(timeline_figure(z)))
        zooms.append((time.perf_counter() - t, frac, f"{z.mode}/{z.source}{' +lanes' if expand else ''}",
                      z.shapes_per_row, size))
    out["zoom_s"] = max(z[0] for z in zooms)
    out["zooms"] = [f"{f:.2%}: {s:.3f} s {m} {n} shapes/row {b / 1e3:.0f} kB" for s, f, m, n, b in zooms]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks-wide", type=int, default=1024)
    ap.add_argument("--events-wide", type=int, default=2000)
    ap.add_argument("--ranks-deep", type=int, default=64)
    ap.add_argument("--events-deep", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="write the runs here and keep them")
    ap.add_argument("--lazy", action="store_true", help="also time a cold first view without the summaries")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="ddprof-bench-dash-"))
    try:
        for ranks, events in ((args.ranks_wide, args.events_wide), (args.ranks_deep, args.events_deep)):
            path = root / f"run-{ranks}x{events}"
            t = time.perf_counter()
            if not (path / "manifest.json").exists():
                generated, ingested = write_run(path, ranks, events)
                print(f"{ranks} ranks x {events:,} events: store written in {time.perf_counter() - t:.1f} s "
                      f"(traces generated in {generated:.1f} s, ingested with their timeline summaries in "
                      f"{ingested:.1f} s)")
            else:
                print(f"{ranks} ranks x {events:,} events: store kept from an earlier run")
            m = measure(path, args.lazy)
            if args.lazy:
                print(f"  first view cold without summaries {m['lazy_s']:.2f} s (grid built from the store in "
                      f"{m['lazy_load_s']:.2f} s)")
            print(f"  first view cold {m['cold_s']:.2f} s (grid assembled in {m['cold_load_s']:.2f} s), warm "
                  f"{m['first_view_s']:.2f} s (load {m['load_s']:.2f} s; {m['mode']}, {m['first_view_kb']:.0f} kB)"
                  f"   zoom ≤ {m['zoom_s']:.3f} s   [targets 3 s, 1 s]")
            for z in m["zooms"]:
                print("    zoom", z)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
