"""What a trace cannot tell: findings about the trace itself, said before its numbers.

Each finding is one row ``{finding, rank, ranks, count, example, affects, headline}``: its code, the rank
it is about (null for a finding about the run, whose ``ranks`` then lists the ranks concerned), how many
events (or ranks, or notices) show it, one of them as an example, which metrics it bends and how, and
whether it changes a headline number (those also become verdicts: :mod:`.verdicts`).

Findings, in the order the report lists them (codes are API):

* ``gpu_not_captured``: a rank recorded GPU launches (:data:`LAUNCH`: ``cudaLaunchKernel``,
  ``cuLaunchKernel``, ``hipLaunchKernel``, graph launches, async copies) but no GPU activity at all: the
  GPU side was not captured, and the rank's numbers describe its CPU threads only. Headline.
* ``accelerator_not_analysed``: a rank recorded an accelerator's activity in categories of its own
  (:mod:`ddprof.vocabulary.devices`: Meta's MTIA writes its device work as ``mtia_ccp_events`` and its runtime
  as ``mtia_runtime``), which ddprof does not read as device work (ingest keeps them as kind ``other`` and
  counts them in the rank's manifest record, ``accelerator_events``): the
  rank's numbers describe its host operators, not the accelerator. Headline; the verdicts of the timeline
  sections (overlap, idle, steps without compute) are then not said for such a run (:mod:`.verdicts`): they
  would read host operators as if they were the device.
* ``events_lost``: the profiler wrote into the trace that it lost events (Kineto's ``WARNING``/``ERROR``
  lists: a full GPU buffer that stopped tracing, dropped activity records; :data:`LOST`). Headline: work
  missing from the trace reads as idle time.
* ``missing_ranks``: the trace's world size names ranks that were not traced. Headline: collectives,
  skews and stragglers compare the traced ranks only.
* ``clock_offset``: a host's clock was found offset from the reference host's by more than the
  collectives' transfer times, and corrected (:mod:`.clocks`).
* ``dropped_events``: complete events ingest could not keep (negative duration, longer than a day, a
  timestamp out of range, malformed), per reason.
* ``profiler_notices``: the profiler's other warnings and errors written into the trace.
* ``untraced_gaps``: a rank traced in several profiling windows (:mod:`ddprof.store.windows`); the time between
  them is left out of spans and idle time.
* ``graph_capture``: launches inside a CUDA/HIP stream-capture region (``cudaStreamBeginCapture`` ..
  ``cudaStreamEndCapture`` on the same thread): captured into a graph, not executed there.
* ``graph_kernels``: kernels executed by a graph launch (their correlation is the ``cudaGraphLaunch``'s):
  they take the graph launch as their launch (its time and step).
* ``stream_overlap``: a kernel starting before the previous kernels on its stream ended (running maximum
  of the ends): a timestamp error, or programmatic dependent launch (Hopper and later GPUs let a kernel
  start while its predecessor on the stream finishes).
* ``rounded_timestamps``: every timestamp and duration of the rank is a whole microsecond (exports that
  rounded Kineto's fractional µs), over at least :data:`MIN_ROUNDED_ROWS` rows (``count``: the rows checked,
  on a GPU rank its GPU work, launches and steps).
* ``no_message_sizes``: communication a rank recorded with no message size (an Nsight Systems export has no
  NCCL metadata; a kernel made communication by its name alone): its collectives are matched and timed, but
  no bandwidth is computed for them (``count``: such rows, ``example``: the first one's name).
* ``outside_steps``: work of a rank with ``ProfilerStep#N`` annotations that falls in no step.

Example: a rank with 120 ``cudaLaunchKernel`` calls and no kernel ->
``{finding: "gpu_not_captured", rank: 0, ranks: [0], count: 120, example: "cudaLaunchKernel", affects:
"overlap, breakdown, idle, bubbles: ...", headline: true}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import polars as pl
from ddprof.analyses.frames.memo import Events, Prepared, collect, prepare
from ddprof.analyses.frames.sets import kernels, steps, work
from ddprof.analyses.frames.windows import trace_windows
from ddprof.analyses.sections import Section

from ddprof.report.schema import HealthFinding, rows
from ddprof.vocabulary.devices import accelerator_of
from ddprof.vocabulary.units import NS_PER_US, fmt_us

#: Host calls that put work on a GPU: kernel and graph launches, asynchronous copies and sets.
LAUNCH: Final = r"^(cuda|cu|hip)\w*(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy\w*Async|Memset\w*Async)"
GRAPH_LAUNCH: Final = r"^(cuda|cu|hip)GraphLaunch"
BEGIN_CAPTURE: Final = r"^(cuda|cu|hip)StreamBeginCapture"
END_CAPTURE: Final = r"^(cuda|cu|hip)StreamEndCapture"
#: A profiler notice that says events were lost.
LOST: Final = re.compile(r"drop|overflow|exceeded max|buffer|terminating tracing|stopped early|out.of.range", re.I)
#: Fewest rows of a rank for "every timestamp is a whole µs" to mean rounding rather than chance.
MIN_ROUNDED_ROWS: Final = 20

ORDER: Final = ("gpu_not_captured", "accelerator_not_analysed", "events_lost", "missing_ranks", "clock_offset", "dropped_events",
                "profiler_notices", "untraced_gaps", "graph_capture", "graph_kernels", "stream_overlap",
                "rounded_timestamps", "no_message_sizes", "outside_steps")
HEADLINE: Final = frozenset({"gpu_not_captured", "accelerator_not_analysed", "events_lost", "missing_ranks"})

AFFECTS: Final = {
    "gpu_not_captured": "overlap, breakdown, idle, bubbles: the GPU side was not captured; this rank's numbers "
                        "describe its CPU threads, not its GPU",
    "accelerator_not_analysed": "overlap, breakdown, idle, bubbles, kernels: the accelerator's own activity was "
                                "not analysed (kept as kind other); the numbers describe the host's operators, "
                                "not the accelerator",
    "events_lost": "every timeline metric: work missing from the trace reads as idle time; compute, "
                   "communication and overlap are understated",
    "missing_ranks": "collectives, bandwidth, stragglers: only the traced ranks are compared; an untraced "
                     "rank may be the one the others wait for",
    "clock_offset": "collectives' arrival skew and stragglers: the host's timestamps were moved by the "
                    "offset before they were compared",
    "dropped_events": "the events' own time: what they covered counts as idle, and their kernels as absent",
    "profiler_notices": "depends on the notice: read it",
    "untraced_gaps": "span, idle: the untraced time between windows is left out; each window is measured "
                     "on its own and the windows are added up",
    "graph_capture": "none of the timeline metrics: captured launches run later, through a graph launch; "
                     "counting launches per step would overstate them",
    "graph_kernels": "idle categories and steps: each kernel of the graph takes the graph launch as its "
                     "launch (its time and step)",
    "stream_overlap": "idle: the overlap counts as a 0 µs gap (unions, overlap and breakdown are not "
                      "affected)",
    "rounded_timestamps": "idle and overlap: times are ±0.5 µs; gaps under 1 µs vanish and back-to-back "
                          "kernels may touch or overlap",
    "no_message_sizes": "bandwidth: no message size was recorded for this communication (no collective "
                        "metadata), so no bandwidth is computed for it; collectives are still matched and timed",
    "outside_steps": "per-step overlap, breakdown, idle and bubbles leave this work out; the whole-trace "
                     "sections include it",
}


def _row(finding: str, rank: int | None, count: int, example: str | None,
         ranks: Sequence[int] | None = None) -> dict[str, Any]:
    return {"finding": finding, "rank": rank, "ranks": list(ranks) if ranks is not None else [rank],
            "count": int(count), "example": example, "affects": AFFECTS[finding], "headline": finding in HEADLINE}


def _runtime(p: Prepared) -> pl.DataFrame:
    """The host-side GPU API calls: rank, tid, ts_ns, end_ns, name, correlation."""
    return collect(p.events.filter(pl.col("kind") == "runtime").select(
        "rank", "tid", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"), "name", "correlation"))


def _first(df: pl.DataFrame, by: str = "rank") -> dict[int, tuple[int, str]]:
    """Per ``by`` group: (rows, name of its earliest row)."""
    g = df.sort("ts_ns").group_by(by).agg(pl.len().alias("n"), pl.col("name").first().alias("example"))
    return {int(r): (int(n), str(e)) for r, n, e in g.select(by, "n", "example").iter_rows()}


def gpu_not_captured(p: Prepared, runtime: pl.DataFrame) -> list[dict[str, Any]]:
    on_gpu = set(collect(p.events.filter(pl.col("stream").is_not_null()).select(pl.col("rank").unique()))["rank"])
    launches = runtime.filter(pl.col("name").str.contains(LAUNCH) & ~pl.col("rank").is_in(list(on_gpu)))
    return [_row("gpu_not_captured", r, n, ex) for r, (n, ex) in sorted(_first(launches).items())]


def accelerator_not_analysed(per_rank: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per rank, its events of an accelerator's own categories that ingest kept as kind ``other`` (the
    manifest record's ``accelerator_events``: category -> count); the example names the accelerator and
    the categories, the largest first."""
    out = []
    for r in sorted(per_rank):
        cats = {str(c): int(n) for c, n in (per_rank[r].get("accelerator_events") or {}).items() if n}
        if not cats:
            continue
        order = sorted(cats, key=lambda c: (-cats[c], c))
        names = sorted({accelerator_of(c) or c for c in cats})
        example = f"{'/'.join(names)} events: " + ", ".join(f"{cats[c]} {c}" for c in order)
        out.append(_row("accelerator_not_analysed", r, sum(cats.values()), example))
    return out


