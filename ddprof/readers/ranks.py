"""Which rank wrote a file: a Kineto trace or a Flight Recorder dump. Never a silent default.

* A trace (:func:`trace_rank`): an explicit ``--rank FILE=N`` mapping, then the rank the trace says
  (Kineto's ``distributedInfo.rank``), then a clear rank number in the file or folder name
  (``rank-3.json``, ``rank=00003/``, ``worker7_step_12.json``); disagreements are warnings, the more
  trusted claim wins.
* A file of several ranks, an Nsight Systems export of several processes (:func:`member_ranks`): its
  processes in the file's order are ranks N, N+1, ..., N from ``--rank FILE=N``, else 0 (with a warning).
* A dump (:func:`dump_rank`): PyTorch names dump files prefix + rank (``_dump_12``,
  ``fr_trace_rank_3``), and the content may pin the rank too; content and name must agree, a
  disagreement is refused (a file copied from another rank).

A file with no claim at all is refused, with the fix in the message.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ddprof.errors import RankError
from ddprof.vocabulary.fields import as_int

_NAME_PATTERNS = (
    re.compile(r"(?:^|[^a-z0-9])rank[-_=]?(\d+)(?![0-9])", re.IGNORECASE),
    re.compile(r"(?:^|[^a-z0-9])worker[-_]?(\d+)(?![0-9])", re.IGNORECASE),
)


def rank_from_name(path: Path) -> int | None:
    """The rank number a file name (or, failing that, its folder name) states unambiguously.

    >>> rank_from_name(Path("run/worker7_step_12.1694128201553.pt.trace.json.gz"))
    7
    >>> rank_from_name(Path("raw/rank-00003/trace.json.gz"))
    3
    >>> rank_from_name(Path("trace.json")) is None
    True
    """
    for part in (path.name, path.parent.name):
        found = {int(m.group(1)) for pat in _NAME_PATTERNS for m in pat.finditer(part)}
        if len(found) == 1:
            return found.pop()
        if len(found) > 1:
            return None
    return None


def lookup_map(path: Path, rank_map: dict[str, int] | None) -> int | None:
    """Rank given by the user for this file: keys match the full path, the name, or a path suffix."""
    if not rank_map:
        return None
    full = str(path.resolve())
    for key, rank in rank_map.items():
        if key in (str(path), path.name, full) or full.endswith("/" + key.lstrip("./")):
            return int(rank)
    return None


def trace_rank(path: Path, claimed: Any, rank_map: dict[str, int] | None,
               claims_in: str = "distributedInfo", lone: bool = False) -> tuple[int, list[str]]:
    """(rank, warnings) for one trace, or :class:`RankError` saying how to fix it. ``claimed``: the rank
    the trace says (unchecked; not a non-negative integer is no claim), kept in its ``claims_in``.
    ``lone``: the trace is the only one given (a single-process job's): with no rank anywhere it is rank
    0, said in a warning; among several, a trace without a rank is refused (which rank it is cannot be
    guessed, and two guessed alike would merge)."""
    warnings: list[str] = []
    field = f"{claims_in}.rank"
    mapped = lookup_map(path, rank_map)
    info_rank = as_int(claimed)
    if info_rank is not None and info_rank < 0:
        info_rank = None
    named = rank_from_name(path)
    if mapped is not None:
        if info_rank is not None and info_rank != mapped:
            warnings.append(f"--rank maps this file to rank {mapped} but its {claims_in} says {info_rank}")
        return mapped, warnings
    if info_rank is not None:
        if named is not None and named != info_rank:
            warnings.append(f"file name suggests rank {named} but {field} is {info_rank}; using {info_rank}")
        return info_rank, warnings
    if named is not None:
        warnings.append(f"no {field} in the trace; rank {named} taken from the file name")
        return named, warnings
    if lone:
        warnings.append(f"no {field} in the trace and no rank number in its name: rank 0, the only trace given "
                        f"(--rank {path.name}=N gives another)")
        return 0, warnings
    raise RankError(
        f"cannot tell which rank this trace belongs to: it has no {field} and its name has no "
        f"rank number. Give it one with --rank {path.name}=N (or rename it rank-N.json)",
        path=path,
    )


def rank_from_dump_name(path: str | Path) -> int | None:
    """The trailing number of a dump's file name, or None: ``_dump_12`` -> 12, ``rank3.json`` -> 3,
    ``x`` -> None."""
    p = Path(path)
    m = re.search(r"(\d+)$", p.name) or re.search(r"(\d+)$", p.stem)
    return int(m.group(1)) if m else None


def dump_rank(content_rank: int | None, name_rank: int | None, path: str | Path) -> tuple[int, str]:
    """(rank, where it came from) of a dump: the content first, then the file name; refuse a
    disagreement or no rank at all."""
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


def member_ranks(path: Path, claimed: list[Any], rank_map: dict[str, int] | None,
                 claims_in: str) -> tuple[list[int], list[str]]:
    """(ranks, warnings) of the processes of one file that holds several ranks (an Nsight Systems export),
    given in the file's order (:mod:`ddprof.readers.nsys.export`: by CUDA device). One process is a trace
    of its own (:func:`trace_rank`), and, with no claim at all, rank 0, said in a warning. Several are ranks
    N to N+n-1: N from ``--rank FILE=N``, else 0, said in a warning (their own claims, which one export of
    several processes does not record, are not read)."""
    if len(claimed) == 1:
        try:
            rank, warnings = trace_rank(path, claimed[0], rank_map, claims_in)
        except RankError:
            return [0], [f"no rank recorded for the export's one process and none in its name: rank 0 (give "
                         f"another with --rank {path.name}=N)"]
        return [rank], warnings
    first = lookup_map(path, rank_map)
    if first is not None:
        return [first + i for i in range(len(claimed))], []
    return list(range(len(claimed))), [
        f"no rank recorded for the export's {len(claimed)} processes: ranks 0-{len(claimed) - 1} in the order "
        f"of their CUDA devices (another node's export takes its first rank with --rank {path.name}=N)"]
