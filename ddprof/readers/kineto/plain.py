"""A Kineto trace decoded into plain columns, without Polars or NumPy: what a process that has not
loaded them yet can do (:mod:`ddprof.readers.read_ahead` runs it while the program loads).

The file is streamed and cut into runs exactly as :func:`.decode.decode` does (:func:`.stream.split`), each
run decoded by the same typed decoders, strict then lenient. A run they take whose complete events are all
kept becomes a :class:`Run`: numbers as machine arrays (a null as :data:`NULL`; integers spelled otherwise
through :func:`~ddprof.vocabulary.fields.as_int`, as :mod:`.events` does), names and categories as codes
into tables of the distinct strings, and as plain values the collective metadata of the few rows that can
carry it and the instants and B/E events :class:`.events.Columns` keeps until the file ends. Every other
run (a malformed event, an event :mod:`.events` drops and counts, an integer equal to :data:`NULL`) is
kept as its text, checked to be whole events, and decoded by :func:`.decode._consume` in the process that
builds the frame. So is a run that process asks for (``wanted``: it has a core free to decode with, and
:mod:`~ddprof.readers.read_ahead` asks for runs once it has loaded the program), after the cut is checked
to be whole events and nothing else. :meth:`.events.Columns.add_plain` makes of the two kinds the frame
:func:`.decode.decode` makes of the file, row for row (in fewer chunks: runs are handed over together,
:data:`PIECE_EVENTS` events at a time).
"""

from __future__ import annotations

import math
import os
import zlib
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import compress
from pathlib import Path
from typing import Any

import msgspec
from msgspec.structs import astuple

from ddprof.readers.kineto.categories import CAT_KIND, canonical
from ddprof.readers.kineto.stream import split
from ddprof.readers.kineto.structs import (
    LENIENT_RUN,
    MAX_DUR_NS,
    MAX_TS_US,
    PHASE_OF,
    STRICT_RUN,
    Args,
    Complete,
    StrictComplete,
)
from ddprof.readers.source import Source
from ddprof.vocabulary.collective_ops import MARKER_RE
from ddprof.vocabulary.fields import as_int

_CScanner: type[_scan.Scanner] | None
try:  # the compiled scanner, built with the package where a C compiler was found
    from ddprof.readers.kineto import _scan
    _CScanner = _scan.Scanner
except ImportError:  # pragma: no cover - an install without it: the typed decoders read every run
    _CScanner = None

#: A null in an integer column (a value equal to it sends the run the ordinary way).
NULL = -(1 << 63)
#: The args' fields, in the order :attr:`Run.rare` gives their values; the raw JSON ones last.
ARG_FIELDS: tuple[str, ...] = Args.__struct_fields__
RAW_FIELDS = ("input_dims", "input_type", "concrete_inputs", "in_split", "out_split")
_RAW_AT = len(ARG_FIELDS) - len(RAW_FIELDS)
if ARG_FIELDS[_RAW_AT:] != RAW_FIELDS:  # pragma: no cover - a guard on structs.py
    raise ImportError("the args' raw fields must come last")
_NO_RAW = (b"",) * len(RAW_FIELDS)

_strict = msgspec.json.Decoder(STRICT_RUN)
_lenient = msgspec.json.Decoder(LENIENT_RUN)
_whole = msgspec.json.Decoder(list[msgspec.Raw])  # only tells whole events from a bad cut
_EMPTY = Args()  # the args of an event that has none
#: ``DDPROF_SCANNER=off`` decodes every run with the typed decoders (the same columns, more slowly).
SCANNER_SWITCH = "DDPROF_SCANNER"
#: Whether runs are read by the compiled scanner first (:class:`TextScanner`).
SCANNER = _CScanner is not None and os.environ.get(SCANNER_SWITCH, "").lower() != "off"
#: The integer columns of a :class:`Run`, in the scanner's order.
_INT_COLUMNS = ("pid", "tid", "a_stream", "a_device", "correlation", "external_id")


