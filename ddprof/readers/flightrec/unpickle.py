"""Reading a Flight Recorder dump file into plain Python objects, without importing anything.

A dump is a pickle (``\\x80`` + protocol 2..5) or JSON (from ``_dump_nccl_trace_json``). Pickles go
through :class:`SafeUnpickler`, which refuses every global: a real dump pickles only dicts, lists, tuples,
strings, numbers, booleans and None, so the allow-list is empty.
"""

from __future__ import annotations

import io
import json
import pickle
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import msgspec

from ddprof.errors import BadInputError
from ddprof.readers.ranks import rank_from_dump_name

__all__ = ["SafeUnpickler", "json_damage", "looks_like_pickle", "pickle_damage", "read_dump_object"]

_PICKLE_PROTOCOLS = frozenset({2, 3, 4, 5})


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global, so loading a dump can import and call nothing.

    A Flight Recorder dump needs no global: all of it is built from the pickle opcodes for dict, list,
    tuple, str, int, float, bool and None (checked on the real 2.9 dumps with ``pickletools``). Any
    ``GLOBAL``/``STACK_GLOBAL``/``INST``/``OBJ``/``EXT*`` opcode therefore means the file is not a plain
    dump, and is refused with the module and name it asked for.
    """

    def __init__(self, file: io.BufferedIOBase, *, path: str | Path, rank: int | None):
        super().__init__(file)
        self._path = path
        self._rank = rank

    def find_class(self, module: str, name: str) -> Any:
        raise BadInputError(
            f"refused to load: the pickle asks to import {module}.{name}, but a Flight Recorder dump "
            "needs no globals (it may be malicious or not a dump)",
            path=self._path,
            rank=self._rank,
        )

    def persistent_load(self, pid: Any) -> Any:
        raise BadInputError(
            "refused to load: the pickle uses persistent ids, which a Flight Recorder dump never does",
            path=self._path,
            rank=self._rank,
        )


def looks_like_pickle(head: bytes) -> bool:
    """Whether a file's first bytes are a pickle protocol header (``\\x80`` + protocol 2..5)."""
    return len(head) >= 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS


_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


class _RecordId(msgspec.Struct):
    """An entry's ``record_id`` alone: decoding entries as these skips every other field unbuilt."""

    record_id: Any = None


def _top_level(data: bytes) -> dict[str, msgspec.Raw] | None:
    """A JSON object's values by key, scanned but not built (``msgspec.Raw``); None when ``data`` is not one
    JSON object."""
    try:
        return msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except _DECODE_ERRORS:
        return None


def _record_ids(entries: msgspec.Raw) -> list[Any] | None:
    """Each entry's ``record_id``, its other fields skipped unbuilt; None when the entries are not a list of
    objects (the full parse names what is wrong with them)."""
    try:
        return [e.record_id for e in msgspec.json.decode(entries, type=list[_RecordId])]
    except _DECODE_ERRORS:
        return None


def _repeats(ids: list[Any]) -> list[bool]:
    """Per entry, whether an earlier entry has its ``record_id`` (an integer one)."""
    seen: set[int] = set()
    out = []
    for rid in ids:
        known = isinstance(rid, int) and not isinstance(rid, bool)
        out.append(known and rid in seen)
        if known:
            seen.add(rid)
    return out


def _json_dump(data: bytes) -> Any:
    """A JSON dump as plain objects, building only what is read (a fuzzed 600 MB file took 20 s and 3.8 GB
    to build):

    * no ``version`` or ``pg_config`` key: the keys alone (``parse_dump`` refuses the file naming them);
    * an entry that repeats an earlier entry's ``record_id`` (read once by ``parse_dump``): its ``record_id``
      alone, its other fields never built.
    """
    top = _top_level(data)
    if top is not None and not {"version", "pg_config"} <= set(top):
        return dict.fromkeys(top)
    ids = _record_ids(top["entries"]) if top is not None and "entries" in top else None
    repeated = _repeats(ids) if ids is not None else []
    if top is not None and ids is not None and any(repeated):
        try:
            raws = msgspec.json.decode(top["entries"], type=list[msgspec.Raw])
            entries = [{"record_id": rid} if again else json.loads(bytes(raw))
                       for raw, rid, again in zip(raws, ids, repeated)]
            return {k: entries if k == "entries" else json.loads(bytes(v)) for k, v in top.items()}
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, *_DECODE_ERRORS):
            pass  # the whole document's parse names what is wrong
    return json.loads(data.decode("utf-8"))


