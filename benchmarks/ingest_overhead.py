"""Ingest's cost per trace file beyond decoding it, on many small generated traces.

    python benchmarks/ingest_overhead.py                 # 64 traces of ~36 kB, 5 rounds
    python benchmarks/ingest_overhead.py --profile 30    # and cProfile's top 30 of the pipeline's ingest
    python benchmarks/ingest_overhead.py --ranks 1024 --rounds 3   # input past PARALLEL_MIN_BYTES: the pool

``ddprof synth`` writes N ranks of a data-parallel run (2 steps, 20 kernels a step: ~150 events, ~36 kB a
trace; not timed). Then, in one process, after one trace ingested and dropped (what a process pays once:
imports, Polars' first calls):

* decode:   :func:`ddprof.readers.kineto.decode.decode` of every trace (read, JSON, the raw event frame);
* one by one: :func:`ddprof.ingestion.job.ingest_file` of every trace, one call each, into an empty run
            dir: decode, events table, validation, Parquet part, timeline summary (what a large trace costs
            beyond its size);
* pipeline: :func:`ddprof.ingestion.pipeline.ingest` of all of them into an empty run dir, as ``ddprof
            ingest`` runs it: small traces built in batches (:func:`ddprof.ingestion.job.ingest_files`),
            then the manifest; in this process below ``PARALLEL_MIN_BYTES`` of input (64 traces), in a pool
            of worker processes above it (``--ranks 1024``);

and through the CLI, each a fresh process: ``ddprof ingest -q TRACES -o RUN`` on the N traces and on one
of them, the difference over N - 1 being the per-file cost with the process's fixed costs removed.

Per file: "beyond decoding" = (time - decode time) / N: wall-clock time, and for the in-process cases the
CPU time of the process (all its threads) beside it. Each case runs ``--rounds`` times, every case once
a round, after ``os.sync()`` (a case must not pay the write-back of the one before); medians are printed,
with the load average beside them (timings on a shared machine are noisy: compare figures from the same
run).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ddprof.ingestion.job import ingest_file
from ddprof.ingestion.pipeline import ingest
from ddprof.readers.kineto.decode import decode
from ddprof.synth import Spec, generate

REPO = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    """CPU seconds of this process (all threads) and of its children that were waited for (the pool's)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _timed(fn: Callable[..., object], *args: object) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn(*args)``, started with nothing left to write back."""
    os.sync()
    gc.collect()
    t0, c0 = time.perf_counter(), _cpu()
    fn(*args)
    return time.perf_counter() - t0, _cpu() - c0


def _decode_all(files: list[Path]) -> None:
    for f in files:
        decode(f)


def _ingest_all(files: list[Path], out: Path) -> None:
    for f in files:
        ingest_file(str(f), str(out), None)


def _cli(traces: Path, out: Path) -> float:
    cmd = [sys.executable, "-m", "ddprof", "ingest", "-q", str(traces), "-o", str(out)]
    os.sync()
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

        cases: dict[str, list[tuple[float, float]]] = {"decode": [], "one by one": [], "pipeline": []}
        clis: dict[str, list[float]] = {"cli N": [], "cli 1": []}
        for r in range(args.rounds):
            cases["decode"].append(_timed(_decode_all, files))
            cases["one by one"].append(_timed(_ingest_all, files, work / f"i{r}"))
            cases["pipeline"].append(_timed(ingest, traces, work / f"p{r}"))
            if not args.no_cli:
                clis["cli N"].append(_cli(traces, work / f"c{r}"))
                clis["cli 1"].append(_cli(one, work / f"c1-{r}"))
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in cases.items()}
        dec_wall, dec_cpu = (x / n for x in med["decode"])
        print(f"\nmedian of {args.rounds} rounds, ms per trace file (load {os.getloadavg()[0]:.2f} at end):")
        print(f"  {'':27} {'wall':>7}  {'CPU':>7}   beyond decoding: {'wall':>6}  {'CPU':>6}")
        print(f"  {'decode':27} {1e3 * dec_wall:7.2f}  {1e3 * dec_cpu:7.2f}")
        for case in ("one by one", "pipeline"):
            wall, cpu = (x / n for x in med[case])
            print(f"  {case:27} {1e3 * wall:7.2f}  {1e3 * cpu:7.2f}                    "
                  f"{1e3 * (wall - dec_wall):6.2f}  {1e3 * (cpu - dec_cpu):6.2f}")
        med_cli = {k: statistics.median(v) for k, v in clis.items() if v}
        if not args.no_cli:
            per = (med_cli["cli N"] - med_cli["cli 1"]) / (n - 1)
            print(f"  {'CLI (N - 1 traces)':27} {1e3 * per:7.2f}  {'':7}                    {1e3 * (per - dec_wall):6.2f}"
                  f"   (ddprof ingest: {med_cli['cli N']:.2f} s for {n}, {med_cli['cli 1']:.2f} s for 1)")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            ingest(traces, work / "profiled")
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
