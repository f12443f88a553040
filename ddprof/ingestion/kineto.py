"""Decode one Kineto (PyTorch profiler) trace file into a Polars frame of its complete events.

The event list is first split into raw JSON slices (one cheap pass), then decoded in chunks with a typed
msgspec decoder that materialises only the fields ddprof uses. Each chunk becomes a small columnar frame
at once, so the Python objects of at most one chunk are alive at a time. A chunk the typed decoder
rejects is decoded event by event: malformed complete events are dropped and counted, never fatal.

Timestamps: Kineto writes microseconds with a fractional part. Whole microseconds and the fraction are
converted to integer nanoseconds separately (``ts * 1000`` in float64 would round epoch-scale values to
multiples of 256 ns).
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from ddprof.errors import BadInputError
from ddprof.ingestion.comms import MARKER_RE

MARKER_PATTERN = MARKER_RE.pattern

#: Longest plausible event: a day. Longer ones are CUPTI timestamp overflows and are dropped.
MAX_DUR_NS = 24 * 3600 * 10**9
#: Timestamps beyond this many microseconds do not fit int64 nanoseconds.
MAX_TS_US = 9.2e15
CHUNK = 16384

# Integers some producers write as strings ("0x0" streams on ROCm) or floats; normalised by _as_int.
Num = int | float | str | None


class Args(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    external_id: Num = msgspec.field(default=None, name="External id")
    correlation: Num = None
    stream: Num = None
    device: Num = None
    coll_name: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: Num = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Num = msgspec.field(default=None, name="Out msg nelems")
    group_size: Num = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | int | None = msgspec.field(default=None, name="Process Group Name")
    pg_id: str | int | None = msgspec.field(default=None, name="Process Group ID")
    seq: Num = msgspec.field(default=None, name="Seq")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")


class Event(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    ph: str | None = None
    name: str | None = None
    cat: str | None = None
    pid: Num = None
    tid: Num = None
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None


class Trace(msgspec.Struct, forbid_unknown_fields=False):
    traceEvents: msgspec.Raw = msgspec.Raw()  # noqa: N815 - Kineto's key; split into raw events below
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815


_trace_decoder = msgspec.json.Decoder(Trace)
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_chunk_decoder = msgspec.json.Decoder(list[Event])
_event_decoder = msgspec.json.Decoder(Event)
_any_decoder = msgspec.json.Decoder()

#: Columns of the decoded frame (before classification).
RAW_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(), "dur_ns": pl.Int64(), "pid": pl.Int64(), "tid": pl.Int64(), "cat": pl.String(),
    "name": pl.String(), "a_stream": pl.Int64(), "a_device": pl.Int64(), "correlation": pl.Int64(),
    "external_id": pl.Int64(), "coll_name": pl.String(), "in_nelems": pl.Int64(), "out_nelems": pl.Int64(),
    "group_size": pl.Int64(), "dtype": pl.String(), "pg": pl.String(), "seq": pl.Int64(),
    "input_dims": pl.Binary(), "input_type": pl.Binary(), "concrete_inputs": pl.Binary(),
}


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
    try:  # ISA-L inflates about twice as fast as zlib; same format, same errors
        from isal import igzip
    except ImportError:  # pragma: no cover - isal is a dependency, but the fallback is the standard library
        return gzip.decompress(raw)
    return igzip.decompress(raw)


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
        kind = type(_any_decoder.decode(data)).__name__
        raise BadInputError(f"top level is a JSON {kind}, expected an object with 'traceEvents'",
                            path=path) from None
    except msgspec.DecodeError as exc:
        raise BadInputError(f"not valid JSON ({exc}); the file may be truncated", path=path) from None
    del data
    if not trace.traceEvents:
        raise BadInputError("no 'traceEvents' list: not a Kineto/Chrome trace", path=path)
    try:
        raws = _raw_list_decoder.decode(trace.traceEvents)
    except msgspec.ValidationError:
        raise BadInputError("'traceEvents' is not a list", path=path) from None
    trace.traceEvents = msgspec.Raw()
    dropped: Counter[str] = Counter()
    frames, complete = [], 0
    for start in range(0, len(raws), CHUNK):
        events, malformed = _decode_chunk(raws[start:start + CHUNK], dropped)
        frame, n = _chunk_frame(events, dropped)
        complete += n + malformed
        frames.append(frame)
    del raws
    info, base, props = trace.distributedInfo, trace.baseTimeNanoseconds, trace.deviceProperties
    return Decoded(
        frame=pl.concat(frames, rechunk=True) if frames else pl.DataFrame(schema=RAW_SCHEMA),
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


def _to_ns(us: np.ndarray) -> np.ndarray:
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def _as_int(v: Any) -> int | None:
    """An integer field whatever its spelling: 7, 7.0, "7", "0x7"; anything else is None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -2**63 <= v < 2**63 else None
    if isinstance(v, float):
        return int(v) if v.is_integer() and abs(v) < 2**63 else None
    if isinstance(v, str):
        try:
            n = int(v, 0)
        except ValueError:
            return None
        return n if -2**63 <= n < 2**63 else None
    return None


