"""Analysis time: ddprof from its cached store vs Holistic Trace Analysis (HTA) on the same traces.

    python benchmarks/analyses_vs_hta.py [--repeat 3] [TRACE_SET ...]

For each trace set: ingest once into a temporary store (timed apart), then, best of ``--repeat``:

* ddprof: open the run, read the events, compute overlap + temporal breakdown + idle categories
  (the three analyses HTA also has, sharing their work intervals as the report does), and separately
  the whole report (every section, what ``ddprof analyze`` computes);
* HTA: ``TraceAnalysis(trace_dir)`` (parse) and its three calls on every rank.

Ratios > 1 mean ddprof is faster; ``x report`` compares HTA's parse + calls with the whole report. HTA runs with its defaults (including its µs rounding).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from ddprof.analyses.breakdown import temporal_breakdown
from ddprof.analyses.frames.memo import prepare
from ddprof.analyses.idle import idle_breakdown
from ddprof.analyses.overlap import overlap
from ddprof.analyses.report import COLUMNS, build_report

import ddprof

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's own trace sets
from tests.support.paths import trace_set  # noqa: E402

DEFAULT_SETS = ["dlrm-8xV100-nccl", "hta/nccl-metadata-a100", "hta/a100-16rank-rank0", "hta/sendrecv-2-of-128",
                "hta/v100-2rank-rank1-large"]


def best_of(n: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def ddprof_three(store: Path) -> None:
    ev = prepare(ddprof.open_run(store).events().select(COLUMNS).collect().lazy())
    overlap(ev), temporal_breakdown(ev), idle_breakdown(ev)


def hta_parse(path: Path):
    from hta.trace_analysis import TraceAnalysis

    return TraceAnalysis(trace_dir=str(path))


def hta_three(ta) -> None:
    ranks = sorted(ta.t.traces)
    ta.get_comm_comp_overlap(visualize=False)
    ta.get_temporal_breakdown(visualize=False)
    ta.get_idle_time_breakdown(ranks=ranks, visualize=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", default=DEFAULT_SETS)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    header = (f"{'trace set':<28}{'ingest':>8}{'ddprof 3':>10}{'report':>9}{'HTA calls':>11}{'HTA parse':>11}"
              f"{'x calls':>9}{'x total':>9}{'x report':>10}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets:
            store = Path(tmp) / name.replace("/", "_")
            t0 = time.perf_counter()
            ddprof.ingest([trace_set(name)], store)
            ingest_s = time.perf_counter() - t0
            ours = best_of(args.repeat, lambda store=store: ddprof_three(store))
            report = best_of(args.repeat, lambda store=store: build_report(ddprof.open_run(store)))
            parse = best_of(args.repeat, lambda name=name: hta_parse(trace_set(name)))
            ta = hta_parse(trace_set(name))
            calls = best_of(args.repeat, lambda ta=ta: hta_three(ta))
            print(f"{name:<28}{ingest_s:>7.2f}s{ours:>9.3f}s{report:>8.3f}s{calls:>10.3f}s{parse:>10.2f}s"
                  f"{calls / ours:>8.1f}x{(parse + calls) / ours:>8.1f}x{(parse + calls) / report:>9.1f}x")
    print("\nddprof 3 = overlap + temporal breakdown + idle categories from the store; report = every section.")
    print("x calls = HTA calls / ddprof 3; x total = (HTA parse + calls) / ddprof 3 (ddprof reuses its store);")
    print("x report = (HTA parse + calls) / report.")


if __name__ == "__main__":
    main()
