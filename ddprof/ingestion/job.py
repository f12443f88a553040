"""Ingest trace files: open each with its reader, build the event table, validate, write each trace's Parquet part.

The format is the reader's business (:mod:`ddprof.readers`): recognition picks it (a file no reader takes
fails naming what it is), the reader decodes the file, says who wrote it and builds its rows; what is
done here is the same for every format (the rank and world size checked, duplicates dropped, the part
written).

A unit of work is one trace, or a batch of small ones built as one frame (:func:`ingest_files`: a frame
operation costs about the same on a hundred rows as on ten thousand). Runs in a worker process; returns
small summaries (never the events), so memory is bounded by one large trace or one batch of small ones
per worker (:data:`ddprof.ingestion.pipeline.BATCH_BYTES`) whatever the number of ranks.
"""

from __future__ import annotations

import io
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import polars as pl

from ddprof.errors import BadInputError, DdprofError, OutputError, SchemaError
from ddprof.ingestion.world import MAX_WORLD_SIZE, checked_world_size
from ddprof.readers import registry
from ddprof.readers.base import EventReader, Opened, reads_dumps, reads_events
from ddprof.readers.ranks import member_ranks, trace_rank
from ddprof.readers.source import quick_digest
from ddprof.store.atomic import write_atomic, write_bytes_atomic
from ddprof.store.rundir import rank_dir
from ddprof.store.schema import GPU_KINDS, STEP_PREFIX, step_number, validate
from ddprof.store.timeline_summary import lanes, summary_path, write_summary
from ddprof.store.windows import gap_threshold_ns, split_windows
from ddprof.vocabulary.collective_ops import CommRule, kernel_rules
from ddprof.vocabulary.devices import ACCELERATOR_CAT_PATTERN
from ddprof.vocabulary.loaders import DATA_LOADER_PATTERN

#: Rows per Parquet row group. The writer holds a row group's encoded columns at once: on the 54 MB
#: trace (123k rows), one group took 8 MB more peak memory than groups of 32k rows. Readers still get
#: groups large enough to decode in parallel.
ROW_GROUP = 32768
_T = TypeVar("_T")


