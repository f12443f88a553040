"""Data loading: the host time each step spends drawing its batch, and whether the devices wait for it.

A training step that draws its batch on the main thread (a ``DataLoader`` with ``num_workers=0``, or
workers that cannot keep up) holds everything after it back: the host launches nothing while it loads, and
a GPU that has finished the previous step's work sits idle. The idle time then reads as *host wait*
(:mod:`.idle`) and looks like a slow launch rate, where the fix is in the input pipeline (more loader
workers, pinned memory, prefetching). This module measures it per rank.

Which rows: the host spans named like a data loader (:data:`ddprof.vocabulary.loaders.DATA_LOADER_PATTERN`,
``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``), CPU ops or annotations inside a profiler
step, merged per (rank, step) so that nested or overlapping spans count once. (``ddprof analyze`` reads a GPU
rank's host ops only where it needs them: of its loaders, PyTorch's DataLoader spans, ``enumerate(DataLoader)…``,
:func:`.rank_groups.read_ranks`.) Per rank:

* ``steps`` and ``step_us``: its ``ProfilerStep#N`` annotations and their mean duration (the step time the
  training loop saw: host basis). A rank with no profiler step at all (a trace taken without
  ``prof.step()``) is measured over its traced span instead, as one window: ``steps`` 0, ``step_us`` its
  first start to last end, its loader spans wherever they lie;
* ``loading_us``: the merged loader time per step (a step without one counts 0); ``loading_pct`` its share
  of the steps' time;
* on a rank with device work, ``device_idle_us``: per step, the loader time during which none of the rank's
  device rows ran (kernels, copies, memsets on any stream), within the rank's first to last device row;
  ``device_idle_pct`` its share of the loader time in that span. A loader the device runs under (the
  previous step's kernels still queued: the host loads ahead) costs nothing; one it waits through is
  exposed. Null on a CPU-only rank (the loader runs on the ranks' only processor: it is exposed).
* ``op``: the loader span with the most time (its name).

Example: ProfilerStep#5 [0, 176) ms holding ``enumerate(DataLoader)#…__next__`` [0, 69) ms, the GPU idle
from 2 ms to 69 ms (the previous step's last kernels end at 2 ms) -> loading 69 ms, 39 % of the step,
device idle 67 ms, 97 % of the loading.

The verdict (:func:`loading_verdicts`) speaks where data loading is :data:`LOADING_WORTH_PCT` of the steps'
time or more and, on device ranks, the devices are idle through :data:`EXPOSED_PCT` of it or more: a
loader that takes 1 % of the step (workers keeping up), or one the GPU runs under, is no finding.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import polars as pl
from ddprof.analyses.frames import intervals as iv
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived, prepare
from ddprof.analyses.frames.sets import kernels, rank_spans, steps
from ddprof.analyses.sections import Section
from msgspec import Meta

from ddprof.report.display import Column, Table
from ddprof.report.schema import Pct, Rank, Row
from ddprof.store.schema import STEP_PREFIX
from ddprof.vocabulary.loaders import DATA_LOADER_PATTERN
from ddprof.vocabulary.units import NS_PER_US, fmt_pct, fmt_us

#: Data loading below this share of the steps' time is not worth a verdict (a loader whose workers keep up
#: takes about 1 %).
LOADING_WORTH_PCT = 10.0
#: On a device rank, the share of the loader time the devices must be idle through for the verdict.
EXPOSED_PCT = 50.0


class DataLoadingRow(Row):
    """One rank's data loading per profiler step (module doc)."""

    rank: Rank
    steps: Annotated[int, Meta(description="profiler steps of the rank; 0: it has none, and the row covers its traced span")]
    step_us: Annotated[float, Meta(description="mean ProfilerStep duration (host), µs; with no step, the traced span")]
    loading_us: Annotated[float, Meta(description="mean host time in data-loader spans per step, µs")]
    loading_pct: Pct
    device_idle_us: Annotated[float | None, Meta(
        description="per step, the loading time during which the rank's devices ran nothing, µs; null on a CPU rank")]
    device_idle_pct: Pct
    op: Annotated[str, Meta(description="the data-loader span with the most time")]


_SCHEMA = {"rank": pl.Int64, "steps": pl.Int64, "step_us": pl.Float64, "loading_us": pl.Float64,
           "loading_pct": pl.Float64, "device_idle_us": pl.Float64, "device_idle_pct": pl.Float64, "op": pl.String}


@derived
def loader_spans(p: Prepared) -> pl.DataFrame:
    """The data-loader spans inside profiler steps: rank, step, name, start, end (module doc). The host rows
    first, the pattern then on them alone (a regular expression over every row of a large run costs)."""
    host = collect(p.events.filter(pl.col("stream").is_null() & pl.col("kind").is_in(["cpu_op", "annotation"])
                                   & pl.col("step").is_not_null() & ~pl.col("name").str.starts_with(STEP_PREFIX))
                   .select("rank", "step", "name", "ts_ns", "dur_ns"))
    return host.filter(pl.col("name").str.contains(DATA_LOADER_PATTERN)).select(
        pl.col("rank").cast(pl.Int64), "step", "name", pl.col("ts_ns").alias("start"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))


