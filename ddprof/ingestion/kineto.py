"""Decode one Kineto (PyTorch profiler) trace file into a Polars frame of its complete events.

The event list is first split into raw JSON slices (with the header, in one pass), then decoded in chunks with a typed
msgspec decoder (:mod:`ddprof.ingestion.events`). Each chunk becomes a small columnar frame at once, so
the Python objects of at most one chunk are alive at a time. A chunk the typed decoder rejects is decoded
event by event: malformed complete events are dropped and counted, never fatal.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import polars as pl

from ddprof.errors import BadInputError
from ddprof.ingestion.events import RAW_SCHEMA, Event, chunk_frame

CHUNK = 8192


class Trace(msgspec.Struct, forbid_unknown_fields=False):
    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - Kineto's key: raw events, decoded in chunks
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815


_trace_decoder = msgspec.json.Decoder(Trace)
_chunk_decoder = msgspec.json.Decoder(list[Event])
_event_decoder = msgspec.json.Decoder(Event)
_any_decoder = msgspec.json.Decoder()

@dataclass
class Decoded:
    """What one trace file holds: header fields and the complete ('X') events as a frame."""

    frame: pl.DataFrame
    distributed_info: dict[str, Any] | None
    base_time_ns: int | None
    device_properties: list[Any]
    raw_complete: int  # 'X' events in the file, before any was dropped
    dropped: Counter[str] = field(default_factory=Counter)
    sha1: str = ""
    uncompressed_bytes: int = 0


def _gunzip(raw: bytes) -> bytes:
    """Inflate a gzip file into a buffer sized from its trailer (no doubling reallocations, so the
    peak is the output size, not twice it). Multi-member files fall back to the general path."""
    zlib_impl: ModuleType = zlib
    gzip_impl: ModuleType = gzip
    try:  # ISA-L inflates about twice as fast as zlib; same format
        from isal import igzip, isal_zlib

        zlib_impl, gzip_impl = isal_zlib, igzip
    except ImportError:  # pragma: no cover - isal is a dependency; the standard library does the same
        pass
    size = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    if size:
        try:
            out = zlib_impl.decompress(raw, 31, size)
        except zlib_impl.error:
            out = b""
        if len(out) == size:
            return out
    return gzip_impl.decompress(raw)


def read_bytes(path: Path) -> tuple[bytes, str]:
    """File content (gunzipped when compressed) and the SHA-1 of the bytes on disk."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read file ({exc.strerror or exc})", path=path) from None
    digest = hashlib.sha1(raw).hexdigest()
    if not raw:
        raise BadInputError("file is empty", path=path)
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = _gunzip(raw)
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            raise BadInputError(f"corrupt or truncated gzip data ({exc})", path=path) from None
        if not raw:
            raise BadInputError("file is empty once decompressed", path=path)
    return raw, digest


def decode(path: Path) -> Decoded:
    data, digest = read_bytes(path)
    size = len(data)
    try:
        trace = _trace_decoder.decode(data)
    except msgspec.ValidationError:
        doc = _any_decoder.decode(data)
        if isinstance(doc, dict):
            raise BadInputError("'traceEvents' is not a list of events", path=path) from None
        raise BadInputError(f"top level is a JSON {type(doc).__name__}, expected an object with "
                            "'traceEvents'", path=path) from None
    except msgspec.DecodeError as exc:
        raise BadInputError(f"not valid JSON ({exc}); the file may be truncated", path=path) from None
    del data
    raws = trace.traceEvents
    if raws is None:
        raise BadInputError("no 'traceEvents' list: not a Kineto/Chrome trace", path=path)
    trace.traceEvents = None
    dropped: Counter[str] = Counter()
    frames, complete = [], 0
    for start in range(0, len(raws), CHUNK):
        events, malformed = _decode_chunk(raws[start:start + CHUNK], dropped)
        frame, n = chunk_frame(events, dropped)
        complete += n + malformed
        frames.append(frame)
    del raws
    info, base, props = trace.distributedInfo, trace.baseTimeNanoseconds, trace.deviceProperties
    return Decoded(
        frame=pl.concat(frames, rechunk=False) if frames else pl.DataFrame(schema=RAW_SCHEMA),
        distributed_info=info if isinstance(info, dict) else None,
        base_time_ns=base if isinstance(base, int) and not isinstance(base, bool) else None,
        device_properties=props if isinstance(props, list) else [],
        raw_complete=complete,
        dropped=dropped,
        sha1=digest,
        uncompressed_bytes=size,
    )


def _decode_chunk(raws: list[msgspec.Raw], dropped: Counter[str]) -> tuple[list[Event], int]:
    """Typed decode of a slice of events; event by event when the slice holds a malformed one."""
    try:
        return _chunk_decoder.decode(b"[" + b",".join(raws) + b"]"), 0
    except msgspec.ValidationError:
        pass
    events, malformed = [], 0
    for raw in raws:
        try:
            events.append(_event_decoder.decode(raw))
        except msgspec.ValidationError as exc:
            loose = _any_decoder.decode(raw)
            if isinstance(loose, dict) and loose.get("ph") == "X":
                malformed += 1
                dropped[f"malformed event ({str(exc).split(' - at')[0]})"] += 1
    return events, malformed
