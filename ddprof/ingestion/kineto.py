"""Decode one Kineto (PyTorch profiler) trace file into column lists.

Two paths:

* a fast typed decode with msgspec (only the fields ddprof uses are materialised);
* a tolerant path, taken only when the typed decode rejects the file, that checks events one by one,
  drops the malformed ones and says how many and why.

Timestamps: Kineto writes microseconds with a fractional part. They are converted to integer
nanoseconds without going through ``ts * 1000`` in floating point (which loses up to 256 ns at
epoch-scale values): whole microseconds and the fraction are converted separately.
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

from ddprof.errors import BadInputError

#: Longest plausible event: a day. Longer ones are CUPTI timestamp overflows and are dropped.
MAX_DUR_NS = 24 * 3600 * 10**9


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


class Event(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    ph: str | None = None
    name: str | None = None
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None


class Trace(msgspec.Struct, forbid_unknown_fields=False):
    traceEvents: list[Event] | None = None  # noqa: N815 - Kineto's key
    distributedInfo: dict[str, Any] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    deviceProperties: list[Any] | None = None  # noqa: N815
    schemaVersion: int | str | None = None  # noqa: N815


_trace_decoder = msgspec.json.Decoder(Trace)
_loose_decoder = msgspec.json.Decoder()
_args_decoder = msgspec.json.Decoder(Args)
_event_decoder = msgspec.json.Decoder(Event)
_event_encoder = msgspec.json.Encoder()

COLUMNS = ("ts_ns", "dur_ns", "pid", "tid", "cat", "name", "a_stream", "a_device", "correlation",
           "external_id", "coll_name", "in_nelems", "out_nelems", "group_size", "dtype", "pg", "seq",
           "input_dims", "input_type")


@dataclass
class Decoded:
    """What one trace file holds: header fields and the complete ('X') events as columns."""

    columns: dict[str, Any]
    distributed_info: dict[str, Any] | None
    base_time_ns: int | None
    device_properties: list[Any]
    raw_complete: int  # 'X' events in the file, before any was dropped
    dropped: Counter[str] = field(default_factory=Counter)
    sha1: str = ""
    uncompressed_bytes: int = 0


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
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInputError(f"corrupt or truncated gzip data ({exc})", path=path) from None
        if not raw:
            raise BadInputError("file is empty once decompressed", path=path)
    return raw, digest


def decode(path: Path) -> Decoded:
    data, digest = read_bytes(path)
    try:
        trace = _trace_decoder.decode(data)
        events = trace.traceEvents
        dropped: Counter[str] = Counter()
    except msgspec.DecodeError as exc:
        if not isinstance(exc, msgspec.ValidationError):
            raise BadInputError(f"not valid JSON ({exc}); the file may be truncated", path=path) from None
        trace, events, dropped = _decode_tolerant(data, path)
    if events is None:
        raise BadInputError("no 'traceEvents' list: not a Kineto/Chrome trace", path=path)
    malformed = sum(dropped.values())
    out = _columns(events, dropped)
    return Decoded(
        columns=out.pop("_cols"),
        distributed_info=trace.distributedInfo if isinstance(trace.distributedInfo, dict) else None,
        base_time_ns=trace.baseTimeNanoseconds if isinstance(trace.baseTimeNanoseconds, int) else None,
        device_properties=trace.deviceProperties if isinstance(trace.deviceProperties, list) else [],
        raw_complete=out.pop("_raw_complete") + malformed,
        dropped=dropped,
        sha1=digest,
        uncompressed_bytes=len(data),
    )


def _decode_tolerant(data: bytes, path: Path) -> tuple[Trace, list[Event] | None, Counter[str]]:
    """Slow path: decode untyped, then keep each event that has the right shape."""
    doc = _loose_decoder.decode(data)
    if not isinstance(doc, dict):
        raise BadInputError(f"top level is a JSON {type(doc).__name__}, expected an object with "
                            "'traceEvents'", path=path)
    raw_events = doc.get("traceEvents")
    if not isinstance(raw_events, list):
        raise BadInputError("no 'traceEvents' list: not a Kineto/Chrome trace", path=path)
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    try:
        trace = msgspec.convert(header, Trace)
    except msgspec.ValidationError:
        trace = Trace(distributedInfo=header.get("distributedInfo") if isinstance(
            header.get("distributedInfo"), dict) else None)
    events: list[Event] = []
    dropped: Counter[str] = Counter()
    for ev in raw_events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue  # only complete events are kept; others are not checked
        try:
            events.append(_event_decoder.decode(_event_encoder.encode(ev)))
        except msgspec.ValidationError as exc:
            dropped[f"malformed event ({str(exc).split(' - at')[0]})"] += 1
    return trace, events, dropped


def _to_ns(us: np.ndarray) -> np.ndarray:
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def _as_int(v: Any) -> int | None:
    """An integer field whatever its spelling: 7, 7.0, "7", "0x7"; anything else is None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else None
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


def _columns(events: list[Event], dropped: Counter[str]) -> dict[str, Any]:
    """Complete events with a name, a numeric ts and dur, as column lists (ts/dur in ns)."""
    keep: list[Event] = []
    raw_complete = 0
    for e in events:
        if e.ph != "X":
            continue
        raw_complete += 1
        if e.ts is None or e.dur is None or e.name is None:
            dropped["missing ts, dur or name"] += 1
            continue
        keep.append(e)
    ts = _to_ns(np.fromiter((e.ts for e in keep), dtype=np.float64, count=len(keep)))
    dur = _to_ns(np.fromiter((e.dur for e in keep), dtype=np.float64, count=len(keep)))
    ok = (dur >= 0) & (dur <= MAX_DUR_NS) & np.isfinite(ts.astype(np.float64))
    n_neg = int((dur < 0).sum())
    n_big = int((dur > MAX_DUR_NS).sum())
    if n_neg:
        dropped["negative duration"] += n_neg
    if n_big:
        dropped["duration over 24 h (CUPTI timestamp overflow)"] += n_big
    if not ok.all():
        idx = np.flatnonzero(ok)
        keep = [keep[i] for i in idx]
        ts, dur = ts[idx], dur[idx]
    empty = Args()
    args = [e.args or empty for e in keep]
    cols = {
        "ts_ns": ts,
        "dur_ns": dur,
        "pid": [_as_int(e.pid) for e in keep],
        "tid": [_as_int(e.tid) for e in keep],
        "cat": [e.cat for e in keep],
        "name": [e.name for e in keep],
        "a_stream": [_as_int(a.stream) for a in args],
        "a_device": [_as_int(a.device) for a in args],
        "correlation": [_as_int(a.correlation) for a in args],
        "external_id": [_as_int(a.external_id) for a in args],
        "coll_name": [a.coll_name for a in args],
        "in_nelems": [_as_int(a.in_nelems) for a in args],
        "out_nelems": [_as_int(a.out_nelems) for a in args],
        "group_size": [_as_int(a.group_size) for a in args],
        "dtype": [a.dtype for a in args],
        "pg": [None if (p := a.pg_name if a.pg_name is not None else a.pg_id) is None else str(p) for a in args],
        "seq": [_as_int(a.seq) for a in args],
        "input_dims": [bytes(a.input_dims) or None for a in args],
        "input_type": [bytes(a.input_type) or None for a in args],
    }
    return {"_cols": cols, "_raw_complete": raw_complete}
