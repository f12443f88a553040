"""The records of a Flight Recorder dump, and the parsing of one raw entry or status table into them.

:class:`FREntry` is one record of the FR ring buffer, :class:`PGStatus` one group's counters from
``pg_status``, :class:`FRDump` one rank's whole dump. The parsers take the plain objects a pickle or JSON
file holds (lists and tuples alike) and raise ValueError on anything malformed; :func:`parse_dump
<ddprof.readers.flightrec.dump.parse_dump>` turns that into a BadInputError naming the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddprof.vocabulary.fields import as_int, brief, int_field, text_field

__all__ = ["FREntry", "PGStatus", "FRDump", "parse_entry", "parse_status", "parse_ranks"]


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
    nccl_version: str | None = None  # the NCCL the job ran with, where the dump says


def parse_ranks(value: Any, what: str = "ranks") -> tuple[int, ...]:
    """``"[0, 1]"`` (pickle/JSON string) or ``[0, 1]`` -> ``(0, 1)``; anything else raises ValueError naming
    ``what`` (the field) and what was expected."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"{what} is the text {brief(value)}, expected a list of integers such as "
                             "[0, 1] (or that list written as text)") from None
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(r, int) and not isinstance(r, bool) for r in value
    ):
        raise ValueError(f"{what} must be a list of integers, got {brief(value)}")
    return tuple(value)


#: Bounds on an entry's tensor list: a collective of more tensors or dimensions than this is no real one.
MAX_TENSORS, MAX_DIMS = 4096, 64


def parse_sizes(value: Any) -> list[list[int]]:
    """An entry's ``input_sizes``/``output_sizes``: one list of integer dimensions per tensor,
    ``[[4096, 5120]]``. What is not of that shape, or past :data:`MAX_TENSORS`/:data:`MAX_DIMS`, is
    unknown (``[]``): these fields only describe the stuck collective, and a crafted list must not reach the
    report (lists shared inside a pickle would spell out as 2**depth items)."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_TENSORS:
        return []
    out = []
    for dims in value:
        if not isinstance(dims, (list, tuple)) or len(dims) > MAX_DIMS:
            return []
        ints = [d for d in dims if isinstance(d, int) and not isinstance(d, bool)]
        if len(ints) != len(dims):
            return []
        out.append(ints)
    return out


def parse_dtypes(value: Any) -> list[str]:
    """An entry's ``input_dtypes``: one name per tensor (``["BFloat16"]``); anything else is unknown (``[]``)."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_TENSORS or not all(isinstance(v, str) for v in value):
        return []
    return [v[:64] for v in value]


def parse_entry(raw: Any, index: int) -> FREntry:
    """One raw ``entries`` item (the ``index``-th) -> :class:`FREntry`; raises ValueError when malformed.

    ``is_p2p`` is taken from the op name (``nccl:send``/``nccl:recv``) when the dump does not say.
    A ``time_created_ns`` that is no int64 (a list, text, a fraction) is unknown (None): it only dates the
    wait, and any other type would reach the comparisons of times (a list against an int, or two lists
    shared through a pickle's memo compared item by item for 2**depth steps).
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"entry {index} is a {type(raw).__name__} ({brief(raw)}), expected an object with the "
                         "collective's fields (profiling_name, process_group, state, ...)")
    try:
        pg = raw["process_group"]
        if not isinstance(pg, (list, tuple)) or len(pg) < 1:
            raise ValueError(f"entry {index}: process_group must be [name, desc], got {brief(pg)}")
        op = text_field(raw["profiling_name"], f"entry {index}: profiling_name")
        is_p2p = raw.get("is_p2p")
        if is_p2p is None:
            is_p2p = bool(re.match(r"nccl:(send|recv)\b", op))
        pg_id = raw.get("pg_id")
        return FREntry(
            record_id=int_field(raw.get("record_id", index), "record_id"),
            pg_name=text_field(pg[0], f"entry {index}: process group name"),
            pg_desc=text_field(pg[1], f"entry {index}: process group description") if len(pg) > 1 else "",
            pg_id=None if pg_id is None else int_field(pg_id, "pg_id"),
            collective_seq_id=int_field(raw["collective_seq_id"], "collective_seq_id"),
            p2p_seq_id=int_field(raw.get("p2p_seq_id", 0), "p2p_seq_id"),
            is_p2p=bool(is_p2p),
            op=op,
            state=text_field(raw["state"], f"entry {index}: state"),
            time_created_ns=as_int(raw.get("time_created_ns")),
            input_sizes=parse_sizes(raw.get("input_sizes")),
            input_dtypes=parse_dtypes(raw.get("input_dtypes")),
            output_sizes=parse_sizes(raw.get("output_sizes")),
        )
    except KeyError as exc:
        raise ValueError(f"entry {index} lacks the field {brief(exc.args[0])}") from exc


def parse_status(raw: Any) -> dict[str, PGStatus]:
    """The raw ``pg_status`` table (keyed by local ``pg_id``; None when absent) -> {pg_id: PGStatus}."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"pg_status must be a dict, got {type(raw).__name__}")
    out = {}
    for key, st in raw.items():
        if not isinstance(st, Mapping):
            raise ValueError(f"pg_status[{brief(key)}] is a {type(st).__name__}, expected an object of counters")
        missing = [f for f in ("last_enqueued_collective", "last_completed_collective") if f not in st]
        if missing:
            raise ValueError(f"pg_status[{brief(key)}] lacks the field {missing[0]} (an integer: the group's "
                             "last collective in that state)")
        started = st.get("last_started_collective")
        out[text_field(key, "a pg_status key")] = PGStatus(
            last_enqueued=int_field(st["last_enqueued_collective"], "last_enqueued_collective"),
            last_completed=int_field(st["last_completed_collective"], "last_completed_collective"),
            last_started=None if started is None else int_field(started, "last_started_collective"),
        )
    return out
