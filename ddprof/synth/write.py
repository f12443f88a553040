"""A generated run on disk: ``OUT/traces/rank<N>.pt.trace.json`` (one Kineto trace per rank; or, in
format ``nsys``, ``OUT/traces/run.sqlite``: the same run as one Nsight Systems SQLite export of every rank,
:mod:`.nsys`) and ``OUT/truth.json`` (the true metrics, :mod:`.truth`, with the spec and the event counts). Beside each trace,
the collector's ``rank-NNNNN.meta.json`` names the rank's host (``node000``, ...), as a captured run does.

>>> truth = generate(Spec(ranks=16, tp=2, pp=2, slow={5: 1.5}), "runs/synth")   # doctest: +SKIP

A scenario (:mod:`.scenarios`, :mod:`.noisy`) is written the same way by :func:`write_kineto`, and
:func:`ingest_generated` makes it a run dir through ingest, as a captured run becomes one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from ddprof.ingestion import ingest
from ddprof.store.atomic import write_json_atomic
from ddprof.store.rundir import Run
from ddprof.store.sidecar import META_FORMAT
from ddprof.synth.kineto import events as kineto_events
from ddprof.synth.kineto import write_json_trace, write_trace
from ddprof.synth.nsys import write_export
from ddprof.synth.schedule import groups, simulate
from ddprof.synth.spec import Spec
from ddprof.synth.truth import truth as true_metrics

TRUTH = "truth.json"
TRACES = "traces"
NSYS_EXPORT = "run.sqlite"
#: The formats a generated run is written in.
FORMATS = ("kineto", "nsys")


def trace_name(rank: int, compress: bool = False) -> str:
    return f"rank{rank}.pt.trace.json" + (".gz" if compress else "")


def host_name(host: int) -> str:
    return f"node{host:03d}"


def write_meta(folder: Path, rank: int, host: str) -> Path:
    """The collector's meta file of ``rank`` in ``folder``, naming its host (all ingest reads of it here)."""
    path = folder / f"rank-{rank:05d}.meta.json"
    write_json_atomic(path, {"format": META_FORMAT, "rank": rank, "host": host})
    return path


def generate(spec: Spec, out_dir: str | Path, *, with_truth: bool = True, compress: bool = False,
             fmt: str = "kineto") -> dict[str, Any]:
    """Simulate ``spec``, write every rank's trace into ``out_dir/traces`` (``compress``: gzip, about a
    tenth of the size, for runs of many events; ``fmt`` ``nsys``: every rank in one Nsight Systems SQLite
    export, ``traces/run.sqlite``, without the collectives' metadata, which an export does not carry) and
    (``with_truth``) ``out_dir/truth.json``; returns the truth (without it: only the event counts)."""
    out = Path(out_dir)
    traces = out / TRACES
    traces.mkdir(parents=True, exist_ok=True)
    lines = simulate(spec)
    all_groups = groups(spec)
    if fmt == "nsys":
        total = write_export(traces / NSYS_EXPORT, {line.rank: kineto_events(spec, line) for line in lines})
        counts = {NSYS_EXPORT: total}
    else:
        counts = {str(line.rank): write_trace(spec, line, traces / trace_name(line.rank, compress), all_groups)
                  for line in lines}
    for r in range(spec.ranks):
        write_meta(traces, r, host_name(spec.host_of(r)))
    result = true_metrics(spec, lines) if with_truth else {}
    result["events"] = counts
    result["total_events"] = sum(counts.values())
    if with_truth:
        write_json_atomic(out / TRUTH, result)
    return result


class Scenario(Protocol):
    """What :func:`write_kineto` needs of a scenario: its traces, one per rank."""

    def kineto(self) -> dict[int, dict[str, Any]]: ...


def write_traces(traces: dict[int, dict[str, Any]], folder: Path, skip: Iterable[int] = ()) -> Path:
    """Kineto traces (rank -> trace, as :func:`~ddprof.synth.kineto.to_kineto` makes them) as
    ``folder/rank<N>.pt.trace.json``, but the ranks in ``skip``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, trace in traces.items():
        if rank not in skip:
            head = {k: v for k, v in trace.items() if k != "traceEvents"}
            write_json_trace(folder / trace_name(rank), head, (json.dumps(e) for e in trace["traceEvents"]))
    return folder


def write_kineto(sc: Scenario, folder: Path, skip: Iterable[int] = ()) -> Path:
    """The scenario's Kineto traces as ``folder/rank<N>.pt.trace.json`` (but the ranks in ``skip``); a scenario
    that places its ranks on hosts (``host_of``) gets each rank's meta file naming its host."""
    write_traces(sc.kineto(), folder, tuple(skip))
    host_of = getattr(sc, "host_of", None)
    if host_of is not None:
        for rank in sc.kineto():
            write_meta(folder, rank, host_name(host_of(rank)))
    return folder


def ingest_generated(sc: Scenario, folder: Path, run_dir: Path | None = None) -> Run:
    """The scenario written as traces into ``folder`` (:func:`write_kineto`), ingested into ``run_dir``
    (by default ``folder/run``)."""
    return ingest([write_kineto(sc, folder)], folder / "run" if run_dir is None else run_dir)