class Declined(Exception):
    """The file is not read here: the process that builds the frame reads it the ordinary way."""


@dataclass
class Run:
    """One run's kept complete events as columns (``ints`` hold :data:`NULL` where ``nulls`` says)."""

    n: int
    ts: bytes  # float64 microseconds
    dur: bytes
    ints: dict[str, bytes]  # int64, by column
    nulls: frozenset[str]
    shapes: bytes  # int64: the CRC-32 of the input shapes and types, NULL without them
    name: bytes  # uint32 codes into the file's names so far (``names`` extends them)
    cat: bytes  # uint32 codes into the file's categories so far (``cats`` extends them)
    rare: list[tuple[int, tuple[Any, ...]]]  # (row in the run, its args' values in the order of ARG_FIELDS)
    timed: list[tuple[Any, ...]]  # its kept instants and B/E events (:func:`_timed`), before its complete ones
    names: list[str]  # the names first seen in this run, in code order
    cats: list[str | None]


@dataclass
class Tail:
    """What is known once the file is read: its other keys (:class:`.stream.Header`'s fields), its SHA-1
    and inflated size."""

    head: dict[str, Any]
    sha1: str
    size: int


#: What :func:`read_plain` emits, in file order: a run in columns, or the text of a run to decode the
#: ordinary way; then the :class:`Tail`.
Piece = Run | bytes | Tail


#: Runs in columns are emitted together once they hold this many events (the process that makes their frame
#: pays about a millisecond a piece: on the 54 MB trace 47 pieces took 45 ms, 12 pieces 34 ms).
PIECE_EVENTS = 16_384


def read_plain(path: Path, emit: Callable[[Piece], None], wanted: Callable[[], bool] | None = None) -> None:
    """Decode ``path`` into plain columns, runs emitted in file order as soon as :data:`PIECE_EVENTS` events
    are decoded (a run the ordinary path must decode at once, after those before it), the :class:`Tail` last;
    :class:`Declined` where anything is not the common case (a file that is not a streamable trace or cannot
    be read, a document nested deeper than the decoder recurses): the ordinary path then reads it, and says
    what is wrong with it. ``wanted`` is asked before each run: when it says so, the run is emitted as its
    text, undecoded (after those before it)."""
    src = Source(path)
    held: list[Run] = []

    def hold(piece: Piece) -> None:
        if isinstance(piece, Run):
            held.append(piece)
            if sum(r.n for r in held) < PIECE_EVENTS:
                return
        if held:
            emit(joined(held))
            held.clear()
        if not isinstance(piece, Run):
            emit(piece)

    try:
        head = split(src.blocks(), _consumer(hold, _Tables(), wanted))
    except Exception as exc:
        raise Declined(f"{type(exc).__name__}: {exc}") from None
    if held:
        emit(joined(held))
    emit(Tail({f: getattr(head, f) for f in head.__struct_fields__}, src.sha1.hexdigest(), src.size))


def joined(runs: list[Run]) -> Run:
    """Consecutive runs as one: their columns one after the other, rows of rare metadata moved by the rows
    before them, instants and B/E events and new names in file order; a column holds a null where any does."""
    if len(runs) == 1:
        return runs[0]
    filled = [r for r in runs if r.n]
    rare, at = [], 0
    for r in filled:
        rare += [(i + at, values) for i, values in r.rare]
        at += r.n
    columns = {c: b"".join(r.ints[c] for r in filled) for c in (filled[0].ints if filled else {})}
    return Run(at, b"".join(r.ts for r in filled), b"".join(r.dur for r in filled), columns,
               frozenset().union(*(r.nulls for r in filled)), b"".join(r.shapes for r in filled),
               b"".join(r.name for r in filled), b"".join(r.cat for r in filled), rare,
               [e for r in runs for e in r.timed], [n for r in runs for n in r.names],
               [c for r in runs for c in r.cats])


