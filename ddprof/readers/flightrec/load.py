"""Loading a directory of per-rank Flight Recorder dumps, and the cheap check that a directory holds some.

:func:`load_dump_dir` reads every candidate file (skipping logs and notes kept beside the dumps) into a
:class:`DumpSet`: the dumps by rank, plus each file that failed as a BadInputError, so one bad rank never
stops the others. :func:`is_flight_recorder_dir` sniffs names and file heads only, never unpickling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddprof.errors import BadInputError, RankError
from ddprof.readers.flightrec.unpickle import looks_like_pickle, read_dump_object

if TYPE_CHECKING:  # the records' parser is loaded when a dump is read, not when a file is only recognised
    from ddprof.readers.flightrec.records import FRDump

__all__ = ["SKIPPED_SUFFIXES", "DumpSet", "load_dump", "load_dump_dir", "is_flight_recorder_dir"]

#: File suffixes that are never dumps (logs, notes, reference answers kept beside the dumps).
SKIPPED_SUFFIXES = frozenset({".log", ".txt", ".md", ".rst", ".csv", ".yaml", ".yml", ".py", ".sh", ".html"})
_SNIFF_BYTES = 65536
_SNIFF_FILES = 64
#: Top-level keys of a Kineto (PyTorch profiler) trace; a JSON file with one of them is no dump.
KINETO_KEYS = frozenset({"schemaVersion", "traceEvents", "deviceProperties", "distributedInfo"})
#: A JSON string, or one of the characters that open, close or separate (numbers and literals skipped).
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:]')


@dataclass(frozen=True)
class DumpSet:
    """The dumps of a directory: loaded ones by rank, and the files that failed (each a BadInputError)."""

    path: str
    dumps: dict[int, FRDump]
    failures: list[BadInputError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def load_dump(path: str | Path) -> FRDump:
    """Read and validate one dump file (pickle or JSON). Raises BadInputError naming the file and rank."""
    from ddprof.readers.flightrec.dump import parse_dump

    return parse_dump(read_dump_object(path), path)


def _candidate_files(directory: Path) -> tuple[list[Path], list[str]]:
    """The files of a directory that may be dumps (sorted), and the names skipped as logs or notes."""
    files, skipped = [], []
    for p in sorted(directory.iterdir()):
        if p.name.startswith(".") or not p.is_file():
            continue
        if p.suffix.lower() in SKIPPED_SUFFIXES or p.name.upper().startswith(("LICENSE", "README")):
            skipped.append(p.name)
            continue
        files.append(p)
    return files, skipped


def load_dump_dir(path: str | Path) -> DumpSet:
    """Load every dump in a directory. A bad file becomes a failure; the other ranks still load.

    Files named like logs or notes (``*.log``, ``*.txt``, ``*.md``, ...) are skipped. Two files claiming
    the same rank both fail (RankError), since neither can be trusted over the other.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise BadInputError("expected a directory of Flight Recorder dumps", path=path)
    files, skipped = _candidate_files(directory)
    return load_dump_files(files, source=str(directory), skipped=skipped)


#: Names PyTorch gives dump files: ``TORCH_FR_DUMP_TEMP_FILE`` + rank (ddprof's collector sets
#: ``fr_trace_rank_``; PyTorch's default is ``nccl_trace_rank_``).
DUMP_NAME_PATTERNS = ("fr_trace_rank_*", "nccl_trace_rank_*")


def find_dump_files(root: str | Path) -> list[Path]:
    """Flight Recorder dumps anywhere under ``root`` (e.g. a captured run's ``raw/rank-NNNNN/``), by name."""
    root = Path(root)
    found = {p for pattern in DUMP_NAME_PATTERNS for p in root.rglob(pattern) if p.is_file()}
    return sorted(p for p in found if not any(part.startswith(".") for part in p.relative_to(root).parts))


def load_dump_files(files: list[Path], *, source: str, skipped: list[str] | None = None) -> DumpSet:
    """Load the given dump files; a bad file becomes a failure, two files claiming one rank both fail."""
    failures: list[BadInputError] = []
    by_rank: dict[int, list[FRDump]] = {}
    for f in files:
        try:
            d = load_dump(f)
        except BadInputError as exc:
            failures.append(exc)
            continue
        by_rank.setdefault(d.rank, []).append(d)
    dumps = {}
    for rank, ds in sorted(by_rank.items()):
        if len(ds) == 1:
            dumps[rank] = ds[0]
            continue
        names = ", ".join(Path(d.path).name for d in ds)
        failures.extend(
            RankError(f"rank {rank} is claimed by several dumps ({names})", path=d.path, rank=rank)
            for d in ds
        )
    return DumpSet(path=source, dumps=dumps, failures=failures, skipped=skipped or [])


def _has_kineto_key(text: str) -> bool:
    """Whether the outermost object of a JSON text (a file head, possibly cut short) has a key of
    :data:`KINETO_KEYS`. A key is a string followed by ``:`` one level deep; the scan stops at the first
    Kineto key, so a trace whose ``distributedInfo.pg_config`` fills the head is still recognised.

    ``{"schemaVersion": 1, "distributedInfo": {"pg_config": [...]`` -> True (``distributedInfo``);
    ``{"version": "2.9", "pg_config": {"0": {"desc": "traceEvents"}}`` -> False.
    """
    depth, previous = 0, ""
    for m in _JSON_TOKEN.finditer(text):
        tok = m.group()
        if tok in ("{", "["):
            depth += 1
        elif tok in ("}", "]"):
            depth -= 1
        elif tok == ":" and depth == 1 and previous[1:-1] in KINETO_KEYS:
            return True
        previous = tok
    return False


def looks_like_dump(name: str, head: bytes) -> bool:
    """Whether a file's first bytes are a dump's: a pickle protocol header, or a ``.json`` file whose text
    mentions ``pg_config`` and has no Kineto key at the top level."""
    if looks_like_pickle(head):
        return True
    if name.lower().endswith(".json"):
        text = head.decode("utf-8", errors="ignore")
        return '"pg_config"' in text and not _has_kineto_key(text)
    return False


def _sniff_file(p: Path) -> bool:
    try:
        with p.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return False
    return looks_like_dump(p.name, head)


def is_flight_recorder_dir(path: str | Path) -> bool:
    """Cheap check that a directory holds FR dumps, so a CLI can route it to hang diagnosis.

    True when some file starts with a pickle protocol header, or is a JSON file mentioning ``pg_config``
    whose outermost object has no Kineto key (``schemaVersion``, ``traceEvents``, ``deviceProperties``,
    ``distributedInfo``: a Kineto trace names its process groups in ``distributedInfo.pg_config``), or is
    named ``*_dump_<n>``. Reads at most 64 KiB of at most 64 files; never unpickles anything.
    """
    directory = Path(path)
    if not directory.is_dir():
        return False
    try:
        files, _ = _candidate_files(directory)
    except OSError:
        return False
    if any(re.search(r"_dump_\d+$", f.name) for f in files):
        return True
    return any(_sniff_file(f) for f in files[:_SNIFF_FILES])
