"""The inflated bytes of a trace file, block by block (gzip, multi-member gzip or plain), and its SHA-1.

ISA-L inflates about twice as fast as zlib, with the same format and API; the standard library's zlib
is the fallback. Every failure is a :class:`BadInputError` naming the file.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from ddprof.errors import BadInputError

#: What a gzip stream starts with.
GZIP_MAGIC = b"\x1f\x8b"
BLOCK = 1 << 20  # inflated bytes per block: about 4,000 Kineto events
READ = 1 << 20  # bytes read from disk at a time

_inflate_impl: ModuleType = zlib
try:  # ISA-L inflates about twice as fast as zlib; same format and API
    from isal import isal_zlib

    _inflate_impl = isal_zlib
except ImportError:  # pragma: no cover - isal is a dependency; the standard library does the same
    pass


def gzipped(path: Path) -> bool:
    """Whether the file starts as a gzip stream; BadInputError naming it when it cannot be read."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(GZIP_MAGIC)) == GZIP_MAGIC
    except OSError as exc:
        raise BadInputError(f"cannot read file ({exc.strerror or exc})", path=path) from None


class Source:
    """The inflated bytes of one file, block by block, with the SHA-1 of the bytes on disk."""

    def __init__(self, path: Path, block: int = BLOCK):
        self.path, self.block = path, block
        self.sha1 = hashlib.sha1()
        self.size = 0  # inflated bytes so far

    def blocks(self) -> Iterator[bytes]:
        try:
            fh = self.path.open("rb")
        except OSError as exc:
            raise BadInputError(f"cannot read file ({exc.strerror or exc})", path=self.path) from None
        with fh:
            first = self._read(fh)
            if not first:
                raise BadInputError("file is empty", path=self.path)
            pieces = self._inflate(first, fh) if first[:2] == GZIP_MAGIC else self._plain(first, fh)
            for piece in pieces:
                self.size += len(piece)
                yield piece
        if self.size == 0:
            raise BadInputError("file is empty once decompressed", path=self.path)

    def _read(self, fh: Any) -> bytes:
        try:
            raw: bytes = fh.read(READ)
        except OSError as exc:
            raise BadInputError(f"cannot read file ({exc.strerror or exc})", path=self.path) from None
        self.sha1.update(raw)
        return raw

    def _plain(self, first: bytes, fh: Any) -> Iterator[bytes]:
        raw = first
        while raw:
            yield raw
            raw = self._read(fh)

    def _inflate(self, first: bytes, fh: Any) -> Iterator[bytes]:
        impl = _inflate_impl  # looked up here: tests swap in the standard library's zlib
        d, fed = impl.decompressobj(31), False
        data = first
        try:
            while data:
                while data:
                    if not fed:  # between members, zero padding is allowed (as gzip(1) and Python's gzip do)
                        data = data.lstrip(b"\x00")
                        if not data:
                            break
                    fed = True
                    out = d.decompress(data, self.block)
                    if out:
                        yield out
                    data = d.unconsumed_tail
                    if d.eof:  # a multi-member file: the next member starts in unused_data (only there)
                        data = d.unused_data
                        d, fed = impl.decompressobj(31), False
                data = self._read(fh)
            tail = d.flush()
        except impl.error as exc:
            raise BadInputError(f"corrupt or truncated gzip data ({exc})", path=self.path) from None
        if tail:
            yield tail
        if fed and not d.eof:
            raise BadInputError("corrupt or truncated gzip data (compressed file ended before the "
                                "end-of-stream marker was reached)", path=self.path)


#: Bytes read at each end of a file for :func:`quick_digest`.
QUICK_BYTES = 64 << 10


def quick_digest(path: Path, size: int) -> str:
    """SHA-1 of a file's size, first and last :data:`QUICK_BYTES` bytes: two small reads whatever the
    file's size. Catches an append, a truncation, a new header or a new tail; an edit in the middle is
    left to the full hash (:func:`file_sha1`), which the cache computes whenever the file's inode or
    change time moved. Raises OSError if the file cannot be read."""
    h = hashlib.sha1(str(size).encode())
    with path.open("rb") as fh:
        h.update(fh.read(QUICK_BYTES))
        if size > QUICK_BYTES:
            fh.seek(max(QUICK_BYTES, size - QUICK_BYTES))
            h.update(fh.read(QUICK_BYTES))
    return h.hexdigest()


def file_sha1(path: Path) -> str:
    """SHA-1 of a file's bytes on disk (what :attr:`Source.sha1` records while decoding). Raises OSError."""
    h = hashlib.sha1()
    with path.open("rb") as fh:
        while chunk := fh.read(READ):
            h.update(chunk)
    return h.hexdigest()
