"""The dependency model's replay of the recording on every bundled and test run, and on generated ones:
the replay error (largest miss of a rank's step span, as a share of the mean measured step) and what the
model holds, per run.

    python benchmarks/whatif_replay.py [TRACE_SET ...]

Each set is ingested into a temporary store first (not timed). A run is "explained" when the error is at
most 2 %; otherwise the reason is printed and ``ddprof whatif`` projects nothing for it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from ddprof.analyses.whatif.store import replay_check

import ddprof
from ddprof.errors import DdprofError
from ddprof.synth import DataParallel, Pipeline, ingest_generated

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.paths import trace_set  # noqa: E402

SETS = ["dlrm-8xV100-nccl", "gloo-ddp-4rank-slow-rank", "gloo-pipeline-4stage", "hta/nccl-metadata-a100",
        "hta/sendrecv-2-of-128", "hta/a100-16rank-rank0", "hta/v100-2rank-rank1-large", "hta/amd-mi250",
        "tracelens/mi300-rocm-resnet-rank0"]


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name in names or SETS:
            runs[name] = lambda name=name: ddprof.ingest([trace_set(name)], Path(tmp) / name.replace("/", "_"))
        if not names:
            runs["synth DataParallel(slow rank 2)"] = lambda: ingest_generated(DataParallel(), Path(tmp) / "dp")
            runs["synth DataParallel(cpu)"] = lambda: ingest_generated(DataParallel(device="cpu"), Path(tmp) / "dpc")
            runs["synth Pipeline"] = lambda: ingest_generated(Pipeline(), Path(tmp) / "pp")
        for name, make in runs.items():
            try:
                run = make()
            except DdprofError as exc:
                print(f"{name:36} not ingested: {str(exc).splitlines()[-1].strip()}")
                continue
            t0 = time.perf_counter()
            c = replay_check(run.events())
            dt = time.perf_counter() - t0
            m = c.model
            held = (f"{m.ops['worker'].n_unique()} ranks, {m.ops['step'].n_unique()} steps, {m.ops.height:,} ops, "
                    f"{m.ops['instance'].drop_nulls().n_unique():,} matched instances, "
                    f"{m.inconsistent} ops ended before their instance's last arrival") if m is not None else "-"
            verdict = (f"replay error {100 * c.error:.3f} % of the mean step {1e3 * c.measured_step_s:,.2f} ms"
                       if c.explained else f"NOT EXPLAINED: {c.reason}")
            print(f"{name:36} {verdict}; {held}; {dt:.2f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
