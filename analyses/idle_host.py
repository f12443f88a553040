"""Where the host was while its GPU sat idle: each GPU rank's device idle time split by the runtime calls its host
was inside at that moment.

Idle time whose gaps are *host wait* (:mod:`.idle`: the next kernel was launched after the previous one ended)
reads as "the CPU does not launch work fast enough". That is the launch rate's fault only when the host was
busy launching or running its own ops; a host inside ``cudaFree`` (the caching allocator giving memory back:
it waits for the device first), inside a call that waits for the device, or creating streams and loading
modules (start-up) needs another fix. Nsight Systems shows this as the CUDA API row beside an empty GPU row;
this module measures it.

Per GPU rank idle through :data:`MIN_IDLE_PCT` of its span or more:

* ``idle_us``: the time within its first to last device row (kernels, copies, memsets on any stream) with no
  device row running, within each profiling window (the breakdown's idle time);
* per class of runtime call (:mod:`ddprof.vocabulary.runtime_calls`: ``memory``, ``sync``, ``setup``,
  ``launch``, ``other``): the idle time during which the host was inside such a call, on any of its threads
  (a moment inside calls of several classes counts once, for the first class of
  :data:`~ddprof.vocabulary.runtime_calls.PRIORITY`); ``no_call_us``: the rest, the host outside every
  runtime call (its own ops, Python, a data loader, or nothing traced);
* ``calls``: the calls of the class with most idle time that had the most idle time inside them, e.g.
  ``cudaFree 1.21 s, cudaMalloc 8.2 ms``.

A launch call of :data:`LONG_LAUNCH_NS` or more is not enqueuing work (that takes microseconds): a kernel launch
that long while the device is idle is loading the kernel's module (CUDA's lazy loading, on its first launch) or
compiling it, and counts as ``setup``; an asynchronous copy or memset that long waited (a copy from or to
pageable host memory is done before the call returns) and counts as ``sync``.

Example: kernels [0, 10) and [30, 40) ms, the host in ``cudaFree`` over [8, 25) ms and in a 10 µs
``cudaLaunchKernel`` at 28 ms -> idle 20 ms: memory 15 ms, launch 10 µs, no call 4.99 ms.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import numpy as np
import polars as pl
from ddprof.analyses.frames.lengths import rank_lengths
from ddprof.analyses.frames.memo import Events, Prepared, collect, prepare
from ddprof.analyses.frames.sets import kernels
from ddprof.analyses.frames.windows import several_windows, window_of
from ddprof.analyses.sections import Section
from msgspec import Meta

from ddprof.report.display import Column, Table
from ddprof.report.schema import Rank, Row
from ddprof.vocabulary.runtime_calls import ASYNC_COPY, KERNEL_LAUNCH, PRIORITY, RUNTIME_CLASSES
from ddprof.vocabulary.units import NS_PER_US, fmt_us

#: Ranks whose device is idle less than this share of their span are left out (the idle verdict, which this
#: section serves, speaks from there: :data:`.idle.IDLE_WORTH_MENTIONING_PCT`); measuring them would cost a
#: tenth of a large run's report.
MIN_IDLE_PCT = 5.0
#: Calls named in ``calls``, at most.
NAMED_CALLS = 3
#: A launch call this long while the device sits idle is not enqueuing work (a few µs) (module doc).
LONG_LAUNCH_NS = 1_000_000


class IdleHostRow(Row):
    """One GPU rank's device idle time by where its host was (module doc)."""

    rank: Rank
    idle_us: Annotated[float, Meta(description="time within the first to last device row with none running, µs")]
    memory_us: Annotated[float, Meta(description="of it, the host inside memory calls (cudaMalloc, cudaFree...), µs")]
    sync_us: Annotated[float, Meta(description="the host inside calls that wait for the device, µs")]
    setup_us: Annotated[float, Meta(description="the host creating streams and events, loading modules, µs")]
    launch_us: Annotated[float, Meta(description="the host inside launch calls (cudaLaunchKernel...), µs")]
    other_us: Annotated[float, Meta(description="the host inside other runtime calls, µs")]
    no_call_us: Annotated[float, Meta(description="the host outside every runtime call, µs")]
    calls: Annotated[str, Meta(description="the calls of the class with most idle time that held most of it")]


