"""Level of detail: a time window of a run in, what the browser should draw out (plain data, no plotly).

:func:`view` answers a window ``[t0, t1)`` (ns since the run's first event) for every rank, one row each,
and one more row per lane (stream or thread) of the ``expand``-ed rank, right below it:

* ``events`` mode when the grid's start counts say the window may hold few enough events (at most
  :data:`ROW_CAP` on every row and :data:`TOTAL_CAP` in all), the run has at most :data:`DETAIL_RANKS`
  ranks, and the events read from the store for that window confirm it: the real events, each with its
  row, start, end, colour class and its name and collective metadata for the hover.
* ``bins`` mode otherwise: for every row, busy ns per colour class in ``bins`` equal bins over the window.
  A window that spans at least ``bins`` grid cells is answered by summing ``k`` adjacent cells
  (``k = ⌈cells in window / bins⌉``, at most ``bins`` bins from the edge of the window's first cell, so
  that every cell it touches is drawn), with no event read; a narrower one from its events read from the
  store (:func:`~.data.occupancy`) when the run has at most :data:`DETAIL_RANKS` ranks and the grid
  counts at most :data:`READ_CAP` events there, else at the grid's own resolution (one bin a cell:
  reading a thousand ranks' parts takes seconds). Example: cells of 1,024 ns, a window of 10 ms (9,766
  cells) and 1,000 bins -> k = 10, 977 bins each the sum of 10 cells. The expanded rank's lanes are always binned from its events.

A rank that failed to ingest keeps its row, with nothing drawn and its error on the row.
Either way no row gets more than ``max(bins, ROW_CAP)`` shapes: the budget the browser never exceeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from ddprof.dashboards.timeline.data import CLASSES, RankEvents, TimelineData, occupancy

ROW_CAP = 2_000
TOTAL_CAP = 12_000
#: Events mode reads the hover details from the store for every rank: at most this many ranks.
DETAIL_RANKS = 64
DEFAULT_BINS = 1_000
#: A window narrower than ``bins`` grid cells is binned from its events when the grid says it holds at
#: most this many (row-lane events over all ranks); above, at the grid's own resolution.
READ_CAP = 3_000_000


@dataclass(frozen=True)
class Row:
    rank: int
    lane: int | None  # None: the whole rank (its row lanes)
    label: str
    failed: str | None = None  # the error of a rank that failed to ingest (a row with nothing drawn)


@dataclass
class View:
    """One answer of :func:`view`. ``busy`` is (rows, classes, bins) ns in bins mode; ``events`` a dict of
    arrays ``row, start, end, cls`` plus the per-event ``detail`` dicts in events mode."""

    mode: str
    t0: int
    t1: int
    rows: list[Row]
    bin_ns: float = 0.0
    bin_t0: float = 0.0
    busy: np.ndarray | None = None
    events: dict[str, Any] | None = None
    steps: list[tuple[int, int]] | None = None  # (step, start ns) within the window
    source: str = "grid"  # what answered: the persisted grid, or events read from the store

    @property
    def shapes_per_row(self) -> int:
        """The most shapes one row asks the browser to draw: bins, or events on the fullest row."""
        if self.mode == "bins":
            return 0 if self.busy is None else int(self.busy.shape[2])
        rows = self.events["row"] if self.events else np.zeros(0, dtype=np.int64)
        return int(np.bincount(rows).max()) if rows.size else 0

    @property
    def shapes(self) -> int:
        if self.mode == "bins":
            return 0 if self.busy is None else int(self.busy.shape[0] * self.busy.shape[2])
        return int(self.events["row"].size) if self.events else 0


def rows_of(data: TimelineData, expand: int | None) -> list[Row]:
    """A row per rank (failed ranks included, in rank order), the expanded rank's lanes right below it."""
    rows: list[Row] = []
    for r in sorted({*data.ranks, *data.failed}, key=lambda k: (k < 0, abs(k))):  # unknown ranks last
        if r in data.failed:
            label, error = data.failed[r]
            rows.append(Row(r, None, label, failed=error))
            continue
        rows.append(Row(r, None, f"rank {r}"))
        if r == expand:
            rows.extend(Row(r, i, f"↳ {name}") for i, name in enumerate(data.lanes[r]))
    return rows


def _clamp(data: TimelineData, t0: float | None, t1: float | None) -> tuple[int, int]:
    lo = 0 if t0 is None else max(0, int(t0))
    hi = data.span_ns if t1 is None else min(data.span_ns, int(t1))
    if hi <= lo:  # a window outside the run, or empty: the nearest 1 µs inside it
        lo = min(max(0, lo), max(0, data.span_ns - 1000))
        hi = min(data.span_ns, lo + 1000)
    return lo, max(hi, lo + 1)


def _pick(data: TimelineData, row: Row, ev: RankEvents | None) -> np.ndarray:
    if ev is None or row.failed is not None:
        return np.zeros(0, dtype=np.int64)
    if row.lane is None:
        return np.flatnonzero(ev.lane < data.row_lanes[row.rank])
    return np.flatnonzero(ev.lane == row.lane)


def _steps(data: TimelineData, t0: int, t1: int) -> list[tuple[int, int]]:
    """(step, earliest start over the ranks) of the steps that begin inside the window, at most 200."""
    if not data.steps.height:
        return []
    first = data.steps.group_by("step").agg(pl.col("start").min()).sort("step")
    return [(int(s), int(t)) for s, t in first.iter_rows() if t0 <= t < t1][:200]


