"""Scale sweep: ingest and analyze of generated runs from 8 to 1,024 ranks, ddprof beside HTA.

    python benchmarks/scale_sweep.py                       # 8, 64, 256, 1,024 ranks x ~50 k events
    python benchmarks/scale_sweep.py --ranks 8,64 --events 20000 --hta-mem-gb 8

Per size: ``ddprof synth`` writes the traces (data parallel, 8 GPUs per host, one slow rank; not timed),
then each step runs as its own process, timed wall-clock, with the peak memory of its process tree (the
sum of the RSS of the process and its children, sampled every 50 ms):

* ``ddprof ingest TRACES -o RUN`` (a process pool on every core);
* ``ddprof analyze RUN --format json`` (the whole report, a group of ranks at a time);
* the floor under any reader of the traces: a process that reads every trace and decodes its events as
  ingest does (its compiled scanner where built, else its typed decoders: ``decode_floor.py``), on a process
  pool of every core, and keeps nothing (the interpreter's
  start and the pool's included): what ingest costs beyond it builds, checks and writes the store;
* HTA (``holistictraceanalysis``): ``TraceAnalysis(trace_dir)`` then ``get_comm_comp_overlap``,
  ``get_temporal_breakdown`` and ``get_idle_time_breakdown`` on every rank, in a process bounded by an
  address-space limit (``--hta-mem-gb``) and a timeout (``--hta-timeout``); where it fails, the table says
  why (out of memory, timed out) and larger sizes are not tried.

µs/event = wall time / events; "× linear" = a size's time over the linear extrapolation from the smallest
size's µs/event (the target: no size above 1.3). The traces of a size are deleted once it is measured (``--keep`` keeps
them). Prints a Markdown table (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from decode_floor import DECODE

from ddprof.synth import Spec, generate

HTA_SCRIPT = r"""
import logging, sys, warnings
logging.disable(logging.WARNING)
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ranks = sorted(ta.t.traces)
ta.get_comm_comp_overlap(visualize=False)
ta.get_temporal_breakdown(visualize=False)
ta.get_idle_time_breakdown(ranks=ranks, visualize=False)
print("HTA-OK", len(ranks))
"""

FLOOR_SCRIPT = DECODE + r"""
import os, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

def read_and_decode(path):
    with open(path, "rb") as fh:
        split(iter(lambda: fh.read(1 << 20), b""), decode)

if __name__ == "__main__":
    files = sorted(str(f) for f in Path(sys.argv[1]).glob("*.pt.trace.json"))
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(read_and_decode, files, chunksize=4))
    print("FLOOR-OK", len(files))
