"""The size of ``ddprof analyze --format json`` and of its detail tables, and analyze's peak memory.

    python benchmarks/report_size.py            # 64 ranks x 3,000 steps, 1,024 ranks x 100 steps
    python benchmarks/report_size.py --quick    # small shapes, a minute

Per shape: ``ddprof synth``'s generator (:func:`ddprof.synth.generate`; the command line does not expose
``layers``/``buckets``, and its smallest step has 53 events) writes a data-parallel run with one slow rank
(not measured), ``ddprof ingest`` builds its run dir (not measured), then ``ddprof analyze RUN --format json -o REPORT`` runs in a child of a small
wrapper process, whose ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` after the child exits is the
analyze's peak RSS (the wrapper has no other child, so nothing else counts). Printed: events, the JSON's
size (as written, indented; and the same JSON without indentation), the detail tables' size (``REPORT.tables/``), the peak and the wall time, against the targets.

Events per rank: 3 per compute kernel, 4 per all-reduce and 1 per step: 4 kernels, one layer and one
gradient bucket give 17 events a step (51 k a rank over 3,000 steps, 1.7 k over 100).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ddprof.synth import Spec, generate

MB = 1 << 20


@dataclass(frozen=True)
class Shape:
    ranks: int
    steps: int
    kernels: int
    json_mb: float  # target: the JSON at most this
    peak_mb: float  # target: analyze's peak RSS at most this


FULL = [Shape(64, 3000, 4, 2, 1024), Shape(1024, 100, 4, 5, 0.6 * 1024)]
QUICK = [Shape(8, 200, 4, 2, 1024), Shape(64, 20, 4, 5, 0.6 * 1024)]

_WRAPPER = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


def _ddprof(*args: str) -> list[str]:
    return [sys.executable, "-m", "ddprof", *args]


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(shape: Shape, work: Path) -> dict[str, float]:
    """Generate, ingest, then analyze one shape (module doc); the figures of the analyze."""
    traces, run, report = work / "gen", work / "run", work / "report.json"
    generate(Spec(ranks=shape.ranks, steps=shape.steps, kernels=shape.kernels, layers=1, buckets=1,
                  slow={shape.ranks // 2: 1.3}, seed=1), traces, with_truth=False)
    subprocess.run(_ddprof("ingest", str(traces / "traces"), "-o", str(run), "-q"), check=True,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(traces)  # the traces are not needed past ingest: disk for the next shape
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *_ddprof("analyze", str(run), "--format", "json", "-o",
                                                                   str(report))],
                         check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    compact = len(msgspec.json.encode(msgspec.json.decode(report.read_bytes())))  # the same JSON, no indent
    events = sum(int(v.get("events") or 0) for v in json.loads((run / "manifest.json").read_text())["per_rank"].values())
    return {"events": events, "json_mb": _size(report) / MB, "compact_mb": compact / MB, "tables_mb": _size(Path(f"{report}.tables")) / MB,
            "peak_mb": int(out.stdout.split()[-1]) / 1024, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small shapes (a minute)")
    ap.add_argument("--work", type=Path, help="where to generate (default: a temporary directory)")
    args = ap.parse_args(argv)
    shapes = QUICK if args.quick else FULL
    print("| ranks x steps | events | JSON MB (target) | JSON MB unindented | tables MB | analyze peak MB (target) "
          "| analyze s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    missed = 0
    for shape in shapes:
        with tempfile.TemporaryDirectory(dir=args.work) as tmp:
            m = measure(shape, Path(tmp))
        ok_json, ok_peak = m["json_mb"] <= shape.json_mb, m["peak_mb"] <= shape.peak_mb
        missed += (not ok_json) + (not ok_peak)
        print(f"| {shape.ranks:,} x {shape.steps:,} | {m['events']:,.0f} | {m['json_mb']:.2f} (≤ {shape.json_mb:g})"
              f"{'' if ok_json else ' MISSED'} | {m['compact_mb']:.2f} | {m['tables_mb']:.1f} | {m['peak_mb']:,.0f} (≤ {shape.peak_mb:,.0f})"
              f"{'' if ok_peak else ' MISSED'} | {m['wall_s']:.1f} |", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
