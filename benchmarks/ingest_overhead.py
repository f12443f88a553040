"""Ingest's cost per trace file beyond decoding it, on many small generated traces.

    python benchmarks/ingest_overhead.py                 # 64 traces of ~36 kB, 5 rounds
    python benchmarks/ingest_overhead.py --profile 30    # and cProfile's top 30 of the in-process ingest

``ddprof synth`` writes N ranks of a data-parallel run (2 steps, 20 kernels a step: ~150 events, ~36 kB a
trace; not timed). Then, in one process, after one trace ingested and dropped (what a process pays once:
imports, Polars' first calls):

* decode:   :func:`ddprof.ingestion.kineto.decode` of every trace (read, JSON, the raw event frame);
* ingest:   :func:`ddprof.ingestion.job.ingest_file` of every trace into an empty run dir: decode, events
            table, validation, Parquet part, timeline summary;
* pipeline: :func:`ddprof.ingestion.pipeline.ingest` of all of them into an empty run dir (the above, then
            the manifest), as ``ddprof ingest`` runs it on traces this small (in its own process, below
            ``PARALLEL_MIN_BYTES`` of input);

and through the CLI, each a fresh process: ``ddprof ingest -q TRACES -o RUN`` on the N traces and on one
of them, the difference over N - 1 being the per-file cost with the process's fixed costs removed.

Per file: "beyond decoding" = (time - decode time) / N. Each case runs ``--rounds`` times, every case once
a round; medians are printed, with the load average beside them (timings on a shared machine are noisy:
compare figures from the same run).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ddprof.ingestion.job import ingest_file
from ddprof.ingestion.kineto import decode
from ddprof.ingestion.pipeline import ingest
from ddprof.synth import Spec, generate

REPO = Path(__file__).resolve().parents[1]


def _timed(fn: Callable[..., object], *args: object) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def _decode_all(files: list[Path]) -> None:
    for f in files:
        decode(f)


def _ingest_all(files: list[Path], out: Path) -> None:
    for f in files:
        ingest_file(str(f), str(out), None)


def _cli(traces: Path, out: Path) -> float:
    cmd = [sys.executable, "-m", "ddprof", "ingest", "-q", str(traces), "-o", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO)  # the checkout's ddprof (-m reads cwd first)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64, help="traces (ranks) to generate")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--kernels", type=int, default=20, help="compute kernels per rank per step")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-cli", action="store_true", help="only the in-process cases")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the rounds, cProfile one in-process ingest of every trace; print the top N")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ddprof-overhead-"))
    try:
        traces, one = work / "run" / "traces", work / "one"
        counts = generate(Spec(ranks=args.ranks, steps=args.steps, kernels=args.kernels), work / "run",
                          with_truth=False)
        files = sorted(traces.glob("*.pt.trace.json"))
        one.mkdir()
        shutil.copy(files[0], one / files[0].name)
        n = len(files)
        kb = sum(f.stat().st_size for f in files) / n / 1024
        print(f"{n} traces, {counts['total_events'] / n:.0f} events and {kb:.0f} kB each; "
              f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f} at start", flush=True)
        ingest_file(str(files[0]), str(work / "warm-up"), None)  # what a process pays once

        cases: dict[str, list[float]] = {"decode": [], "ingest": [], "pipeline": []}
        if not args.no_cli:
            cases |= {"cli N": [], "cli 1": []}
        for r in range(args.rounds):
            cases["decode"].append(_timed(_decode_all, files))
            cases["ingest"].append(_timed(_ingest_all, files, work / f"i{r}"))
            cases["pipeline"].append(_timed(ingest, traces, work / f"p{r}"))
            if not args.no_cli:
                cases["cli N"].append(_cli(traces, work / f"c{r}"))
                cases["cli 1"].append(_cli(one, work / f"c1-{r}"))
        med = {k: statistics.median(v) for k, v in cases.items()}
        dec = med["decode"] / n
        print(f"\nmedian of {args.rounds} rounds, ms per trace file (load {os.getloadavg()[0]:.2f} at end):")
        print(f"  decode                      {1e3 * dec:7.2f}")
        for case in ("ingest", "pipeline"):
            per = med[case] / n
            print(f"  {case:27} {1e3 * per:7.2f}   beyond decoding: {1e3 * (per - dec):6.2f}")
        if not args.no_cli:
            per = (med["cli N"] - med["cli 1"]) / (n - 1)
            print(f"  CLI (N - 1 traces)          {1e3 * per:7.2f}   beyond decoding: {1e3 * (per - dec):6.2f}"
                  f"   (ddprof ingest: {med['cli N']:.2f} s for {n}, {med['cli 1']:.2f} s for 1)")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            _ingest_all(files, work / "profiled")
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
