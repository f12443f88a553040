"""Safe reader for PyTorch NCCL Flight Recorder (FR) dumps.

A dump is what ``ProcessGroupNCCL`` writes on a timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``): one file per rank,
named ``<prefix><rank>`` (``_dump_12``), holding a pickled dict (or JSON, from ``_dump_nccl_trace_json``)::

    {"version": "2.9",
     "pg_config": {"74": {"name": "74", "desc": "EXPERT_MODEL_PARALLEL_GROUP", "ranks": "[12, 13, 14, 15]"}, ...},
     "pg_status": {"11": {"last_enqueued_collective": 20536, "last_completed_collective": 20529, ...}, ...},
     "entries": [{"record_id": 90084, "pg_id": 11, "process_group": ("74", "EXPERT_MODEL_PARALLEL_GROUP"),
                  "collective_seq_id": 20530, "p2p_seq_id": 0, "is_p2p": False, "op_id": 20530,
                  "profiling_name": "nccl:all_to_all", "state": "scheduled", "time_created_ns": ...,
                  "input_sizes": [[4096, 5120]], "input_dtypes": ["BFloat16"], ...}, ...],
     "nccl_version": "2.27.3"}

Things about the format that are easy to get wrong (seen in real 2.9 dumps):

- There is no rank field. This reader takes the rank from the content when the content pins it (a ``rank``
  key if a producer adds one, else the one rank common to every group in ``pg_config``: a process only
  records the groups it belongs to), else from the file name's trailing number, and refuses a file whose
  content and name disagree. It never defaults to 0.
- ``pg_config`` is keyed by the group *name* (a counter shared by all ranks); ``pg_status`` is keyed by the
  local ``pg_id`` (a per-process counter). Entries carry both, which anchors the mapping; for groups without
  entries both counters grow in creation order, so the sorted names map onto the sorted ids.
- ``pg_status`` counts collectives and point-to-point work in one field: ``last_enqueued_collective`` is the
  sequence number of the last enqueued work of *either* kind (``collective_seq_id`` or ``p2p_seq_id``).
- ``ranks`` in ``pg_config`` is a string (``"[12, 13]"``); send/recv names use group-local ranks
  (``nccl:send 3->0``).

Loading never imports anything: :class:`SafeUnpickler` refuses every global. A real dump pickles only dicts,
lists, tuples, strings, numbers, booleans and None, so the allow-list is empty.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprof.errors import BadInputError, RankError

__all__ = [
    "FREntry",
    "FRDump",
    "DumpSet",
    "SafeUnpickler",
    "read_dump_object",
    "parse_dump",
    "load_dump",
    "load_dump_dir",
    "is_flight_recorder_dir",
    "rank_from_filename",
]

#: File suffixes that are never dumps (logs, notes, reference answers kept beside the dumps).
SKIPPED_SUFFIXES = frozenset({".log", ".txt", ".md", ".rst", ".csv", ".yaml", ".yml", ".py", ".sh", ".html"})
#: The major format version this reader understands (PyTorch writes 2.0 ... 2.10 as of torch 2.9).
SUPPORTED_MAJOR = "2"
_PICKLE_PROTOCOLS = frozenset({2, 3, 4, 5})
_SNIFF_BYTES = 65536


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


@dataclass(frozen=True)
class FREntry:
    """One record of the FR ring buffer, normalised (JSON lists and pickle tuples alike)."""

    record_id: int
    pg_name: str
    pg_desc: str
    pg_id: int | None
    collective_seq_id: int
    p2p_seq_id: int
    is_p2p: bool
    op: str
    state: str
    time_created_ns: int | None
    input_sizes: list[Any]
    input_dtypes: list[str]
    output_sizes: list[Any]

    @property
    def seq(self) -> int:
        """The sequence number this entry has in its stream (``p2p_seq_id`` for send/recv)."""
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id

    @property
    def completed(self) -> bool:
        return self.state == "completed"


@dataclass(frozen=True)
class PGStatus:
    last_enqueued: int
    last_completed: int
    last_started: int | None


@dataclass(frozen=True)
class FRDump:
    """One rank's dump. ``pg_status`` is keyed by group *name* (mapped from the local ``pg_id``)."""

    path: str
    rank: int
    rank_source: str
    version: str
    pg_ranks: dict[str, tuple[int, ...]]
    pg_desc: dict[str, str]
    pg_status: dict[str, PGStatus]
    entries: tuple[FREntry, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class DumpSet:
    """The dumps of a directory: loaded ones by rank, and the files that failed (each a BadInputError)."""

    path: str
    dumps: dict[int, FRDump]
    failures: list[BadInputError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- reading


def rank_from_filename(path: str | Path) -> int | None:
    """The trailing number of a file name, or None: ``_dump_12`` -> 12, ``rank3.json`` -> 3, ``x`` -> None."""
    p = Path(path)
    m = re.search(r"(\d+)$", p.name) or re.search(r"(\d+)$", p.stem)
    return int(m.group(1)) if m else None


def _looks_like_pickle(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS


def read_dump_object(path: str | Path) -> Any:
    """Read a dump file into plain Python objects, without importing anything.

    Pickle is detected by its protocol header (``\\x80`` + protocol 2..5), anything else is parsed as JSON.
    Raises BadInputError naming the file (and the rank its name implies) for unreadable input.
    """
    rank = rank_from_filename(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read the file: {exc.strerror or exc}", path=path, rank=rank) from exc
    if _looks_like_pickle(data[:2]):
        try:
            return SafeUnpickler(io.BytesIO(data), path=path, rank=rank).load()
        except BadInputError:
            raise
        except Exception as exc:  # a damaged pickle can raise almost anything; name it, don't crash
            raise BadInputError(
                f"not a readable Flight Recorder pickle (truncated or damaged): {type(exc).__name__}: {exc}",
                path=path,
                rank=rank,
            ) from exc
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadInputError(
            "not a Flight Recorder dump: neither a pickle (no protocol header) nor JSON", path=path, rank=rank
        ) from exc


def _parse_ranks(value: Any) -> tuple[int, ...]:
    """``"[0, 1]"`` (pickle/JSON string) or ``[0, 1]`` -> ``(0, 1)``; anything else raises ValueError."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(r, int) and not isinstance(r, bool) for r in value
    ):
        raise ValueError(f"ranks must be a list of integers, got {value!r}")
    return tuple(value)


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return value


def _parse_entry(raw: Any, index: int) -> FREntry:
    if not isinstance(raw, Mapping):
        raise ValueError(f"entry {index} is a {type(raw).__name__}, not a dict")
    try:
        pg = raw["process_group"]
        if not isinstance(pg, (list, tuple)) or len(pg) < 1:
            raise ValueError(f"entry {index}: process_group must be [name, desc], got {pg!r}")
        op = str(raw["profiling_name"])
        is_p2p = raw.get("is_p2p")
        if is_p2p is None:
            is_p2p = bool(re.match(r"nccl:(send|recv)\b", op))
        pg_id = raw.get("pg_id")
        return FREntry(
            record_id=_as_int(raw.get("record_id", index), "record_id"),
            pg_name=str(pg[0]),
            pg_desc=str(pg[1]) if len(pg) > 1 else "",
            pg_id=None if pg_id is None else _as_int(pg_id, "pg_id"),
            collective_seq_id=_as_int(raw["collective_seq_id"], "collective_seq_id"),
            p2p_seq_id=_as_int(raw.get("p2p_seq_id", 0), "p2p_seq_id"),
            is_p2p=bool(is_p2p),
            op=op,
            state=str(raw["state"]),
            time_created_ns=raw.get("time_created_ns"),
            input_sizes=list(raw.get("input_sizes") or []),
            input_dtypes=list(raw.get("input_dtypes") or []),
            output_sizes=list(raw.get("output_sizes") or []),
        )
    except KeyError as exc:
        raise ValueError(f"entry {index} lacks the field {exc.args[0]!r}") from exc


def _parse_status(raw: Any) -> dict[str, PGStatus]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"pg_status must be a dict, got {type(raw).__name__}")
    out = {}
    for key, st in raw.items():
        if not isinstance(st, Mapping):
            raise ValueError(f"pg_status[{key!r}] must be a dict")
        started = st.get("last_started_collective")
        out[str(key)] = PGStatus(
            last_enqueued=_as_int(st["last_enqueued_collective"], "last_enqueued_collective"),
            last_completed=_as_int(st["last_completed_collective"], "last_completed_collective"),
            last_started=None if started is None else _as_int(started, "last_started_collective"),
        )
    return out


def map_status_to_names(
    status_by_id: Mapping[str, PGStatus], pg_names: list[str], entries: tuple[FREntry, ...]
) -> tuple[dict[str, PGStatus], list[str]]:
    """Key ``pg_status`` (by local ``pg_id``) by group name.

    Rule: an entry's (process_group name, pg_id) pair anchors a name to an id. Groups without entries are
    mapped by creation order: group names and local ids both grow as groups are created, so when
    ``pg_config`` and ``pg_status`` list the same number of groups, the i-th smallest name maps to the i-th
    smallest id. The order mapping is used only where it agrees with every anchor.

    Example: names ``["0", "7", "41"]``, ids ``["0", "1", "5"]``, an entry of group "41" with pg_id 5
    -> ``{"0": status["0"], "7": status["1"], "41": status["5"]}``.

    Returns the mapping and warnings for groups left unmapped.
    """
    anchors = {e.pg_name: str(e.pg_id) for e in entries if e.pg_id is not None}
    mapping = {name: pid for name, pid in anchors.items() if pid in status_by_id}
    warnings: list[str] = []
    numeric = all(n.isdigit() for n in pg_names) and all(k.lstrip("-").isdigit() for k in status_by_id)
    if numeric and len(pg_names) == len(status_by_id):
        by_order = dict(zip(sorted(pg_names, key=int), sorted(status_by_id, key=int), strict=True))
        if all(by_order.get(n) == pid for n, pid in anchors.items()):
            mapping = by_order
        else:
            warnings.append(
                "pg_status ids do not follow group creation order; only groups with entries have status"
            )
    elif status_by_id:
        unmapped = sorted(set(pg_names) - set(mapping))
        if unmapped:
            warnings.append(
                f"no pg_status for groups {', '.join(unmapped)} (cannot map local pg ids to names)"
            )
    return {name: status_by_id[pid] for name, pid in mapping.items()}, warnings


def _rank_from_content(obj: Mapping[str, Any], pg_ranks: Mapping[str, tuple[int, ...]]) -> int | None:
    """The rank the content pins: a ``rank`` key, else the single rank common to all recorded groups."""
    rank = obj.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank
    common: set[int] | None = None
    for ranks in pg_ranks.values():
        common = set(ranks) if common is None else common & set(ranks)
    if common is not None and len(common) == 1:
        return next(iter(common))
    return None


def resolve_rank(content_rank: int | None, name_rank: int | None, path: str | Path) -> tuple[int, str]:
    """Pick the rank of a dump: content first, then file name; refuse a disagreement or no rank at all."""
    if content_rank is not None and name_rank is not None and content_rank != name_rank:
        raise RankError(
            f"the dump's content says rank {content_rank} but the file name says {name_rank}; "
            "rename the file or check that it was not copied from another rank",
            path=path,
            rank=name_rank,
        )
    if content_rank is not None:
        return content_rank, "content"
    if name_rank is not None:
        return name_rank, "file name"
    raise RankError(
        "cannot tell which rank wrote this dump: the content does not pin it and the file name has no "
        "trailing rank number (name it like _dump_<rank>)",
        path=path,
    )


def parse_dump(obj: Any, path: str | Path) -> FRDump:
    """Validate a loaded dump object and normalise it into an :class:`FRDump`. Raises BadInputError."""
    name_rank = rank_from_filename(path)
    if not isinstance(obj, Mapping):
        raise BadInputError(
            f"not a Flight Recorder dump: top level is a {type(obj).__name__}, expected a dict",
            path=path,
            rank=name_rank,
        )
    missing = [k for k in ("version", "pg_config") if k not in obj]
    if missing:
        raise BadInputError(
            f"not a Flight Recorder dump: no {', '.join(missing)} key (found {', '.join(map(str, list(obj)[:8]))})",
            path=path,
            rank=name_rank,
        )
    version = str(obj["version"])
    if version.split(".")[0] != SUPPORTED_MAJOR:
        raise BadInputError(
            f"Flight Recorder format version {version} is not supported (this reader understands {SUPPORTED_MAJOR}.x)",
            path=path,
            rank=name_rank,
        )
    try:
        pg_config = obj["pg_config"]
        if not isinstance(pg_config, Mapping):
            raise ValueError("pg_config must be a dict")
        pg_ranks = {str(k): _parse_ranks(v.get("ranks", [])) for k, v in pg_config.items()}
        pg_desc = {str(k): str(v.get("desc", "")) for k, v in pg_config.items()}
        raw_entries = obj.get("entries", [])
        if not isinstance(raw_entries, (list, tuple)):
            raise ValueError("entries must be a list")
        entries = tuple(_parse_entry(e, i) for i, e in enumerate(raw_entries))
        status_by_id = _parse_status(obj.get("pg_status"))
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise BadInputError(f"malformed Flight Recorder dump: {exc}", path=path, rank=name_rank) from exc
    rank, source = resolve_rank(_rank_from_content(obj, pg_ranks), name_rank, path)
    warnings: list[str] = []
    if "entries" not in obj:
        warnings.append("the dump has no entries (written without collectives?)")
    for e in entries:
        if e.pg_name not in pg_ranks:
            warnings.append(f"entry {e.record_id} names group {e.pg_name!r}, absent from pg_config")
            break
    pg_status, status_warnings = map_status_to_names(status_by_id, list(pg_ranks), entries)
    return FRDump(
        path=str(path),
        rank=rank,
        rank_source=source,
        version=version,
        pg_ranks=pg_ranks,
        pg_desc=pg_desc,
        pg_status=pg_status,
        entries=entries,
        warnings=tuple(warnings + status_warnings),
    )


def load_dump(path: str | Path) -> FRDump:
    """Read and validate one dump file (pickle or JSON). Raises BadInputError naming the file and rank."""
    return parse_dump(read_dump_object(path), path)


def _candidate_files(directory: Path) -> tuple[list[Path], list[str]]:
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
    loaded: list[FRDump] = []
    failures: list[BadInputError] = []
    for f in files:
        try:
            loaded.append(load_dump(f))
        except BadInputError as exc:
            failures.append(exc)
    by_rank: dict[int, list[FRDump]] = {}
    for d in loaded:
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
    return DumpSet(path=str(directory), dumps=dumps, failures=failures, skipped=skipped)


# --------------------------------------------------------------------------------------------- sniffing


def _sniff_file(p: Path) -> bool:
    try:
        with p.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return False
    if _looks_like_pickle(head):
        return True
    if p.suffix.lower() == ".json":
        text = head.decode("utf-8", errors="ignore")
        return '"pg_config"' in text and '"traceEvents"' not in text
    return False


def is_flight_recorder_dir(path: str | Path) -> bool:
    """Cheap check that a directory holds FR dumps, so a CLI can route it to hang diagnosis.

    True when some file starts with a pickle protocol header, or is a JSON file mentioning ``pg_config``
    (and not ``traceEvents``, which marks a Kineto trace), or is named ``*_dump_<n>``. Reads at most 64 KiB
    of at most 64 files; never unpickles anything.
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
    return any(_sniff_file(f) for f in files[:64])
