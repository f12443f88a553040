"""What a timeline draws: a persisted occupancy grid for the wide views, the Parquet store for the narrow ones.

Lanes. On a rank with GPU kernels each GPU stream is a lane, then each CPU thread (CPU ops, runtime calls,
CPU-side communication); on a CPU rank the threads alone. A rank's own row draws its *row lanes*: the
streams of a GPU rank, the threads of a CPU rank; expanded, the rank shows every lane. Within a lane only
the outermost events are drawn (an event starting before the running maximum of the earlier ends is
nested and dropped), so a lane's events are disjoint and its busy time per bin never exceeds the bin.

Each drawn event is coloured by one of :data:`CLASSES`: compute (GPU compute kernels, CPU ops), comm,
memcpy (memcpy, memset), other (sync, runtime calls). Times are ns since the run's first event
(``t0_ns``, the smallest ``first_ns`` of the manifest). Steps are marked where each rank's row-lane
events of that step begin and end.

The grid (:func:`load`): ``grid[r, c, b]`` for ``fine_bins`` cells of ``cell_ns`` (a power of two) ns,
aligned on multiples of ``cell_ns`` since the epoch, cell 0 starting ``origin_ns`` (<= 0) from t0: for c < 4
the ns of cell b covered by class c on rank r's row lanes (lanes summed), for c = 4 how many of those
events start in cell b (the level of detail's estimate of what a window holds, without reading it). An
event [s, e) adds ``min(e, edge_{b+1}) − max(s, edge_b)`` to every cell b it touches: its first and last
cells get their partial lengths, the cells between the full width. Example: width 10, event [5, 27) ->
cells 0, 1, 2 get 5, 10, 7. ``cell_ns`` is the smallest power of two giving the run at most
``FINE_CELLS / (ranks × 5)`` cells (1,024 to 65,536), and no more than the summary of the rank with fewest
events has: a rank's summary is exact at any coarser power of two (below), never at a finer one.

The grid is assembled from each rank's timeline summary (:mod:`ddprof.store.timeline_summary`), one rank at a
time (memory: one rank's summary and the grid, memory-mapped): aligned power-of-two cells nest, so a
summary's finer cells sum exactly into the grid's. Ingest writes the summary beside each Parquet part;
a rank without a valid one (a store ingested before summaries, a rank of several parts) is summarised
from its events read from the store, by the same function: the grid is the same either way, only slower
to build. The grid is kept beside the store: ``RUN/dashboard/`` (a temporary directory when the run dir is
read-only). Its key hashes this module's source and the summary's, the manifest's ingest fingerprint, and
every Parquet part's name, size and modification time: a changed store or a changed grid builds a new
one. Files are written atomically and ``grid.json`` last, so a reader sees a whole grid or none.

Narrow windows read events from Parquet (:meth:`TimelineData.window`): only the parts of the ranks asked
for, only rows with ``ts_ns`` in ``[t0 − long_ns, t1)`` (row-group statistics skip the rest). An
outermost event longer than ``long_ns`` = max(1 ms, span / 4,096) may start before that and still cover
the window: those few (at most 4,096 a lane) are kept with the grid and merged in.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ddprof.store import timeline_summary as ts
from ddprof.store.atomic import write_atomic
from ddprof.store.rundir import Run
from ddprof.store.timeline_summary import CLASSES, CPU_KINDS, DETAIL_COLUMNS, Summary, occupancy, outermost

__all__ = ["CLASSES", "CPU_KINDS", "DETAIL_COLUMNS", "occupancy", "load", "TimelineData", "RankEvents"]

_CLASS_OF = {"compute": 0, "cpu_op": 0, "comm": 1, "memcpy": 2, "memset": 2}
#: The count channel of the grid: events starting per bin (module doc).
STARTS = len(CLASSES)
#: Fine bins of the grid: at most as many as fit in this many cells (ranks x channels x bins), at most 65,536.
FINE_CELLS = 30_000_000
MAX_FINE_BINS = ts.FINE
GRID_DIR = "dashboard"
_SOURCE_HASH = hashlib.sha1(Path(__file__).read_bytes() + ts.SOURCE_HASH.encode()).hexdigest()[:16]


@dataclass
class RankEvents:
    """One rank's drawn events in a window, sorted by start (ns since ``t0``); ``lane`` indexes the rank's
    lanes; ``details`` (possibly empty) holds :data:`DETAIL_COLUMNS` row for row."""

    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray
    lane: np.ndarray
    details: pl.DataFrame

    def select(self, mask: np.ndarray) -> RankEvents:
        idx = np.flatnonzero(mask)
        return RankEvents(self.start[idx], self.end[idx], self.cls[idx], self.lane[idx],
                          self.details[idx.tolist()] if self.details.height else self.details)


@dataclass
class TimelineData:
    """The grid and what the views need besides it (module doc); narrow windows come from :meth:`window`."""

    run: Run
    ranks: list[int]
    t0_ns: int
    span_ns: int
    fine_bins: int
    grid: np.ndarray = field(repr=False)  # (ranks, channels, fine_bins) float32, memory-mapped
    origin_ns: int  # where the grid's cell 0 begins, ns since t0 (<= 0: cells are aligned, module doc)
    cell_ns: int  # the grid's cell width, a power of two
    lanes: dict[int, list[str]]
    row_lanes: dict[int, int]  # the rank's row draws lanes [0, n)
    steps: pl.DataFrame  # rank, step, start, end (ns since t0)
    long_ns: int
    long: pl.DataFrame  # rank, start, end, lane, cls and the details of the long outermost events
    failed: dict[int, tuple[str, str]] = field(default_factory=dict)  # row key -> (label, error): failed inputs
    built: bool = False  # this load built the grid (a cold start)
    from_store: list[int] = field(default_factory=list)  # ranks the grid summarised from the store, not ingest
    path: Path | None = None

    @property
    def bin_ns(self) -> float:
        return float(self.cell_ns)

    def cell_of(self, t: float) -> int:
        """The grid cell holding ``t`` ns since t0 (may lie outside the grid)."""
        return int((t - self.origin_ns) // self.cell_ns)

    @property
    def busy(self) -> np.ndarray:
        return self.grid[:, :STARTS]

    def index(self, rank: int) -> int:
        return self.ranks.index(rank)

    def starts_in(self, lo: float, hi: float) -> np.ndarray:
        """Per rank, the row-lane events starting in the grid cells that ``[lo, hi)`` touches (≥ the truth)."""
        a = max(0, self.cell_of(lo))
        b = min(self.fine_bins, self.cell_of(hi) + 2)
        return self.grid[:, STARTS, a:b].sum(axis=1, dtype=np.float64)

    def window(self, ranks: list[int], lo: int, hi: int, *, details: bool = True) -> dict[int, RankEvents]:
        """Every lane's outermost events of ``ranks`` overlapping ``[lo, hi)`` ns since t0, read from Parquet."""
        gpu = [r for r in ranks if self.row_lanes[r] and self.lanes[r][0].startswith("stream")]
        cols = ["rank", "ts_ns", "dur_ns", "stream", "tid", "kind", *(DETAIL_COLUMNS if details else [])]
        t = pl.col("ts_ns")
        df = self.run.collect_events(cols, ranks, _drawn(gpu) & (t >= self.t0_ns + lo - self.long_ns)
                                     & (t < self.t0_ns + hi))
        out: dict[int, RankEvents] = {}
        parts = df.partition_by("rank", as_dict=True) if df.height else {}
        for r in ranks:
            part = parts.get((r,), df.clear())
            ev = _prepare(part, self.lanes[r], self.t0_ns, details)
            extra = self.long.filter((pl.col("rank") == r) & (pl.col("start") < hi) & (pl.col("end") > lo))
            if extra.height:
                ev = _merge(ev, extra, details)
            keep = _outermost(ev.start, ev.end, ev.lane)
            ev = ev.select(keep)
            out[r] = ev.select(ev.end > lo)
        return out


