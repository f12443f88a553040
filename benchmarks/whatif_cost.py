"""What the report's ``whatif`` section costs: ``ddprof analyze RUN --format json`` with the section and
with it switched off (``DDPROF_WHATIF=off``), on the bundled and test runs, in CPU time (user + sys of the
command, imports included: the whole default report as a user runs it), and the ratio.

    python benchmarks/whatif_cost.py [--repeat 3] [--generated 8] [TRACE_SET ...]

Each set is ingested into a temporary store first (not timed); each command runs ``--repeat`` times, the
least CPU time kept (CPU time, not wall time: the machine is shared). ``--generated N``: also a generated
data-parallel run of N ranks x ``--events`` events each (10 steps, one slow rank: the scale sweep's,
``benchmarks/scale_sweep.py``), whose section models the steps the report's event budget allows. The
requirement: a ratio of at most 1.5 on every run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import ddprof

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.scale_sweep import spec_for  # noqa: E402
from ddprof.synth import generate  # noqa: E402
from tests.support.paths import trace_set  # noqa: E402

SETS = ["dlrm-8xV100-nccl", "gloo-ddp-4rank-slow-rank", "gloo-pipeline-4stage", "hta/nccl-metadata-a100",
        "hta/a100-16rank-rank0", "hta/v100-2rank-rank1-large"]
DDPROF = str(Path(sys.executable).with_name("ddprof"))


def cpu(run: Path, whatif: bool) -> tuple[float, dict]:
    env = {**os.environ, "DDPROF_WHATIF": "on" if whatif else "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([DDPROF, "analyze", str(run), "--format", "json"], env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), report.get("whatif") or {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--generated", type=int, nargs="*", default=[], metavar="RANKS")
    ap.add_argument("--events", type=int, default=50_000, help="events per rank of a generated run")
    ap.add_argument("sets", nargs="*")
    a = ap.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        inputs = [(name, trace_set(name)) for name in (a.sets or SETS)]
        for ranks in a.generated:
            traces = Path(tmp) / f"gen{ranks}"
            generate(spec_for(ranks, a.events, 0), traces, with_truth=False)
            inputs.append((f"generated {ranks} x {a.events // 1000} k", traces))
        for name, source in inputs:
            run = Path(tmp) / name.replace("/", "_").replace(" ", "_")
            try:
                ddprof.ingest([source], run)
            except Exception as exc:  # a set that does not ingest is listed, not timed
                print(f"{name:30} not ingested: {exc}")
                continue
            off = min(cpu(run, False)[0] for _ in range(a.repeat))
            on, section = cpu(run, True)
            for _ in range(a.repeat - 1):
                on = min(on, cpu(run, True)[0])
            ratio = on / off
            worst = max(worst, ratio)
            state = "computed" if section.get("computed") else f"not computed: {section.get('reason')}"
            if section.get("steps_in_run") and len(section.get("steps_modelled") or []) < section["steps_in_run"]:
                state += f", steps {section['steps_modelled']} of {section['steps_in_run']}"
            print(f"{name:30} without {off:6.2f} s  with {on:6.2f} s CPU  ratio {ratio:4.2f}  ({state})", flush=True)
    print(f"worst ratio {worst:.2f} (at most 1.5 required)")


if __name__ == "__main__":
    main()