@derived
def loading_intervals(p: Prepared) -> pl.DataFrame:
    """The loader spans merged per (rank, step), nested or overlapping ones once: rank, step, start, end (what
    this section and the ``step_times`` rows add up)."""
    return collect(iv.merge(loader_spans(p).lazy(), ["rank", "step"]))


_NO_HOST = pl.DataFrame(schema={"rank": pl.Int64, "name": pl.String, "ts_ns": pl.Int64, "dur_ns": pl.Int64})


def _unstepped(p: Prepared) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The ranks with no profiler step at all: their loader spans anywhere (rank, name, start, end), merged
    per rank (rank, start, end), and their traced span as the one window measured (rank, steps 0, __step_ns:
    first start to last end of any row). Where every rank has a step (most runs), no row is read."""
    none = set(rank_spans(p)["rank"].to_list()) - set(steps(p)["rank"].to_list())
    host = collect(p.events.filter(pl.col("stream").is_null() & pl.col("kind").is_in(["cpu_op", "annotation"])
                                   & pl.col("rank").is_in(sorted(none)))
                   .select(pl.col("rank").cast(pl.Int64), "name", "ts_ns", "dur_ns")) if none else _NO_HOST
    spans = host.filter(pl.col("name").str.contains(DATA_LOADER_PATTERN)).select(  # the pattern on these rows alone
        "rank", "name", pl.col("ts_ns").alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
    merged = collect(iv.merge(spans.lazy(), ["rank"]))
    window = (rank_spans(p).lazy().select(pl.col("rank").cast(pl.Int64), pl.lit(0, pl.Int64).alias("steps"),
                                          (pl.col("last_ns") - pl.col("first_ns")).alias("__step_ns"))
              .join(merged.lazy().select("rank").unique(), on="rank", how="semi"))
    return spans, merged, collect(window)


def data_loading(events: Events) -> pl.DataFrame:
    """Per rank with a data-loader span in a step, or anywhere on a rank with no step: the columns of
    :class:`DataLoadingRow` (module doc)."""
    p = prepare(events)
    spans, merged = loader_spans(p), loading_intervals(p)
    lone_spans, lone_merged, lone_window = _unstepped(p)
    if spans.is_empty() and lone_spans.is_empty():
        return pl.DataFrame(schema=_SCHEMA)
    st = pl.concat([steps(p).lazy().with_columns(pl.col("rank").cast(pl.Int64))
                    .group_by("rank").agg(pl.len().cast(pl.Int64).alias("steps"),
                                          (pl.col("end") - pl.col("start")).sum().alias("__step_ns")),
                    lone_window.lazy()])
    spans = pl.concat([spans.select("rank", "name", "start", "end"), lone_spans])
    merged = pl.concat([merged.select("rank", "start", "end"), lone_merged.select("rank", "start", "end")])
    loading = merged.group_by("rank").agg((pl.col("end") - pl.col("start")).sum().alias("__load_ns"))
    op = (spans.group_by("rank", "name").agg((pl.col("end") - pl.col("start")).sum().alias("__t"))
          .sort("rank", "__t", "name", descending=[False, True, False]).group_by("rank", maintain_order=True).first()
          .select("rank", pl.col("name").alias("op")))
    device = kernels(p).lazy().select(pl.col("rank").cast(pl.Int64), pl.col("ts_ns").alias("start"),
                                      (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
    span = device.group_by("rank").agg(pl.col("start").min().alias("w_start"), pl.col("end").max().alias("w_end"))
    inside = iv.clip(merged.lazy().select("rank", "start", "end"), span, ["rank"])
    bare = iv.subtract(inside, device, ["rank"])  # loading with no device row running
    idle = collect(
        inside.group_by("rank").agg((pl.col("end") - pl.col("start")).sum().alias("__in_ns"))
        .join(bare.group_by("rank").agg((pl.col("end") - pl.col("start")).sum().alias("__idle_ns")),
              on="rank", how="left")
        .with_columns(pl.col("__idle_ns").fill_null(0)))
    out = collect(
        loading.lazy().join(st, on="rank", how="inner").join(op.lazy(), on="rank", how="left")
        .join(idle.lazy(), on="rank", how="left")
        .join(span.select("rank", pl.lit(True).alias("__gpu")), on="rank", how="left")
        .with_columns(pl.max_horizontal("steps", 1).alias("__windows"))  # a rank with no step: its traced span
        .select(
            "rank", "steps",
            (pl.col("__step_ns") / pl.col("__windows") / NS_PER_US).alias("step_us"),
            (pl.col("__load_ns") / pl.col("__windows") / NS_PER_US).alias("loading_us"),
            pl.when(pl.col("__step_ns") > 0).then(100 * pl.col("__load_ns") / pl.col("__step_ns")).alias("loading_pct"),
            pl.when(pl.col("__gpu")).then(pl.col("__idle_ns").fill_null(0) / pl.col("__windows") / NS_PER_US)
            .alias("device_idle_us"),
            pl.when(pl.col("__gpu") & (pl.col("__in_ns") > 0)).then(100 * pl.col("__idle_ns") / pl.col("__in_ns"))
            .alias("device_idle_pct"),
            pl.col("op").fill_null(""))
        .sort("rank"))
    return out.cast(_SCHEMA)  # type: ignore[arg-type]


def loading_rows(report: dict[str, Any]) -> list[DataLoadingRow]:
    return msgspec.convert(report.get("data_loading") or [], list[DataLoadingRow])


def exposed(rows: list[DataLoadingRow]) -> bool:
    """Whether the ranks' data loading is a finding (module doc): :data:`LOADING_WORTH_PCT` of the steps' time
    or more on average over the ranks, and, where they have devices, idle devices through
    :data:`EXPOSED_PCT` of it or more."""
    if not rows:
        return False
    mean_pct = sum(r.loading_pct or 0.0 for r in rows) / len(rows)
    idle = _device_idle_pct(rows)
    on_device = any(r.device_idle_us is not None for r in rows)
    return mean_pct >= LOADING_WORTH_PCT and (not on_device or (idle is not None and idle >= EXPOSED_PCT))


def _device_idle_pct(rows: list[DataLoadingRow]) -> float | None:
    """The mean share of the loading time the devices were idle through, over the device ranks that loaded
    within their traced device work (None where none did: a loader before the first kernel tells nothing)."""
    known = [r.device_idle_pct for r in rows if r.device_idle_pct is not None]
    return sum(known) / len(known) if known else None


def loading_verdicts(report: dict[str, Any]) -> list[str]:
    """Data loading that holds the steps back (:func:`exposed`). Examples: "data loading takes 39 % of each
    step (enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__, 68.9 ms of a 176 ms host step), and the GPU
    is idle through 97 % of it: the input pipeline starves the GPU (more DataLoader workers, pinned memory,
    prefetching)"; over several ranks, the mean share and the rank that loads longest."""
    rows = loading_rows(report)
    if not exposed(rows):
        return []
    worst = max(rows, key=lambda r: (r.loading_pct or 0.0, -r.rank))
    mean_pct = sum(r.loading_pct or 0.0 for r in rows) / len(rows)
    if not any(r.steps for r in rows):  # no profiler step: over each rank's traced span
        text = (f"data loading takes {mean_pct:.0f} % of the traced time ({worst.op}, {fmt_us(worst.loading_us)} "
                f"of {fmt_us(worst.step_us)}" + (f" on rank {worst.rank}" if len(rows) > 1 else "")
                + "; the trace has no profiler steps)")
    elif len(rows) == 1:
        text = (f"data loading takes {mean_pct:.0f} % of each step ({worst.op}, {fmt_us(worst.loading_us)} of a "
                f"{fmt_us(worst.step_us)} host step)")
    else:
        text = (f"data loading takes {mean_pct:.0f} % of the step on average over {len(rows)} ranks (rank "
                f"{worst.rank} most: {worst.loading_pct or 0.0:.0f} %, {fmt_us(worst.loading_us)} of a "
                f"{fmt_us(worst.step_us)} host step; {worst.op})")
    idle = _device_idle_pct(rows)
    if idle is not None:
        gpus = "GPU is" if sum(r.device_idle_pct is not None for r in rows) == 1 else "GPUs are"
        return [f"{text}, and the {gpus} idle through {idle:.0f} % of it: the input pipeline starves the "
                f"{gpus.split()[0]} (more DataLoader workers, pinned memory, prefetching)"]
    return [f"{text}: the input pipeline holds the step back (more DataLoader workers, prefetching)"]


