"""Ingest speed and memory: ddprof vs Holistic Trace Analysis (HTA) on the same traces, in one run.

For each trace set, in a fresh subprocess each (so imports and peak memory are not shared):

* hta:      ``TraceAnalysis(trace_dir=...)``  (parse only)
* cold:     what ``ddprof ingest SRC -o RUN_DIR`` runs, into an empty run dir, in a process set up as that
            command sets itself up (one allocator arena for every thread: ``ddprof.runtime.memory``)
* warm:     what ``ddprof analyze RUN_DIR --format json`` runs on a run dir ingested beforehand by another
            process: open it, build the full report (every analysis: overlap, breakdown, idle, bubbles,
            collectives, stragglers, bandwidth), write the JSON
* reuse:    ``ddprof ingest SRC -o RUN_DIR`` again on the run dir the same traces were ingested into by
            another process: nothing is parsed, so this is what the cache's check costs (each trace's
            stat and the digest of its first and last 64 KiB; ``ddprof.ingestion.pipeline``)
* hta+ / cold+ / warm+: the same as hta / cold / warm, in a process that has already parsed (HTA),
            ingested or analysed (ddprof) one small trace (rank 0 of the bundled DLRM sample, 0.1 MB).
            This removes what a process pays once, whatever the trace: each library's runtime start-up
            (Polars' thread pool, allocator arenas and Parquet writer, the pages of its code first run;
            pandas' equivalents), so what is left scales with the trace.

A third set, ``v100 xN`` (``--scale N``, default 4; 0 leaves it out), is generated: the 54 MB trace's events
repeated N times end to end (timestamps shifted, correlation/External/flow ids offset), to show how
time and memory grow with one rank's trace.

Every case runs in a fresh process. Times are wall-clock seconds of the measured call only (interpreter
start and imports excluded, for both tools); peak memory is the peak RSS during the call minus the RSS
just before it (imports excluded). Each case runs ``--repeat`` times, in rounds (every case once per round,
so that a machine whose speed drifts during the run slows every case alike); the median is printed, and
the lowest and highest ratio of one round's times, which show how far a single measurement can be trusted.

Then, for each set, the whole process both ways, timed from outside (interpreter start, imports, exit
included): ``python -c "TraceAnalysis(trace_dir=SRC)"`` against the ``ddprof ingest SRC -o RUN_DIR`` console
script (which decodes one large trace in a child process while it imports: ``ddprof.readers.read_ahead``;
the same with ``DDPROF_READ_AHEAD=off`` beside it, and with ``DDPROF_SCANNER=off``: every run decoded by the
typed decoders, as an install without the compiled scanner does), in turns (``--repeat`` rounds), both packages' modules
byte-compiled as an install leaves them, with the floor under any reader of the set beside them, each part
measured alone in a fresh process: the interpreter's start (``python -c pass``, whole process), the
decompression (each file inflated block by block, nothing kept) and the decoding (the reader's own cuts of
the inflated text, each read by the compiled scanner, else decoded by its typed decoder: the fields it reads,
results dropped; ``decode_floor.py``).

First, the program's start-up: ``ddprof --version`` and ``ddprof --help`` as a user runs them, the whole
process (interpreter, imports, exit) from outside, ``STARTUP_RUNS`` runs after one not counted: the
median wall seconds and the median peak RSS of the process (not a difference, unlike the rows below).

    python benchmarks/ingest_vs_hta.py [--repeat 3] [--scale 4] [--traces DIR]
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec
from decode_floor import DECODE

from ddprof.ingestion.discover import discover

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository's own trace sets, as the tests find them
from tests.support.paths import trace_set  # noqa: E402

SMALL = REPO / "sample_traces" / "dlrm-8xV100-nccl" / "worker0_step_12.1694128201545.pt.trace.json.gz"
SETS = {
    "v100-large (1 rank, 54 MB)": "hta/v100-2rank-rank1-large",
    "dlrm 8 ranks": "dlrm-8xV100-nccl",
}

PRELUDE = """
import gc, json, sys, time
def _status_mb(key):
    with open('/proc/self/status') as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key)) / 1024
def peak_mb():  # this process's own high-water mark (ru_maxrss would carry the parent's across exec)
    return _status_mb('VmHWM:')
def rss_mb():
    return _status_mb('VmRSS:')
"""

#: Per tool: what the process imports and sets up first (not measured), and the measured call on a
#: source ``SRC_`` into ``OUT_`` (ddprof's warm call reads the run dir ``OUT_``).
TOOLS = {
    "hta": ("""
import logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
""", "TraceAnalysis(trace_dir=SRC_)"),
    "cold": ("""
from ddprof.runtime.memory import use_ingest_allocator
use_ingest_allocator()  # as `ddprof ingest` does, before Polars loads
from ddprof.cli import main as cli
import ddprof.ingestion.pipeline, ddprof.readers.kineto.build
""", 'assert cli(["ingest", "-q", SRC_, "-o", OUT_, "-j", str(JOBS)]) == 0'),
    "warm": ("""
from ddprof.cli import main as cli
import ddprof.cli.analyze_cmd, ddprof.analyses.report  # imported by the command
""", 'assert cli(["analyze", OUT_, "--format", "json", "-o", OUT_ + ".json"]) in (0, 1)  # 1: a problem found'),
}
TOOLS["reuse"] = TOOLS["cold"]
#: "tool+": the same, after the same call on the small trace in that process.
CASES = ["hta", "cold", "hta+", "cold+", "warm", "warm+", "reuse"]


def case_code(case: str) -> str:
    setup, call = TOOLS[case.rstrip("+")]
    warm_up = call.replace("SRC_", "SMALL").replace("OUT_", "OUT + '-small'") + "\n" if case.endswith("+") else ""
    measured = call.replace("SRC_", "SRC").replace("OUT_", "OUT")
    return (setup + warm_up + "gc.collect(); m0 = rss_mb(); t0 = time.perf_counter()\n" + measured
            + "\nt = time.perf_counter() - t0\n")


def measure(case: str, src: Path, jobs: int) -> tuple[float, float]:
    out = Path(tempfile.mkdtemp(prefix="ddprof-bench-"))
    small = out / "small"  # a one-file trace dir (HTA parses directories)
    small.mkdir()
    shutil.copy(SMALL, small / SMALL.name)
    code = PRELUDE + f"SRC, OUT, JOBS, SMALL = {str(src)!r}, {str(out / 'run')!r}, {jobs}, {str(small)!r}\n" + \
        case_code(case) + "print(json.dumps({'t': t, 'mem': peak_mb() - m0}))\n"
    try:
        if case.startswith(("warm", "reuse")):  # the cached run dirs, made by another process
            for trace, run in ((src, "run"), (small, "run-small"))[:2 if case.endswith("+") else 1]:
                subprocess.run([sys.executable, "-m", "ddprof", "ingest", "-q", str(trace), "-o", str(out / run),
                                "-j", str(jobs)], capture_output=True, text=True, check=True, cwd=REPO)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              cwd=REPO)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{case} on {src} failed:\n{exc.stderr[-2000:]}") from None
    finally:
        shutil.rmtree(out, ignore_errors=True)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return res["t"], res["mem"]


STARTUP_RUNS = 9


#: Starts a command and prints its wall seconds, peak RSS (KiB) and exit code. A child's ``ru_maxrss``
#: starts from the RSS of the process that forked it (Linux keeps the forked copy's high-water mark across
#: exec), so the command is started from this small interpreter, not from the benchmark with its frames.
_STARTER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - t0, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def startup(arg: str, runs: int = STARTUP_RUNS) -> tuple[float, float]:
    """``ddprof ARG``, the console script this interpreter installed: median wall seconds of the whole
    process and median peak RSS (MB) over ``runs`` runs, after one run not counted (the starter's own
    RSS, about 10 MB, is a floor under the peak: ddprof's start-up is above it)."""
    script = Path(sys.executable).with_name("ddprof")
    cmd = [str(script), arg] if script.exists() else [sys.executable, "-m", "ddprof", arg]
    times, peaks = [], []
    for i in range(runs + 1):
        out = subprocess.run([sys.executable, "-S", "-c", _STARTER, *cmd], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, cwd=REPO, check=True).stdout.split()
        elapsed, peak_kib, code = float(out[0]), int(out[1]), int(out[2])
        if code:
            raise SystemExit(f"{' '.join(cmd)} exited with {code}")
        if i:
            times.append(elapsed)
            peaks.append(peak_kib / 1024)
    return statistics.median(times), statistics.median(peaks)


#: ``python WHOLE[case] SRC OUT``: the whole-process cases, as a user runs each tool.
WHOLE = {
    "hta": """
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
""",
}

#: Parts of the floor, each in a fresh process on the set's files (``FILES``): its measured seconds in ``t``.
FLOOR = {
    "decompression": """
import time, zlib
try:
    from isal import isal_zlib as zlib
except ImportError:
    pass
t0 = time.perf_counter()
for f in FILES:
    with open(f, 'rb') as fh:
        inflate = zlib.decompressobj(47) if f.endswith('.gz') else None
        while block := fh.read(1 << 20):
            if inflate is not None:
                inflate.decompress(block)
t = time.perf_counter() - t0
""",
    "decoding": DECODE + """
import gzip, time
texts = [gzip.decompress(open(f, 'rb').read()) if f.endswith('.gz') else open(f, 'rb').read() for f in FILES]
t0 = time.perf_counter()
for text in texts:
    split(iter([text[i:i + (1 << 20)] for i in range(0, len(text), 1 << 20)]), decode)
t = time.perf_counter() - t0
""",
}


def whole_process(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``cmd`` as one process, started from the small starter (with
    ``env`` added to the environment)."""
    out = subprocess.run([sys.executable, "-S", "-c", _STARTER, *cmd], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, cwd=REPO, check=True, env={**os.environ, **(env or {})}).stdout.split()
    if int(out[2]):
        raise SystemExit(f"{' '.join(cmd)} exited with {out[2]}")
    return float(out[0]), int(out[1]) / 1024


def whole_cases(src: Path, rounds: int) -> dict[str, list[float]]:
    """Both tools' whole process on ``src`` in turns, and the parts of the floor: seconds per round."""
    script = Path(sys.executable).with_name("ddprof")
    ddprof = [str(script)] if script.exists() else [sys.executable, "-m", "ddprof"]
    files = sorted(str(f) for f in discover([src]))  # what ingest reads (not a cache's files beside them)
    times: dict[str, list[float]] = {"hta": [], "ddprof ingest": [], "read ahead off": [], "scanner off": [],
                                     "interpreter start": [], **{part: [] for part in FLOOR}}
    for _ in range(rounds):
        out = Path(tempfile.mkdtemp(prefix="ddprof-bench-"))
        try:
            times["hta"].append(whole_process([sys.executable, "-c", WHOLE["hta"], str(src)])[0])
            times["ddprof ingest"].append(whole_process([*ddprof, "ingest", str(src), "-o", str(out / "run")])[0])
            times["read ahead off"].append(whole_process([*ddprof, "ingest", str(src), "-o", str(out / "run-off")],
                                                         env={"DDPROF_READ_AHEAD": "off"})[0])
            times["scanner off"].append(whole_process([*ddprof, "ingest", str(src), "-o", str(out / "run-typed")],
                                                      env={"DDPROF_SCANNER": "off"})[0])
        finally:
            shutil.rmtree(out, ignore_errors=True)
        times["interpreter start"].append(whole_process([sys.executable, "-c", "pass"])[0])
        for part, code in FLOOR.items():
            proc = subprocess.run([sys.executable, "-c", f"FILES = {files!r}\n" + code + "print(t)"],
                                  capture_output=True, text=True, check=True, cwd=REPO)
            times[part].append(float(proc.stdout.split()[-1]))
    return times


def print_whole(label: str, times: dict[str, list[float]]) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    rounds = sorted(h / d for h, d in zip(times["hta"], times["ddprof ingest"]))
    floor = med["interpreter start"] + sum(med[p] for p in FLOOR)
    print(f"{label:28} {'whole':6} {med['hta']:8.3f} {'':8}   hta, whole process")
    print(f"{label:28} {'whole':6} {med['ddprof ingest']:8.3f} {'':8}   ddprof ingest, whole process: "
          f"{med['hta'] / med['ddprof ingest']:.1f}x faster ({rounds[0]:.1f}-{rounds[-1]:.1f} by round)")
    off = sorted(h / d for h, d in zip(times["hta"], times["read ahead off"]))
    print(f"{label:28} {'whole':6} {med['read ahead off']:8.3f} {'':8}   the same, DDPROF_READ_AHEAD=off: "
          f"{med['hta'] / med['read ahead off']:.1f}x faster ({off[0]:.1f}-{off[-1]:.1f} by round)")
    typed = sorted(h / d for h, d in zip(times["hta"], times["scanner off"]))
    print(f"{label:28} {'whole':6} {med['scanner off']:8.3f} {'':8}   the same, DDPROF_SCANNER=off (typed decoders "
          f"only): {med['hta'] / med['scanner off']:.1f}x faster ({typed[0]:.1f}-{typed[-1]:.1f} by round)")
    parts = " + ".join(f"{k} {med[k]:.3f}" for k in ("interpreter start", *FLOOR))
    print(f"{label:28} {'floor':6} {floor:8.3f} {'':8}   {parts}; ddprof ingest = "
          f"{med['ddprof ingest'] / floor:.1f}x the floor, {med['ddprof ingest'] - floor:.3f} s above it")


def scaled_trace(src: Path, n: int, out: Path) -> Path:
    """A one-rank trace dir: ``src``'s events repeated ``n`` times end to end (gzip level 1)."""
    doc = msgspec.json.decode(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(times) - min(times) + 1000
    copies = []
    for k in range(n):
        for e in events:
            if k:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += k * span
                if isinstance(e.get("id"), int):
                    e["id"] += k * 10**9
                if isinstance(e.get("args"), dict):
                    e["args"] = {a: v + k * 10**9 if a in ("correlation", "External id") and isinstance(v, int)
                                 else v for a, v in e["args"].items()}
            copies.append(e)
    doc["traceEvents"] = copies
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"x{n}.pt.trace.json.gz"
    path.write_bytes(gzip.compress(msgspec.json.encode(doc), compresslevel=1))
    return out


def largest_json_mb(src: Path) -> float:
    sizes = [len(gzip.decompress(f.read_bytes())) if f.suffix == ".gz" else f.stat().st_size
             for f in src.rglob("*.json*")]
    return max(sizes) / 2**20


def byte_compiled() -> None:
    """The package's modules compiled, as installing it compiles them (pip writes every module's bytecode):
    where the environment says not to write bytecode (``PYTHONDONTWRITEBYTECODE``), an editable install
    would otherwise compile ddprof's modules afresh in every process, and no installed HTA's."""
    for folder in ("ddprof", "analyses", "collectors", "dashboards"):
        compileall.compile_dir(REPO / folder, quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--traces", type=Path, default=None,
                    help="a folder holding the sets (default: the repository's sample_traces and tests/data/traces)")
    ap.add_argument("--scale", type=int, default=4, help="repeat the 54 MB trace N times (0: no such set)")
    args = ap.parse_args()
    byte_compiled()
    where = (lambda rel: args.traces / rel) if args.traces else trace_set
    sets = [(label, where(rel)) for label, rel in SETS.items()]
    tmp = Path(tempfile.mkdtemp(prefix="ddprof-bench-scaled-"))
    if args.scale > 1:
        scaled = scaled_trace(next(where(SETS[next(iter(SETS))]).glob("*.json.gz")), args.scale, tmp)
        sets.insert(1, (f"v100 x{args.scale} (generated)", scaled))
    try:
        _run(sets, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(sets: list[tuple[str, Path]], args: argparse.Namespace) -> None:
    print(f"{'trace set':28} {'case':6} {'time s':>8} {'peak MB':>8}   ratio vs HTA")
    for arg in ("--version", "--help"):
        t, m = startup(arg)
        print(f"{'start-up: ddprof ' + arg:28} {'start':6} {t:8.3f} {m:8.1f}   whole process, "
              f"median of {STARTUP_RUNS}; peak = the process's RSS")
    for label, src in sets:
        runs: dict[str, list[tuple[float, float]]] = {case: [] for case in CASES}
        for _ in range(args.repeat):  # rounds of every case: a machine whose speed drifts slows all alike
            for case in CASES:
                runs[case].append(measure(case, src, args.jobs))
        results = {case: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
                   for case, rs in runs.items()}
        for case, (t, m) in results.items():
            base = "hta+" if case.endswith("+") else "hta"
            base_t, base_m = results[base]
            # the same ratio within each round (HTA and ddprof measured minutes apart): how much it varies
            rounds = sorted(h[0] / c[0] for h, c in zip(runs[base], runs[case]))
            ratio = "" if case.startswith("hta") else \
                f"{base_t / t:7.1f}x faster ({rounds[0]:.1f}-{rounds[-1]:.1f} by round), memory {m / base_m:5.2f}x of HTA's"
            if case == "reuse":
                ratio = f"the cache's check: {1000 * t:.1f} ms, {100 * t / results['cold'][0]:.1f}% of cold's time"
            print(f"{label:28} {case:6} {t:8.3f} {m:8.1f}   {ratio}")
        print_whole(label, whole_cases(src, args.repeat))
        js = largest_json_mb(src)
        print(f"{'':28} largest rank's JSON: {js:.1f} MB; ingest peak = {results['cold'][1] / js:.2f}x of it "
              f"(cold), {results['cold+'][1] / js:.2f}x (cold+)")


if __name__ == "__main__":
    main()