def _ints(values: list[Any]) -> pl.Series:
    """Int64 column; values spelled otherwise (``"0x0"``, ``7.0``) go through :func:`_as_int`."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (TypeError, OverflowError):
        return pl.Series([_as_int(v) for v in values], dtype=pl.Int64)


def _chunk_frame(events: list[Event], dropped: Counter[str]) -> tuple[pl.DataFrame, int]:
    """Complete events with a name and a plausible ts and dur, as a frame (ts/dur in ns)."""
    keep = [e for e in events if e.ph == "X"]
    n_complete = len(keep)
    ok = [e for e in keep if e.ts is not None and e.dur is not None and e.name is not None]
    if len(ok) < n_complete:
        dropped["missing ts, dur or name"] += n_complete - len(ok)
    ts_us = np.fromiter((e.ts for e in ok), dtype=np.float64, count=len(ok))
    dur_us = np.fromiter((e.dur for e in ok), dtype=np.float64, count=len(ok))
    with np.errstate(invalid="ignore"):
        bad_ts = ~(np.abs(ts_us) < MAX_TS_US)
        neg = dur_us < 0
        big = ~(dur_us * 1000 <= MAX_DUR_NS) & ~neg
    for mask, why in ((bad_ts, "timestamp out of range"), (neg & ~bad_ts, "negative duration"),
                      (big & ~bad_ts, "duration over 24 h (CUPTI timestamp overflow)")):
        if mask.any():
            dropped[why] += int(mask.sum())
    good = ~(bad_ts | neg | big)
    if not good.all():
        idx = np.flatnonzero(good)
        ok = [ok[i] for i in idx]
        ts_us, dur_us = ts_us[idx], dur_us[idx]
    empty = Args()
    args = [e.args or empty for e in ok]
    cols: dict[str, Any] = {
        "ts_ns": _to_ns(ts_us),
        "dur_ns": _to_ns(dur_us),
        "pid": _ints([e.pid for e in ok]),
        "tid": _ints([e.tid for e in ok]),
        "cat": [e.cat for e in ok],
        "name": [e.name for e in ok],
        "a_stream": _ints([a.stream for a in args]),
        "a_device": _ints([a.device for a in args]),
        "correlation": _ints([a.correlation for a in args]),
        "external_id": _ints([a.external_id for a in args]),
    }
    # Collective metadata matters on few rows: collective markers (by name) and rows with new-format
    # fields. Gather it from those rows only, then scatter into full-length columns.
    cols["coll_name"] = pl.Series([a.coll_name for a in args], dtype=pl.String)
    names = pl.Series(cols["name"], dtype=pl.String)
    wanted = names.str.contains(MARKER_PATTERN) | cols["coll_name"].is_not_null()
    rare = wanted.arg_true()
    sub = [args[i] for i in rare.to_list()]
    cols["name"] = names
    sparse = {
        "in_nelems": [_as_int(a.in_nelems) for a in sub],
        "out_nelems": [_as_int(a.out_nelems) for a in sub],
        "group_size": [_as_int(a.group_size) for a in sub],
        "dtype": [a.dtype for a in sub],
        "pg": [None if (p := a.pg_name if a.pg_name is not None else a.pg_id) is None else str(p) for a in sub],
        "seq": [_as_int(a.seq) for a in sub],
        "input_dims": [bytes(a.input_dims) or None for a in sub],
        "input_type": [bytes(a.input_type) or None for a in sub],
        "concrete_inputs": [bytes(a.concrete_inputs) or None for a in sub],
    }
    for name, values in sparse.items():
        dtype = RAW_SCHEMA[name]
        col = pl.Series(name, [None] * len(ok), dtype=dtype)
        cols[name] = col.scatter(rare, pl.Series(values, dtype=dtype)) if sub else col
    return pl.DataFrame(cols, schema=RAW_SCHEMA), n_complete
