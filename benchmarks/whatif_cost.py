"""What the report's ``whatif`` section costs: ``ddprof analyze RUN --format json`` with the section and
with it switched off (``DDPROF_WHATIF=off``), on the bundled and test runs, in wall time (what a user
waits for: the section runs on a thread of its own beside the rest of the report) and in CPU time (user +
sys of the command, imports included), and their ratios.

    python benchmarks/whatif_cost.py [--repeat 3] [--generated 8] [--runs RUN_DIR ...] [TRACE_SET ...]

Each set is ingested into a temporary store first (not timed); the two commands run in turns, ``--repeat``
times each, the least wall and the least CPU time kept (the machine is shared). ``--generated N``: also a
generated data-parallel run of N ranks x ``--events`` events each (10 steps, one slow rank: the scale
sweep's, ``benchmarks/scale_sweep.py``), whose section models the steps the report's event budget allows.
``--runs``: run dirs already ingested (the scale sweep's 1,024 ranks, kept with ``--keep``). The
requirement: a wall-time ratio of at most 1.5 on every run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ddprof

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.scale_sweep import spec_for  # noqa: E402
from ddprof.synth import generate  # noqa: E402
from tests.support.paths import trace_set  # noqa: E402

SETS = ["dlrm-8xV100-nccl", "gloo-ddp-4rank-slow-rank", "gloo-pipeline-4stage", "hta/nccl-metadata-a100",
        "hta/a100-16rank-rank0", "hta/v100-2rank-rank1-large"]
DDPROF = str(Path(sys.executable).with_name("ddprof"))


def timed(run: Path, whatif: bool) -> tuple[float, float, dict]:
    """Wall and CPU seconds of the report of ``run``, with the section or without, and the section."""
    env = {**os.environ, "DDPROF_WHATIF": "on" if whatif else "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([DDPROF, "analyze", str(run), "--format", "json"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, report.get("whatif") or {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--generated", type=int, nargs="*", default=[], metavar="RANKS")
    ap.add_argument("--events", type=int, default=50_000, help="events per rank of a generated run")
    ap.add_argument("--runs", type=Path, nargs="*", default=[], metavar="RUN_DIR")
    ap.add_argument("sets", nargs="*")
    a = ap.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        inputs = [(name, trace_set(name)) for name in (a.sets or SETS)]
        for ranks in a.generated:
            traces = Path(tmp) / f"gen{ranks}"
            generate(spec_for(ranks, a.events, 0), traces, with_truth=False)
            inputs.append((f"generated {ranks} x {a.events // 1000} k", traces))
        runs = [(str(r), r) for r in a.runs]
        for name, source in inputs:
            run = Path(tmp) / name.replace("/", "_").replace(" ", "_")
            try:
                ddprof.ingest([source], run)
            except Exception as exc:  # a set that does not ingest is listed, not timed
                print(f"{name:30} not ingested: {exc}")
                continue
            runs.append((name, run))
        for name, run in runs:
            off, on, section = [math.inf, math.inf], [math.inf, math.inf], {}
            for _ in range(a.repeat):  # in turns: a change of the machine's load falls on both
                wall, cpu, _ = timed(run, False)
                off = [min(off[0], wall), min(off[1], cpu)]
                wall, cpu, section = timed(run, True)
                on = [min(on[0], wall), min(on[1], cpu)]
            ratio = on[0] / off[0]
            worst = max(worst, ratio)
            state = "computed" if section.get("computed") else f"not computed: {section.get('reason')}"
            if section.get("steps_in_run") and len(section.get("steps_modelled") or []) < section["steps_in_run"]:
                state += f", steps {section['steps_modelled']} of {section['steps_in_run']}"
            print(f"{name:30} wall without {off[0]:6.2f} s  with {on[0]:6.2f} s  ratio {ratio:4.2f};  CPU without "
                  f"{off[1]:6.2f} s  with {on[1]:6.2f} s  ratio {on[1] / off[1]:4.2f}  ({state})", flush=True)
    print(f"worst wall-time ratio {worst:.2f} (at most 1.5 required)")


if __name__ == "__main__":
    main()
