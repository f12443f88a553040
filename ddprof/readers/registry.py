"""Every input format ddprof reads, in one place, and the recognition that picks a file's reader.

A new format is a folder beside ``kineto/`` with its reader (:mod:`ddprof.readers.base`) and one line in
:data:`READERS`. Everything else asks this module: which files of a directory tree to open
(:func:`claimed`), which reader opens a file (:func:`recognise`), which reader loads dumps
(:func:`dump_reader`).

Recognition (:func:`recognise`) reads the file's first :data:`HEAD_BYTES` (inflated when gzip), then:

1. the first reader of :data:`READERS` that recognises the content (order: the more particular first;
   a Flight Recorder JSON dump is JSON too);
2. else a format recognised only to be refused (:mod:`.unread`): an Nsight Systems report (whose SQLite
   export the Nsight Systems reader takes), a Perfetto protobuf trace ... refused naming what the file is;
3. else the first reader that claims the file's name (``.json``: the Kineto reader, whose decoder then
   says precisely what is wrong: empty, truncated gzip, not JSON);
4. else the file is refused: "not a format ddprof reads", with the formats it reads.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from ddprof.errors import BadInputError
from ddprof.readers.base import DumpReader, EventReader, Recogniser, reads_dumps, reads_events
from ddprof.readers.flightrec.reader import FlightRecorderReader
from ddprof.readers.kineto.reader import KinetoReader
from ddprof.readers.nsys.reader import NsysReader
from ddprof.readers.source import GZIP_MAGIC
from ddprof.readers.unread import refusal

#: The readers, the more particular first (module doc).
READERS: list[Recogniser] = [
    FlightRecorderReader(),
    KinetoReader(),
    NsysReader(),
]

#: Bytes of a file recognition looks at (inflated ones for a gzip file).
HEAD_BYTES = 4096


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of a file, inflated when it starts as gzip (what a damaged gzip stream
    yields, possibly nothing: the reader's decoder names the damage). Raises BadInputError when the
    file cannot be read."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(size)
    except OSError as exc:
        raise BadInputError(f"cannot read file ({exc.strerror or exc})", path=path) from None
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return zlib.decompressobj(31).decompress(raw, size)
    except zlib.error:
        return b""


def unread(path: Path) -> str | None:
    """Why ``path`` is not read when it is a format ddprof knows but reads not (:mod:`.unread`), e.g.
    ``"a Perfetto protobuf trace: not supported yet"``, or one a reader takes by its content under a name a
    directory search passes over (a gzipped export, ``x.sqlite.gz``); None for any other file (or one that
    cannot be read)."""
    try:
        head = read_head(path)
    except BadInputError:
        return None
    by_content = next((r for r in READERS if r.recognise(path.name, head)), None)
    if by_content is not None:  # its content is a format ddprof reads, its name not one a tree search takes
        if by_content.claims_name(path.name):
            return None
        if path.name.endswith(".gz") and by_content.claims_name(path.name.removesuffix(".gz")):
            return f"{by_content.describes}, gzipped: ddprof reads it inflated (gunzip -k {path.name})"
        return (f"{by_content.describes} by its content, not by its name ({by_content.names}): give the file "
                "itself on the command line")
    known = refusal(path, head)
    return known.message() if known is not None else None


def recognise(path: Path) -> Recogniser:
    """The reader of ``path`` (module doc); raises BadInputError naming the file and what it is when no
    reader takes it."""
    head = read_head(path)
    for reader in READERS:
        if reader.recognise(path.name, head):
            return reader
    known = refusal(path, head)
    if known is not None:
        raise BadInputError(known.message(), path=path)
    for reader in READERS:
        if reader.claims_name(path.name):
            return reader
    formats = ", ".join(r.describes for r in READERS)
    raise BadInputError(f"not a format ddprof reads (it reads {formats})", path=path)


def event_readers() -> list[EventReader]:
    """The readers whose files become events in the store."""
    return [r for r in READERS if reads_events(r)]


def dump_reader() -> DumpReader:
    """The reader of Flight Recorder dumps (the hang diagnosis' input)."""
    return next(r for r in READERS if reads_dumps(r))


def claimed(name: str) -> bool:
    """Whether a file of this name, met in a directory tree, is one an event reader reads."""
    return any(r.claims_name(name) for r in event_readers())


def claimed_names() -> str:
    """The names :func:`claimed` takes, for messages: ``*.json, *.json.gz``."""
    return ", ".join(r.names for r in event_readers())
