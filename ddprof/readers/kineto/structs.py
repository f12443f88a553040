"""What ddprof decodes of a Kineto event: typed msgspec structs, only the fields it uses.

Each struct comes in two variants. The strict one types integers as integers, which decodes about a
sixth faster; a run of events it rejects (ROCm writes streams as ``"0x0"``, some producers write
floats or strings) is decoded again with the lenient one, whose integers may be spelled any way
(normalised later by :func:`ddprof.vocabulary.fields.as_int`).

The fast paths decode a run as a list of a union tagged on ``ph``: complete events (``"X"``), duration
begin/end events (``"B"``/``"E"``) and instants (``"i"``/``"I"``) get their fields, every other phase of
the Chrome trace format decodes to an empty struct (its fields are skipped). A run with an unknown or missing phase falls back to :data:`Event`, one event at a time.
"""

from __future__ import annotations

from typing import Any, Union  # noqa: UP035 - a union built at run time

import msgspec

#: Longest plausible event: a day. Longer ones are CUPTI timestamp overflows and are dropped.
MAX_DUR_NS = 24 * 3600 * 10**9
#: Timestamps beyond this many microseconds do not fit int64 nanoseconds.
MAX_TS_US = 9.2e15

#: Integers some producers write as strings ("0x0" streams on ROCm) or floats.
Num = int | float | str | None
Int = int | None

_FLAGS: dict[str, Any] = {"forbid_unknown_fields": False, "gc": False}


def _args(num: Any) -> Any:
    f = msgspec.field
    return msgspec.defstruct("Args", [
        ("external_id", num, f(default=None, name="External id")),
        ("correlation", num, None),
        ("stream", num, None),
        ("device", num, None),
        ("coll_name", str | None, f(default=None, name="Collective name")),
        ("in_nelems", num, f(default=None, name="In msg nelems")),
        ("out_nelems", num, f(default=None, name="Out msg nelems")),
        ("group_size", num, f(default=None, name="Group size")),
        ("dtype", str | None, None),
        ("pg_name", str | int | None, f(default=None, name="Process Group Name")),
        ("pg_id", str | int | None, f(default=None, name="Process Group ID")),
        ("seq", num, f(default=None, name="Seq")),
        ("src_rank", num, f(default=None, name="Src Rank")),  # PyTorch 2.5+: a send/recv's global ranks
        ("dst_rank", num, f(default=None, name="Dst Rank")),
        ("input_dims", msgspec.Raw, f(default=msgspec.Raw(), name="Input Dims")),
        ("input_type", msgspec.Raw, f(default=msgspec.Raw(), name="Input type")),
        ("concrete_inputs", msgspec.Raw, f(default=msgspec.Raw(), name="Concrete Inputs")),
        # an all-to-all-v's split sizes (record_param_comms): a string "[10, 11]", rows of dim 0 per rank
        ("in_split", msgspec.Raw, f(default=msgspec.Raw(), name="In split size")),
        ("out_split", msgspec.Raw, f(default=msgspec.Raw(), name="Out split size")),
    ], **_FLAGS)


def _fields(num: Any, args: Any) -> list[tuple[str, Any, Any]]:
    return [("name", str | None, None), ("cat", str | None, None), ("pid", num, None), ("tid", num, None),
            ("ts", float | None, None), ("dur", float | None, None), ("args", args | None, None)]


Args: Any = _args(Num)
_StrictArgs = _args(Int)
#: Any event, any phase (the slow path).
Event: Any = msgspec.defstruct("Event", [("ph", str | None, None), *_fields(Num, Args)], **_FLAGS)
Complete: Any = msgspec.defstruct("Complete", _fields(Num, Args), tag="X", tag_field="ph", **_FLAGS)
StrictComplete: Any = msgspec.defstruct("Complete", _fields(Int, _StrictArgs), tag="X", tag_field="ph", **_FLAGS)

#: Phases that become complete events: duration begin/end pairs, instants (zero duration, where their
#: category has a kind). Counters (``C``) and the others carry no interval: their fields are skipped.
TIMED_PHASES = "BEiI"
_OTHER_PHASES = "bneCsftPNODMVvRc()"
_OTHERS = tuple(msgspec.defstruct(f"Phase_{i}", [], tag=ph, tag_field="ph", **_FLAGS)
                for i, ph in enumerate(_OTHER_PHASES))


def _timed(num: Any, args: Any) -> dict[str, Any]:
    """One struct per timed phase, with the fields of a complete event (``dur`` is typed, as in
    :data:`Event`, so that every decoding path accepts and rejects the same events, and then ignored)."""
    return {ph: msgspec.defstruct(f"Timed_{ph}_{i}", _fields(num, args), tag=ph, tag_field="ph", **_FLAGS)
            for i, ph in enumerate(TIMED_PHASES)}


#: Phase of each timed struct type, for both variants.
_STRICT_TIMED, _LENIENT_TIMED = _timed(Int, _StrictArgs), _timed(Num, Args)
PHASE_OF: dict[Any, str] = {t: ph for d in (_STRICT_TIMED, _LENIENT_TIMED) for ph, t in d.items()}


def _run_of(complete: Any, timed: dict[str, Any]) -> Any:
    """A run of events: a list of the union tagged on ``ph``."""
    union = Union.__getitem__((complete, *timed.values(), *_OTHERS))
    return list.__class_getitem__(union)


STRICT_RUN = _run_of(StrictComplete, _STRICT_TIMED)
LENIENT_RUN = _run_of(Complete, _LENIENT_TIMED)
