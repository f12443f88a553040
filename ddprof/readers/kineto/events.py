"""One Kineto event as ddprof reads it, and a chunk of events as a columnar frame.

Only the fields ddprof uses are decoded (msgspec typed structs, no per-event dicts). A chunk becomes a
Polars frame at once. Collective metadata matters on few rows: collective markers (by name) and rows
with new-format fields; it is gathered from those rows only, as plain values (:class:`MetaRows`), and made a
small frame of its own once for the trace, or for all the traces built together.

Categories are stored in their modern spelling whatever the trace's generation
(:func:`ddprof.readers.kineto.categories.canonical`).

Other exporters of the Chrome trace format write durations as ``B``/``E`` pairs: they are matched per
(pid, tid) as a stack (in timestamp order, file order between equal timestamps) and become complete
events; a ``B`` never closed or an ``E`` with nothing open is dropped and named in the warnings.
Instants (``i``/``I``) become zero-duration events where their category has a kind (a ``cpu_op``
instant); the others, and counters (``C``), hold no interval any analysis measures and are not kept.
Both are added once the file is read, after its complete events, in the file order of the event
that opens them (so the frame does not depend on where the reader cut the text).

Timestamps: Kineto writes microseconds with a fractional part. Whole microseconds and the fraction are
converted to integer nanoseconds separately (``ts * 1000`` in float64 would round epoch-scale values to
multiples of 256 ns).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.ma  # noqa: F401 - Polars imports it on its first NumPy -> Series conversion (~30 ms): load it with the rest
import polars as pl

from ddprof.readers.kineto.categories import CAT_KIND, canonical
from ddprof.readers.kineto.plain import ARG_FIELDS, NULL, RAW_FIELDS, Run, joined
from ddprof.readers.kineto.structs import MAX_DUR_NS, MAX_TS_US, PHASE_OF, Args, Complete
from ddprof.vocabulary.collective_ops import MARKER_RE
from ddprof.vocabulary.fields import as_int

AnyComplete = Any  # a complete event from any decoding path (ddprof.readers.kineto.structs)


#: Columns of the decoded frame, one row per kept complete event (before classification).
RAW_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(), "dur_ns": pl.Int64(), "pid": pl.Int64(), "tid": pl.Int64(), "cat": pl.String(),
    "name": pl.String(), "a_stream": pl.Int64(), "a_device": pl.Int64(), "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "is_marker": pl.Boolean(),  # the name is a collective marker's (:data:`ddprof.vocabulary.collective_ops.MARKER_RE`)
    "shapes": pl.UInt32(),  # the recorded input shapes and types (:func:`_shapes`)
}
#: Collective metadata, only for the rows that can carry it (markers and rows with new-format fields);
#: ``_row`` is the row's index in the frame above.
META_SCHEMA: dict[str, pl.DataType] = {
    "_row": pl.UInt32(), "coll_name": pl.String(), "in_nelems": pl.Int64(), "out_nelems": pl.Int64(),
    "group_size": pl.Int64(), "dtype": pl.String(), "pg": pl.String(), "seq": pl.Int64(),
    "src_rank": pl.Int64(), "dst_rank": pl.Int64(),
    "input_dims": pl.Binary(), "input_type": pl.Binary(), "concrete_inputs": pl.Binary(),
    "in_split": pl.Binary(), "out_split": pl.Binary(),
}


def _to_ns(us: np.ndarray) -> np.ndarray:
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def _ints(values: Sequence[Any]) -> pl.Series:
    """Int64 column; values spelled otherwise (``"0x0"``, ``7.0``) go through :func:`ddprof.vocabulary.fields.as_int`."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (TypeError, OverflowError):
        return pl.Series([as_int(v) for v in values], dtype=pl.Int64)


def _shapes(args: list[Any]) -> pl.Series:
    """Per event, a CRC-32 of its ``Input Dims`` and ``Input type`` as the trace writes them (null without
    them): calls of one op with equal values ran on the same shapes and types (``shapes`` in the store).
    A checksum of the raw text costs ~30 ns an event; parsing the lists would cost ~50 times that."""
    crc = zlib.crc32
    return pl.Series([crc(a.input_dims, crc(a.input_type)) if a.input_dims else None for a in args], dtype=pl.UInt32)