def _drawn(gpu_ranks: list[int]) -> pl.Expr:
    """Rows that are some lane's: GPU rows of GPU ranks, and CPU ops, runtime calls, CPU-side communication."""
    return (pl.col("stream").is_not_null() & pl.col("rank").is_in(gpu_ranks)) | (
        pl.col("stream").is_null() & pl.col("kind").is_in(list(CPU_KINDS)))


def _lane_names(df: pl.DataFrame) -> list[str]:
    streams = df.get_column("stream").drop_nulls().unique().sort().to_list()
    tids = df.filter(pl.col("stream").is_null()).get_column("tid").drop_nulls().unique().sort().to_list()
    return [f"stream {s}" for s in streams] + [f"thread {t}" for t in tids]


def _lane_of(df: pl.DataFrame, names: list[str]) -> np.ndarray:
    """Each row's lane index in ``names`` (``stream N`` first, then ``thread N``, each sorted; else -1)."""
    streams = np.array([int(n.split()[1]) for n in names if n.startswith("stream")], dtype=np.int64)
    tids = np.array([int(n.split()[1]) for n in names if n.startswith("thread")], dtype=np.int64)
    stream = df.get_column("stream")
    on_gpu = stream.is_not_null().to_numpy()
    sv = stream.fill_null(0).to_numpy().astype(np.int64)
    tv = df.get_column("tid").fill_null(-1).to_numpy().astype(np.int64)
    si = np.clip(np.searchsorted(streams, sv), 0, max(0, streams.size - 1))
    ti = np.clip(np.searchsorted(tids, tv), 0, max(0, tids.size - 1))
    s_ok = (streams[si] == sv) if streams.size else np.zeros(sv.size, bool)
    t_ok = (tids[ti] == tv) if tids.size else np.zeros(tv.size, bool)
    lane = np.where(on_gpu, np.where(s_ok, si, -1), np.where(t_ok, streams.size + ti, -1))
    return lane.astype(np.int16)


