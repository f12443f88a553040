"""What a timeline draws, loaded once from the run dir's Parquet store into NumPy arrays per rank.

Drawn rows: on a rank with GPU kernels, every row on a GPU stream (one lane per stream); on a CPU rank,
the CPU ops and communication rows (one lane per thread). Within a lane only the outermost events are
kept (an event starting before the running maximum of the earlier ends is nested and dropped), so a lane's
events are disjoint and its busy time per bin never exceeds the bin.

Steps are marked where each rank's drawn events of that step begin and end (the ``step`` column, which
GPU rows inherit from their launch).

Each drawn event is coloured by one of :data:`CLASSES`: compute (GPU compute kernels, CPU ops), comm,
memcpy (memcpy, memset), other (sync and the rest). Times are ns since the run's first event (``t0_ns``,
the smallest ``first_ns`` of the manifest). ``pos`` is the event's row number in its rank's parts, so the details of a few events are read
back with one sliced scan instead of being held in memory.

Occupancy, per rank and class, is precomputed on a fine grid of ``fine_bins`` equal bins over the run
(``busy[r, c, b]`` = ns of bin b covered by class c on rank r, lanes summed). An event [s, e) adds
``min(e, edge_{b+1}) − max(s, edge_b)`` to every bin b it touches: its first and last bins get their
partial lengths, the bins between get the full width (a difference array). Example: width 10, event
[5, 27) -> bins 0, 1, 2 get 5, 10, 7.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ddprof.rundir import Run

CLASSES = ("compute", "comm", "memcpy", "other")
_CLASS_OF = {"compute": 0, "cpu_op": 0, "comm": 1, "memcpy": 2, "memset": 2}
#: Fine bins of the occupancy grid: as many as fit in this many cells (ranks x classes x bins), at most 65,536.
FINE_CELLS = 24_000_000
MAX_FINE_BINS = 65_536


@dataclass
class RankEvents:
    """One rank's drawn events, sorted by start (ns since ``t0``); lanes index ``lane_names``."""

    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray
    lane: np.ndarray
    pos: np.ndarray
    lane_names: list[str]
    max_dur: int

    def window(self, t0: int, t1: int) -> np.ndarray:
        """Indices of the events that overlap [t0, t1): started before t1 and ending after t0."""
        lo = int(np.searchsorted(self.start, t0 - self.max_dur, side="left"))
        hi = int(np.searchsorted(self.start, t1, side="left"))
        idx = np.arange(lo, hi)
        return idx[self.end[lo:hi] > t0]


@dataclass
class TimelineData:
    """Every rank's drawn events, the step windows and the fine occupancy grid (module doc)."""

    run: Run
    ranks: list[int]
    t0_ns: int
    span_ns: int
    ranks_events: dict[int, RankEvents]
    steps: pl.DataFrame  # rank, step, start, end (ns since t0)
    fine_bins: int
    busy: np.ndarray = field(repr=False)  # (ranks, classes, fine_bins) float32 ns

    @property
    def bin_ns(self) -> float:
        return self.span_ns / self.fine_bins

    def details(self, rank: int, pos: np.ndarray) -> pl.DataFrame:
        """The stored rows at ``pos`` (see module doc) of one rank, in the order of ``pos``."""
        if pos.size == 0:
            return pl.DataFrame()
        lo, hi = int(pos.min()), int(pos.max())
        cols = ["name", "step", "coll_op", "bytes", "pg", "peer"]
        rows = self.run.events([rank]).select(cols).slice(lo, hi - lo + 1).collect()
        return rows[(pos - lo).tolist()]


def _lanes(df: pl.DataFrame) -> tuple[np.ndarray, list[str]]:
    is_gpu = df.get_column("stream").is_not_null()
    key = pl.when(is_gpu).then(pl.col("stream")).otherwise(pl.col("tid"))
    keys = df.select(key.alias("k"), is_gpu.alias("g")).unique(maintain_order=False).sort("g", "k", descending=[True, False])
    names = [f"stream {k}" if g else f"thread {k}" for k, g in keys.iter_rows()]
    lut = keys.with_row_index("lane").with_columns(pl.col("lane").cast(pl.Int16))
    lane = df.select(key.alias("k"), is_gpu.alias("g")).join(lut, on=["k", "g"], how="left",
                                                              maintain_order="left").get_column("lane")
    return lane.to_numpy(), names


