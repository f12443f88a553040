"""ddprof's critical path (analyses/whatif/critical.py) beside HTA's (``CriticalPathAnalysis``) on
single-rank traces HTA accepts: per ProfilerStep, the path's length, and the share bound by the CPU (host)
against the GPU (kernels, communication), same input, one run.

    python benchmarks/critical_path_vs_hta.py [TRACE_SET RANK ...]

HTA's kinds are its ``bound_by`` (cpu_bound, gpu_compute_bound, gpu_comm_bound); ours map onto them as
host launch + data loading + a host thread's idle time (CPU), compute (GPU compute) and communication
(GPU communication); a device's idle time is a wait HTA counts on the side that made it (here: CPU).
The lengths differ on the V100 trace (about +42 % for ddprof): HTA weighs a thread's time between its
top-level ops zero (a dependency edge) and links threads only through launches and synchronisations, so its
path is the longest chain of op time; ddprof's replay keeps such gaps as measured delays, so its path spans
the step. The main thread's wait while the autograd thread runs the backward is a hand-off in the model
(analyses/whatif/store.py, ``_handoffs``): the path runs through the backward's launches (host launch
95 %, idle 4.5 %), as HTA's does.
The installed HTA calls ``DataFrame.drop(axis=1, columns=...)``, which pandas 3 refuses: the call is
passed on without ``axis`` (same meaning) for the comparison.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import polars as pl
from ddprof.analyses.whatif.projections import whatif

import ddprof

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.paths import trace_set  # noqa: E402

_drop = pd.DataFrame.drop


def _drop_columns(self, *a, axis=None, columns=None, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
    return _drop(self, *a, columns=columns, **k) if columns is not None else _drop(self, *a, axis=axis or 0, **k)


SETS = [("hta/v100-2rank-rank1-large", 1)]


def ours(name: str, rank: int, tmp: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    run = ddprof.ingest([trace_set(name)], tmp / name.replace("/", "_"))
    w = whatif(run.events(), stragglers=None, comm_k=[], host_gaps=False, rebalance=False, attribute=False)
    if not w.explained or w.critical is None:
        raise SystemExit(f"{name}: not explained: {w.reason}")
    cpu = pl.col("kind").is_in(["host launch", "data loading", "idle"])
    per = (w.critical.links.group_by("step").agg(pl.col("s").sum().alias("len"),
                                                 pl.col("s").filter(cpu).sum().alias("cpu")).sort("step"))
    return per, w.critical.by_kind()


def hta(name: str, rank: int, steps: int) -> list[tuple[float, float]]:
    pd.DataFrame.drop = _drop_columns
    try:
        from hta.trace_analysis import TraceAnalysis
        ta = TraceAnalysis(trace_dir=str(trace_set(name)))
        out = []
        for i in range(steps):
            try:
                g, ok = ta.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=i)
            except Exception as exc:  # HTA's own failure on this step, reported as such
                print(f"  HTA fails on step {i}: {type(exc).__name__}: {exc}")
                ok = False
            if not ok:
                out.append((float("nan"), float("nan")))
                continue
            df = g.get_critical_path_breakdown()
            total = float(df["duration"].sum()) / 1e6  # µs to s
            cpu = float(df.loc[df["bound_by"] == "cpu_bound", "duration"].sum()) / 1e6
            out.append((total, cpu))
        return out
    finally:
        pd.DataFrame.drop = _drop


def main(args: list[str]) -> None:
    sets = [(args[i], int(args[i + 1])) for i in range(0, len(args), 2)] if args else SETS
    with tempfile.TemporaryDirectory() as tmp:
        for name, rank in sets:
            t0 = time.process_time()
            per, kinds = ours(name, rank, Path(tmp))
            t1 = time.process_time()
            theirs = hta(name, rank, per.height)
            t2 = time.process_time()
            print(f"{name} rank {rank}: ddprof {t1 - t0:.1f} s CPU (ingest included), HTA {t2 - t1:.1f} s CPU")
            print("  ddprof by kind: " + ", ".join(f"{k} {100 * s:.1f} %" for k, _, s in kinds.iter_rows()))
            for (step, length, cpu), (h_len, h_cpu) in zip(per.iter_rows(), theirs):
                print(f"  step {step}: ddprof {1e3 * length:9.2f} ms ({100 * cpu / length:5.1f} % CPU-side), "
                      f"HTA {1e3 * h_len:9.2f} ms ({100 * h_cpu / h_len if h_len else float('nan'):5.1f} % CPU-bound)"
                      f"  difference {100 * (length - h_len) / h_len:+.1f} %")


if __name__ == "__main__":
    main(sys.argv[1:])