def graph_capture(runtime: pl.DataFrame) -> list[dict[str, Any]]:
    """Launches between a ``*StreamBeginCapture`` and the next ``*StreamEndCapture`` of its thread (to the
    end of the trace when none follows)."""
    begins = runtime.filter(pl.col("name").str.contains(BEGIN_CAPTURE)).select("rank", "tid", "ts_ns")
    if begins.height == 0:
        return []
    ends = runtime.filter(pl.col("name").str.contains(END_CAPTURE)).select(
        "rank", "tid", pl.col("ts_ns").alias("__end_ts"), pl.col("end_ns").alias("cap_end"))
    regions = (begins.sort("ts_ns").join_asof(ends.sort("__end_ts"), left_on="ts_ns", right_on="__end_ts",
                                              by=["rank", "tid"], strategy="forward", check_sortedness=False)
               .select("rank", "tid", pl.col("ts_ns").alias("cap_start"), pl.col("cap_end").fill_null(2**62)))
    launches = runtime.filter(pl.col("name").str.contains(LAUNCH) & ~pl.col("name").str.contains(GRAPH_LAUNCH)
                              & pl.col("tid").is_not_null())
    inside = (launches.sort("ts_ns").join_asof(regions.sort("cap_start"), left_on="ts_ns", right_on="cap_start",
                                               by=["rank", "tid"], strategy="backward", check_sortedness=False)
              .filter(pl.col("ts_ns") <= pl.col("cap_end")))
    return [_row("graph_capture", r, n, ex) for r, (n, ex) in sorted(_first(inside).items())]


