"""The OSDI'25 straggler study's published answers beside ours, from our own dependency model and replay.

    python benchmarks/whatif_osdi.py [AR SE ST]

For each job of ``tests/data/traces/osdi25`` (the study's three public traces): the model's size, the
time to build and replay it, then every published number beside ours: ``blocking_slowdown`` and
``launch_slowdown`` (relative error, tolerance ±0.5 %), each entry of ``blocking_decompose_by_dp_rank/
stage/optype`` (relative error, ±1 %, with both rankings), M_S and M_W (absolute error, ±0.02).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ddprof.analyses.whatif import osdi

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.paths import OSDI25  # noqa: E402


def main(names: list[str]) -> int:
    worst_ok = True
    for name in names or ["AR", "SE", "ST"]:
        t0 = time.perf_counter()
        job = osdi.load(OSDI25, name)
        a = osdi.analyse(job.ops)
        t1 = time.perf_counter()
        rows = osdi.reproduce(job, a)
        t2 = time.perf_counter()
        m = a.model
        print(f"\n== {name}: {job.meta.get('world_size')} ranks, {m.ops['worker'].n_unique()} workers, "
              f"{len(m.steps)} steps, {m.ops.height:,} ops, {m.n_nodes:,} nodes, {len(m.src):,} edges, "
              f"{len(a.order.levels)} levels; model + 3 replays {t1 - t0:.2f} s, "
              f"{len(rows)} published numbers {t2 - t1:.2f} s")
        print(f"   {'metric':34} {'key':26} {'ours':>9} {'published':>9} {'error':>9}  rank")
        for r in rows:
            ok = abs(r["error"]) <= r["tolerance"]
            worst_ok &= ok
            err = f"{r['error']:+.4f}" if r["metric"].startswith("M_") else f"{100 * r['error']:+.2f}%"
            rank = f"{r['rank_ours']}/{r['rank_published']}" if "rank_ours" in r else ""
            print(f"   {r['metric']:34} {r['key']:26} {r['ours']:9.4f} {r['published']:9.4f} {err:>9}  {rank}"
                  f"{'' if ok else '  OUT OF TOLERANCE'}")
    print("\nall within tolerance" if worst_ok else "\nsome numbers out of tolerance")
    return 0 if worst_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