_EMPTY = Args()  # the args of an event that has none


#: Rows of plain runs made one frame at most: their bytes wait for it beside the frames already made (a few MB).
HELD_ROWS = 65_536


class Columns:
    """Accumulates decoded runs of events as columnar pieces; their Python objects die with the run."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.rows = 0
        self.complete = 0  # 'X' events seen, kept or not
        self.dropped: Counter[str] = Counter()
        self.meta = MetaRows()
        self._marker_names: dict[str, bool] = {}
        self._cats: dict[str | None, str | None] = {}
        self._instant_cats: dict[str | None, bool] = {}  # whether an instant of this category is kept
        self._pairs = _Pairs()
        self._plain: PlainTables | None = None  # made by the first run read in plain columns
        self._held: list[Run] = []  # runs in plain columns not yet in a frame (:meth:`_flush`)
        self._held_rows = 0

    def add_run(self, run: list[Any], complete: type) -> None:
        """Add a decoded run of events of any phase: those of type ``complete`` (phase 'X') now, the
        instants whose category has a kind and the B/E pairs once the file ends (:meth:`frame`)."""
        if set(map(type, run)) <= {complete}:  # most runs: complete events only, kept as they are
            self.add(run)
            return
        self.timed([e for e in run if type(e) in PHASE_OF])
        self.add([e for e in run if type(e) is complete])

    def timed(self, events: list[Any]) -> None:
        """Keep the instants that fit a kind and the B/E events until the file ends (``events``:
        phases B, E, i, I only, typed structs or :data:`~.structs.Event`)."""
        kinded = self._instant_cats  # instants can be a third of a trace: each category is looked at once
        for e in events:
            ph = PHASE_OF.get(type(e)) or e.ph
            if ph not in "BE":
                cat = e.cat
                if cat not in kinded:
                    kinded[cat] = canonical(cat) in CAT_KIND
                if not kinded[cat]:
                    continue
            self._pairs.add(ph, e)

    def add(self, keep: list[AnyComplete], malformed: int = 0) -> None:
        """Add the complete events of a run (``keep``: already only phase 'X')."""
        self._flush()  # the rows of the plain runs before it come first
        self.complete += len(keep) + malformed
        ts_us = np.array([e.ts for e in keep], dtype=np.float64)  # a missing one is NaN
        dur_us = np.array([e.dur for e in keep], dtype=np.float64)
        name_list = [e.name for e in keep]
        good = self._plausible(ts_us, dur_us, name_list)
        ok = keep
        if good is not None:
            idx = np.flatnonzero(good)
            ok, ts_us, dur_us, name_list = [keep[i] for i in idx], ts_us[idx], dur_us[idx], [name_list[i] for i in idx]
        if not ok:
            return
        args = [e.args or _EMPTY for e in ok]
        flags = self._markers(name_list)
        rare = set(np.flatnonzero(flags).tolist())
        named = [a.coll_name for a in args]
        if named.count(None) < len(named):  # new-format metadata: on few rows
            rare.update(i for i, c in enumerate(named) if c is not None)
        if rare:
            self.meta.add(sorted(rare), args, self.rows)
        columns = {
            "ts_ns": pl.Series(_to_ns(ts_us)),
            "dur_ns": pl.Series(_to_ns(dur_us)),
            "pid": _ints([e.pid for e in ok]),
            "tid": _ints([e.tid for e in ok]),
            "cat": pl.Series(self._categories([e.cat for e in ok]), dtype=pl.String),
            "name": pl.Series(name_list, dtype=pl.String),
            "a_stream": _ints([a.stream for a in args]),
            "a_device": _ints([a.device for a in args]),
            "correlation": _ints([a.correlation for a in args]),
            "external_id": _ints([a.external_id for a in args]),
            "is_marker": pl.Series(flags),
            "shapes": _shapes(args),
        }
        self.frames.append(_frame(columns, RAW_SCHEMA))
        self.rows += len(ok)

    def add_plain(self, run: Run) -> None:
        """Add a run decoded in plain columns (:mod:`.plain`): the frame and metadata :meth:`add` makes of
        the same events. Consecutive runs are made one frame (:meth:`_flush`): a frame's columns cost about
        0.1 ms each to make whatever their length."""
        tables = self._plain = self._plain or PlainTables()
        if run.names or run.cats:
            tables.extend(run.names, self._markers(run.names), self._categories(run.cats))
        for ph, pid, tid, ts, name, cat, values in run.timed:
            self._pairs.keep(ph, pid, tid, ts, name, cat, None if values is None else _args(values))
        if not run.n:
            return
        self.complete += run.n
        if run.rare:
            rows, values = zip(*run.rare)
            self.meta.add_values(rows, dict(zip(ARG_FIELDS, zip(*values))), self.rows)
        self._held.append(run)
        self._held_rows += run.n
        self.rows += run.n
        if self._held_rows >= HELD_ROWS:
            self._flush()

    def _flush(self) -> None:
        """The plain runs held, one after the other, as one frame (their codes index the tables as they are now:
        the tables only grow)."""
        if not self._held:
            return
        run, tables = joined(self._held), self._plain
        self._held, self._held_rows = [], 0
        assert tables is not None  # made by add_plain
        names, cats = _codes(run.name), _codes(run.cat)
        columns = {
            "ts_ns": pl.Series(_to_ns(np.frombuffer(run.ts, dtype=np.float64))),
            "dur_ns": pl.Series(_to_ns(np.frombuffer(run.dur, dtype=np.float64))),
            **{c: _plain_ints(data, c in run.nulls) for c, data in run.ints.items()},
            "cat": tables.cats.gather(cats),
            "name": tables.names.gather(names),
            "is_marker": tables.markers.gather(names),
            "shapes": _plain_ints(run.shapes, True).cast(pl.UInt32),
        }
        self.frames.append(_frame(columns, RAW_SCHEMA))

    def _categories(self, cats: list[str | None]) -> list[str | None]:
        """Each category in its modern spelling (a trace has few distinct ones: each is mapped once)."""
        seen = self._cats
        for c in set(cats).difference(seen):
            seen[c] = canonical(c)
        if all(seen[c] == c for c in seen):
            return cats
        return [seen[c] for c in cats]

    def categories(self) -> frozenset[str | None]:
        """The distinct categories of the rows added (each run's are mapped through ``_cats``)."""
        return frozenset(self._cats.values())

    def _markers(self, names: list[str]) -> np.ndarray:
        """Which names are collective markers' (a job has few distinct names: each is tested once)."""
        seen = self._marker_names
        try:
            flags = list(map(seen.__getitem__, names))
        except KeyError:
            for n in set(names).difference(seen):
                seen[n] = MARKER_RE.match(n) is not None
            flags = list(map(seen.__getitem__, names))
        return np.array(flags, dtype=bool)

    def _plausible(self, ts_us: np.ndarray, dur_us: np.ndarray, names: list[str | None]) -> np.ndarray | None:
        """Mask of the events to keep (None: all); the others are counted by reason."""
        with np.errstate(invalid="ignore"):
            missing = np.isnan(ts_us) | np.isnan(dur_us)
            bad_ts = ~(np.abs(ts_us) < MAX_TS_US) & ~missing
            neg = (dur_us < 0) & ~missing
            big = ~(dur_us <= MAX_DUR_NS / 1000) & ~neg & ~missing  # not dur * 1000: 1e308 would overflow
        if None in names:
            missing |= np.array([n is None for n in names], dtype=bool)
        drop = missing | bad_ts | neg | big
        if not drop.any():
            return None
        for mask, why in ((missing, "missing ts, dur or name"), (bad_ts & ~missing, "timestamp out of range"),
                          (neg & ~bad_ts & ~missing, "negative duration"),
                          (big & ~bad_ts & ~missing, "duration over 24 h (CUPTI timestamp overflow)")):
            if mask.any():
                self.dropped[why] += int(mask.sum())
        return ~drop

    def frame(self) -> pl.DataFrame:
        """All runs as one frame whose columns keep the runs as chunks: a contiguous copy would cost
        time and, while it is made, the memory of a second copy; nothing downstream needs it."""
        matched, dropped = self._pairs.complete()
        self.dropped.update(dropped)
        if matched or dropped:
            self.add(matched, sum(dropped.values()))
        self._flush()
        frames, self.frames = self.frames, []
        return pl.concat(frames, rechunk=False) if frames else pl.DataFrame(schema=RAW_SCHEMA)


class PlainTables:
    """The distinct names (and whether each is a collective marker's) and categories (in their modern
    spelling) of a file read in plain columns, as its runs' codes index them."""

    def __init__(self) -> None:
        self.names = pl.Series(dtype=pl.String)
        self.markers = pl.Series(dtype=pl.Boolean)
        self.cats = pl.Series(dtype=pl.String)

    def extend(self, names: list[str], markers: np.ndarray, cats: list[str | None]) -> None:
        self.names = self.names.append(pl.Series(names, dtype=pl.String)).rechunk()
        self.markers = self.markers.append(pl.Series(markers, dtype=pl.Boolean)).rechunk()
        self.cats = self.cats.append(pl.Series(cats, dtype=pl.String)).rechunk()


def _args(values: tuple[Any, ...]) -> Any:
    """The args of :mod:`.plain`'s values. Their raw JSON stays bytes: what reads it (:func:`_shapes`,
    :func:`_meta`) reads a ``msgspec.Raw`` and bytes alike."""
    return Args(*values)


def _codes(data: bytes) -> pl.Series:
    return pl.Series(np.frombuffer(data, dtype=np.uint32))


def _plain_ints(data: bytes, nulls: bool) -> pl.Series:
    """An int64 column of :mod:`.plain` (``nulls``: :data:`.plain.NULL` stands for null in it)."""
    values = pl.Series(np.frombuffer(data, dtype=np.int64))
    return values.set(values == NULL, None) if nulls else values


class _Pairs:
    """Duration begin/end events and kept instants of a file, made complete events once all are read."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def add(self, ph: str, e: Any) -> None:
        """Keep an event until the end of the file; its raw args are copied (they view the run's text)."""
        args = e.args
        if args is not None and any(getattr(args, f) for f in RAW_FIELDS):
            args = msgspec.structs.replace(args, **{f: msgspec.Raw(bytes(getattr(args, f))) for f in RAW_FIELDS})
        self.keep(ph, e.pid, e.tid, e.ts, e.name, e.cat, args)

    def keep(self, ph: str, pid: Any, tid: Any, ts: Any, name: Any, cat: Any, args: Any) -> None:
        self.events.append((pid, tid, ts, len(self.events), ph, name, cat, args))

    def complete(self) -> tuple[list[AnyComplete], Counter[str]]:
        """The instants (duration 0) and matched pairs as complete events, in the file order of their
        opening event, and the unmatched events counted by reason (the first one of each reason
        named). Per (pid, tid), in timestamp order (file order between equal ones): a ``B`` opens, an
        ``E`` closes the innermost open ``B``.

        Example: ``B fwd @0, B mm @1, E @4, E @9`` on one thread -> ``fwd`` [0, 9], ``mm`` [1, 4].
        """
        events, self.events = self.events, []
        found: list[tuple[int, AnyComplete]] = []
        dropped: Counter[str] = Counter()
        if not events:
            return [], dropped
        found += [(e[3], Complete(name=e[5], cat=e[6], pid=e[0], tid=e[1], ts=e[2], dur=0.0, args=e[7]))
                  for e in events if e[4] in "iI"]
        pairs = [e for e in events if e[4] in "BE"]
        timed = [e for e in pairs if isinstance(e[2], (int, float))]
        if len(timed) < len(pairs):
            dropped["'B'/'E' event without a timestamp"] += len(pairs) - len(timed)
        threads: dict[tuple[Any, Any], list[tuple[Any, ...]]] = {}
        for e in sorted(timed, key=lambda e: (e[2], e[3])):
            threads.setdefault((e[0], e[1]), []).append(e)
        first: dict[str, str] = {}
        for (pid, tid), evs in threads.items():
            stack: list[tuple[Any, ...]] = []
            for e in evs:
                if e[4] == "B":
                    stack.append(e)
                elif stack:
                    b = stack.pop()
                    found.append((b[3], Complete(
                        name=b[5] if b[5] is not None else e[5], cat=b[6] if b[6] is not None else e[6],
                        pid=b[0], tid=b[1], ts=b[2], dur=e[2] - b[2], args=b[7] if b[7] is not None else e[7])))
                else:
                    first.setdefault("E", f"'E' (end) event with no open 'B' on its thread, e.g. {e[5]!r} "
                                          f"(pid {pid}, tid {tid}, ts {e[2]})")
                    dropped[first["E"]] += 1
            for b in stack:
                first.setdefault("B", f"'B' (begin) event never closed by an 'E' on its thread, e.g. {b[5]!r} "
                                      f"(pid {pid}, tid {tid}, ts {b[2]})")
                dropped[first["B"]] += 1
        return [c for _, c in sorted(found, key=lambda f: f[0])], dropped


#: The args' fields the metadata is made of.
_META_FIELDS = ("coll_name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name", "pg_id", "seq",
                "src_rank", "dst_rank", *RAW_FIELDS)
_INT_FIELDS = ("in_nelems", "out_nelems", "group_size", "seq", "src_rank", "dst_rank")


class MetaRows:
    """The collective metadata of the few rows that can carry it (:data:`META_SCHEMA`), kept as plain values
    until a frame is asked for: the rows of every run of a trace, and of every trace built together
    (:func:`ddprof.readers.kineto.build.build_events`), become one frame: its columns cost ~0.3 ms to make
    whatever their length, a tenth of a small trace's ingest were they made for each run or trace."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.fields: dict[str, list[Any]] = {f: [] for f in _META_FIELDS}

    def add(self, rows: list[int], args: Sequence[Any] | Mapping[int, Any], base: int) -> None:
        """Some rows of a run (``args``: at least those rows' args, whose raw fields view the run's text)."""
        sub = [args[i] for i in rows]
        self.add_values(rows, {f: [getattr(a, f) for a in sub] for f in _META_FIELDS}, base)

    def add_values(self, rows: Sequence[int], fields: Mapping[str, Sequence[Any]], base: int) -> None:
        """Some rows of a run, given the values of each args' field over them (at least :data:`_META_FIELDS`;
        :mod:`.plain` hands its rows' args over as values); the raw fields are copied out."""
        self.rows += [r + base for r in rows]
        for f, values in self.fields.items():
            values += [bytes(v) or None for v in fields[f]] if f in RAW_FIELDS else fields[f]

    def extend(self, other: MetaRows, offset: int) -> None:
        """Append ``other``'s rows, their row numbers moved by ``offset``."""
        self.rows += [r + offset for r in other.rows]
        for f, values in self.fields.items():
            values += other.fields[f]

    def frame(self) -> pl.DataFrame:
        """The rows as a frame of :data:`META_SCHEMA` (a process group named by its id where it has no name)."""
        fields = self.fields
        pgs = (n if n is not None else i for n, i in zip(fields["pg_name"], fields["pg_id"]))  # the name, else the id
        columns = {
            "_row": pl.Series(self.rows, dtype=pl.UInt32),
            "coll_name": pl.Series(fields["coll_name"], dtype=pl.String),
            **{f: _ints(fields[f]) for f in _INT_FIELDS},
            "dtype": pl.Series(fields["dtype"], dtype=pl.String),
            "pg": pl.Series([None if p is None else str(p) for p in pgs], dtype=pl.String),
            **{name: pl.Series(fields[name], dtype=pl.Binary) for name in RAW_FIELDS},
        }
        return _frame(columns, META_SCHEMA)


def _frame(columns: dict[str, pl.Series], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A frame of typed Series, named and ordered as ``schema`` says (each already of its type): about
    7x cheaper per run than a dict of lists cast to the schema."""
    return pl.DataFrame([columns[name].alias(name) for name in schema])