def graph_kernels(p: Prepared, runtime: pl.DataFrame) -> list[dict[str, Any]]:
    """GPU work rows whose correlation is a graph launch's on their rank."""
    graphs = runtime.filter(pl.col("name").str.contains(GRAPH_LAUNCH) & pl.col("correlation").is_not_null())
    if graphs.height == 0:
        return []
    ran = kernels(p).join(graphs.select("rank", "correlation").unique(), on=["rank", "correlation"], how="semi")
    return [_row("graph_kernels", r, n, ex) for r, (n, ex) in sorted(_first(ran).items())]


def stream_overlap(p: Prepared) -> list[dict[str, Any]]:
    """Kernels starting before the running maximum of the earlier ends on their stream."""
    k = kernels(p).select("rank", "stream", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"), "name")
    bad = collect(
        k.lazy().sort("rank", "stream", "ts_ns", "end_ns")
        .with_columns(pl.col("end_ns").cum_max().shift(1).over("rank", "stream").alias("__reach"))
        .filter(pl.col("ts_ns") < pl.col("__reach"))
    )
    out = []
    for r, (n, _) in sorted(_first(bad).items()):
        e = bad.filter(pl.col("rank") == r).sort("ts_ns").row(0, named=True)
        example = (f"{e['name']} on stream {e['stream']} starts {fmt_us((e['__reach'] - e['ts_ns']) / NS_PER_US)} "
                   "before the previous kernel ends")
        out.append(_row("stream_overlap", r, n, example))
    return out


def rounded_timestamps(p: Prepared) -> list[dict[str, Any]]:
    whole = (pl.col("ts_ns") % NS_PER_US == 0) & (pl.col("dur_ns") % NS_PER_US == 0)
    t = collect(p.events.sort("ts_ns").group_by("rank").agg(
        pl.len().alias("n"), whole.all().alias("whole"), pl.col("name").first().alias("example"),
        pl.col("ts_ns").first().alias("ts")))
    return [_row("rounded_timestamps", int(r), int(n), f"{ex} at {ts // NS_PER_US} µs")
            for r, n, w, ex, ts in t.sort("rank").select("rank", "n", "whole", "example", "ts").iter_rows()
            if w and n >= MIN_ROUNDED_ROWS]


def no_message_sizes(p: Prepared) -> list[dict[str, Any]]:
    """Communication rows (``kind == "comm"``) without a message size (``bytes`` null), per rank."""
    rows = collect(p.events.filter((pl.col("kind") == "comm") & pl.col("bytes").is_null()).select("rank", "ts_ns", "name"))
    return [_row("no_message_sizes", r, n, ex) for r, (n, ex) in sorted(_first(rows).items())]


def outside_steps(p: Prepared) -> list[dict[str, Any]]:
    """Work rows with no step on ranks that have steps (GPU work by name; CPU work by its role)."""
    stepped = steps(p).select("rank").unique()
    k = kernels(p).filter(pl.col("step").is_null()).join(stepped, on="rank", how="semi")
    out = {r: v for r, v in _first(k).items()}
    cpu = (work(p).filter(~pl.col("on_gpu") & pl.col("step").is_null()).join(stepped, on="rank", how="semi")
           .select("rank", pl.col("start").alias("ts_ns"), pl.concat_str(pl.lit("CPU "), pl.col("role")).alias("name")))
    for r, v in _first(cpu).items():
        out.setdefault(r, v)
    return [_row("outside_steps", r, n, ex) for r, (n, ex) in sorted(out.items())]


def untraced_gaps(p: Prepared) -> list[dict[str, Any]]:
    out = []
    for (rank,), w in trace_windows(p).sort("rank", "window").partition_by("rank", as_dict=True).items():
        if w.height < 2:
            continue
        starts, ends = w["t_start"].to_list(), w["t_end"].to_list()
        gaps = [b - a for a, b in zip(ends, starts[1:])]
        longest = max(range(len(gaps)), key=lambda i: gaps[i])
        example = (f"{fmt_us(gaps[longest] / NS_PER_US)} with no event after window {longest} "
                   f"({w.height} windows, {fmt_us(sum(e - s for s, e in zip(starts, ends)) / NS_PER_US)} traced)")
        out.append(_row("untraced_gaps", int(rank), len(gaps), example))
    return sorted(out, key=lambda f: f["rank"])


def from_ingest(per_rank: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The findings only ingest could see, from each rank's manifest record: the profiler's notices
    (``notices``) and the events ingest dropped (``dropped``: reason -> count)."""
    out = []
    for r in sorted(per_rank):
        info = per_rank[r]
        notices = [n for n in info.get("notices") or [] if isinstance(n, str)]
        lost = [n for n in notices if LOST.search(n)]
        if lost:
            out.append(_row("events_lost", r, len(lost), lost[0]))
        other = [n for n in notices if not LOST.search(n)]
        if other:
            out.append(_row("profiler_notices", r, len(other), other[0]))
        dropped = {str(k): int(v) for k, v in (info.get("dropped") or {}).items() if v}
        if dropped:
            why = max(dropped, key=lambda k: dropped[k])
            out.append(_row("dropped_events", r, sum(dropped.values()),
                            "; ".join(f"{n} {k}" for k, n in sorted(dropped.items(), key=lambda kv: -kv[1]))
                            if len(dropped) > 1 else f"{dropped[why]} {why}"))
    return out


def missing_ranks(ranks: Sequence[int], world_size: int | None) -> list[dict[str, Any]]:
    if not world_size or not ranks:
        return []
    missing = sorted(set(range(world_size)) - set(ranks))
    if not missing:
        return []
    return [_row("missing_ranks", None, len(missing), f"{len(ranks)} of {world_size} ranks traced; missing "
                 + _ranges(missing), ranks=missing)]


def clock_offsets(clocks: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    clocks = clocks or {}
    for h in clocks.get("hosts") or []:
        if h.get("applied"):
            ahead = "ahead of" if h["offset_ns"] > 0 else "behind"
            example = (f"host {h['host']}'s clock runs {fmt_us(abs(h['offset_ns']) / NS_PER_US)} {ahead} host "
                       f"{clocks.get('reference')}'s (± {fmt_us(h['bound_ns'] / NS_PER_US)}, "
                       f"{h['instances']} collectives)")
            out.append(_row("clock_offset", None, int(h.get("instances") or 0), example, ranks=h.get("ranks") or []))
    return out


def _ranges(xs: Sequence[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7' (at most 16 ranges shown)."""
    spans: list[list[int]] = []
    for x in xs:
        if spans and spans[-1][1] == x - 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:16])
    return text + (f" ... ({len(xs)} in all)" if len(spans) > 16 else "")