def _outermost(start: np.ndarray, end: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Mask of the events not nested in an earlier event of their lane (input sorted by lane, start)."""
    if start.size == 0:
        return np.zeros(0, dtype=bool)
    offset = lane.astype(np.int64) * (int(end.max()) + 1)  # lanes apart: one running max over all
    reach = np.maximum.accumulate(end + offset)
    prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    return (start + offset) >= prev


def _rank_events(df: pl.DataFrame) -> RankEvents:
    lane, names = _lanes(df)
    start = df.get_column("ts").to_numpy()
    end = start + df.get_column("dur_ns").to_numpy()
    order = np.lexsort((start, lane))
    start, end, lane = start[order], end[order], lane[order]
    keep = _outermost(start, end, lane)
    idx = order[keep]
    by_start = np.argsort(start[keep], kind="stable")
    idx = idx[by_start]
    cls = df.get_column("cls").to_numpy()
    s, e = start[keep][by_start], end[keep][by_start]
    return RankEvents(start=s, end=e, cls=cls[idx].astype(np.int8), lane=lane[keep][by_start],
                      pos=df.get_column("pos").to_numpy()[idx], lane_names=names,
                      max_dur=int((e - s).max()) if s.size else 0)


def occupancy(start: np.ndarray, end: np.ndarray, group: np.ndarray, groups: int, t0: float, width: float,
              bins: int) -> np.ndarray:
    """Busy ns per (group, bin) of ``bins`` bins of ``width`` ns from ``t0`` (module doc; clipped to the grid)."""
    out = np.zeros(groups * bins + 1, dtype=np.float64)
    if start.size == 0:
        return out[:-1].reshape(groups, bins)
    s = np.clip((start - t0) / width, 0, bins)
    e = np.clip((end - t0) / width, 0, bins)
    keep = e > s
    s, e, g = s[keep], e[keep], group[keep].astype(np.int64) * bins
    b0 = np.minimum(np.floor(s).astype(np.int64), bins - 1)
    b1 = np.minimum(np.floor(e).astype(np.int64), bins - 1)
    same = b0 == b1
    n = groups * bins + 1
    out += np.bincount(g[same] + b0[same], weights=(e - s)[same], minlength=n)
    d = ~same
    out += np.bincount(g[d] + b0[d], weights=(b0[d] + 1 - s[d]), minlength=n)
    out += np.bincount(g[d] + b1[d], weights=(e[d] - b1[d]), minlength=n)
    full = np.bincount(g[d] + b0[d] + 1, minlength=n) - np.bincount(g[d] + b1[d], minlength=n)
    out += np.cumsum(full)  # 1 per bin strictly between b0 and b1 (never crosses a group: b1 <= bins-1)
    return (out[:-1] * width).reshape(groups, bins)


def _fine_bins(ranks: int) -> int:
    n = 1024
    while n * 2 <= MAX_FINE_BINS and ranks * len(CLASSES) * n * 2 <= FINE_CELLS:
        n *= 2
    return n


def load(run: Run) -> TimelineData:
    """Read the drawn rows of every rank (module doc) and build the fine occupancy grid."""
    ranks = run.ranks
    gpu_ranks = [r for r in ranks if run.rank_info(r).get("kernels", 1) > 0 or run.rank_info(r).get("gpu")]
    firsts = [run.rank_info(r).get("first_ns") for r in ranks]
    counts = [run.rank_info(r).get("events") for r in ranks]
    if any(c is None for c in counts):
        counts = [int(run.events([r]).select(pl.len()).collect().item()) for r in ranks]
    first_row = pl.DataFrame({"rank": ranks, "first_row": np.cumsum([0, *counts[:-1]])},
                             schema={"rank": pl.Int32, "first_row": pl.Int64})
    lf = run.events().with_row_index("pos")
    drawn = (pl.col("stream").is_not_null() & pl.col("rank").is_in(gpu_ranks)) | (
        ~pl.col("rank").is_in(gpu_ranks) & pl.col("stream").is_null() & pl.col("kind").is_in(["cpu_op", "comm"]))
    kind_cls = pl.col("kind").cast(pl.String).replace_strict(_CLASS_OF, default=3, return_dtype=pl.Int8)
    df = lf.filter(drawn).select("pos", "rank", "ts_ns", "dur_ns", "stream", "tid", "step",
                                 kind_cls.alias("cls")).collect()
    steps = (df.drop_nulls("step").group_by("rank", "step")
             .agg(pl.col("ts_ns").min().alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end")))
    known = [f for f in firsts if f is not None]
    t0 = min(known) if known and len(known) == len(ranks) else int(df.get_column("ts_ns").min() or 0)
    df = df.join(first_row, on="rank", how="left").with_columns(
        (pl.col("ts_ns") - t0).alias("ts"), (pl.col("pos").cast(pl.Int64) - pl.col("first_row")).alias("pos"))
    steps = steps.with_columns(pl.col("start") - t0, pl.col("end") - t0).sort("rank", "step")
    per: dict[int, RankEvents] = {}
    for (r,), part in df.partition_by("rank", as_dict=True, maintain_order=False).items():
        per[int(r)] = _rank_events(part)  # type: ignore[call-overload]
    empty = np.zeros(0, dtype=np.int64)
    for r in ranks:
        per.setdefault(r, RankEvents(empty, empty, empty.astype(np.int8), empty.astype(np.int16), empty, [], 0))
    span = max([int(e.end.max()) for e in per.values() if e.end.size] + [int(steps.get_column("end").max() or 1)
                                                                         if steps.height else 1])
    fine = _fine_bins(len(ranks))
    busy = np.zeros((len(ranks), len(CLASSES), fine), dtype=np.float32)
    for i, r in enumerate(ranks):
        ev = per[r]
        busy[i] = occupancy(ev.start, ev.end, ev.cls, len(CLASSES), 0.0, span / fine, fine)
    return TimelineData(run=run, ranks=ranks, t0_ns=t0, span_ns=span, ranks_events=per, steps=steps,
                        fine_bins=fine, busy=busy)


def summary(data: TimelineData) -> dict[str, Any]:
    """Counts for a log line: ranks, drawn events, fine bins."""
    return {"ranks": len(data.ranks), "events": sum(e.start.size for e in data.ranks_events.values()),
            "fine_bins": data.fine_bins}