def _consumer(emit: Callable[[Piece], None], tables: _Tables,
              wanted: Callable[[], bool] | None = None) -> Callable[[memoryview], None]:
    """:func:`.stream.split`'s consumer: raises :class:`msgspec.DecodeError` for a bad cut, and only then.
    The decoders are tried as :func:`.decode._decode_run` tries them; a run neither takes is text, and so is
    a run ``wanted`` asks for (checked to be whole events only)."""
    kinded: dict[str | None, bool] = {}
    scanner, scanned = (TextScanner() if SCANNER else None), False

    def consume(text: memoryview) -> None:
        nonlocal scanner, scanned
        if wanted is not None and wanted():
            _whole.decode(text)  # DecodeError: a bad cut
            emit(bytes(text))
            return
        if scanner is not None:
            kept = scanner.run(text)
            if kept is not None:
                scanned = True
                if kept.n or kept.timed:
                    emit(kept)
                return
            _whole.decode(text)  # DecodeError: a bad cut (the scanner took nothing from it)
            if scanned:  # the file's codes are the scanner's: this run is decoded by the other process
                emit(bytes(text))
                return
            scanner = None  # the file's first run is not the scanner's: the typed decoders read it all
        for decoder, complete in ((_strict, StrictComplete), (_lenient, Complete)):
            try:
                run = decoder.decode(text)
            except msgspec.ValidationError:
                continue
            kept = _columns(run, complete, tables, kinded)
            if kept is None:
                emit(bytes(text))
            elif kept.n or kept.timed:
                emit(kept)
            return
        _whole.decode(text)  # DecodeError: a bad cut
        emit(bytes(text))
    return consume


