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

__all__ = ["SafeUnpickler", "looks_like_pickle", "read_dump_object"]

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


def _top_level_keys(data: bytes) -> list[str] | None:
    """The keys of a JSON object, its values scanned but not built (``msgspec.Raw``); None when ``data``
    is not one JSON object. A JSON file of hundreds of MB that is no dump (no ``version`` or ``pg_config``)
    is refused in a second this way, where building its objects took 17 s and 3.9 GB to refuse it."""
    try:
        return list(msgspec.json.decode(data, type=dict[str, msgspec.Raw]))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


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
        except Exception as exc:  # a damaged pickle can raise almost anything; name it, don't crash
            raise BadInputError(
                f"not a readable Flight Recorder pickle (truncated or damaged): {type(exc).__name__}: {exc}",
                path=path,
                rank=rank,
            ) from exc
    keys = _top_level_keys(data)
    if keys is not None and not {"version", "pg_config"} <= set(keys):
        return dict.fromkeys(keys)  # refused by its keys (parse_dump names them), its values never built
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadInputError(
            "not a Flight Recorder dump: neither a pickle (no protocol header) nor JSON", path=path, rank=rank
        ) from exc
