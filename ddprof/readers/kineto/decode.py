"""Decode one Kineto (PyTorch profiler) trace file into a Polars frame of its complete events.

The file is streamed: inflated block by block (:mod:`~ddprof.readers.source`) and cut into runs of
whole events (:mod:`~ddprof.readers.kineto.stream`), each decoded by typed msgspec structs
(:mod:`~ddprof.readers.kineto.structs`) and turned into a small columnar frame at once
(:mod:`~ddprof.readers.kineto.events`). Neither the inflated JSON nor the Python objects of more than one run
are resident at a time. A run the typed decoder rejects is decoded event by event: malformed complete
events are dropped and counted, never fatal. A document may also be the bare list of events (Chrome's
JSON array format), and its durations ``B``/``E`` pairs (:mod:`~ddprof.readers.kineto.events`). A file that
is neither is read whole, only to say precisely what it is instead.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ddprof.errors import BadInputError
from ddprof.readers import read_ahead
from ddprof.readers.kineto import plain
from ddprof.readers.kineto.depth import decode_shallow, retry_shallow
from ddprof.readers.kineto.events import Columns, MetaRows
from ddprof.readers.kineto.plain import Piece, Tail
from ddprof.readers.kineto.stream import MAX_HEAD, Header, InvalidJSON, NotStreamable, split
from ddprof.readers.kineto.structs import (
    LENIENT_RUN,
    STRICT_RUN,
    TIMED_PHASES,
    Complete,
    Event,
    StrictComplete,
)
from ddprof.readers.source import Source

_strict_decoder = msgspec.json.Decoder(STRICT_RUN)
_lenient_decoder = msgspec.json.Decoder(LENIENT_RUN)
_raw_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_event_decoder = msgspec.json.Decoder(Event)
_any_decoder = msgspec.json.Decoder()
_TIMED = frozenset(TIMED_PHASES)
_COMPLETE_PH = re.compile(rb'"ph"[ \t\r\n]*:[ \t\r\n]*"X"')


@dataclass
class Decoded:
    """What one trace file holds: header fields, the complete ('X') events as a frame, and the
    collective metadata of the few rows that carry it (:data:`events.META_SCHEMA`)."""

    frame: pl.DataFrame
    meta_rows: MetaRows  # made a frame when asked for (:attr:`meta`), or with other traces' (:mod:`.build`)
    distributed_info: dict[str, Any] | None
    base_time_ns: int | None
    device_properties: list[Any]
    raw_complete: int  # complete events in the file ('X', and B/E pairs), before any was dropped
    dropped: Counter[str] = field(default_factory=Counter)
    notices: list[str] = field(default_factory=list)  # the profiler's own warnings and errors ("WARNING: ...")
    sha1: str = ""
    uncompressed_bytes: int = 0
    categories: frozenset[str | None] = frozenset()  # the distinct values of ``frame``'s ``cat``
    header_keys: frozenset[str] = frozenset()  # the document's top-level keys among :class:`.stream.Header`'s

    @property
    def meta(self) -> pl.DataFrame:
        """The metadata as a frame (:data:`.events.META_SCHEMA`)."""
        return self.meta_rows.frame()


def decode(path: Path) -> Decoded:
    ahead = read_ahead.take(path)
    if ahead is not None:
        try:
            return _from_pieces(ahead)
        except read_ahead.Lost:
            pass  # the child read nothing usable: the file is read here
    src, cols = Source(path), Columns()
    scanner = plain.TextScanner() if plain.SCANNER else None
    try:
        head = split(src.blocks(), lambda text: _consume(text, cols, scanner))
    except NotStreamable:
        _explain(path)
        raise  # pragma: no cover - _explain always raises
    except InvalidJSON as exc:
        raise BadInputError(str(exc), path=path) from None
    return _decoded(cols, head, src.sha1.hexdigest(), src.size)


def _from_pieces(pieces: Iterable[Piece]) -> Decoded:
    """The file as :mod:`.plain` decoded it (in another process: :mod:`ddprof.readers.read_ahead`), each run
    added as it comes: in columns, or its text decoded here. A text that does not decode (it was checked to
    be whole events only: a string of invalid UTF-8 passes that check) sends the file the ordinary way,
    which says what is wrong with it."""
    cols, tail = Columns(), None
    for piece in pieces:
        if isinstance(piece, Tail):
            tail = piece
        elif isinstance(piece, bytes):
            try:
                _consume(memoryview(piece), cols)
            except msgspec.DecodeError as exc:
                raise read_ahead.Lost(f"a run that does not decode ({exc})") from None
        else:
            cols.add_plain(piece)
    if tail is None:
        raise read_ahead.Lost("the pieces ended before the file's end")
    return _decoded(cols, Header(**tail.head), tail.sha1, tail.size)


def _decoded(cols: Columns, head: Header, sha1: str, size: int) -> Decoded:
    info, base, props = head.distributedInfo, head.baseTimeNanoseconds, head.deviceProperties
    frame = cols.frame()  # adds the B/E pairs and instants: before the categories are read
    return Decoded(
        frame=frame,
        meta_rows=cols.meta,
        distributed_info=info if isinstance(info, dict) else None,
        base_time_ns=base if isinstance(base, int) and not isinstance(base, bool) else None,
        device_properties=props if isinstance(props, list) else [],
        raw_complete=cols.complete,
        dropped=cols.dropped,
        notices=_notices(head),
        sha1=sha1,
        uncompressed_bytes=size,
        categories=cols.categories(),
        header_keys=frozenset(f for f in head.__struct_fields__ if getattr(head, f) is not None),
    )


def _consume(text: memoryview, cols: Columns, scanner: plain.TextScanner | None = None) -> None:
    """The run in columns by ``scanner`` (the file's: its codes index ``cols``' tables) where it takes it; else
    :func:`_decode_run`, once more with containers past :data:`~ddprof.readers.kineto.depth.MAX_DEPTH`
    levels cut off when the text nests deeper than the decoder can recurse (args nobody reads)."""
    if scanner is not None:
        run = scanner.run(text)
        if run is not None:
            cols.add_plain(run)
            return
    dropped = cols.dropped.copy()
    try:
        _decode_run(text, cols)
    except RecursionError:
        cols.dropped = dropped
        try:
            retry_shallow(lambda cut: _decode_run(memoryview(cut), cols), text)
        except msgspec.DecodeError:
            cols.dropped = dropped
            raise


def _decode_run(text: memoryview, cols: Columns) -> None:
    """Typed decode of ``[ev, ...]``; event by event when it holds a malformed one. Raises
    :class:`msgspec.DecodeError` (before touching ``cols``) when the text is not whole events."""
    for decoder, complete in ((_strict_decoder, StrictComplete), (_lenient_decoder, Complete)):
        try:
            run = decoder.decode(text)
        except msgspec.ValidationError:
            continue
        cols.add_run(run, complete)
        return
    raws = _raw_decoder.decode(text)  # DecodeError here: a bad cut, not a bad event
    events: list[Any] = []
    malformed = 0
    for raw in raws:
        try:
            events.append(_event_decoder.decode(raw))
        except msgspec.ValidationError as exc:
            why = str(exc).split(" - at")[0]
            try:
                loose = _any_decoder.decode(raw)
            except msgspec.DecodeError:  # e.g. a number out of range: say whether it was a complete event
                complete = _COMPLETE_PH.search(bytes(raw)) is not None
            else:
                complete = isinstance(loose, dict) and loose.get("ph") == "X"
            if complete:
                malformed += 1
                cols.dropped[f"malformed event ({why})"] += 1
    cols.timed([e for e in events if e.ph in _TIMED])
    cols.add([e for e in events if e.ph == "X"], malformed)


#: Notices kept per trace file: the first ones say what went wrong; a flood says nothing more.
MAX_NOTICES = 50


def _notices(head: Any) -> list[str]:
    """Kineto's log lines written into the trace (top-level ``"WARNING"``/``"ERROR"`` lists of strings:
    e.g. ``"Exceeded max GPU buffer count (33 >= 33) - terminating tracing"``), as ``LEVEL: message``."""
    out = []
    for level in ("ERROR", "WARNING"):
        lines = getattr(head, level, None)
        if isinstance(lines, list):
            out += [f"{level}: {line}" for line in lines if isinstance(line, str)]
    return out[:MAX_NOTICES]


def _explain(path: Path) -> None:
    """Say what a file that is not a streamable ``traceEvents`` document is (reads it whole)."""
    data = b"".join(Source(path).blocks())
    try:
        doc = decode_shallow(_any_decoder, data)
    except msgspec.DecodeError as exc:
        hint = "; the file may be truncated" if "truncated" in str(exc) else ""
        raise BadInputError(f"not valid JSON ({exc}){hint}", path=path) from None
    if not isinstance(doc, dict):
        raise BadInputError(f"top level is a JSON {type(doc).__name__}, expected an object with "
                            "'traceEvents' or a list of events", path=path)
    if doc.get("traceEvents") is None:
        raise BadInputError("no 'traceEvents' list: not a Kineto/Chrome trace", path=path)
    if not isinstance(doc["traceEvents"], list):
        raise BadInputError("'traceEvents' is not a list of events", path=path)
    raise BadInputError(f"the 'traceEvents' list was not found in its first {MAX_HEAD >> 20} MB of text",
                        path=path)
