"""Level of detail: a time window of a run in, what the browser should draw out (plain data, no plotly).

:func:`view` answers a window ``[t0, t1)`` (ns since the run's first event) for every rank, one row each,
and one more row per lane (stream or thread) of the ``expand``-ed rank, right below it:

* ``events`` mode when the window holds few enough events (at most :data:`ROW_CAP` on every row and
  :data:`TOTAL_CAP` in all) and the run has at most :data:`DETAIL_RANKS` ranks: the real events, each with its row, start, end and colour class; their names
  and collective metadata are read back from the store for the hover (:meth:`TimelineData.details`).
* ``bins`` mode otherwise: for every row, busy ns per colour class in ``bins`` equal bins over the window.
  A window that spans at least ``bins`` cells of the precomputed fine grid is answered by summing ``k``
  adjacent fine cells (``k = ⌊cells in window / bins⌋``), with no event touched; a narrower one from the
  events in the window (:func:`~.data.occupancy`). Example: fine cells of 1 µs, a window of 10 ms and
  1,000 bins -> k = 10, each bin the sum of 10 fine cells.

Either way no row gets more than ``max(bins, ROW_CAP)`` shapes: the budget the browser never exceeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from ddprof.dashboards.timeline.data import CLASSES, TimelineData, occupancy

ROW_CAP = 2_000
TOTAL_CAP = 12_000
#: Events mode reads the hover details with one sliced scan per rank: at most this many ranks.
DETAIL_RANKS = 64
DEFAULT_BINS = 1_000


@dataclass(frozen=True)
class Row:
    rank: int
    lane: int | None  # None: the whole rank (all lanes)
    label: str


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
    rows: list[Row] = []
    for r in data.ranks:
        rows.append(Row(r, None, f"rank {r}"))
        if r == expand:
            rows.extend(Row(r, i, f"↳ {name}") for i, name in enumerate(data.ranks_events[r].lane_names))
    return rows


def _clamp(data: TimelineData, t0: float | None, t1: float | None) -> tuple[int, int]:
    lo = 0 if t0 is None else max(0, int(t0))
    hi = data.span_ns if t1 is None else min(data.span_ns, int(t1))
    if hi <= lo:  # a window outside the run, or empty: the nearest 1 µs inside it
        lo = min(max(0, lo), max(0, data.span_ns - 1000))
        hi = min(data.span_ns, lo + 1000)
    return lo, max(hi, lo + 1)


def _lower_bounds(data: TimelineData, rows: list[Row], t0: int, t1: int) -> list[int]:
    """Events starting inside the window, per row: a lower bound of the events to draw, in O(log n)."""
    out = []
    for row in rows:
        ev = data.ranks_events[row.rank]
        n = int(np.searchsorted(ev.start, t1) - np.searchsorted(ev.start, t0))
        out.append(n if row.lane is None else 0)
    return out


def _picks(data: TimelineData, rows: list[Row], t0: int, t1: int) -> list[np.ndarray]:
    picks: list[np.ndarray] = []
    cache: dict[int, np.ndarray] = {}
    for row in rows:
        ev = data.ranks_events[row.rank]
        if row.rank not in cache:
            cache[row.rank] = ev.window(t0, t1)
        idx = cache[row.rank]
        picks.append(idx if row.lane is None else idx[ev.lane[idx] == row.lane])
    return picks


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
    rows = rows_of(data, expand if expand in data.ranks_events else None)
    steps = _steps(data, lo, hi)
    wide = (hi - lo) / data.bin_ns >= bins  # the fine grid alone answers
    low = _lower_bounds(data, rows, lo, hi)
    if max(low, default=0) <= ROW_CAP and sum(low) <= TOTAL_CAP and len(data.ranks) <= DETAIL_RANKS:
        picks = _picks(data, rows, lo, hi)
        counts = [int(p.size) for p in picks]
        if max(counts, default=0) <= ROW_CAP and sum(counts) <= TOTAL_CAP:
            return View("events", lo, hi, rows, events=_events(data, rows, picks, with_details), steps=steps)
    busy, bin_t0, width = _bins(data, rows, lo, hi, bins, wide)
    return View("bins", lo, hi, rows, bin_ns=width, bin_t0=bin_t0, busy=busy, steps=steps)


def _bins(data: TimelineData, rows: list[Row], lo: int, hi: int, bins: int,
          wide: bool) -> tuple[np.ndarray, float, float]:
    ncls = len(CLASSES)
    out = np.zeros((len(rows), ncls, bins), dtype=np.float32)
    index = {r: i for i, r in enumerate(data.ranks)}
    if wide:
        fw = data.bin_ns
        k = max(1, int((hi - lo) / fw) // bins)
        first = int(lo // fw)
        n = min(bins, (data.fine_bins - first + k - 1) // k)
        for i, row in enumerate(rows):
            if row.lane is None:
                cells = data.busy[index[row.rank], :, first:first + n * k]
                pad = n * k - cells.shape[1]
                if pad:
                    cells = np.pad(cells, ((0, 0), (0, pad)))
                out[i, :, :n] = cells.reshape(ncls, n, k).sum(axis=2)
        width = fw * k
        return _lanes_into(data, rows, out, first * fw, width, bins), first * fw, width
    width = (hi - lo) / bins
    for i, row in enumerate(rows):
        if row.lane is None:
            ev = data.ranks_events[row.rank]
            idx = ev.window(lo, hi)
            out[i] = occupancy(ev.start[idx], ev.end[idx], ev.cls[idx], ncls, lo, width, bins)
    return _lanes_into(data, rows, out, lo, width, bins), float(lo), width


def _lanes_into(data: TimelineData, rows: list[Row], out: np.ndarray, t0: float, width: float,
                bins: int) -> np.ndarray:
    """Fill the lane rows of an expanded rank from its events (one rank: cheap at any zoom)."""
    ncls = len(CLASSES)
    for i, row in enumerate(rows):
        if row.lane is not None:
            ev = data.ranks_events[row.rank]
            idx = ev.window(int(t0), int(t0 + width * bins) + 1)
            idx = idx[ev.lane[idx] == row.lane]
            out[i] = occupancy(ev.start[idx], ev.end[idx], ev.cls[idx], ncls, t0, width, bins)
    return out


def _events(data: TimelineData, rows: list[Row], picks: list[np.ndarray], with_details: bool) -> dict[str, Any]:
    parts: dict[str, list[Any]] = {"row": [], "start": [], "end": [], "cls": [], "detail": []}
    for i, (row, idx) in enumerate(zip(rows, picks)):
        ev = data.ranks_events[row.rank]
        parts["row"].append(np.full(idx.size, i, dtype=np.int64))
        parts["start"].append(ev.start[idx])
        parts["end"].append(ev.end[idx])
        parts["cls"].append(ev.cls[idx])
        if with_details:
            details = data.details(row.rank, ev.pos[idx])
            parts["detail"].extend(details.to_dicts() if details.height else [])
    out: dict[str, Any] = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64))
                           for k, v in parts.items() if k != "detail"}
    out["detail"] = parts["detail"]
    return out


def to_json(v: View) -> dict[str, Any]:
    """A JSON-ready summary of a view (what a callback sends, less the drawing): mode, window, rows, counts."""
    return {"mode": v.mode, "t0_ns": v.t0, "t1_ns": v.t1, "rows": [r.label.strip() for r in v.rows],
            "shapes": v.shapes, "shapes_per_row": v.shapes_per_row}
