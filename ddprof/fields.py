"""Integer fields of foreign input (Kineto traces, Flight Recorder dumps), however they are spelled.

Producers write the same integer as ``7``, ``7.0``, ``"7"`` or ``"0x7"``; booleans, fractions and
values past int64 are no integers. Every reader parses such fields here.
"""

from __future__ import annotations

from typing import Any

_INT64 = (-(2**63), 2**63)


def as_int(v: Any) -> int | None:
    """An int64 field whatever its spelling: 7, 7.0, "7", "007", "0x7" -> 7; True, 7.5, "x", 2**63 -> None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        n = v
    elif isinstance(v, float):
        if not v.is_integer():
            return None
        n = int(v)
    elif isinstance(v, str):
        try:
            n = int(v, 10) if v.strip().isdigit() else int(v, 0)  # "007" is 7; base 0 reads "0x7"
        except ValueError:
            return None
    else:
        return None
    return n if _INT64[0] <= n < _INT64[1] else None


def int_field(value: Any, what: str) -> int:
    """:func:`as_int`, or ValueError naming the field: ``int_field("x", "record_id")`` raises
    ``record_id must be an integer, got 'x'``."""
    n = as_int(value)
    if n is None:
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return n
