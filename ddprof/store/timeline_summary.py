"""A timeline summary of one rank's events, written at ingest beside its Parquet part: what the dashboard's
occupancy grid (:mod:`ddprof.dashboards.timeline.data`) is assembled from without reading the events again.

Ingest has each trace's events in memory when it writes the part; summarising them there costs a sort and
a few array passes, against a second read of every event (names included) when the dashboard first opens.
A run dir ingested before summaries existed, a rank made of several parts, or a summary that no longer
matches its part (size, modification time, this module's source) is summarised from the store instead,
by the same function: both ways give the same arrays.

What is drawn. A *lane* is a GPU stream (rows with ``stream`` set) or a CPU thread (rows with ``stream``
null, of a kind in :data:`CPU_KINDS`, ``tid`` set). Within a lane only the outermost events count: one
starting before the running maximum of the earlier ends is nested and dropped. Each event is coloured
by one of :data:`CLASSES`. The summary keeps the two lane groups apart (``stream``, ``thread``), because
which of them a rank's row draws (its streams on a GPU rank, its threads on a CPU rank) is decided by
the whole rank, not by one part.

Cells. Time is cut into cells of ``2**k`` ns aligned on multiples of ``2**k`` since the epoch, ``k`` the
smallest giving at most :func:`cells_for` cells over the drawn events (2 a event of the part, 8,192 to
65,536); for each group, 4 channels of busy ns per class and 1 of events starting in the cell
(``cells[g * 5 + c, i]``). Aligned powers of two nest: any coarser cell of ``2**K`` ns is the exact sum of
``2**(K - k)`` of these, so one rank's summary serves a grid of any rank count as long as it is no finer
(:func:`rebin`). A copy summed 8 to 1 (``k + 3``) spares reading the fine one when the grid is coarse
(many ranks). Example: events in [1,000, 70,000) ns in at most 65,536 cells -> k = 0 would need 69,000,
k = 1 gives 34,500 cells of 2 ns from cell 500. Only the channels some event is on are stored.

Also kept: each lane's name, the first start and last end of every step per group, and the outermost
events longer than :data:`LONG_MIN_NS` with their details (the grid's "long" events are longer than
max(1 ms, span / 4,096), a subset).
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ddprof.errors import OutputError
from ddprof.store.atomic import write_bytes_atomic

_deflate: Any = zlib  # ISA-L deflates the cells 7x faster at the same level, in zlib's format (read by zlib)
try:
    from isal import isal_zlib

    _deflate = isal_zlib
except ImportError:  # pragma: no cover - isal is a dependency; the standard library does the same
    pass

CLASSES = ("compute", "comm", "memcpy", "other")
_CLASS_OF = {"compute": 0, "cpu_op": 0, "comm": 1, "memcpy": 2, "memset": 2}
CPU_KINDS = ("cpu_op", "runtime", "comm")
DETAIL_COLUMNS = ["name", "step", "coll_op", "bytes", "pg", "peer"]
COLUMNS = ["ts_ns", "dur_ns", "stream", "tid", "kind", *DETAIL_COLUMNS]
GROUPS = ("stream", "thread")
#: Channels per group: busy ns of each class, then the count of events starting in the cell.
CHANNELS = len(CLASSES) + 1
FINE = 65_536
#: Cells a part's summary gets at least, and per drawn event (up to :data:`FINE`).
MIN_CELLS = 8_192
CELLS_PER_EVENT = 2
COARSE_SHIFT = 3
LONG_MIN_NS = 1_000_000
SUFFIX = ".timeline"
FORMAT = 1
SOURCE_HASH = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:16]


@dataclass
class Summary:
    """One rank's (or part's) summary (module doc). Times are ns since the epoch."""

    k: int  # cells are 2**k ns
    first_cell: int  # absolute index of cells[:, 0] (its start is first_cell * 2**k ns)
    cells: np.ndarray  # (2 * CHANNELS, n) float32
    coarse_first: int  # the same at 2**(k + COARSE_SHIFT) ns
    coarse: np.ndarray
    streams: list[int]
    tids: list[int]
    steps: dict[str, np.ndarray]  # group (0 stream, 1 thread), step, start, end: one entry per (group, step)
    long: pl.DataFrame  # group, start, end, stream, tid, cls and DETAIL_COLUMNS

    def level(self, k: int) -> tuple[np.ndarray, int, int]:
        """The cells to rebin to ``2**k`` ns: the coarse copy when it is fine enough, else the fine one."""
        if self.k + COARSE_SHIFT <= k:
            return self.coarse, self.coarse_first, self.k + COARSE_SHIFT
        return self.cells, self.first_cell, self.k


def drawn() -> pl.Expr:
    """Rows of some lane: GPU rows, and CPU ops, runtime calls and CPU-side communication off the GPU."""
    return pl.col("stream").is_not_null() | (pl.col("stream").is_null() & pl.col("kind").is_in(list(CPU_KINDS))
                                             & pl.col("tid").is_not_null())


def outermost(start: np.ndarray, end: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Mask of the events not nested in an earlier event of their lane (input sorted by lane, start); rows
    with no lane (-1) are dropped."""
    if start.size == 0:
        return np.zeros(0, dtype=bool)
    base = int(start.min())  # times from the earliest: absolute ns times lanes would overflow int64
    offset = (lane.astype(np.int64) + 1) * (int(end.max()) - base + 1)  # lanes apart: one running max over all
    reach = np.maximum.accumulate(end - base + offset)
    prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    return ((start - base + offset) >= prev) & (lane >= 0)


