"""JSON nested deeper than ddprof reads, cut off: arguments nobody reads must not be able to break a decode.

msgspec recurses once per level of nesting, also to skip a value it does not keep, and stops at the
interpreter's recursion limit (about 1,000 levels) with a RecursionError. ddprof reads nothing deeper
than a few levels (an event's ``args``, its ``Input Dims``: five), so when a decode hits that limit the
text is decoded again with every container deeper than :data:`MAX_DEPTH` replaced by ``null``.

>>> flatten_deep(b'[{"a": [[1], {"b": "]"}]}]', limit=3)
b'[{"a": [null, null]}]'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

#: Containers nested deeper than this (the run's list is level 1, an event level 2) become ``null``.
MAX_DEPTH = 64

# a whole string (atomic: linear time even on a string that never ends), or a bracket
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]', re.DOTALL)
_OPEN = frozenset(b"[{")


def flatten_deep(text: bytes, limit: int = MAX_DEPTH) -> bytes:
    """``text`` with each container deeper than ``limit`` levels replaced by ``null``. Text that is not
    balanced JSON comes back no more valid than it went in."""
    out: list[bytes] = []
    depth, last, cut = 0, 0, -1
    for m in _TOKEN.finditer(text):
        c = text[m.start()]
        if c == 0x22:  # '"': a string, brackets inside it do not count
            continue
        if c in _OPEN:
            depth += 1
            if depth == limit + 1:
                cut = m.start()
        else:
            if depth == limit + 1 and cut >= 0:
                out += (text[last:cut], b"null")
                last, cut = m.end(), -1
            depth -= 1
    if cut >= 0:  # the text ends inside a cut container: it stays unclosed, hence invalid
        out += (text[last:cut], b"null")
    else:
        out.append(text[last:])
    return b"".join(out)


def decode_shallow(decoder: Any, text: bytes | bytearray | memoryview) -> Any:
    """``decoder.decode(text)``; past the recursion limit, the same text cut to :data:`MAX_DEPTH` levels.
    Raises :class:`msgspec.DecodeError` (never RecursionError) for text that cannot be decoded."""
    try:
        return decoder.decode(text)
    except RecursionError:
        return retry_shallow(lambda cut: decoder.decode(cut), text)


def retry_shallow(decode: Callable[[bytes], T], text: bytes | bytearray | memoryview) -> T:
    """``decode`` of ``text`` cut to :data:`MAX_DEPTH` levels, after a decode of the whole hit the
    recursion limit. Still too deep (text too damaged for its brackets to be counted): a
    :class:`msgspec.DecodeError`, as for any text that does not parse."""
    try:
        return decode(flatten_deep(bytes(text)))
    except RecursionError:
        raise msgspec.DecodeError(f"JSON nested more than {MAX_DEPTH} levels deep where its brackets "
                                  "cannot be matched") from None
