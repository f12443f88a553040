"""A generated run on disk: ``OUT/traces/rank<N>.pt.trace.json`` (one Kineto trace per rank) and
``OUT/truth.json`` (the true metrics, :mod:`.truth`, with the spec and the event counts). Beside each trace,
the collector's ``rank-NNNNN.meta.json`` names the rank's host (``node000``, ...), as a captured run does.

>>> truth = generate(Spec(ranks=16, tp=2, pp=2, slow={5: 1.5}), "runs/synth")   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddprof.atomic import write_json_atomic
from ddprof.ingestion.sidecar import META_FORMAT
from ddprof.synth.kineto import write_trace
from ddprof.synth.schedule import groups, simulate
from ddprof.synth.spec import Spec
from ddprof.synth.truth import truth as true_metrics

TRUTH = "truth.json"
TRACES = "traces"


def trace_name(rank: int) -> str:
    return f"rank{rank}.pt.trace.json"


def host_name(host: int) -> str:
    return f"node{host:03d}"


def generate(spec: Spec, out_dir: str | Path, *, with_truth: bool = True) -> dict[str, Any]:
    """Simulate ``spec``, write every rank's trace into ``out_dir/traces`` and (``with_truth``)
    ``out_dir/truth.json``; returns the truth (without it: only the event counts)."""
    out = Path(out_dir)
    traces = out / TRACES
    traces.mkdir(parents=True, exist_ok=True)
    lines = simulate(spec)
    all_groups = groups(spec)
    counts = {str(line.rank): write_trace(spec, line, traces / trace_name(line.rank), all_groups) for line in lines}
    for r in range(spec.ranks):
        write_json_atomic(traces / f"rank-{r:05d}.meta.json",
                          {"format": META_FORMAT, "rank": r, "host": host_name(spec.host_of(r))})
    result = true_metrics(spec, lines) if with_truth else {}
    result["events"] = counts
    result["total_events"] = sum(counts.values())
    if with_truth:
        write_json_atomic(out / TRUTH, result)
    return result