def occupancy(start: np.ndarray, end: np.ndarray, group: np.ndarray, groups: int, t0: float, width: float,
              bins: int) -> np.ndarray:
    """Busy ns per (group, bin) of ``bins`` bins of ``width`` ns from ``t0``, clipped to them. An event
    [s, e) adds ``min(e, edge_{b+1}) − max(s, edge_b)`` to every bin b it touches: its first and last bins
    their partial lengths, the bins between the full width. Example: width 10, [5, 27) -> 5, 10, 7.

    In bin units, an event in bins b0..b1 adds ``b0 + 1 − s`` to b0, ``e − b1`` to b1, and through a
    running sum +1 from b0 + 1 and −1 from b1: the bins between get 1; an event within one bin gets
    ``(b0 + 1 − s) + (e − b0) − 1 = e − s``. Three histograms (the +1s and −1s counted as integers: exact, and
    cheaper than as weights) and one running sum over the bins, whatever the events (the bins, not the events,
    are most of the work: a rank's summary has 65,536 a channel)."""
    n = groups * bins + 1
    if start.size == 0:
        return np.zeros(n - 1, dtype=np.float64).reshape(groups, bins)
    s = np.clip((start - t0) / width, 0, bins)
    e = np.clip((end - t0) / width, 0, bins)
    keep = e > s
    if not keep.all():
        s, e, group = s[keep], e[keep], group[keep]
    g = group.astype(np.int64) * bins
    b0 = np.minimum(s.astype(np.int64), bins - 1)  # s >= 0: truncation is the floor
    b1 = np.minimum(e.astype(np.int64), bins - 1)
    at0, at1 = g + b0, g + b1
    out = np.bincount(np.concatenate([at0, at1]), weights=np.concatenate([b0 + 1 - s, e - b1]), minlength=n)
    steps = np.bincount(at0 + 1, minlength=n)
    steps -= np.bincount(at1, minlength=n)
    out += np.cumsum(steps)  # never crosses a group: an event's +1 and -1 are both within its group, or cancel
    return (out[:-1] * width).reshape(groups, bins)


def cells_at(lo: int, hi: int, k: int) -> tuple[int, int]:
    """(first cell, cell count) of the cells of ``2**k`` ns covering ``[lo, hi)`` ns (at least one)."""
    first = lo >> k
    return first, max(1, -((-max(hi, lo + 1)) >> k) - first)


