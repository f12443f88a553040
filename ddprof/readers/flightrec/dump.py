"""The dump format: one loaded Flight Recorder object (format 2.x) -> :class:`~ddprof.readers.flightrec.records.FRDump`.

Validates the top level (a dict with ``version`` 2.x and ``pg_config``), parses the groups, entries and
``pg_status``, works out which rank wrote the dump, and keys ``pg_status`` by group name:

- Rank: a dump has no rank field. The content pins it when it has a ``rank`` key (a producer may add one)
  or when exactly one rank is common to every group in ``pg_config`` (a process only records the groups it
  belongs to); else the file name's trailing number does. Content and name must agree, and there is no
  default rank (:func:`ddprof.readers.ranks.dump_rank`).
- ``pg_config`` is keyed by the group *name* (a counter shared by all ranks), ``pg_status`` by the local
  ``pg_id`` (a per-process counter); :func:`map_status_to_names` joins the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddprof.errors import BadInputError
from ddprof.readers.flightrec.records import FRDump, FREntry, PGStatus, parse_entry, parse_ranks, parse_status
from ddprof.readers.ranks import dump_rank, rank_from_dump_name
from ddprof.vocabulary.fields import brief, text_field

__all__ = ["SUPPORTED_MAJOR", "parse_dump", "map_status_to_names"]

#: The major format version this reader understands (PyTorch writes 2.0 ... 2.10 as of torch 2.9).
SUPPORTED_MAJOR = "2"


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


def _nccl_version(value: Any) -> str | None:
    """The dump's ``nccl_version`` as text ("2.21.5"), or None when absent or not a string or number."""
    try:
        return text_field(value, "nccl_version") if value else None
    except ValueError:
        return None


def _parse_entries(raw: list[Any] | tuple[Any, ...]) -> tuple[tuple[FREntry, ...], int]:
    """The entries, each parsed (:func:`~ddprof.readers.flightrec.records.parse_entry`), and how many were
    left out as repeats. An entry that is an earlier one again (one object a pickle refers to twice) raises
    ValueError: no Flight Recorder writes that, and through such references a file of a megabyte held half
    a million entries to parse. An entry that repeats an earlier entry's ``record_id`` (the same entry
    written out again: a Flight Recorder numbers its entries once each) is read once: the repeats are
    counted, never parsed."""
    seen: set[int] = set()
    record_ids: set[int] = set()
    out = []
    repeats = 0
    for i, e in enumerate(raw):
        if isinstance(e, Mapping):
            if id(e) in seen:
                raise ValueError(f"entry {i} is an earlier entry again (one object the file refers to twice)")
            seen.add(id(e))
            rid = e.get("record_id")
            if isinstance(rid, int) and not isinstance(rid, bool):
                if rid in record_ids:
                    repeats += 1
                    continue
                record_ids.add(rid)
        out.append(parse_entry(e, i))
    return tuple(out), repeats


def _parse_groups(pg_config: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """``pg_config`` (group name -> ``{"ranks": ..., "desc": ...}``) -> (ranks by group, description by
    group); raises ValueError naming the group and the field that is not of that shape."""
    if not isinstance(pg_config, Mapping):
        raise ValueError(f"pg_config is a {type(pg_config).__name__}, expected an object of groups")
    ranks, desc = {}, {}
    for k, v in pg_config.items():
        name = text_field(k, "a pg_config key")
        if not isinstance(v, Mapping):
            raise ValueError(f"pg_config[{brief(k)}] is a {type(v).__name__} ({brief(v)}), expected an object "
                             "with the group's ranks and desc")
        ranks[name] = parse_ranks(v.get("ranks", []), f"pg_config[{brief(k)}].ranks")
        desc[name] = text_field(v.get("desc", ""), f"pg_config[{brief(k)}].desc")
    return ranks, desc


def parse_dump(obj: Any, path: str | Path) -> FRDump:
    """Validate a loaded dump object and normalise it into an :class:`FRDump`. Raises BadInputError."""
    name_rank = rank_from_dump_name(path)

    def bad(message: str) -> BadInputError:
        return BadInputError(message, path=path, rank=name_rank)

    if not isinstance(obj, Mapping):
        raise bad(f"not a Flight Recorder dump: top level is a {type(obj).__name__}, expected a dict")
    missing = [k for k in ("version", "pg_config") if k not in obj]
    if missing:
        found = ", ".join(map(brief, list(obj)[:8]))
        raise bad(f"not a Flight Recorder dump: no {', '.join(missing)} key (found {found})")
    try:
        version = text_field(obj["version"], "version")
    except ValueError as exc:
        raise bad(f"malformed Flight Recorder dump: {exc}") from exc
    if version.split(".")[0] != SUPPORTED_MAJOR:
        raise bad(
            f"Flight Recorder format version {version} is not supported "
            f"(this reader understands {SUPPORTED_MAJOR}.x)"
        )
    part = "pg_config"  # the part being read, named when something unforeseen in it fails
    try:
        pg_ranks, pg_desc = _parse_groups(obj["pg_config"])
        part = "entries"
        raw_entries = obj.get("entries", [])
        if not isinstance(raw_entries, (list, tuple)):
            raise ValueError(f"entries is a {type(raw_entries).__name__}, expected a list of objects")
        entries, repeats = _parse_entries(raw_entries)
        part = "pg_status"
        status_by_id = parse_status(obj.get("pg_status"))
    except ValueError as exc:  # the parsers' own sentences (records.py): which field, what was expected
        raise bad(f"malformed Flight Recorder dump: {exc}") from exc
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise bad(f"malformed Flight Recorder dump: its {part} is not of the shape a Flight Recorder writes "
                  f"(a value of an unexpected type in it)") from exc
    rank, source = dump_rank(_rank_from_content(obj, pg_ranks), name_rank, path)
    warnings: list[str] = []
    if "entries" not in obj:
        warnings.append("the dump has no entries (written without collectives?)")
    if repeats:
        warnings.append(f"{repeats} entries repeat an earlier entry's record_id: each entry read once")
    stray = next((e for e in entries if e.pg_name not in pg_ranks), None)
    if stray is not None:
        warnings.append(f"entry {stray.record_id} names group {stray.pg_name!r}, absent from pg_config")
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
        nccl_version=_nccl_version(obj.get("nccl_version")),
    )
