"""Scalar fields of foreign input (Kineto traces, Flight Recorder dumps), however they are spelled.

Producers write the same integer as ``7``, ``7.0``, ``"7"`` or ``"0x7"``; booleans, fractions and
values past int64 are no integers. A text field is a string (a number is taken as its digits); a list or
a dict where text belongs is refused, never turned into text: a crafted pickle's lists can share
themselves so that one of 60 objects spells out as 2**60 items. Every reader parses such fields here, and
an error message shows a bad value only through :func:`brief`.
"""

from __future__ import annotations

import reprlib
from typing import Any

_BRIEF = reprlib.Repr()  # Python 3.12 takes these as arguments; 3.10 and 3.11 only as attributes
_BRIEF.maxlevel, _BRIEF.maxlist, _BRIEF.maxtuple, _BRIEF.maxdict = 2, 4, 4, 4
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 60, 60, 40


def brief(value: Any) -> str:
    """A bounded repr for error messages, whatever the value's size or sharing:
    ``brief([[1, 2, 3, 4, 5]] * 3)`` is ``'[[1, 2, 3, 4, ...], [1, 2, 3, 4, ...], [1, 2, 3, 4, ...]]'``."""
    return _BRIEF.repr(value)


def text_field(value: Any, what: str) -> str:
    """A string field: a str as it is, an int or float as its digits; anything else a ValueError naming the
    field (``text_field(["x"], "state")`` raises ``state must be a string, got a list``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{what} must be a string, got a {type(value).__name__}")

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
        raise ValueError(f"{what} must be an integer, got {brief(value)}")
    return n