def level_for(lo: int, hi: int, cells: int) -> int:
    """The smallest ``k`` whose cells cover ``[lo, hi)`` in at most ``cells`` of them."""
    k = max(0, (max(1, hi - lo) // max(1, cells)).bit_length() - 1)
    while cells_at(lo, hi, k)[1] > cells:
        k += 1
    return k


def rebin(cells: np.ndarray, first: int, k: int, to_k: int, to_first: int, n: int) -> np.ndarray:
    """Cells of ``2**k`` ns from absolute cell ``first`` summed into ``n`` cells of ``2**to_k`` ns from
    ``to_first`` (``to_k >= k``; what falls outside is dropped)."""
    out = np.zeros((cells.shape[0], n), dtype=np.float64)
    if not cells.shape[1]:
        return out
    f = 1 << (to_k - k)
    lead = first - ((first >> (to_k - k)) << (to_k - k))  # fine cells before `first` in its coarse cell
    m = -(-(lead + cells.shape[1]) // f)
    summed = np.zeros((cells.shape[0], m), dtype=np.float64)
    for r in range(f):  # f strided adds, in the order of the cells within a coarse one: ~3x a sum over a short axis
        j = (r - lead) % f  # the first fine cell at position r of its coarse cell
        column = cells[:, j::f]
        at = (lead + j) // f
        summed[:, at:at + column.shape[1]] += column
    at = (first >> (to_k - k)) - to_first
    a, b = max(0, at), min(n, at + m)
    if b > a:
        out[:, a:b] = summed[:, a - at:b - at]
    return out


_NO_STEP = -(1 << 40)


def _by_lane_start(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The order by lane, then start, then end descending (an outer event first when two start together).
    One stable sort of a packed key (traces come nearly sorted: ~5x a three-key lexsort), the few
    (lane, start) ties then ordered by end."""
    if not start.size:
        return np.zeros(0, dtype=np.int64)
    base = int(start.min())
    if int(lane.max()) >= 127 or int(start.max()) - base >= 1 << 56:
        return np.lexsort((-end, start, lane))
    key = (lane.astype(np.int64) << 56) | (start - base)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    tie = np.flatnonzero(ks[1:] == ks[:-1])
    if tie.size:
        pos = np.unique(np.concatenate([tie, tie + 1]))  # every member of a tied run, runs contiguous
        sub = order[pos]
        order[pos] = sub[np.lexsort((-end[sub], key[sub]))]
    return order


def _steps(group: np.ndarray, step: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[str, np.ndarray]:
    """(group, step) -> first start, last end, sorted; events of no step (``_NO_STEP``) left out."""
    has = step != _NO_STEP
    key = group[has] * (1 << 42) + step[has]
    order = np.argsort(key, kind="stable")
    key = key[order]
    at = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, dtype=np.int64)
    uniq = key[at]  # sorted already: each distinct key's first row, as np.unique finds it, without sorting again
    lo = np.minimum.reduceat(start[has][order], at) if at.size else np.zeros(0, dtype=np.int64)
    hi = np.maximum.reduceat(end[has][order], at) if at.size else np.zeros(0, dtype=np.int64)
    return {"group": (uniq >> 42).astype(np.int8), "step": (uniq - ((uniq >> 42) << 42)).astype(np.int32),
            "start": lo.astype(np.int64), "end": hi.astype(np.int64)}


def cells_for(events: int) -> int:
    """How many cells a summary of a rank (or part) of this many events gets at most (module doc)."""
    want = max(MIN_CELLS, CELLS_PER_EVENT * events)
    return min(FINE, 1 << (want - 1).bit_length())


_DRAWN = drawn()
#: The lane columns :func:`summarise` adds, by whether ``kind`` is the store's Enum (class by its category
#: code) or text.
_LANE_COLUMNS = {enum: {
    "_gpu": pl.col("stream").is_not_null(), "_sv": pl.col("stream").fill_null(0), "_tv": pl.col("tid").fill_null(0),
    "_code": (pl.col("kind").to_physical() if enum else pl.col("kind").cast(pl.String).replace_strict(
        _CLASS_OF, default=3, return_dtype=pl.Int8)).fill_null(127).cast(pl.Int64),
    "_step": pl.col("step").fill_null(_NO_STEP).cast(pl.Int64)} for enum in (True, False)}
#: Below this many values, a Python set finds the distinct ones sooner than a Polars hash (which is 4x
#: faster on a large rank, but costs ~0.1 ms a call whatever the size) or NumPy's unique (~40 us a call).
_SMALL = 4096


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct int64 values, sorted."""
    if values.size < _SMALL:
        return np.array(sorted(set(values.tolist())), dtype=np.int64)
    return pl.Series(values, dtype=pl.Int64).unique().sort().to_numpy()


def lanes(df: pl.DataFrame, *keep: str) -> pl.DataFrame:
    """The events of ``df`` that are drawn, with their lanes' columns: what :func:`summarise` starts from,
    in one frame operation (~0.1 ms whatever its size: ingest makes it once for several parts, ``keep``-ing
    the column that says whose each row is, and passes each part its slice)."""
    return df.lazy().select(*COLUMNS, *keep).filter(_DRAWN).with_columns(
        **_LANE_COLUMNS[isinstance(df.get_column("kind").dtype, pl.Enum)]).collect()


def summarise(df: pl.DataFrame, cells: int | None = None, events: int | None = None, *,
              drawn_lanes: pl.DataFrame | None = None) -> Summary:
    """The summary of one rank's events (any columns beyond :data:`COLUMNS` ignored; module doc) in at most
    ``cells`` cells (default :func:`cells_for` ``events``, the rank's events, drawn or not: ``df.height``
    unless given); ``drawn_lanes``: :func:`lanes` of ``df``, when already made."""
    events = df.height if events is None else events
    kind = df.get_column("kind").dtype
    df = lanes(df) if drawn_lanes is None else drawn_lanes
    on_gpu = df.get_column("_gpu").to_numpy()
    sv, tv = df.get_column("_sv").to_numpy().astype(np.int64), df.get_column("_tv").to_numpy().astype(np.int64)
    s_arr, t_arr = _distinct(sv[on_gpu]), _distinct(tv[~on_gpu])
    streams, tids = [int(x) for x in s_arr], [int(x) for x in t_arr]
    lane = np.where(on_gpu, np.searchsorted(s_arr, sv), len(streams) + np.searchsorted(t_arr, tv))
    start = df.get_column("ts_ns").to_numpy().astype(np.int64)
    end = start + df.get_column("dur_ns").to_numpy().astype(np.int64)
    cls = df.get_column("_code").to_numpy()
    if isinstance(kind, pl.Enum):  # the store's: class by category code (127: none)
        lut = np.full(128, 3, dtype=np.int8)
        lut[:len(kind.categories)] = [_CLASS_OF.get(c, 3) for c in kind.categories.to_list()]
        cls = lut[np.clip(cls, 0, 127)]
    cls = cls.astype(np.int8)
    order = _by_lane_start(lane, start, end)
    start, end, cls, lane = start[order], end[order], cls[order], lane[order]
    keep = outermost(start, end, lane)
    idx = order[keep]
    start, end, cls, lane = start[keep], end[keep], cls[keep], lane[keep]
    group = (lane >= len(streams)).astype(np.int64)
    lo, hi = (int(start.min()), int(end.max())) if start.size else (0, 1)
    k = level_for(lo, hi, cells or cells_for(events))
    first, n = cells_at(lo, hi, k)
    rel = (start - (first << k)).astype(np.float64)
    rel_end = (end - (first << k)).astype(np.float64)
    channel = group * CHANNELS + cls.astype(np.int64)
    used = np.flatnonzero(np.bincount(channel, minlength=len(GROUPS) * CHANNELS))  # channels some event is on
    remap = np.zeros(len(GROUPS) * CHANNELS, dtype=np.int64)
    remap[used] = np.arange(used.size)
    dense = remap[channel]
    fine = np.zeros((len(GROUPS) * CHANNELS, n), dtype=np.float32)
    fine[used] = occupancy(rel, rel_end, dense, used.size, 0.0, float(1 << k), n)
    rows = used.tolist()  # the channels some event is on: its class's, and its group's count
    for g in range(len(GROUPS)):
        on = group == g
        if on.any():
            rows.append(g * CHANNELS + len(CLASSES))
            fine[rows[-1]] = np.bincount((start[on] >> k) - first, minlength=n)[:n]
    c_first, c_n = cells_at(lo, hi, k + COARSE_SHIFT)
    coarse = np.zeros((len(fine), c_n), dtype=np.float32)  # the other channels stay zero
    coarse[rows] = rebin(fine[rows], first, k, k + COARSE_SHIFT, c_first, c_n)
    steps = _steps(group, df.get_column("_step").to_numpy()[idx], start, end)
    big = np.flatnonzero(end - start > LONG_MIN_NS)
    long = _NO_LONG if not big.size else df[idx[big]].select(COLUMNS).with_columns(
        group=pl.Series(group[big], dtype=pl.Int8), start=pl.Series(start[big], dtype=pl.Int64),
        end=pl.Series(end[big], dtype=pl.Int64), cls=pl.Series(cls[big], dtype=pl.Int8),
    ).select("group", "start", "end", "stream", "tid", "cls", *DETAIL_COLUMNS)
    return Summary(k, first, fine, c_first, coarse, streams, tids, steps, long)


def summary_path(part: Path) -> Path:
    """``.../part-X.parquet`` -> ``.../part-X.timeline``."""
    return part.with_name(part.name.removesuffix(".parquet") + SUFFIX)


def _frame_bytes(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_ipc(buf)
    return buf.getvalue()


def _packed(cells: np.ndarray) -> tuple[list[int], bytes]:
    """The channels holding anything, and their cells compressed (zlib's format, level 1: fast both ways)."""
    used = [int(c) for c in np.flatnonzero(cells.any(axis=1))]
    return used, _deflate.compress(np.ascontiguousarray(cells[used], dtype=np.float32).tobytes(), 1)


def _unpacked(used: list[int], blob: bytes, n: int) -> np.ndarray:
    out = np.zeros((len(GROUPS) * CHANNELS, n), dtype=np.float32)
    if used:
        out[used] = np.frombuffer(zlib.decompress(blob), dtype=np.float32).reshape(len(used), n)
    return out


#: The file: MAGIC, the header's length (4 bytes, little-endian), the header (JSON: the summary's numbers,
#: where each blob lies after it, and the CRC-32 of the blobs before the fine cells, whose zlib stream has
#: its own check), then the blobs: the steps' arrays, the coarse cells, the long events (Arrow IPC), the
#: fine cells last (left unread when the coarse ones will do).
MAGIC = b"DDPROFTL"
_STEP_TYPES = {"group": np.int8, "step": np.int32, "start": np.int64, "end": np.int64}


def write_summary(df: pl.DataFrame, part: Path, drawn_lanes: pl.DataFrame | None = None) -> None:
    """Summarise a part's events (just written to ``part``) beside it (``drawn_lanes``: :func:`lanes` of ``df``,
    when already made); a failure to write leaves none (the dashboard then summarises the part from the
    store)."""
    s = summarise(df, drawn_lanes=drawn_lanes)
    st = part.stat()
    fine_used, fine = _packed(s.cells)
    coarse_used, coarse = _packed(s.coarse)
    blobs = {**{f"steps_{c}": np.ascontiguousarray(s.steps[c], dtype=t).tobytes() for c, t in _STEP_TYPES.items()},
             "coarse": coarse, "long": _frame_bytes(s.long) if s.long.height else b"", "fine": fine}
    at, spans = 0, {}
    for name, blob in blobs.items():
        spans[name] = [at, len(blob)]
        at += len(blob)
    meta = {"format": FORMAT, "source": SOURCE_HASH, "part_size": st.st_size, "part_mtime_ns": st.st_mtime_ns,
            "k": s.k, "first_cell": s.first_cell, "cells": s.cells.shape[1], "fine_used": fine_used,
            "coarse_first": s.coarse_first, "coarse_cells": s.coarse.shape[1], "coarse_used": coarse_used,
            "streams": s.streams, "tids": s.tids, "steps": len(s.steps["step"]), "blobs": spans,
            "crc": zlib.crc32(b"".join(b for name, b in blobs.items() if name != "fine"))}
    head = json.dumps(meta).encode()
    target = summary_path(part)
    try:  # a cache: read_summary refuses one not whole
        write_bytes_atomic(target, b"".join([MAGIC, len(head).to_bytes(4, "little"), head, *blobs.values()]),
                           durable=False)
    except OutputError:
        target.unlink(missing_ok=True)


_NO_LONG = pl.DataFrame(schema={"group": pl.Int8, "start": pl.Int64, "end": pl.Int64, "stream": pl.Int64,
                               "tid": pl.Int64, "cls": pl.Int8, "name": pl.String, "step": pl.Int32,
                               "coll_op": pl.String, "bytes": pl.Int64, "pg": pl.String, "peer": pl.Int32})


def read_summary(part: Path, to_k: int | None = None) -> Summary | None:
    """The summary written beside ``part`` if it is this code's and the part is still the one it summarised;
    else None. ``to_k``: the cells will be rebinned to ``2**to_k`` ns; the fine ones are left unread (no
    cells) when the coarse ones will do."""
    try:
        with open(summary_path(part), "rb") as fh:
            lead = fh.read(len(MAGIC) + 4)
            if lead[:len(MAGIC)] != MAGIC:
                return None
            meta = json.loads(fh.read(int.from_bytes(lead[len(MAGIC):], "little")))
            st = part.stat()
            if (meta.get("format"), meta.get("source"), meta.get("part_size"), meta.get("part_mtime_ns")) != (
                    FORMAT, SOURCE_HASH, st.st_size, st.st_mtime_ns):
                return None
            k = int(meta["k"])
            coarse_will_do = to_k is not None and k + COARSE_SHIFT <= to_k
            spans = meta["blobs"]
            body = fh.read(spans["fine"][0] if coarse_will_do else -1)
            if zlib.crc32(body[:spans["fine"][0]]) != meta["crc"]:  # written without fsync: a crash may cut it
                return None

            def blob(name: str) -> bytes:
                a, n = spans[name]
                if a + n > len(body):
                    raise ValueError("a summary cut short")
                return body[a:a + n]

            steps = {c: np.frombuffer(blob(f"steps_{c}"), dtype=t) for c, t in _STEP_TYPES.items()}
            if any(v.size != meta["steps"] for v in steps.values()):
                raise ValueError("a summary cut short")
            cells = np.zeros((len(GROUPS) * CHANNELS, 0), dtype=np.float32) if coarse_will_do else \
                _unpacked(meta["fine_used"], blob("fine"), int(meta["cells"]))
            coarse = _unpacked(meta["coarse_used"], blob("coarse"), int(meta["coarse_cells"]))
            long = pl.read_ipc(io.BytesIO(blob("long"))) if spans["long"][1] else _NO_LONG
            return Summary(k, int(meta["first_cell"]), cells, int(meta["coarse_first"]), coarse,
                           [int(x) for x in meta["streams"]], [int(x) for x in meta["tids"]], steps, long)
    except (OSError, ValueError, KeyError, TypeError, zlib.error, pl.exceptions.PolarsError):
        return None