_SCHEMA = {"rank": pl.Int64, "idle_us": pl.Float64, **{f"{c}_us": pl.Float64 for c in PRIORITY},
           "no_call_us": pl.Float64, "calls": pl.String}


def _on_one_axis(rank: np.ndarray, t: np.ndarray, origin: int, stride: int) -> np.ndarray:
    """Times of several ranks on one axis, each rank's shifted by its own stride, so that one sort orders them
    by (rank, time) and no interval of one rank meets another's: ``(t - origin) + rank_index * stride``."""
    return (t - origin) + rank * stride


def device_idle(p: Prepared, ranks: list[int]) -> pl.DataFrame:
    """rank, start, end: the idle intervals of GPU ``ranks``, between their merged device rows (no row running
    on any stream), within a profiling window (the time between two windows was never traced). NumPy over
    all ranks at once: the device rows sorted by (rank, start), a gap wherever a row starts after every
    earlier row of its rank ended."""
    k = kernels(p).filter(pl.col("rank").is_in(ranks))
    empty = pl.DataFrame(schema={"rank": pl.Int64, "start": pl.Int64, "end": pl.Int64})
    if k.height < 2:
        return empty
    rank = k["rank"].to_numpy().astype(np.int64)
    start = k["ts_ns"].to_numpy().astype(np.int64)
    end = start + k["dur_ns"].to_numpy().astype(np.int64)
    origin, stride = int(start.min()), int(end.max()) - int(start.min()) + 1
    if stride * (int(rank.max()) + 1) >= 1 << 62:  # cannot share one axis: rank by rank (never on real traces)
        order = np.lexsort((start, rank))
        rank, start, end = rank[order], start[order], end[order]
        reach = np.concatenate([[0], end[:-1]])
        for r in np.unique(rank):
            on = np.flatnonzero(rank == r)
            reach[on[1:]] = np.maximum.accumulate(end[on])[:-1]
        first = np.concatenate([[True], rank[1:] != rank[:-1]])
    else:
        a, e = _on_one_axis(rank, start, origin, stride), _on_one_axis(rank, end, origin, stride)
        order = np.argsort(a, kind="stable")
        rank, start, end, a, e = rank[order], start[order], end[order], a[order], e[order]
        reach_axis = np.maximum.accumulate(e)  # ranks lie apart on the axis: a maximum never crosses into the next
        first = np.concatenate([[True], rank[1:] != rank[:-1]])
        reach = np.concatenate([[0], reach_axis[:-1] - rank[:-1] * stride + origin])
    gap = ~first & (start > reach)
    gaps = pl.DataFrame({"rank": rank[gap], "start": reach[gap], "end": start[gap]})
    if gaps.height and several_windows(p):
        same = window_of(p, gaps, "start") == window_of(p, gaps.with_columns(pl.col("end") - 1), "end")
        gaps = gaps.filter(same)
    return gaps


def _class_expr() -> pl.Expr:
    """The class code of a runtime call by name: its index in :data:`PRIORITY`."""
    out = pl.lit(PRIORITY.index("other"), dtype=pl.Int8)
    for cls, pattern in reversed(RUNTIME_CLASSES.items()):  # the first pattern that matches decides
        out = pl.when(pl.col("name").str.contains(pattern)).then(pl.lit(PRIORITY.index(cls), dtype=pl.Int8)).otherwise(out)
    return out