def idle_in_loading(report: dict[str, Any]) -> float | None:
    """The share (0-1) of the devices' idle time (``breakdown``'s, over the ranks with devices) that fell
    while their host loaded data, where the data loading is a finding (:func:`exposed`); else None."""
    rows = loading_rows(report)
    if not exposed(rows):
        return None
    idle = {b["rank"]: b["idle_us"] for b in report.get("breakdown") or []}
    during = sum((r.device_idle_us or 0.0) * max(r.steps, 1) for r in rows  # no step: the traced span, once
                 if r.device_idle_us is not None and r.rank in idle)
    total = sum(idle[r.rank] for r in rows if r.device_idle_us is not None and r.rank in idle)
    return min(during / total, 1.0) if total > 0 else None


LOADING_TABLE = Table(
    "Data loading per step (host time drawing the batch)",
    (Column("op", "op"), Column("rank", "rank"), Column("steps", "steps"), Column("host step", "step_us", fmt_us),
     Column("loading", "loading_us", fmt_us), Column("of step", "loading_pct", fmt_pct),
     Column("device idle in it", "device_idle_pct", fmt_pct)),
    rows=loading_rows, left=1, at=32)

SECTIONS = (
    Section("data_loading", [], data_loading, "steps", tables=(LOADING_TABLE,), verdict=loading_verdicts,
            verdict_at=35, record=list[DataLoadingRow], order=45),
)
