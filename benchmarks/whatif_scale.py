"""Dependency model and replay cost as ranks and ops grow (generated op tables, no trace parsing).

    python benchmarks/whatif_scale.py [--ranks 8 64 256] [--ops 50000] [--steps 1]

Each rank runs ``--ops`` ops per step on one lane: compute ops with an all-reduce (every rank) every
50 ops, so the graph couples all ranks. Prints, per size: build (the graph from the op table), plan
(topological levels, once per model), one replay, and the replay's level count. The target for a later
pass is 1,024 ranks x 50 k ops in 60 s.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import polars as pl
from ddprof.analyses.whatif.model import build
from ddprof.analyses.whatif.replay import plan, replay


def table(ranks: int, ops: int, steps: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = ranks * ops * steps
    worker = np.repeat(np.arange(ranks), ops * steps)
    step = np.tile(np.repeat(np.arange(steps), ops), ranks)
    k = np.tile(np.arange(ops), ranks * steps)
    dur = rng.uniform(1e-5, 1e-4, n)
    start = np.cumsum(dur + 1e-6) - dur  # back to back on each rank (times need not be consistent here)
    comm = k % 50 == 49
    inst = np.where(comm, step * ops + k, -1)
    return pl.DataFrame({"step": step, "worker": worker, "start": start, "end": start + dur,
                         "instance": pl.Series(inst).replace(-1, None)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--ops", type=int, default=50_000)
    ap.add_argument("--steps", type=int, default=1)
    a = ap.parse_args()
    for r in a.ranks:
        ops = table(r, a.ops, a.steps)
        t0 = time.process_time()
        m = build(ops)
        t1 = time.process_time()
        order = plan(m)
        t2 = time.process_time()
        replay(m, order=order)
        t3 = time.process_time()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"{r:5d} ranks x {a.ops:,} ops ({ops.height:,} ops, {len(m.src):,} edges): CPU build {t1 - t0:6.2f} s, "
              f"plan {t2 - t1:6.2f} s ({len(order.levels):,} levels), replay {t3 - t2:6.2f} s; peak {peak:.1f} GB",
              flush=True)
        del m, order, ops


if __name__ == "__main__":
    main()
