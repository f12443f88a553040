"""Perfetto export: time and peak memory as the number of exported ranks grows, on one generated run.

A run of ``--ranks`` ranks (``ddprof.synth``: data-parallel CUDA+NCCL, ``--steps`` steps of ``--kernels``
kernels, 8 ranks per host with host 1's clock 500 µs ahead, so the export aligns clocks too) is ingested
once; then ``ddprof export RUN --perfetto OUT.json.gz --ranks 0-(k−1)`` runs for growing k, each in a
fresh process (the CLI's ``main``, as ``ddprof`` runs it). Printed per k: events written, wall seconds of
the whole process (interpreter start included), its peak RSS (the child's own ``ru_maxrss``), the file's size. The export reads one rank at a
time, so the peak stays near one rank's events while the time grows with the events.

    python benchmarks/export_perfetto.py [--ranks 32] [--steps 40] [--kernels 240]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ddprof
from ddprof.synth.spec import Spec
from ddprof.synth.write import generate

#: The child: ddprof's CLI, then its own peak RSS (KB on Linux) on stderr.
CHILD = ("import resource, sys\nfrom ddprof.cli import main\nrc = main(sys.argv[1:])\n"
         "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(rc)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--kernels", type=int, default=240)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddprof-export-bench-") as tmp:
        work = Path(tmp)
        spec = Spec(ranks=args.ranks, steps=args.steps, kernels=args.kernels, clock_offset_us={1: 500.0})
        t = time.perf_counter()
        truth = generate(spec, work / "synth", with_truth=False)
        run = ddprof.ingest([work / "synth" / "traces"], work / "run")
        print(f"run: {args.ranks} ranks, {truth['total_events']:,} events "
              f"({truth['total_events'] // args.ranks:,} per rank); generated and ingested in "
              f"{time.perf_counter() - t:.1f} s")
        print(f"{'ranks':>6} {'events':>12} {'wall s':>8} {'peak RSS MB':>12} {'file MB':>8}")
        k = 1
        while True:
            k = min(k, args.ranks)
            out = work / f"k{k}.json.gz"
            argv = ["export", str(run.path), "--perfetto", str(out), "--ranks", f"0-{k - 1}"]
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True)
            wall = time.perf_counter() - t
            if proc.returncode:
                sys.exit(proc.stderr)
            peak_kb = int(proc.stderr.rsplit("PEAK_KB ", 1)[1].split()[0])
            events = proc.stderr.split(" events")[0].rsplit(" ", 1)[-1]
            print(f"{k:>6} {events:>12} {wall:>8.2f} {peak_kb / 1024:>12.0f} {out.stat().st_size / 1e6:>8.1f}")
            if k == args.ranks:
                print(proc.stderr.strip().splitlines()[-2])
                break
            k *= 2


if __name__ == "__main__":
    main()
