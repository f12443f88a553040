"""The interface every input format implements: recognise a file, say who wrote it, read it.

Two kinds of reader, one shape:

* an :class:`EventReader` reads a file of events (a profiler trace) into the store's event table
  (:mod:`ddprof.store.schema`): :meth:`~EventReader.open` decodes it and says who wrote it (an :class:`Opened`
  with its :class:`Identity`), :meth:`~EventReader.read` turns opened files into rows. ``read`` takes
  several files at once: the ingest pipeline builds many small traces as one frame (a frame operation
  costs about the same on a hundred rows as on ten thousand), each file's rows tagged ``_trace``. A file
  that holds several ranks opens as one :class:`Opened` whose ``members`` are its ranks: ``read`` then takes
  the members, each as a file of its own.
* a :class:`DumpReader` reads a file of another kind of record (a Flight Recorder dump) for an analysis
  that is not the event table's (the hang diagnosis).

Both recognise a file cheaply, from its name (:meth:`~EventReader.claims_name`: which files of a directory
tree are worth opening) and its first bytes (:meth:`~EventReader.recognise`). A new format is a folder
beside ``kineto/`` holding its reader and one line in :data:`ddprof.readers.registry.READERS` (a complete
one, run: ``SpansReader`` in ``tests/unit/test_readers.py``)::

    class CsvSpans:                               # a file of "name,start_us,end_us" lines
        name, describes, names = "csv-spans", "a CSV file of spans", "*.spans.csv"

        def claims_name(self, name):
            return name.endswith(".spans.csv")

        def recognise(self, name, head):
            return head.startswith(b"name,start_us,end_us")

        def open(self, path):
            rows = path.read_text().splitlines()[1:]
            return Opened(identity=Identity(), sha1=hashlib.sha1(path.read_bytes()).hexdigest(),
                          raw_complete=len(rows), state=rows)

        def read(self, opened, ranks, rules):
            frames = [conform(spans_frame(o.state), {"rank": pl.lit(r, pl.Int32)})
                      for o, r in zip(opened, ranks)]
            return with_trace_index(frames), [[] for _ in opened]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeGuard, runtime_checkable

import numpy as np
import polars as pl

from ddprof.vocabulary.collective_ops import CommRule


@dataclass
class Identity:
    """Who wrote a file, as the file says: None (or empty) where it does not say. The values are the
    file's claims, not checked: the ingest pipeline checks them (a rank past the world size, a world
    size of the wrong type) and names ``claims_in`` in what it says (``distributedInfo.world_size``)."""

    rank: Any = None
    world_size: Any = None
    host: str | None = None
    backend: str | None = None
    pg_config: list[Any] = field(default_factory=list)
    nccl_version: str | None = None
    device_names: list[str] = field(default_factory=list)
    base_time_ns: int | None = None
    claims_in: str = "the file"  # where the file keeps these claims, e.g. Kineto's "distributedInfo"


@dataclass
class Opened:
    """One file opened by its reader: who wrote it, what opening it found, and ``state``, the reader's
    own decoded form of the file that :meth:`EventReader.read` takes back."""

    identity: Identity
    sha1: str  # of the bytes on disk: names the file's Parquet part
    raw_complete: int  # events in the file before any was dropped
    dropped: dict[str, int] = field(default_factory=dict)  # events dropped, by reason
    notices: list[str] = field(default_factory=list)  # the producer's own warnings and errors in the file
    warnings: list[str] = field(default_factory=list)  # what opening it found wrong (kept, not fatal)
    state: Any = None
    #: A file that holds several ranks (an Nsight Systems export of several processes): one Opened per rank,
    #: in the file's order (:func:`ddprof.readers.ranks.member_ranks`), each read as a file of its own.
    members: list[Opened] = field(default_factory=list)
    member: str | None = None  # which part of its file this is, for messages ("process 111 on CUDA device 0")


@runtime_checkable
class Recogniser(Protocol):
    """What every reader has: a name, what its files are, and the cheap recognition."""

    name: str  # short, for messages and the registry ("kineto")
    describes: str  # what a file it reads is, as a sentence's object ("a PyTorch profiler (Kineto) trace")
    names: str  # the names :meth:`claims_name` takes, for messages ("*.json, *.json.gz")

    def claims_name(self, name: str) -> bool:
        """Whether a file of this name, met in a directory tree, is one of this reader's (never opens it)."""
        ...

    def recognise(self, name: str, head: bytes) -> bool:
        """Whether the file is one of this reader's, from its name and first bytes (``head``: at most
        :data:`ddprof.readers.registry.HEAD_BYTES`, inflated when the file is gzip)."""
        ...


@runtime_checkable
class EventReader(Recogniser, Protocol):
    """A reader of events into the store (module doc)."""

    def open(self, path: Path) -> Opened:
        """Decode the file and say who wrote it. Raises :class:`~ddprof.errors.BadInputError` naming the
        file when it cannot be read, or is not what :meth:`recognise` took it for."""
        ...

    def read(self, opened: Sequence[Opened], ranks: Sequence[int],
             rules: tuple[CommRule, ...]) -> tuple[pl.DataFrame, list[list[str]]]:
        """The event table of the ``opened`` files (:mod:`ddprof.store.schema`, ``rank`` from ``ranks``) as one
        frame, each file's rows after the previous one's and in their own order, with a ``_trace``
        column (the file's index in ``opened``, UInt32) after the schema's; and each file's warnings.
        ``rules`` name communication kernels (:func:`ddprof.vocabulary.collective_ops.kernel_rules`). A file's rows
        must be those it gets read alone."""
        ...


@runtime_checkable
class DumpReader(Recogniser, Protocol):
    """A reader of records that are not events (module doc): one file -> one object."""

    def load(self, path: Path) -> Any:
        """The file's records; raises :class:`~ddprof.errors.BadInputError` naming the file."""
        ...

    def is_dump_dir(self, path: str | Path) -> bool:
        """Whether a directory holds such files (cheap: names and first bytes, nothing loaded)."""
        ...

    def find(self, root: str | Path) -> list[Path]:
        """Such files anywhere under ``root``, by name (e.g. those a capture left beside its traces)."""
        ...

    def load_dir(self, path: str | Path) -> Any:
        """Every such file of a directory: the loaded ones and the failures (one bad file fails alone)."""
        ...

    def load_files(self, files: list[Path], *, source: str) -> Any:
        """The given files, as :meth:`load_dir` does (``source``: where they were found, for messages)."""
        ...


def reads_events(reader: Recogniser) -> TypeGuard[EventReader]:
    """Whether ``reader`` is an :class:`EventReader` (what ``isinstance`` says, without the protocol check's
    cost: ingest asks once per trace)."""
    return callable(getattr(reader, "read", None)) and callable(getattr(reader, "open", None))


def reads_dumps(reader: Recogniser) -> TypeGuard[DumpReader]:
    """Whether ``reader`` is a :class:`DumpReader` (as :func:`reads_events`)."""
    return callable(getattr(reader, "load", None)) and callable(getattr(reader, "find", None))


def with_trace_index(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Frames of one file each, one after the other, with the ``_trace`` column :meth:`EventReader.read`
    returns."""
    heights = [f.height for f in frames]
    trace = pl.Series("_trace", np.repeat(np.arange(len(frames), dtype=np.uint32), heights))
    return pl.concat(frames).hstack([trace])
