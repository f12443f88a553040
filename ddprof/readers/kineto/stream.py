"""Cut a Kineto trace's event list into runs of whole events, block by block (:mod:`.source` reads them).

The whole inflated JSON is never resident: peak memory is a block or two plus what the caller keeps.

A Kineto file is ``{ <header keys>, "traceEvents": [ ev, ev, ... ], <trailer keys> }``. The header ends
at the ``"traceEvents": [`` key; it is checked by decoding it with the key's value replaced. Inside the
list, a cut after some ``}`` is proposed and the caller's decoder is the judge: ``[`` + text + ``]`` parses
only when the text is a sequence of whole events (a ``}`` inside a string or a nested object leaves it
unbalanced), so a rejected cut is retried at an earlier ``}`` or with more data. Between two runs the
separator (exactly one ``,``) is checked here. At the end of the file the list's closing ``]`` is found
the same way, together with a trailer that parses.

The Chrome trace format also allows the document to be the bare event list, ``[ ev, ev, ... ]`` (older
profilers wrote it): it is cut the same way, has no header keys, and may end without its ``]`` or with a
trailing ``,`` (the format allows both, so that a trace cut short by a crash still reads).

When the document has neither shape (no ``traceEvents`` list, not JSON at all), :class:`NotStreamable`
is raised and the caller reads the file whole for a precise error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ddprof.readers.kineto.depth import decode_shallow

#: Cut attempts per block before reading more; a cut fails only when a '}' ends a nested object.
CUT_TRIES = 4
#: Closing-bracket candidates (whose trailer parses) tried at the end of the file.
END_TRIES = 16
#: Header longer than this without the event list: not a Kineto trace worth streaming.
MAX_HEAD = 64 << 20

_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_ws = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_WS = re.compile(rb"[ \t\r\n]*")


class NotStreamable(Exception):
    """The document is not a ``{..., "traceEvents": [...], ...}`` object; read it whole instead."""


class Header(msgspec.Struct, forbid_unknown_fields=False):
    distributedInfo: Any = None  # noqa: N815 - Kineto's keys
    baseTimeNanoseconds: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815 - read only to tell a PyTorch profiler trace (.reader)
    computeProperties: Any = None  # noqa: N815 - PyTorch 1.8's deviceProperties
    WARNING: Any = None  # what the profiler logged while tracing (Kineto writes its log's levels as keys)
    ERROR: Any = None

    def update(self, later: Header) -> None:
        for f in self.__struct_fields__:
            if getattr(later, f) is not None:
                setattr(self, f, getattr(later, f))


_header = msgspec.json.Decoder(Header)


def split(blocks: Iterator[bytes], consume: Callable[[memoryview], None]) -> Header:
    """Feed ``consume`` JSON arrays of whole events, in order; return the document's other keys.

    ``consume`` must raise :class:`msgspec.DecodeError` (and do nothing else) for text that does not
    parse: that is how a bad cut is told from a good one. It gets a view into a buffer that changes
    afterwards, so it must copy what it keeps. Raises :class:`InvalidJSON` for a list that is not one.
    """
    blocks = _Counted(blocks)
    head, rest, bare = _head(blocks)
    # buf[0] is a free byte: the '[' of the next run is written just before it, its ']' just after it
    buf, pos, sep = bytearray(b" ") + rest, 1, _Separator()
    sep.offset = blocks.total - len(rest)  # where the list's text starts in the whole text
    del rest
    for block in blocks:
        pos = sep.skip(buf, pos)
        nxt = bytearray(b" ")
        nxt += memoryview(buf)[pos:]
        nxt += block
        sep.offset += pos - 1
        buf, pos = nxt, 1
        if sep.state in (_START, _AFTER_COMMA):
            for cut in _cuts(buf, pos):
                if _try(buf, pos, cut, consume):
                    pos, sep.state = cut + 1, _AFTER_EVENT
                    break
    pos = sep.skip(buf, pos)
    if bare:
        _end_bare(bytes(buf[pos:]), consume, sep.state, sep.offset + pos - 1)
    else:
        head.update(_end(bytes(buf[pos:]), consume, sep.state, sep.offset + pos - 1))
    return head


def _head(blocks: Iterator[bytes]) -> tuple[Header, bytes, bool]:
    """The keys before the event list, the text after its ``[``, and whether the document is the bare
    list. The list is the first ``"traceEvents": [`` at the top level: the text before it, closed,
    must parse; or the document's first character is ``[`` (after white space and a byte-order mark)."""
    buf, tried = b"", set()
    for block in blocks:
        buf += block
        first = _WS.match(buf, 3 if buf.startswith(_BOM) else 0).end()  # type: ignore[union-attr] # always matches
        if first == len(buf):
            continue
        if buf[first] == 0x5B:  # '['
            return Header(), buf[first + 1:], True
        for m in _KEY.finditer(buf):
            if m.start() in tried:
                continue
            tried.add(m.start())
            try:
                return decode_shallow(_header, buf[:m.start()] + b'"traceEvents":null}'), buf[m.end():], False
            except msgspec.DecodeError:  # the key sat inside some other value
                continue
        if len(buf) > MAX_HEAD:
            break
    raise NotStreamable


_START, _AFTER_EVENT, _AFTER_COMMA, _CLOSED = range(4)


class _Separator:
    """Where the list stands between events: exactly one ',' between two events, none before the
    first or after the last, then ']'."""

    def __init__(self) -> None:
        self.state = _START
        self.offset = 0  # of buf[1] in the whole (inflated) text

    def skip(self, buf: bytearray, pos: int) -> int:
        pos = _WS.match(buf, pos).end()  # type: ignore[union-attr] # always matches
        if pos == len(buf) or self.state == _CLOSED:
            return pos
        c = buf[pos]
        if self.state == _AFTER_EVENT:
            if c == 0x2C:  # ','
                self.state = _AFTER_COMMA
                return self.skip(buf, pos + 1)
            if c == 0x5D:  # ']'
                self.state = _CLOSED
                return pos
            raise InvalidJSON(f"not valid JSON (expected ',' or ']' after an event, found {chr(c)!r} "
                              f"{self._where(pos)})")
        if c == 0x2C:
            raise InvalidJSON(f"not valid JSON (',' where an event should start {self._where(pos)})")
        if c == 0x5D:
            if self.state == _AFTER_COMMA:
                raise InvalidJSON(f"not valid JSON (',' before the list's ']' {self._where(pos)})")
            self.state = _CLOSED
        return pos

    def _where(self, pos: int) -> str:
        return f"at byte {self.offset + pos - 1}"


def _cuts(buf: bytearray, pos: int) -> Iterator[int]:
    """Where the run may end, last first: a '}' followed by ',' (between two events: a failed cut
    costs a whole decode), then any '}'. The byte after the '}' must exist: it becomes the ']'."""
    end = len(buf) - 1
    tried = 0
    for pattern in (b"},", b"}"):
        cut = end
        while tried < CUT_TRIES:
            cut = buf.rfind(pattern, pos, cut if pattern == b"}" else cut + 1)
            if cut < 0:
                break
            tried += 1
            yield cut


def _try(buf: bytearray, pos: int, cut: int, consume: Callable[[memoryview], None]) -> bool:
    """Decode ``buf[pos:cut + 1]`` as a list in place (bracket bytes borrowed, then restored)."""
    before, after = buf[pos - 1], buf[cut + 1]
    buf[pos - 1], buf[cut + 1] = 0x5B, 0x5D  # '[' and ']'
    try:
        consume(memoryview(buf)[pos - 1:cut + 2])
    except msgspec.ValidationError:
        raise  # a bad event the consumer did not handle: not a bad cut
    except msgspec.DecodeError:
        return False
    finally:
        buf[pos - 1], buf[cut + 1] = before, after
    return True


def _end(buf: bytes, consume: Callable[[memoryview], None], state: int, base: int = 0) -> Header:
    """The last events and the trailer: the list's ']' is the one after which the rest parses. ``base``:
    where ``buf`` starts in the whole text (errors say where in the file, not where in ``buf``).

    The error reported is that of the events before the first ']' whose trailer parses (the list's
    real end), else the trailer's; the file is said to be maybe truncated only when the decoder says
    the text ran out, or when no end of the list was found and the text does not end an object."""
    if state == _AFTER_EVENT:  # the text ended right after an event
        raise InvalidJSON("not valid JSON (the event list does not end); the file may be truncated")
    end, consumed = len(buf), 0
    last: str | None = None
    body_err: str | None = None
    while consumed < END_TRIES:
        end = buf.rfind(b"]", 0, 1 if state == _CLOSED else end)
        if end < 0:
            break
        try:
            trailer = decode_shallow(_header, _TRAILER_OPEN + buf[end + 1:])
        except msgspec.DecodeError as exc:
            last = _shifted(exc, base + end + 1 - len(_TRAILER_OPEN))
            if state == _CLOSED:
                break
            continue
        body = buf[:end].rstrip(_ws)
        if not body:
            return trailer  # the separator state already vouched for what came before
        consumed += 1
        try:
            consume(memoryview(b"[" + body + b"]"))
        except msgspec.DecodeError as exc:
            body_err = body_err or _shifted(exc, base - 1)
            continue
        return trailer
    err = body_err or last
    why = f" ({err})" if err else ""
    truncated = "truncated" in body_err if body_err else not buf.rstrip(_ws).endswith(b"}")
    raise InvalidJSON(f"not valid JSON{why}{'; the file may be truncated' if truncated else ''}")


_TRAILER_OPEN = b'{"traceEvents":[]'
_BYTE = re.compile(r"\(byte (\d+)\)")


def _shifted(exc: Exception, delta: int) -> str:
    """The decoder's message with its ``(byte N)`` moved by ``delta``: where in the file, not in a piece."""
    return _BYTE.sub(lambda m: f"(byte {int(m[1]) + delta})", str(exc))


class _Counted:
    """The blocks, counting the bytes handed out (where the event list starts in the whole text)."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks, self.total = blocks, 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> bytes:
        block = next(self.blocks)
        self.total += len(block)
        return block


def _end_bare(buf: bytes, consume: Callable[[memoryview], None], state: int, base: int = 0) -> None:
    """The last events of a bare list: up to its ``]`` and white space, or to the end of the text
    (the ``]`` is optional, a trailing ``,`` allowed)."""
    text = buf.rstrip(_ws)
    if state == _CLOSED:
        if text != b"]":
            raise InvalidJSON("not valid JSON (text after the event list's closing ']')")
        return
    if state == _AFTER_EVENT:
        if text:  # pragma: no cover - the separator state stops at anything but ',' or ']'
            raise InvalidJSON("not valid JSON (text after the last event)")
        return
    body = text[:-1] if text.endswith(b"]") else text
    body = body.rstrip(_ws)
    body = body[:-1].rstrip(_ws) if body.endswith(b",") else body
    if not body:
        return
    try:
        consume(memoryview(b"[" + body + b"]"))
    except msgspec.DecodeError as exc:
        hint = "" if text.endswith((b"]", b"}", b",")) else "; the file may be truncated"
        raise InvalidJSON(f"not valid JSON ({_shifted(exc, base - 1)}){hint}") from None


class InvalidJSON(Exception):
    """The event list or the document around it is not valid JSON (its message says where)."""