def view(data: TimelineData, t0: float | None = None, t1: float | None = None, *, expand: int | None = None,
         bins: int = DEFAULT_BINS, with_details: bool = True) -> View:
    """The window's rows in events or bins mode (module doc). ``t0``/``t1`` None: the whole run."""
    lo, hi = _clamp(data, t0, t1)
    rows = rows_of(data, expand if expand in data.lanes else None)
    steps = _steps(data, lo, hi)
    est = data.starts_in(lo, hi)
    read: dict[int, RankEvents] | None = None
    if len(data.ranks) <= DETAIL_RANKS and est.max(initial=0) <= ROW_CAP and est.sum() <= TOTAL_CAP:
        read = data.window(data.ranks, lo, hi, details=with_details)
        picks = [_pick(data, row, read.get(row.rank)) for row in rows]
        counts = [int(p.size) for p in picks]
        if max(counts, default=0) <= ROW_CAP and sum(counts) <= TOTAL_CAP:
            return View("events", lo, hi, rows, events=_events(rows, picks, read, with_details), steps=steps,
                        source="store")
    cells = (hi - lo) / data.bin_ns
    if cells >= bins:
        busy, bin_t0, width = _grid_bins(data, rows, lo, hi, bins)
        source = "grid"
    elif len(data.ranks) <= DETAIL_RANKS and est.sum() <= READ_CAP:
        if read is None:
            read = data.window(data.ranks, lo, hi, details=False)
        width, bin_t0 = (hi - lo) / bins, float(lo)
        busy = _event_bins(data, rows, read, bin_t0, width, bins)
        source = "store"
    else:  # too many events to read in a callback: the grid's own cells, one bin each
        busy, bin_t0, width = _grid_bins(data, rows, lo, hi, bins)
        source = "grid"
    lanes = [r for r in rows if r.lane is not None]
    if lanes:
        rank = lanes[0].rank
        got = read if read is not None and rank in read else data.window([rank], int(bin_t0),
                                                                          int(bin_t0 + width * busy.shape[2]) + 1,
                                                                          details=False)
        busy = _event_bins(data, rows, got, bin_t0, width, busy.shape[2], busy, lanes_only=True)
    return View("bins", lo, hi, rows, bin_ns=width, bin_t0=bin_t0, busy=busy, steps=steps, source=source)


def _grid_bins(data: TimelineData, rows: list[Row], lo: int, hi: int, bins: int) -> tuple[np.ndarray, float, float]:
    """Sums of ``k = ⌈cells / bins⌉`` adjacent grid cells per bin for the rank rows, over every cell
    ``[lo, hi)`` touches (module doc): at most ``bins`` bins."""
    ncls = len(CLASSES)
    c0 = max(0, data.cell_of(lo))
    c1 = min(data.fine_bins, max(c0 + 1, -int(-(hi - data.origin_ns) // data.cell_ns)))
    cells = c1 - c0
    k = max(1, -(-cells // bins))
    n = -(-cells // k)
    out = np.zeros((len(rows), ncls, n), dtype=np.float32)
    drawn = [(i, data.index(row.rank)) for i, row in enumerate(rows) if row.lane is None and row.failed is None]
    if drawn:
        block = np.asarray(data.grid[:, :ncls, c0:c1], dtype=np.float32)
        if n * k > cells:
            block = np.pad(block, ((0, 0), (0, 0), (0, n * k - cells)))
        summed = block.reshape(block.shape[0], ncls, n, k).sum(axis=3)
        at, idx = zip(*drawn)
        out[list(at)] = summed[list(idx)]
    return out, data.origin_ns + c0 * data.cell_ns, float(data.cell_ns * k)


def _event_bins(data: TimelineData, rows: list[Row], read: dict[int, RankEvents], t0: float, width: float, bins: int,
                out: np.ndarray | None = None, lanes_only: bool = False) -> np.ndarray:
    """Occupancy of each row from its events (rank rows: their row lanes; lane rows: that lane)."""
    ncls = len(CLASSES)
    if out is None:
        out = np.zeros((len(rows), ncls, bins), dtype=np.float32)
    for i, row in enumerate(rows):
        if (lanes_only and row.lane is None) or row.rank not in read:
            continue
        ev = read[row.rank]
        idx = _pick(data, row, ev)
        out[i] = occupancy(ev.start[idx], ev.end[idx], ev.cls[idx], ncls, t0, width, bins)
    return out


def _events(rows: list[Row], picks: list[np.ndarray], read: dict[int, RankEvents], with_details: bool) -> dict[str, Any]:
    parts: dict[str, list[Any]] = {"row": [], "start": [], "end": [], "cls": [], "detail": []}
    for i, (row, idx) in enumerate(zip(rows, picks)):
        if not idx.size:
            continue
        ev = read[row.rank]
        parts["row"].append(np.full(idx.size, i, dtype=np.int64))
        parts["start"].append(ev.start[idx])
        parts["end"].append(ev.end[idx])
        parts["cls"].append(ev.cls[idx])
        if with_details and ev.details.height:
            parts["detail"].extend(ev.details[idx.tolist()].to_dicts())
    out: dict[str, Any] = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64))
                           for k, v in parts.items() if k != "detail"}
    out["detail"] = parts["detail"]
    return out


def to_json(v: View) -> dict[str, Any]:
    """A JSON-ready summary of a view (what a callback sends, less the drawing): mode, window, rows, counts."""
    return {"mode": v.mode, "t0_ns": v.t0, "t1_ns": v.t1, "rows": [r.label.strip() for r in v.rows],
            "shapes": v.shapes, "shapes_per_row": v.shapes_per_row, "source": v.source,
            "failed": [r.label for r in v.rows if r.failed is not None]}