@dataclass
class FileResult:
    path: str
    size: int
    mtime_ns: int
    status: str = "ok"  # ok | failed
    error: str | None = None
    rank: int | None = None
    part: str | None = None  # relative to the run dir
    sha1: str | None = None
    world_size: int | None = None
    backend: str | None = None
    pg_config: list[Any] = field(default_factory=list)
    nccl_version: str | None = None
    device_names: list[str] = field(default_factory=list)
    base_time_ns: int | None = None
    raw_complete: int = 0
    events: int = 0
    kernels: int = 0
    comm_kernels: int = 0
    comm_events: int = 0  # communication rows: GPU kernels, or gloo ops on CPU-only ranks
    gpu: bool = False
    steps: list[int] = field(default_factory=list)
    first_ns: int | None = None
    last_ns: int | None = None
    windows: list[list[int]] = field(default_factory=list)  # profiling windows [start_ns, end_ns] (ddprof.store.windows)
    dropped: dict[str, int] = field(default_factory=dict)
    # events of an accelerator's own categories, kept as kind other, by category (ddprof.vocabulary.devices)
    accelerator_events: dict[str, int] = field(default_factory=dict)
    # the distinct names of its host spans named like a data loader (ddprof.vocabulary.loaders)
    loader_names: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # the profiler's warnings and errors in the trace
    warnings: list[str] = field(default_factory=list)
    rank_map: dict[str, int] | None = None  # the mapping this result was made with (cache key)
    lone: bool = False  # made as the only trace given (cache key: a trace with no rank is then rank 0)
    member: str | None = None  # the rank's part of a file that holds several (ddprof.readers.base.Opened.members)
    member_index: int | None = None
    internal: bool = False  # failed by a bug in ddprof, not by its input
    # what the cache checks before reuse (ddprof.ingestion.pipeline): identity, change time, ends' digest
    dev: int | None = None
    ino: int | None = None
    ctime_ns: int | None = None
    quick: str | None = None

    def key(self) -> str:
        """Its key in the manifest's ``sources``: the file's resolved path, ``#i`` after it for the i-th rank
        of a file that holds several."""
        return str(Path(self.path).resolve()) + (f"#{self.member_index}" if self.member_index is not None else "")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, each list and dict copied one level down (what the manifest holds).
        Not :func:`dataclasses.asdict`: its deep recursion over a 1,024-rank job's process group lists
        took 5 ms a trace, in the one process that assembles the manifest."""
        return {f: (v.copy() if isinstance(v, (list, dict)) else v)
                for f in self.__dataclass_fields__ for v in (getattr(self, f),)}


def ingest_file(path_str: str, out_dir: str, rank_map: dict[str, int] | None,
                comm_kernels: tuple[str, ...] = (), lone: bool = False) -> FileResult:
    """Never raises for bad input: the failure is recorded in the result, with file and rank. Raises
    :class:`~ddprof.errors.OutputError` when the run dir cannot be written (no rank could be).
    ``comm_kernels``: the user's ``REGEX[=op]`` rules for communication kernels (already checked). The result
    of the file's first rank: a file of several ranks (an Nsight Systems export) gives one each, through
    :func:`ingest_files`. ``lone``: the trace is the only one given (:func:`ddprof.readers.ranks.trace_rank`)."""
    return ingest_files([path_str], out_dir, rank_map, comm_kernels, lone)[0]


def ingest_files(paths: Sequence[str], out_dir: str, rank_map: dict[str, int] | None,
                 comm_kernels: tuple[str, ...] = (), lone: bool = False) -> list[FileResult]:
    """:func:`ingest_file` of each trace, their events built as one frame: for many small traces (a
    frame operation costs ~0.1 ms whatever its size, and building one trace takes a few dozen). Each
    trace's part, summary and result are those it gets alone; a trace's bad input fails that trace only.
    ``lone``: ``paths`` is the one trace given."""
    out, rules = Path(out_dir), kernel_rules(comm_kernels)
    results: list[FileResult] = []
    ready: dict[EventReader, tuple[list[FileResult], list[Opened]]] = {}  # by reader, in the files' order
    for path_str in paths:
        path = Path(path_str)
        st = path.stat()
        res = FileResult(path=path_str, size=st.st_size, mtime_ns=st.st_mtime_ns, rank_map=rank_map or None,
                         dev=st.st_dev, ino=st.st_ino, ctime_ns=st.st_ctime_ns, lone=lone)
        results.append(res)
        got = _guarded(res, _open, path, rank_map, res)
        if got is not None:
            group = ready.setdefault(got[0], ([], []))
            if len(got[1]) > 1:  # a file of several ranks: a result each
                results[-1:] = [r for r, _ in got[1]]
            group[0].extend(r for r, _ in got[1])
            group[1].extend(o for _, o in got[1])
    got = None  # _store frees each opened trace once built: no other reference may keep it
    created: list[Path] = []
    try:
        while ready:
            reader = next(iter(ready))
            batch, opened = ready.pop(reader)
            _store_batch(reader, out, batch, opened, rules, created)
    except OutputError:  # the run dir cannot take them: the parts written here go (those already there stay)
        for p in created:
            p.unlink(missing_ok=True)
            summary_path(p).unlink(missing_ok=True)
        raise
    return results


def _store_batch(reader: EventReader, out: Path, ready: list[FileResult], opened: list[Opened],
                 rules: tuple[CommRule, ...], created: list[Path]) -> None:
    """:func:`_store` of the traces one reader opened: as one frame, or, when that fails with no trace to
    blame, each alone (to say whose fault it is)."""
    if len(ready) == 1:
        _guarded(ready[0], _store, reader, out, ready, opened, rules, created)
        return
    pairs = list(zip(ready, opened))  # small traces: kept for the fallback below
    try:
        _store(reader, out, ready, opened, rules, created)
    except OutputError:
        raise
    except Exception:  # not a trace's own fault to share: each is built alone, to say whose it is
        for res, one in pairs:
            _guarded(res, _store, reader, out, [res], [one], rules, created)


def _guarded(res: FileResult, step: Callable[..., _T], *args: Any) -> _T | None:
    """``step(*args)``, a failure recorded in ``res`` (and None returned) unless the run dir is at fault."""
    path = Path(res.path)
    try:
        return step(*args)
    except OutputError:
        raise
    except DdprofError as exc:
        res.status, res.error = "failed", str(exc)
        if isinstance(exc, BadInputError) and exc.rank is None and res.member is not None and res.rank is not None:
            res.error = str(BadInputError(exc.cause, path=exc.path or path, rank=res.rank))  # which rank of the file
    except OSError as exc:
        res.status, res.error = "failed", str(BadInputError(f"cannot read file ({exc.strerror or exc})", path=path))
    except Exception as exc:  # a bug must not take the other ranks down; keep the evidence
        res.status, res.internal = "failed", True
        res.error = str(BadInputError(f"internal error while ingesting ({type(exc).__name__}: {exc}); "
                                      f"please report it with this trace:\n{traceback.format_exc()}",
                                      path=path, rank=res.rank))
    return None


def _open(path: Path, rank_map: dict[str, int] | None,
          res: FileResult) -> tuple[EventReader, list[tuple[FileResult, Opened]]]:
    """Recognise a trace and open it with its reader; its identity's facts into ``res`` (a claim that
    contradicts itself raises). A file that holds several ranks gives a result and an opened member each,
    ``res`` the first."""
    res.quick = quick_digest(path, res.size)
    reader = registry.recognise(path)
    if not reads_events(reader):
        if reads_dumps(reader):
            reader.load(path)  # a file that is not what its first bytes suggest says so here
        raise BadInputError(f"{reader.describes}, not a trace: it holds no events to ingest (ddprof analyze "
                            "reads it for the hang diagnosis)", path=path)
    opened = reader.open(path)
    res.sha1 = opened.sha1
    if not opened.members:
        ident = opened.identity
        rank, warns = trace_rank(path, ident.rank, rank_map, ident.claims_in, res.lone)
        _identify(path, res, opened, rank, warns)
        return reader, [(res, opened)]
    ranks, warns = member_ranks(path, [m.identity.rank for m in opened.members], rank_map,
                                opened.members[0].identity.claims_in)
    pairs = []
    for i, (member, rank) in enumerate(zip(opened.members, ranks)):
        mine = res if i == 0 else FileResult(path=res.path, size=res.size, mtime_ns=res.mtime_ns, rank_map=res.rank_map,
                                             dev=res.dev, ino=res.ino, ctime_ns=res.ctime_ns, quick=res.quick,
                                             lone=res.lone)
        mine.sha1, mine.member, mine.member_index = member.sha1, member.member, i
        _identify(path, mine, member, rank, warns if i == 0 else [])
        pairs.append((mine, member))
    return reader, pairs


def _identify(path: Path, res: FileResult, opened: Opened, rank: int, rank_warnings: list[str]) -> None:
    """An opened trace's rank (``rank``, as resolved) and identity into ``res``; raises for a rank or world
    size that cannot be."""
    ident = opened.identity
    res.warnings.extend(opened.warnings)
    res.rank = rank
    if not 0 <= res.rank < MAX_WORLD_SIZE:
        bad, res.rank = res.rank, None
        raise BadInputError(f"rank {bad} is not a plausible rank (0 to {MAX_WORLD_SIZE - 1})", path=path)
    res.warnings.extend(rank_warnings)
    res.world_size, why = checked_world_size(ident.world_size, f"{ident.claims_in}.world_size")
    if why:
        res.warnings.append(why)
    if res.world_size is not None and res.rank >= res.world_size:
        raise BadInputError(f"rank {res.rank} is not below world_size {res.world_size}", path=path, rank=res.rank)
    res.backend, res.pg_config, res.nccl_version = ident.backend, ident.pg_config, ident.nccl_version
    res.device_names, res.base_time_ns = ident.device_names, ident.base_time_ns
    res.raw_complete = opened.raw_complete
    res.dropped = dict(opened.dropped)
    res.notices = list(opened.notices)
    for why, n in opened.dropped.items():
        res.warnings.append(f"dropped {n} of {opened.raw_complete} complete events: {why}")


def _store(reader: EventReader, out_dir: Path, results: list[FileResult], opened: list[Opened],
           rules: tuple[CommRule, ...], created: list[Path]) -> None:
    """Build the traces' events as one frame (``reader``: the one that opened them all), then check and
    write each trace's part (a trace's bad events fail that trace only; the parts not there before are
    added to ``created``). ``opened`` is emptied once built: a large trace's decoded frame is not kept
    while its part is written."""
    df, warnings = reader.read(opened, [r.rank for r in results], rules)  # type: ignore[misc]
    opened.clear()
    n = len(results)
    df, dropped = _drop_duplicates(df, n)
    whole_valid = _valid(df.drop("_trace"))
    facts = _facts(df, n)
    # a batch's drawn events and parts are made at once; a trace alone has them made as it is written (memory)
    drawn: list[pl.DataFrame | None] = [*_per_trace(lanes(df, "_trace"), n)] if n > 1 else [None]
    encoded = _encoded(df, n)
    for t, (res, mine) in enumerate(zip(results, _per_trace(df, n))):
        res.warnings.extend(warnings[t])
        if dropped[t]:
            res.warnings.append(f"dropped {dropped[t]} exact duplicate event(s): every field equal to an earlier "
                                "event's (a trace written twice over would otherwise count its collectives twice)")
        _guarded(res, _write, out_dir, mine, drawn[t], res, facts.get(t), whole_valid, created, encoded[t])


def _per_trace(frame: pl.DataFrame, n: int) -> list[pl.DataFrame]:
    """The rows of each of ``n`` traces (``frame`` holds them one after the other), ``_trace`` dropped."""
    at = np.searchsorted(frame.get_column("_trace").to_numpy(), np.arange(n + 1))
    rest = frame.drop("_trace")
    return [rest.slice(int(a), int(b - a)) for a, b in zip(at[:-1], at[1:])]


def _valid(df: pl.DataFrame) -> bool:
    try:
        validate(df)
    except SchemaError:
        return False
    return True


def _write(out_dir: Path, df: pl.DataFrame, drawn: pl.DataFrame | None, res: FileResult,
           facts: dict[str, Any] | None, valid: bool, created: list[Path], encoded: bytes | None = None) -> None:
    """Check one trace's events, then write its part and timeline summary (``drawn``: its events'
    :func:`~ddprof.store.timeline_summary.lanes`, or None to make them; ``encoded``: its part, or None to encode
    it); its counts into ``res``. ``valid``: all the traces built with it passed
    :func:`~ddprof.store.schema.validate` (else it is asked for this one, to name it)."""
    path = Path(res.path)
    if not valid:
        validate(df, where=f"{path} (rank {res.rank})")
    if df.height == 0 or facts is None:
        raise BadInputError("no complete events in the trace", path=path, rank=res.rank)
    _summarise(df, facts, res)
    assert res.rank is not None and res.sha1 is not None  # set by _open
    member = f"-{res.member_index}" if res.member_index is not None else ""  # one file, several ranks
    part = rank_dir(out_dir, res.rank) / f"part-{res.sha1[:16]}{member}.parquet"
    if not part.exists():
        created.append(part)
    if encoded is None and df.height <= ROW_GROUP:
        encoded = _encode(df)
    if encoded is not None:
        write_bytes_atomic(part, encoded)
    else:
        write_atomic(part, lambda p: _write_parquet(df, p), needed=lambda: _write_parquet(df, io.BytesIO()))
    res.part = str(part.relative_to(out_dir))
    write_summary(df, part, drawn)  # the dashboard's timeline summary, while the events are in memory


_PARQUET: dict[str, Any] = {"compression": "zstd", "statistics": True, "row_group_size": ROW_GROUP}


def _write_parquet(df: pl.DataFrame, target: Path | io.BytesIO) -> int:
    """Write a part; return its size in bytes (into memory: the space a part needs, asked on a full disk)."""
    df.write_parquet(target, **_PARQUET)
    return target.tell() if isinstance(target, io.BytesIO) else target.stat().st_size


def _encode(df: pl.DataFrame) -> bytes:
    """A part of one row group, encoded in memory (written at once: Polars' file writer costs ~0.4 ms more,
    a third of a small part's write)."""
    buf = io.BytesIO()
    _write_parquet(df, buf)
    return buf.getvalue()


def _encoded(df: pl.DataFrame, n: int) -> list[bytes | None]:
    """The parts of a batch of ``n`` traces (``df``: their rows, by ``_trace``), encoded in memory by one
    partitioned write: the same bytes :func:`_encode` gives each alone, for a fixed cost (~0.5 ms a call)
    paid once. None for each where the frame is one trace, a trace is past one row group, or Polars' writer
    cannot partition into memory (:func:`_write` then encodes the trace alone); None for a trace with no
    rows."""
    none: list[bytes | None] = [None] * n
    if n < 2 or df.height == 0 or int(np.bincount(df.get_column("_trace").to_numpy()).max()) > ROW_GROUP:
        return none
    bufs: dict[int, io.BytesIO] = {}

    def into_memory(args: Any) -> io.BytesIO:
        buf = bufs[int(args.partition_keys.item(0, 0))] = io.BytesIO()
        return buf

    try:
        df.lazy().sink_parquet(pl.PartitionBy("", key="_trace", include_key=False, file_path_provider=into_memory),
                               **_PARQUET)
    except Exception:  # a Polars without this writer (its partitioned sink is marked unstable)
        return none
    return [bufs[t].getvalue() if t in bufs else None for t in range(n)]


#: From this many rows up, duplicates are looked for among rows that start and last alike first.
MANY_ROWS = 32_768


def _drop_duplicates(df: pl.DataFrame, traces: int) -> tuple[pl.DataFrame, list[int]]:
    """The events with exact duplicates (every column equal, the trace included) dropped, first kept;
    and how many went, per trace. On a large frame rows are compared whole only where their start,
    trace and duration repeat (:func:`_same_time`: few rows)."""
    if df.height < MANY_ROWS:
        duplicated = df.is_duplicated().any()
    else:
        same_time = _same_time(df)
        duplicated = same_time.size > 0 and df[same_time].is_duplicated().any()
    if not duplicated:
        return df, [0] * traces
    kept = df.unique(maintain_order=True, keep="first")
    before = np.bincount(df.get_column("_trace").to_numpy(), minlength=traces)
    after = np.bincount(kept.get_column("_trace").to_numpy(), minlength=traces)
    return kept, [int(n) for n in before - after]


def _same_time(df: pl.DataFrame) -> np.ndarray:
    """The rows whose start, trace and duration another row shares (integers: found by sorting the starts,
    which a trace writes nearly in order, then among the few rows sharing a start; a hash of three columns
    over every row costs several times more)."""
    ts = df.get_column("ts_ns").to_numpy()
    order = np.argsort(ts, kind="stable")
    tied = ts[order[1:]] == ts[order[:-1]]
    if not tied.any():
        return np.zeros(0, dtype=np.int64)
    rows = order[np.flatnonzero(np.r_[tied, False] | np.r_[False, tied])]  # rows sharing a start
    keys = (ts[rows], df.get_column("_trace").to_numpy()[rows], df.get_column("dur_ns").to_numpy()[rows])
    by = np.lexsort(keys[::-1])
    same = np.logical_and.reduce([k[by][1:] == k[by][:-1] for k in keys])
    return rows[by[np.flatnonzero(np.r_[same, False] | np.r_[False, same])]]


_HOST = pl.col("stream").is_null()
#: The ``ProfilerStep#N`` annotations' durations: the names' parse runs only on the host rows named so.
_STEP_ROWS = pl.struct("name", "dur_ns").filter(_HOST & pl.col("name").str.starts_with(STEP_PREFIX))
_STEP_DURATIONS = _STEP_ROWS.filter(step_number(_STEP_ROWS.struct.field("name")).is_not_null()).struct.field("dur_ns")
#: The distinct names of the host spans named like a data loader's (an analysis reading a GPU rank's rows
#: keeps these by name): the pattern is tried on each distinct name of a host op or annotation once.
_HOST_SPAN_NAMES = pl.col("name").filter(_HOST & pl.col("kind").is_in(["cpu_op", "annotation"])).unique()
_LOADER_NAMES = _HOST_SPAN_NAMES.filter(_HOST_SPAN_NAMES.str.contains(DATA_LOADER_PATTERN)).sort()
#: The categories of the rows of kind ``other`` (where an accelerator's events are looked for).
_OTHER_CATS = pl.col("cat").filter(pl.col("kind") == "other")
_SUMMARY = {
    "events": pl.len(),
    "kernels": pl.col("kind").is_in(["compute", "comm"]).and_(pl.col("stream").is_not_null()).sum(),
    "comm_kernels": ((pl.col("kind") == "comm") & pl.col("stream").is_not_null()).sum(),
    "comm_events": (pl.col("kind") == "comm").sum(),
    "gpu": (pl.col("kind").is_in(GPU_KINDS) & pl.col("stream").is_not_null()).any(),
    "first": pl.col("ts_ns").min(),
    "last": (pl.col("ts_ns") + pl.col("dur_ns")).max(),
    "steps": pl.col("step").drop_nulls().unique().sort(),
    "step_durations": _STEP_DURATIONS,
    "loader_names": _LOADER_NAMES,
    # events of an accelerator ddprof does not analyse (counted by category below only where there are some)
    "accelerator": _OTHER_CATS.str.contains(ACCELERATOR_CAT_PATTERN).sum(),
}
_LISTS = ("steps", "step_durations", "loader_names")
#: The same of a frame of one trace, without grouping (a group-by costs ~3 ms more on a 50k-event trace).
_SUMMARY_OF_ONE = {"_trace": pl.first("_trace"),
                   **{k: e.implode() if k in _LISTS else e for k, e in _SUMMARY.items()}}


def _facts(df: pl.DataFrame, traces: int) -> dict[int, dict[str, Any]]:
    """Each trace's counts, span, steps and step durations (by ``_trace``; none for a trace with no
    events), from one frame operation (``traces``: how many the frame holds)."""
    if df.height == 0:
        return {}
    facts = df.select(**_SUMMARY_OF_ONE) if traces == 1 else df.group_by("_trace").agg(**_SUMMARY)
    return {row.pop("_trace"): row for row in facts.iter_rows(named=True)}


def _summarise(df: pl.DataFrame, s: dict[str, Any], res: FileResult) -> None:
    """The result's counts, span, steps (``s``: :func:`_facts` of the trace) and profiling windows."""
    res.events, res.kernels = s["events"], s["kernels"]
    res.comm_kernels, res.comm_events = s["comm_kernels"], s["comm_events"]
    res.gpu, res.first_ns, res.last_ns = bool(s["gpu"]), s["first"], s["last"]
    res.steps, res.loader_names = s["steps"], list(s["loader_names"])
    res.windows = _windows(df, np.asarray(s["step_durations"], dtype=np.int64))
    if s["accelerator"]:
        acc = df.select(_OTHER_CATS).filter(pl.col("cat").str.contains(ACCELERATOR_CAT_PATTERN))
        res.accelerator_events = {str(c): int(n) for c, n in acc.group_by("cat").len().sort("cat").iter_rows()}


def _windows(df: pl.DataFrame, step_durations: np.ndarray) -> list[list[int]]:
    """The trace's profiling windows, cut at gaps with no event at all (:mod:`ddprof.store.windows`);
    ``step_durations``: those of its ``ProfilerStep#N`` annotations."""
    ts = df.get_column("ts_ns").to_numpy()
    return split_windows(ts, ts + df.get_column("dur_ns").to_numpy(), gap_threshold_ns(step_durations))
