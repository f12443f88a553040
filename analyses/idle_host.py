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


class _Axis:
    """Several ranks' times on one axis: each rank's from its own origin, the ranks ``stride`` apart, so that one
    sort orders times by (rank, time) and no interval of one rank meets another's. Example: ranks 3 and 5 with
    origins 100 and 7,000 and stride 50 -> rank 5's time 7,010 is at 50 + 10 = 60."""

    def __init__(self, rank: np.ndarray, start: np.ndarray, end: np.ndarray):
        self.ranks = np.unique(rank)
        at = np.searchsorted(self.ranks, rank)
        self.origin = np.full(len(self.ranks), np.iinfo(np.int64).max)
        np.minimum.at(self.origin, at, start)
        reach = np.zeros(len(self.ranks), dtype=np.int64)
        np.maximum.at(reach, at, end - self.origin[at])
        self.stride = int(reach.max()) + 1 if len(reach) else 1

    def fits(self) -> bool:
        return self.stride * len(self.ranks) < 1 << 62

    def index(self, rank: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.ranks, rank)

    def on(self, at: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Times ``t`` of the ranks at index ``at`` on the axis."""
        return t - self.origin[at] + at * self.stride

    def off(self, at: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Axis positions of the ranks at index ``at`` back to their times."""
        return x - at * self.stride + self.origin[at]


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
    """Per GPU rank idle through :data:`MIN_IDLE_PCT` of its span or more: the columns of :class:`IdleHostRow`
    (module doc). All ranks at once, on one time axis (:class:`_Axis`; rank by rank where their spans are too
    long to share one), and only the runtime calls that overlap an idle interval take part."""
    p = prepare(events)
    lengths = rank_lengths(p).filter(pl.col("on_gpu") & (pl.col("span_ns") > 0)
                                     & (100 * (pl.col("span_ns") - pl.col("busy_ns")) >= MIN_IDLE_PCT * pl.col("span_ns")))
    if lengths.height == 0:
        return pl.DataFrame(schema=_SCHEMA)
    ranks = lengths["rank"].cast(pl.Int64).to_list()
    device = kernels(p).filter(pl.col("rank").is_in(ranks)).select(
        pl.col("rank").cast(pl.Int64), pl.col("ts_ns").alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
    calls = collect(p.events.filter((pl.col("kind") == "runtime") & pl.col("stream").is_null()
                                    & pl.col("rank").is_in(ranks))
                    .select(pl.col("rank").cast(pl.Int64), "name", pl.col("ts_ns").alias("start"),
                            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end")))
    both = pl.concat([device, calls.drop("name")])
    axis = _Axis(*(both[c].to_numpy() for c in ("rank", "start", "end")))
    if axis.fits():
        out = _attributed(p, axis, device, calls)
    else:  # one rank's span times the ranks past int64 (a clock decades off): rank by rank
        out = pl.concat([_attributed(p, _Axis(*(both.filter(pl.col("rank") == r)[c].to_numpy()
                                                  for c in ("rank", "start", "end"))),
                                     device.filter(pl.col("rank") == r), calls.filter(pl.col("rank") == r))
                         for r in ranks])
    return out if out.height else pl.DataFrame(schema=_SCHEMA)


def _idle_gaps(p: Prepared, axis: _Axis, device: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ranks' device idle intervals on ``axis``, sorted (start, end, rank index): between their merged device
    rows (no row running on any stream), within a profiling window (the time between two windows was never
    traced). A gap wherever a row starts after every earlier row of its rank ended."""
    at = axis.index(device["rank"].to_numpy())
    a, e = axis.on(at, device["start"].to_numpy()), axis.on(at, device["end"].to_numpy())
    order = np.argsort(a, kind="stable")
    a, e, at = a[order], e[order], at[order]
    reach = np.maximum.accumulate(e)  # ranks lie apart on the axis: a maximum never crosses into the next
    gap = (at[1:] == at[:-1]) & (a[1:] > reach[:-1])
    gs, ge, gr = reach[:-1][gap], a[1:][gap], at[1:][gap]
    if gs.size and several_windows(p):
        times = pl.DataFrame({"rank": axis.ranks[gr], "start": axis.off(gr, gs), "last": axis.off(gr, ge) - 1})
        same = (window_of(p, times, "start") == window_of(p, times, "last")).to_numpy()
        gs, ge, gr = gs[same], ge[same], gr[same]
    return gs, ge, gr


def _attributed(p: Prepared, axis: _Axis, device: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """:func:`idle_host`'s rows for the ranks of ``axis``: their ``device`` rows (rank, start, end) and runtime
    ``calls`` (rank, name, start, end)."""
    gs, ge, g_rank = _idle_gaps(p, axis, device)
    n = len(axis.ranks)
    per = np.zeros((n, len(PRIORITY) + 1))
    named = [""] * n
    if calls.height and gs.size:
        c_rank = axis.index(calls["rank"].to_numpy())
        cs, ce = axis.on(c_rank, calls["start"].to_numpy()), axis.on(c_rank, calls["end"].to_numpy())
        inside = _idle_inside(gs, ge, cs, ce)
        hit = inside > 0
        if hit.any():
            found = (calls.filter(pl.Series(hit)).with_columns(pl.Series("__in", inside[hit]), pl.Series("__r", c_rank[hit]),
                                                               _class_expr().alias("__c"))
                     .with_columns(_long_calls().alias("__c")))
            per = _by_class(gs, ge, g_rank, cs[hit], ce[hit], found["__c"].to_numpy(), axis.stride, n)
            most = np.argmax(per[:, :-1], axis=1)  # per rank, the class with most idle time: its calls are named
            top = (found.filter(pl.Series(found["__c"].to_numpy() == most[c_rank[hit]]))  # the rows of that class
                   .group_by("__r", "name").agg(pl.col("__in").sum())
                   .sort("__r", "__in", "name", descending=[False, True, False]).group_by("__r", maintain_order=True)
                   .head(NAMED_CALLS))
            for r, part in top.partition_by("__r", as_dict=True, maintain_order=True).items():
                named[int(r[0])] = ", ".join(f"{name} {fmt_us(ns / NS_PER_US)}" for name, ns in part.select("name", "__in").iter_rows())
    idle_ns = np.bincount(g_rank, weights=(ge - gs).astype(np.float64), minlength=n)
    per[:, -1] = np.maximum(idle_ns - per[:, :-1].sum(axis=1), 0.0)  # outside every call: the rest, exactly
    keep = idle_ns > 0
    return pl.DataFrame({"rank": axis.ranks[keep], "idle_us": idle_ns[keep] / NS_PER_US,
                         **{f"{c}_us": per[keep, i] / NS_PER_US for i, c in enumerate(PRIORITY)},
                         "no_call_us": per[keep, -1] / NS_PER_US, "calls": [m for m, k in zip(named, keep) if k]},
                        schema=_SCHEMA)


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