"""


@dataclass
class Measure:
    wall_s: float
    peak_bytes: int
    rc: int
    tail: str


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a child that just exited
            total += p.memory_info().rss
    return total


def measure(cmd: list[str], *, timeout: float | None = None, mem_limit: int | None = None,
            env: dict[str, str] | None = None) -> Measure:
    """Run ``cmd``; wall time and peak RSS of its process tree (sampled every 50 ms)."""
    def limit() -> None:
        if mem_limit:
            resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=limit,
                            env={**os.environ, **(env or {})})
    ps = psutil.Process(proc.pid)
    peak = 0
    done = threading.Event()
    out: list[bytes] = []

    def read() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())
        done.set()

    threading.Thread(target=read, daemon=True).start()
    rc = None
    while rc is None:
        peak = max(peak, _tree_rss(ps))
        rc = proc.poll()
        if timeout is not None and time.perf_counter() - t0 > timeout:
            for child in ps.children(recursive=True):
                child.kill()
            proc.kill()
            rc = proc.wait()
            rc = -9 if rc >= 0 else rc
            done.wait(5)
            return Measure(time.perf_counter() - t0, peak, 124, b"".join(out).decode(errors="replace")[-2000:])
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    done.wait(5)
    return Measure(wall, peak, rc, b"".join(out).decode(errors="replace")[-2000:])


def spec_for(ranks: int, events: int, seed: int) -> Spec:
    """Data parallel, 10 steps; kernels per step so that a rank has about ``events`` events
    (3 per kernel, 4 per all-reduce, 1 per step)."""
    steps, buckets = 10, 4
    kernels = max(12, round((events / steps - 1 - 4 * buckets) / 3))
    return Spec(ranks=ranks, steps=steps, kernels=kernels, buckets=buckets, layers=4, slow={ranks // 2: 1.3},
                noise=0.1, seed=seed)


def hta_failure(m: Measure, limit_gb: float, timeout: float) -> str:
    if m.rc == 124:
        return f"timed out after {timeout:.0f} s"
    if "MemoryError" in m.tail or "Cannot allocate" in m.tail or "std::bad_alloc" in m.tail or m.rc == -9:
        return f"out of memory (limit {limit_gb:.0f} GB)"
    last = [line for line in m.tail.splitlines() if line.strip()]
    return f"failed (exit {m.rc}: {last[-1][:80] if last else 'no output'})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="8,64,256,1024", help="comma-separated rank counts")
    ap.add_argument("--events", type=int, default=50_000, help="events per rank (about)")
    ap.add_argument("--hta-mem-gb", type=float, default=12.0)
    ap.add_argument("--hta-timeout", type=float, default=600.0)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--work", type=Path, default=None, help="where traces and runs go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep each size's traces and run dir")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/scale_sweep.md"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ddprof-sweep-", dir=args.work))
    ddprof_cmd = [sys.executable, "-m", "ddprof"]
    rows = []
    base: tuple[float, float] | None = None  # the smallest size's µs/event (ingest, analyze)
    hta_stopped: str | None = None
    header = ("| ranks | events | ingest s | ingest µs/event | ingest peak GB | floor s | ingest × floor | analyze s | "
              "analyze µs/event | analyze peak GB | ingest × linear | analyze × linear | HTA parse+3 s | HTA µs/event | "
              "HTA peak GB |")
    print(f"host: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; load {os.getloadavg()[0]:.1f}; work dir {work}", flush=True)
    try:
        for n in [int(x) for x in args.ranks.split(",")]:
            size_dir = work / f"r{n}"
            t0 = time.perf_counter()
            truth = generate(spec_for(n, args.events, args.seed), size_dir, with_truth=False)
            events = int(truth["total_events"])
            print(f"{n} ranks: {events:,} events generated in {time.perf_counter() - t0:.0f} s", flush=True)
            traces, run = size_dir / "traces", size_dir / "run"
            ing = measure([*ddprof_cmd, "ingest", str(traces), "-o", str(run), "-q"])
            if ing.rc != 0:
                print(ing.tail)
                return 1
            floor = measure([sys.executable, "-c", FLOOR_SCRIPT, str(traces)])
            if floor.rc != 0 or "FLOOR-OK" not in floor.tail:
                print(floor.tail)
                return 1
            ana = measure([*ddprof_cmd, "analyze", str(run), "--format", "json", "-o", str(size_dir / "report.json")])
            if ana.rc not in (0, 1):
                print(ana.tail)
                return 1
            report = json.loads((size_dir / "report.json").read_text())
            assert [r["rank"] for r in report["overlap"]] == list(range(n))
            hta_cell = "not run" if args.no_hta else hta_stopped or ""
            hta_rate = hta_peak = ""
            if not args.no_hta and hta_stopped is None:
                limit = int(args.hta_mem_gb * 2**30)
                hta_dir = size_dir / "hta"  # the traces alone: HTA takes every *.json, the collector's meta files too
                hta_dir.mkdir(exist_ok=True)
                for f in traces.glob("*.pt.trace.json"):
                    (hta_dir / f.name).symlink_to(f)
                h = measure([sys.executable, "-c", HTA_SCRIPT, str(hta_dir)], timeout=args.hta_timeout, mem_limit=limit)
                if h.rc == 0 and "HTA-OK" in h.tail:
                    hta_cell, hta_rate = f"{h.wall_s:.1f}", f"{h.wall_s / events * 1e6:.2f}"
                    hta_peak = f"{h.peak_bytes / 2**30:.2f}"
                else:
                    hta_stopped = f"— ({n} ranks: {hta_failure(h, args.hta_mem_gb, args.hta_timeout)})"
                    hta_cell = hta_stopped
            rate = (ing.wall_s / events, ana.wall_s / events)
            base = base or rate
            row = (f"| {n:,} | {events / 1e6:.2f} M | {ing.wall_s:.1f} | {rate[0] * 1e6:.2f} | "
                   f"{ing.peak_bytes / 2**30:.2f} | {floor.wall_s:.1f} | {ing.wall_s / floor.wall_s:.1f} | {ana.wall_s:.1f} | {rate[1] * 1e6:.2f} | "
                   f"{ana.peak_bytes / 2**30:.2f} | {rate[0] / base[0]:.2f} | {rate[1] / base[1]:.2f} | "
                   f"{hta_cell} | {hta_rate} | {hta_peak} |")
            rows.append(row)
            print(row, flush=True)
            if not args.keep:
                for d in (traces, run, size_dir / "hta"):
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    table = "\n".join([header, "|" + "---|" * 15, *rows])
    note = (f"\n\n{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; ~{args.events:,} events per "
            f"rank; peak = RSS of the process tree; floor = reading and decoding every trace on every core, nothing kept; × linear = time over the linear extrapolation from the "
            f"smallest size (target ≤ 1.3); load {os.getloadavg()[0]:.1f} at the end; HTA bounded to {args.hta_mem_gb:.0f} GB and {args.hta_timeout:.0f} s.")
    print("\n" + table + note)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table + note + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