class TextScanner:
    """One file's runs in plain columns straight from their text, by the compiled scanner (:mod:`._scan`):
    the :class:`Run` :func:`_columns` makes of the same text, without a Python object per event. The tables of
    names and categories are kept between runs; the few events whose values are kept as Python values (the
    instants and B/E events, and the complete events that may carry collective metadata) are decoded from
    their text by the strict typed decoder, which takes them since the scanner took their run."""

    def __init__(self) -> None:
        assert _CScanner is not None  # the caller asked SCANNER
        self._scanner = _CScanner(MAX_TS_US, MAX_DUR_NS / 1000)
        self._markers = bytearray()  # by name code: a collective marker's name
        self._kinds = bytearray()  # by the code of an instants' category: it has a kind (the instant is kept)
        self._kinded: dict[str | None, bool] = {}

    def run(self, text: memoryview) -> Run | None:
        """The run in columns; None where the typed decoders must read it (nothing is then changed)."""
        mark = self._scanner.mark()
        got = self._scanner.scan(text, self._markers, self._kinds)
        if got is None:
            return None
        n, ts, dur, ints, null_bits, shapes, name, cat, coll, marked, spans, timed, names, cats, spelled, icats = got
        columns = dict(zip(_INT_COLUMNS, ints)) if n else {}  # no complete event: no columns, as _columns says
        nulls = {c for i, c in enumerate(_INT_COLUMNS) if null_bits >> i & 1}
        if spelled and not _respelled(text, spans, spelled, columns, nulls):
            self._scanner.reset(mark)
            return None
        self._kinds += bytes(canonical(c) in CAT_KIND for c in icats)  # the run is kept: its new codes stand
        markers = self._markers
        markers += bytes(MARKER_RE.match(s) is not None for s in names)
        rows = set(memoryview(coll).cast("I"))
        if marked:
            codes = memoryview(name).cast("I")
            rows.update(r for r in memoryview(marked).cast("I") if markers[codes[r]])
        rare: list[tuple[int, tuple[Any, ...]]] = []
        if rows:
            order = sorted(rows)
            rare = [(r, _values(e.args or _EMPTY)) for r, e in zip(order, _events(text, spans, order))]
        kept = _timed(_events(text, timed, range(len(timed) // 8)), self._kinded) if timed else []
        return Run(n, ts, dur, columns, frozenset(nulls), shapes, name, cat, rare, kept, names, cats)


def _events(text: memoryview, spans: bytes, rows: Iterable[int]) -> list[Any]:
    """The events of ``text`` at the given rows of ``spans`` (uint32 start and end, by row), decoded as the
    run would be: by the strict typed decoder, else (an integer spelled as a string) the lenient one."""
    at = memoryview(spans).cast("I")
    events = b"[" + b",".join(text[at[2 * r]:at[2 * r + 1]] for r in rows) + b"]"
    try:
        return _strict.decode(events)
    except msgspec.ValidationError:
        return _lenient.decode(events)


def _respelled(text: memoryview, spans: bytes, spelled: bytes, columns: dict[str, bytes], nulls: set[str]) -> bool:
    """The integer columns of the rows that write one as a string (``"pid": "Spans"``) read as
    :func:`_int64` reads them (:func:`~ddprof.vocabulary.fields.as_int`; ``nulls`` gains a column where that is
    None); False where one reads as :data:`NULL` (the run is then the typed decoders')."""
    rows = memoryview(spelled).cast("I")
    fixed = {c: bytearray(b) for c, b in columns.items()}
    views = {c: memoryview(b).cast("q") for c, b in fixed.items()}
    for r, e in zip(rows, _events(text, spans, rows)):
        a = e.args or _EMPTY
        for c, v in zip(_INT_COLUMNS, (e.pid, e.tid, a.stream, a.device, a.correlation, a.external_id)):
            value = as_int(v)
            if value == NULL:
                return False
            if value is None:
                nulls.add(c)
            views[c][r] = NULL if value is None else value
    for c, view in views.items():
        view.release()
        columns[c] = bytes(fixed[c])
    return True


def _columns(run: list[Any], complete: type, tables: _Tables, kinded: dict[str | None, bool]) -> Run | None:
    """The run's complete events as columns and its kept instants and B/E events as values (as
    :meth:`.events.Columns.add_run` keeps them); None where the ordinary path must decode it."""
    types = set(map(type, run))
    timed = _timed(run, kinded) if not PHASE_OF.keys().isdisjoint(types) else []
    keep: list[Any] = run if types == {complete} else [e for e in run if type(e) is complete]
    if not keep:
        return Run(0, b"", b"", {}, frozenset(), b"", b"", b"", [], timed, [], [])
    ts, dur, name = [e.ts for e in keep], [e.dur for e in keep], [e.name for e in keep]
    try:
        ts_bytes, dur_bytes = array("d", ts).tobytes(), array("d", dur).tobytes()
    except TypeError:  # a null (the field missing)
        return None
    if (not all(name) and None in name) or not _plausible(ts, dur):  # all(): names are rarely empty
        return None
    args = [e.args or _EMPTY for e in keep]
    # the integer columns, as :data:`.events.RAW_SCHEMA` names them (a comprehension per field: Python 3.11
    # specialises its attribute reads, which makes it faster than ``map(attrgetter(...))``)
    columns = (("pid", [e.pid for e in keep]), ("tid", [e.tid for e in keep]),
               ("a_stream", [a.stream for a in args]), ("a_device", [a.device for a in args]),
               ("correlation", [a.correlation for a in args]), ("external_id", [a.external_id for a in args]))
    ints, nulls = {}, set()
    for column, values in columns:
        packed = _int64(values)
        if packed is None:
            return None
        ints[column], null = packed
        if null:
            nulls.add(column)
    crc = zlib.crc32
    shapes = _int64([crc(a.input_dims, crc(a.input_type)) if a.input_dims else None for a in args])
    if shapes is None:  # pragma: no cover - a CRC-32 always fits
        return None
    known = len(tables.name_list), len(tables.cat_list)
    name_codes = tables.name_codes(name)
    marker = tables.marker
    rows = set(compress(range(len(name_codes)), map(marker.__getitem__, name_codes))) if tables.any_marker else set()
    coll = [a.coll_name for a in args]
    if coll.count(None) < len(coll):  # new-format metadata: on few rows
        rows.update(i for i, c in enumerate(coll) if c is not None)
    cat_codes = tables.cat_codes([e.cat for e in keep])
    return Run(len(keep), ts_bytes, dur_bytes, ints, frozenset(nulls), shapes[0],
               array("I", name_codes).tobytes(), array("I", cat_codes).tobytes(),
               [(i, _values(args[i])) for i in sorted(rows)], timed,
               tables.name_list[known[0]:], tables.cat_list[known[1]:])


class _Tables:
    """The distinct names (and whether each is a collective marker's) and categories of a file, as codes."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.name_list: list[str] = []
        self.marker: list[bool] = []
        self.any_marker = False
        self.cats: dict[str | None, int] = {}
        self.cat_list: list[str | None] = []

    def name_codes(self, names: list[str]) -> list[int]:
        known = len(self.name_list)
        codes = _codes(self.names, self.name_list, names)
        self.marker += [MARKER_RE.match(n) is not None for n in self.name_list[known:]]
        self.any_marker = self.any_marker or any(self.marker[known:])
        return codes

    def cat_codes(self, cats: list[str | None]) -> list[int]:
        return _codes(self.cats, self.cat_list, cats)


def _codes(table: dict[Any, int], order: list[Any], values: list[Any]) -> list[int]:
    """Each value's index in ``table``, a value not seen before added at its end (and to ``order``)."""
    codes = list(map(table.get, values))
    if None in codes:
        for v in values:
            if v not in table:
                table[v] = len(order)
                order.append(v)
        codes = list(map(table.__getitem__, values))
    return codes  # type: ignore[return-value] # no None left


def _timed(run: list[Any], kinded: dict[str | None, bool]) -> list[tuple[Any, ...]]:
    """The run's B/E events and the instants whose category has a kind, in file order, as
    ``(phase, pid, tid, ts, name, cat, args' values or None)`` (:meth:`.events.Columns.timed` keeps the same)."""
    out = []
    for e in compress(run, map(PHASE_OF.__contains__, map(type, run))):  # the others passed over in C
        ph = PHASE_OF[type(e)]
        if ph not in "BE":
            if e.cat not in kinded:
                kinded[e.cat] = canonical(e.cat) in CAT_KIND
            if not kinded[e.cat]:
                continue
        out.append((ph, e.pid, e.tid, e.ts, e.name, e.cat, None if e.args is None else _values(e.args)))
    return out


def _values(args: Any) -> tuple[Any, ...]:
    """An event's args as plain values in the order of :data:`ARG_FIELDS` (raw JSON copied out as bytes)."""
    values = astuple(args)
    raw = values[_RAW_AT:]
    return values[:_RAW_AT] + (tuple(map(bytes, raw)) if any(raw) else _NO_RAW)


def _plausible(ts: list[float], dur: list[float]) -> bool:
    """Whether :class:`.events.Columns` keeps every event of the run (no NaN, none out of range, none
    negative or over a day); else the ordinary path drops and counts them."""
    if not (math.isfinite(sum(ts)) and math.isfinite(sum(dur))):
        return False
    return min(ts) > -MAX_TS_US and max(ts) < MAX_TS_US and min(dur) >= 0 and max(dur) <= MAX_DUR_NS / 1000


def _int64(values: list[Any]) -> tuple[bytes, bool] | None:
    """An int64 column as :func:`.events._ints` makes it (integers as they are; where one is spelled otherwise
    or does not fit, every value through :func:`~ddprof.vocabulary.fields.as_int`): its bytes, None as
    :data:`NULL`, and whether it holds a null; None when a value equals :data:`NULL`."""
    try:
        packed = array("q", values)  # the common case: integers only
    except (OverflowError, TypeError):  # a null, or an integer spelled otherwise or too large
        pass
    else:
        return None if NULL in values else (packed.tobytes(), False)
    try:
        packed = array("q", [NULL if v is None else v for v in values])
    except (OverflowError, TypeError):
        values = [as_int(v) for v in values]
        packed = array("q", [NULL if v is None else v for v in values])
    return None if NULL in values else (packed.tobytes(), None in values)