def health(events: Events, *, ranks: Sequence[int] | None = None, world_size: int | None = None,
           ingest: Mapping[int, Mapping[str, Any]] | None = None,
           clocks: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The report's ``health`` section (module doc), ordered by :data:`ORDER`, then rank.

    ``events`` as traced (before any clock correction); ``ranks`` and ``world_size`` of the run;
    ``ingest``: per rank its manifest record (notices, dropped events); ``clocks``: the report's clocks
    section. Each is optional: a finding whose input is missing is not looked for.
    """
    p = prepare(events)
    runtime = _runtime(p)
    rows = [*gpu_not_captured(p, runtime), *accelerator_not_analysed(ingest or {}), *from_ingest(ingest or {}), *missing_ranks(ranks or [], world_size),
            *clock_offsets(clocks), *untraced_gaps(p), *graph_capture(runtime), *graph_kernels(p, runtime),
            *stream_overlap(p), *rounded_timestamps(p), *no_message_sizes(p), *outside_steps(p)]
    rank_key = lambda f: -1 if f["rank"] is None else f["rank"]  # noqa: E731
    return sorted(rows, key=lambda f: (ORDER.index(f["finding"]), rank_key(f)))


def accelerator_unread(report: dict[str, Any]) -> bool:
    """Whether every rank of the report recorded an accelerator's activity ddprof did not analyse
    (``accelerator_not_analysed``): its timeline verdicts would describe host operators as the device."""
    ranks = set(report.get("run", {}).get("ranks") or [])
    found = {r for row in rows(report.get("health") or [], HealthFinding)
             if row.finding == "accelerator_not_analysed" for r in row.ranks}
    return bool(ranks) and ranks <= found


def _ranks_text(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8])) + (f" ... ({len(ranks)} in all)" if len(ranks) > 8 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def health_verdicts(report: dict[str, Any]) -> list[str]:
    """The trace-health findings that change a headline number (``headline``), one sentence per finding
    over all its ranks. Example: "rank 0: 120 GPU launches recorded but no GPU activity: the GPU side was
    not captured; the numbers describe its CPU threads only"."""
    by: dict[str, list[HealthFinding]] = {}
    for row in rows(report.get("health") or [], HealthFinding):
        if row.headline:
            by.setdefault(row.finding, []).append(row)
    out = []
    for finding, found in by.items():
        ranks = sorted({r for row in found for r in row.ranks})
        count = sum(row.count for row in found)
        if finding == "gpu_not_captured":
            out.append(f"{_ranks_text(ranks)}: {count} GPU launches recorded but no GPU activity: the GPU side was "
                       "not captured; the numbers describe the CPU threads only")
        elif finding == "accelerator_not_analysed":
            what = found[0].example.split(" events:")[0]
            out.append(f"{_ranks_text(ranks)}: {count} events of the {what} accelerator's own activity were not "
                       f"analysed (ddprof reads no {what} device work): the numbers describe the host's operators, "
                       "not the accelerator, and no overlap, idle or step verdict is drawn from them")
        elif finding == "events_lost":
            out.append(f"{_ranks_text(ranks)}: the profiler reports lost events (\"{found[0].example}\"): work "
                       "missing from the trace reads as idle time")
        elif finding == "missing_ranks":
            out.append(f"{found[0].example}: collectives and stragglers compare the traced ranks only")
        else:
            out.append(f"{_ranks_text(ranks)}: {finding.replace('_', ' ')} ({count}): {found[0].affects}")
    return out


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

SECTIONS = (
    Section("health", [], analysed=False, verdict=health_verdicts, verdict_at=10, record=list[HealthFinding], order=150),
)