def _long_calls() -> pl.Expr:
    """``__c`` with the long launch calls reclassified (module doc): a kernel launch as ``setup``, an
    asynchronous copy or memset as ``sync``."""
    long = (pl.col("__c") == PRIORITY.index("launch")) & (pl.col("end") - pl.col("start") >= LONG_LAUNCH_NS)
    return (pl.when(long & pl.col("name").str.contains(KERNEL_LAUNCH)).then(pl.lit(PRIORITY.index("setup"), pl.Int8))
            .when(long & pl.col("name").str.contains(ASYNC_COPY)).then(pl.lit(PRIORITY.index("sync"), pl.Int8))
            .otherwise("__c"))


def _idle_inside(gap_s: np.ndarray, gap_e: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per interval [s, e): its overlap with the disjoint sorted intervals [gap_s, gap_e), from the idle time
    accumulated before each of its ends."""
    before = np.concatenate([[0], np.cumsum(gap_e - gap_s)])

    def cum(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(gap_s, t, side="right")  # gaps starting at or before t
        last = np.maximum(k - 1, 0)
        inside = np.where(k > 0, np.clip(t - gap_s[last], 0, gap_e[last] - gap_s[last]), 0)
        return np.where(k > 0, before[last], 0) + inside

    return cum(e) - cum(s)


def _sweep(gap_s: np.ndarray, gap_e: np.ndarray, gap_rank: np.ndarray, s: np.ndarray, e: np.ndarray,
           cls: np.ndarray, rank: np.ndarray, ranks: int) -> np.ndarray:
    """Idle ns per (rank index, class: index in :data:`PRIORITY`, then no call last): one pass over the starts
    and ends of the gaps and calls (on one axis, ranks apart), each elementary segment given to the first
    class open in it."""
    k = len(PRIORITY)
    t = np.concatenate([gap_s, gap_e, s, e])
    owner = np.concatenate([gap_rank, gap_rank, rank, rank])
    channel = np.concatenate([np.full(len(gap_s) * 2, k), cls, cls]).astype(np.int64)
    step = np.concatenate([np.ones(len(gap_s), np.int32), -np.ones(len(gap_s), np.int32),
                           np.ones(len(s), np.int32), -np.ones(len(s), np.int32)])
    order = np.argsort(t, kind="stable")
    t, owner, channel, step = t[order], owner[order], channel[order], step[order]
    delta = np.zeros((len(t), k + 1), dtype=np.int32)  # open counts: far below 2**31
    delta[np.arange(len(t)), channel] = step
    open_ = np.cumsum(delta, axis=0, dtype=np.int32)
    length = np.diff(t, append=t[-1] if len(t) else 0)
    idle = open_[:, k] > 0
    first = np.where(open_[:, :k].any(axis=1), np.argmax(open_[:, :k] > 0, axis=1), k)  # k: no call
    return np.bincount(owner[idle] * (k + 1) + first[idle], weights=length[idle],
                       minlength=ranks * (k + 1)).reshape(ranks, k + 1)


def _merged(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [s, e) as disjoint sorted ones."""
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    at = np.flatnonzero(new)
    return s[at], np.maximum.reduceat(e, at)


def _by_class(gap_s: np.ndarray, gap_e: np.ndarray, gap_rank: np.ndarray, s: np.ndarray, e: np.ndarray,
              cls: np.ndarray, stride: int, ranks: int) -> np.ndarray:
    """Idle ns per (rank index, class, then no call last) (:func:`_sweep`'s result). Each class's calls merged
    and measured against the idle intervals; where no moment is inside calls of two classes (the classes'
    idle times add up to that of all the calls merged, rank by rank: a host with one thread calling the
    runtime), that is the answer, else the ranks concerned are swept."""
    k = len(PRIORITY)
    per = np.zeros((ranks, k + 1))
    for c in np.unique(cls):
        ms, me = _merged(s[cls == c], e[cls == c])
        per[:, c] = np.bincount(ms // stride, weights=_idle_inside(gap_s, gap_e, ms, me).astype(np.float64),
                                minlength=ranks)
    ms, me = _merged(s, e)
    union = np.bincount(ms // stride, weights=_idle_inside(gap_s, gap_e, ms, me).astype(np.float64), minlength=ranks)
    mixed = np.flatnonzero(per[:, :k].sum(axis=1) != union)  # a moment inside calls of two classes
    if mixed.size:
        g, c = np.isin(gap_rank, mixed), np.isin(s // stride, mixed)
        per[mixed] = _sweep(gap_s[g], gap_e[g], gap_rank[g], s[c], e[c], cls[c], s[c] // stride, ranks)[mixed]
    return per


def idle_host(events: Events) -> pl.DataFrame:
    """Per GPU rank with device idle time: the columns of :class:`IdleHostRow` (module doc). All ranks at once,
    on one time axis (:func:`_on_one_axis`); only the runtime calls that overlap an idle interval take part."""
    p = prepare(events)
    lengths = rank_lengths(p).filter(pl.col("on_gpu") & (pl.col("span_ns") > 0)
                                     & (100 * (pl.col("span_ns") - pl.col("busy_ns")) >= MIN_IDLE_PCT * pl.col("span_ns")))
    gaps = device_idle(p, lengths["rank"].to_list()) if lengths.height else pl.DataFrame()
    if gaps.is_empty():
        return pl.DataFrame(schema=_SCHEMA)
    calls = collect(p.events.filter((pl.col("kind") == "runtime") & pl.col("stream").is_null()
                                    & pl.col("rank").is_in(gaps["rank"].unique().to_list()))
                    .select(pl.col("rank").cast(pl.Int64), "name", pl.col("ts_ns").alias("start"),
                            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end")))
    starts = np.concatenate([gaps["start"].to_numpy(), calls["start"].to_numpy()])
    ends = np.concatenate([gaps["end"].to_numpy(), calls["end"].to_numpy()])
    if (int(ends.max()) - int(starts.min()) + 1) * gaps["rank"].n_unique() < 1 << 62:
        return _attributed(gaps, calls)
    # ranks whose clocks lie too far apart to share one axis (a trace from 1970 beside one of today): one by one
    return pl.concat([_attributed(g, calls.filter(pl.col("rank") == r))
                      for (r,), g in gaps.partition_by("rank", as_dict=True, maintain_order=True).items()])


def _attributed(gaps: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """:func:`idle_host`'s rows for the ranks of ``gaps`` (rank, start, end), with their runtime ``calls`` (rank,
    name, start, end), on one time axis."""
    ranks = np.unique(gaps["rank"].to_numpy())
    g_rank = np.searchsorted(ranks, gaps["rank"].to_numpy())
    g_s, g_e = gaps["start"].to_numpy(), gaps["end"].to_numpy()
    c_s, c_e = calls["start"].to_numpy(), calls["end"].to_numpy()
    lo = min(int(g_s.min()), int(c_s.min())) if calls.height else int(g_s.min())
    hi = max(int(g_e.max()), int(c_e.max())) if calls.height else int(g_e.max())
    stride = hi - lo + 1
    per = np.zeros((len(ranks), len(PRIORITY) + 1))
    named = [""] * len(ranks)
    if calls.height and stride * len(ranks) < 1 << 62:  # one rank spanning 146 years: its calls are not looked at
        gs, ge = _on_one_axis(g_rank, g_s, lo, stride), _on_one_axis(g_rank, g_e, lo, stride)
        order = np.argsort(gs, kind="stable")
        gs, ge = gs[order], ge[order]
        c_rank = np.searchsorted(ranks, calls["rank"].to_numpy())
        cs, ce = _on_one_axis(c_rank, c_s, lo, stride), _on_one_axis(c_rank, c_e, lo, stride)
        inside = _idle_inside(gs, ge, cs, ce)
        hit = inside > 0
        if hit.any():
            found = (calls.filter(pl.Series(hit)).with_columns(pl.Series("__in", inside[hit]), pl.Series("__r", c_rank[hit]),
                                                               _class_expr().alias("__c"))
                     .with_columns(_long_calls().alias("__c")))
            per = _by_class(gs, ge, g_rank[order], cs[hit], ce[hit], found["__c"].to_numpy(), stride, len(ranks))
            most = np.argmax(per[:, :-1], axis=1)  # per rank, the class with most idle time: its calls are named
            top = (found.filter(pl.Series(found["__c"].to_numpy() == most[c_rank[hit]]))  # the rows of that class
                   .group_by("__r", "name").agg(pl.col("__in").sum())
                   .sort("__r", "__in", "name", descending=[False, True, False]).group_by("__r", maintain_order=True)
                   .head(NAMED_CALLS))
            for r, part in top.partition_by("__r", as_dict=True, maintain_order=True).items():
                named[int(r[0])] = ", ".join(f"{n} {fmt_us(ns / NS_PER_US)}" for n, ns in part.select("name", "__in").iter_rows())
    idle_ns = np.bincount(g_rank, weights=(g_e - g_s).astype(np.float64), minlength=len(ranks))
    per[:, -1] = np.maximum(idle_ns - per[:, :-1].sum(axis=1), 0.0)  # outside every call: the rest, exactly
    return pl.DataFrame({"rank": ranks, "idle_us": idle_ns / NS_PER_US,
                         **{f"{c}_us": per[:, i] / NS_PER_US for i, c in enumerate(PRIORITY)},
                         "no_call_us": per[:, -1] / NS_PER_US, "calls": named}, schema=_SCHEMA)


def idle_host_rows(report: dict[str, Any]) -> list[IdleHostRow]:
    return msgspec.convert(report.get("idle_host") or [], list[IdleHostRow])


#: A class of calls the host was in through this share of the devices' idle time or more is named by the idle
#: verdict (:mod:`.idle`).
NAMED_SHARE = 0.3
#: What the host was doing, and the usual fix, per class the idle verdict names.
FINDINGS = {
    "memory": ("allocating and freeing device memory",
               "the caching allocator gives memory back and takes it again, and cudaFree waits for the device "
               "(torch.cuda.empty_cache(), fragmentation, shapes that keep changing; a single cudaFree of seconds "
               "at the start is CUDA creating its context)"),
    "sync": ("blocked in calls that wait for the device",
             "a synchronisation in the step (.item(), .cpu(), a blocking copy) leaves the device nothing queued"),
    "setup": ("creating streams and events and loading modules",
              "start-up and warm-up work, not the training loop: trace steps after the first ones"),
}


def host_in_idle(report: dict[str, Any]) -> tuple[str, float, str] | None:
    """The class of calls (:data:`FINDINGS`) the hosts were inside through :data:`NAMED_SHARE` or more of their
    devices' idle time, over the GPU ranks: (class, share 0-1, the calls named on the rank with most of it);
    else None."""
    rows = idle_host_rows(report)
    idle = sum(r.idle_us for r in rows)
    if idle <= 0:
        return None
    share = {c: sum(getattr(r, f"{c}_us") for r in rows) / idle for c in FINDINGS}
    top = max(share, key=lambda c: share[c])
    if share[top] < NAMED_SHARE:
        return None
    worst = max(rows, key=lambda r: getattr(r, f"{top}_us"))
    return top, share[top], worst.calls


IDLE_HOST_TABLE = Table(
    "Device idle time: where the host was",
    (Column("rank", "rank"), Column("idle", "idle_us", fmt_us), Column("memory", "memory_us", fmt_us),
     Column("sync", "sync_us", fmt_us), Column("setup", "setup_us", fmt_us), Column("launch", "launch_us", fmt_us),
     Column("other calls", "other_us", fmt_us), Column("no call", "no_call_us", fmt_us),
     Column("calls", "calls")),
    rows=idle_host_rows, at=31)

SECTIONS = (
    Section("idle_host", [], idle_host, "idle", tables=(IDLE_HOST_TABLE,), record=list[IdleHostRow], order=41),
)
