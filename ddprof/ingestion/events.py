"""One Kineto event as ddprof reads it, and a chunk of events as a columnar frame.

Only the fields ddprof uses are decoded (msgspec typed structs, no per-event dicts). A chunk becomes a
Polars frame at once. Collective metadata matters on few rows: collective markers (by name) and rows
with new-format fields; it is gathered from those rows only and scattered into full-length columns.

Timestamps: Kineto writes microseconds with a fractional part. Whole microseconds and the fraction are
converted to integer nanoseconds separately (``ts * 1000`` in float64 would round epoch-scale values to
multiples of 256 ns).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
import numpy as np
import polars as pl

from ddprof.ingestion.comms import MARKER_RE

MARKER_PATTERN = MARKER_RE.pattern
#: Longest plausible event: a day. Longer ones are CUPTI timestamp overflows and are dropped.
MAX_DUR_NS = 24 * 3600 * 10**9
#: Timestamps beyond this many microseconds do not fit int64 nanoseconds.
MAX_TS_US = 9.2e15

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


#: Columns of the decoded frame (before classification).
RAW_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(), "dur_ns": pl.Int64(), "pid": pl.Int64(), "tid": pl.Int64(), "cat": pl.String(),
    "name": pl.String(), "a_stream": pl.Int64(), "a_device": pl.Int64(), "correlation": pl.Int64(),
    "external_id": pl.Int64(), "coll_name": pl.String(), "in_nelems": pl.Int64(), "out_nelems": pl.Int64(),
    "group_size": pl.Int64(), "dtype": pl.String(), "pg": pl.String(), "seq": pl.Int64(),
    "input_dims": pl.Binary(), "input_type": pl.Binary(), "concrete_inputs": pl.Binary(),
    "is_marker": pl.Boolean(),  # the name is a collective marker's (comms.MARKER_RE)
}


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


def chunk_frame(events: list[Event], dropped: Counter[str]) -> tuple[pl.DataFrame, int]:
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
    # Collective metadata: gathered from the few rows that can carry it, then scattered.
    cols["coll_name"] = pl.Series([a.coll_name for a in args], dtype=pl.String)
    names = pl.Series(cols["name"], dtype=pl.String)
    cols["is_marker"] = names.str.contains(MARKER_PATTERN)
    rare = (cols["is_marker"] | cols["coll_name"].is_not_null()).arg_true()
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