def _prepare(df: pl.DataFrame, names: list[str], t0: int, details: bool) -> RankEvents:
    """Rows of one rank as arrays sorted by (lane, start): the order :func:`_outermost` needs."""
    lane = _lane_of(df, names)
    start = df.get_column("ts_ns").to_numpy().astype(np.int64) - t0
    end = start + df.get_column("dur_ns").to_numpy().astype(np.int64)
    cls = df.get_column("kind").cast(pl.String).replace_strict(_CLASS_OF, default=3, return_dtype=pl.Int8).to_numpy()
    order = np.lexsort((-end, start, lane))  # an outer event first when two start together
    det = df.select(DETAIL_COLUMNS)[order.tolist()] if details and df.height else pl.DataFrame()
    return RankEvents(start[order], end[order], cls[order], lane[order], det)


def _merge(ev: RankEvents, extra: pl.DataFrame, details: bool) -> RankEvents:
    start = np.concatenate([extra.get_column("start").to_numpy(), ev.start])
    end = np.concatenate([extra.get_column("end").to_numpy(), ev.end])
    lane = np.concatenate([extra.get_column("lane").to_numpy().astype(np.int16), ev.lane])
    cls = np.concatenate([extra.get_column("cls").to_numpy().astype(np.int8), ev.cls])
    order = np.lexsort((-end, start, lane))
    det = pl.DataFrame()
    if details:
        det = pl.concat([extra.select(DETAIL_COLUMNS), ev.details], how="vertical_relaxed") if ev.details.height \
            else extra.select(DETAIL_COLUMNS)
        det = det[order.tolist()]
    return RankEvents(start[order], end[order], cls[order], lane[order], det)


_outermost = outermost