def read_dump_object(path: str | Path) -> Any:
    """Read a dump file into plain Python objects, without importing anything.

    Pickle is detected by its protocol header (``\\x80`` + protocol 2..5), anything else is parsed as JSON.
    Raises BadInputError naming the file (and the rank its name implies) for unreadable input.
    """
    rank = rank_from_dump_name(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read the file: {exc.strerror or exc}", path=path, rank=rank) from exc
    if looks_like_pickle(data[:2]):
        stray = io.StringIO()
        try:
            # On a damaged length (a bytearray of 2**62 bytes) CPython's unpickler can print "SystemError:
            # deallocated bytearray object has exported buffers" itself before it raises MemoryError: that
            # line is no message of ddprof's and must not reach the user's stderr.
            with redirect_stderr(stray):
                return SafeUnpickler(io.BytesIO(data), path=path, rank=rank).load()
        except BadInputError:
            raise
        except Exception as exc:  # a damaged pickle can raise almost anything; say it of the file, don't crash
            raise BadInputError(f"not a readable Flight Recorder pickle: {pickle_damage(exc, len(data))}",
                                path=path, rank=rank) from exc
    try:
        return _json_dump(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadInputError(f"not a Flight Recorder dump: no pickle header, and {json_damage(exc, data)}",
                            path=path, rank=rank) from exc


def pickle_damage(exc: BaseException, size: int) -> str:
    """What is wrong with a pickle the unpickler gave up on, in words about the file (not the unpickler's):
    a length past the file's end or past memory, data cut short, a reference to nothing, a stray opcode."""
    text = str(exc)
    if isinstance(exc, MemoryError):
        return (f"it declares an object larger than memory can hold (a damaged length field; the file has "
                f"{size} bytes)")
    if isinstance(exc, (OverflowError,)) or "exceeds" in text or "too large" in text:
        return f"it declares a length no object of a {size}-byte file can have (a damaged length field)"
    if isinstance(exc, EOFError) or "truncated" in text:
        return f"its {size} bytes end before the objects they begin (the file is truncated or a length is damaged)"
    if "memo" in text.lower():
        return "it refers back to an object it never stored (a damaged reference)"
    if isinstance(exc, RecursionError):
        return "its objects nest deeper than any dump's"
    return ("its opcodes do not build the plain dicts, lists, strings and numbers of a dump (a damaged or "
            "foreign pickle)")


def json_damage(exc: BaseException, data: bytes) -> str:
    """What is wrong with a dump that is not JSON, in words about the file: where it stops being text or
    JSON, and whether it ends early."""
    if isinstance(exc, UnicodeDecodeError):
        return f"byte {exc.start} is not UTF-8 text, so it is not JSON either"
    if isinstance(exc, RecursionError):
        return "its JSON nests deeper than any dump's"
    assert isinstance(exc, json.JSONDecodeError)
    try:  # msgspec tells a document cut short from one broken inside
        msgspec.json.decode(data)
        truncated = False
    except msgspec.DecodeError as why:
        truncated = "truncated" in str(why)
    except RecursionError:
        truncated = False
    if truncated or exc.pos >= len(exc.doc.rstrip()):
        return f"its JSON stops after {len(data)} bytes, inside the document (the file is truncated)"
    if exc.pos == 0 or not exc.doc.strip():
        return "it is not JSON (it does not start with an object)" if exc.doc.strip() else "it is empty"
    return f"its JSON is broken at line {exc.lineno}, column {exc.colno} (byte {exc.pos}): no valid value there"