def _fine_bins(run: Run) -> int:
    """The most cells a rank's row may get: the grid's budget shared by the ranks, 1,024 to 65,536, and no
    more than the summary of the rank with fewest events has (:func:`ddprof.store.timeline_summary.cells_for`,
    at least 8,192), so that every rank's summary written at ingest serves."""
    budget = max(1024, min(MAX_FINE_BINS, FINE_CELLS // (max(1, len(run.ranks)) * (STARTS + 1))))
    events = [run.rank_info(r).get("events") for r in run.ranks]
    counts = [n for n in events if isinstance(n, int)]
    if counts and len(counts) == len(events):
        budget = min(budget, ts.cells_for(min(counts)))
    return budget


def _is_gpu(run: Run, rank: int) -> bool:
    info = run.rank_info(rank)
    return bool(info.get("kernels", 1) > 0 or info.get("gpu"))


def _failed(run: Run) -> dict[int, tuple[str, str]]:
    """Inputs that failed to ingest, as rows: rank -> (label, error). An input whose rank is unknown (it
    could not be read) gets a negative key and its file's name as the label."""
    out: dict[int, tuple[str, str]] = {}
    unknown = 0
    for key, rec in sorted(run.failed.items()):
        rank, error = rec.get("rank"), str(rec.get("error") or "failed to ingest")
        if isinstance(rank, int) and rank not in run.ranks:
            out[rank] = (f"rank {rank} (failed)", error)
        elif rank is None:
            unknown += 1
            out[-unknown] = (f"{Path(str(rec.get('path') or key)).name[:28]} (failed)", error)
    return out


def grid_key(run: Run) -> str:
    """What the grid depends on (module doc), hashed."""
    parts = []
    for r in run.ranks:
        for p in run.rank_info(r).get("parts", []):
            st = (run.path / p).stat()
            parts.append([r, p, st.st_size, st.st_mtime_ns])
    blob = json.dumps([_SOURCE_HASH, run.manifest.get("ingest_fingerprint"), parts, sorted((k, list(v)) for k, v in _failed(run).items())])
    return hashlib.sha1(blob.encode()).hexdigest()[:20]


def grid_dir(run: Run) -> Path:
    """``RUN/dashboard``, or a per-user temporary directory for a read-only run dir."""
    d = run.path / GRID_DIR
    probe = d if d.exists() else run.path
    if os.access(probe, os.W_OK) and probe.stat().st_mode & 0o200:
        return d
    tag = hashlib.sha1(str(run.path.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"ddprof-dashboard-{os.getuid()}" / tag


def _span(run: Run) -> tuple[int, int]:
    """(t0, span) ns from the manifest's first_ns/last_ns, or one aggregate scan when it lacks them."""
    infos = [run.rank_info(r) for r in run.ranks]
    firsts, lasts = [i.get("first_ns") for i in infos], [i.get("last_ns") for i in infos]
    if all(f is not None for f in firsts) and all(v is not None for v in lasts):
        t0, t1 = min(firsts), max(lasts)  # type: ignore[type-var]
    else:
        agg = run.collect_events(None, None, None).select(pl.col("ts_ns").min().alias("a"),
                                                          (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("b"))
        t0, t1 = int(agg.item(0, "a") or 0), int(agg.item(0, "b") or 1)
    return int(t0 or 0), max(1, int(t1 or 1) - int(t0 or 0))


def _rank_summary(run: Run, rank: int, to_k: int, from_store: list[int]) -> Summary:
    """The rank's summary written at ingest (its single part's), else made now from the store (module doc;
    the rank is then added to ``from_store``)."""
    parts = run.rank_info(rank).get("parts", [])
    if len(parts) == 1:
        got = ts.read_summary(run.path / parts[0], to_k)
        if got is not None and got.k <= to_k:  # else coarser than the grid: few events on few ranks
            return got
    from_store.append(rank)
    df = run.collect_events(ts.COLUMNS, [rank], ts.drawn())
    got = ts.summarise(df, events=int(run.rank_info(rank).get("events") or df.height))
    return got if got.k <= to_k else ts.summarise(df, ts.FINE)  # FINE cells are never coarser than the grid


def _build(run: Run, d: Path, key: str) -> dict[str, Any]:
    """The grid assembled from the ranks' summaries, a rank at a time (module doc); returns grid.json's content."""
    ranks = run.ranks
    t0, span = _span(run)
    k = ts.level_for(t0, t0 + span, _fine_bins(run))
    first, fine = ts.cells_at(t0, t0 + span, k)
    long_ns = max(1_000_000, span // 4096)
    lanes: dict[str, list[str]] = {}
    row_lanes: dict[str, int] = {}
    steps: dict[str, list[np.ndarray]] = {"rank": [], "step": [], "start": [], "end": []}
    longs: list[pl.DataFrame] = []
    from_store: list[int] = []

    def fill(tmp: Path) -> None:
        grid = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(ranks), STARTS + 1, fine))
        for i, r in enumerate(ranks):
            s = _rank_summary(run, r, k, from_store)
            gpu = _is_gpu(run, r)
            g = 0 if gpu else 1  # the row draws the streams of a GPU rank, the threads of a CPU rank
            names = ([f"stream {x}" for x in s.streams] if gpu else []) + [f"thread {x}" for x in s.tids]
            lanes[str(r)], row_lanes[str(r)] = names, len(s.streams) if gpu else len(s.tids)
            cells, at, level = s.level(k)
            grid[i] = ts.rebin(cells[g * ts.CHANNELS:(g + 1) * ts.CHANNELS], at, level, k, first, fine)
            on_row = s.steps["group"] == g
            steps["rank"].append(np.full(int(on_row.sum()), r, dtype=np.int32))
            steps["step"].append(s.steps["step"][on_row].astype(np.int32))
            steps["start"].append(s.steps["start"][on_row] - t0)
            steps["end"].append(s.steps["end"][on_row] - t0)
            big = s.long.filter(((pl.col("end") - pl.col("start")) > long_ns) & ((pl.col("group") == 1) | gpu)) \
                if s.long.height else s.long
            if big.height:
                longs.append(big.select(*DETAIL_COLUMNS).with_columns(
                    rank=pl.lit(r, dtype=pl.Int32), start=big.get_column("start") - t0,
                    end=big.get_column("end") - t0, lane=pl.Series(_lane_of(big, names)),
                    cls=big.get_column("cls").cast(pl.Int8)))
        grid.flush()
        del grid

    write_atomic(d / f"grid-{key}.npy", fill)
    step_df = pl.DataFrame({c: pl.Series(np.concatenate(v) if v else [], dtype=dt) for (c, v), dt in
                            zip(steps.items(), (pl.Int32, pl.Int32, pl.Int64, pl.Int64))}).sort("rank", "step")
    long_df = pl.concat(longs, how="vertical_relaxed") if longs else pl.DataFrame(
        schema={**{c: run.events([]).collect_schema()[c] for c in DETAIL_COLUMNS}, "rank": pl.Int32,
                "start": pl.Int64, "end": pl.Int64, "lane": pl.Int16, "cls": pl.Int8})
    write_atomic(d / f"steps-{key}.parquet", lambda p: step_df.write_parquet(p))
    write_atomic(d / f"long-{key}.parquet", lambda p: long_df.write_parquet(p))
    meta = {"key": key, "ranks": ranks, "t0_ns": t0, "span_ns": span, "fine_bins": fine, "long_ns": long_ns,
            "lanes": lanes, "row_lanes": row_lanes, "origin_ns": (first << k) - t0, "cell_ns": 1 << k,
            "summarised_from_store": from_store}
    write_atomic(d / "grid.json", lambda p: p.write_text(json.dumps(meta)))
    for old in d.glob("*-*.*"):  # the files of earlier keys
        if key not in old.name and old.name.split("-")[0] in ("grid", "steps", "long") and not old.name.startswith("."):
            old.unlink(missing_ok=True)
    return meta


def _read_meta(d: Path, key: str) -> dict[str, Any] | None:
    try:
        meta = json.loads((d / "grid.json").read_text())
    except (OSError, ValueError):
        return None
    files = [d / f"{n}-{key}.{x}" for n, x in (("grid", "npy"), ("steps", "parquet"), ("long", "parquet"))]
    return meta if meta.get("key") == key and all(f.is_file() for f in files) else None


def load(run: Run) -> TimelineData:
    """The run's grid, read (memory-mapped) where one of the store's key exists, else built first."""
    key = grid_key(run)
    d = grid_dir(run)
    meta = _read_meta(d, key)
    built = meta is None
    if meta is None:
        meta = _build(run, d, key)
    grid = np.load(d / f"grid-{key}.npy", mmap_mode="r")
    return TimelineData(
        run=run, ranks=list(meta["ranks"]), t0_ns=int(meta["t0_ns"]), span_ns=int(meta["span_ns"]),
        fine_bins=int(meta["fine_bins"]), grid=grid, origin_ns=int(meta["origin_ns"]),
        cell_ns=int(meta["cell_ns"]), lanes={int(k): v for k, v in meta["lanes"].items()},
        row_lanes={int(k): int(v) for k, v in meta["row_lanes"].items()},
        steps=pl.read_parquet(d / f"steps-{key}.parquet"), long_ns=int(meta["long_ns"]),
        long=pl.read_parquet(d / f"long-{key}.parquet"), failed=_failed(run), built=built, path=d,
        from_store=list(meta.get("summarised_from_store", [])))


def summary(data: TimelineData) -> dict[str, Any]:
    """Counts for a log line: ranks, drawn events on the rank rows, fine bins, whether the grid was built now."""
    return {"ranks": len(data.ranks), "events": int(data.grid[:, STARTS].sum(dtype=np.float64)),
            "fine_bins": data.fine_bins, "built": data.built, "summarised_from_store": len(data.from_store)}
