"""Per process group, the collective the group hangs in, and which member ranks are to blame.

The collective reported is the first one that some member ranks never entered, or, when every member
entered, the first one some member never completed. A collective completed on any member was entered by
every member (no rank finishes an all_reduce alone), so such a collective is never "missing" anywhere, even
where a rank's own record still says ``scheduled`` (a rank with a GPU fault stops noticing completions). A
rank whose newest entries are past k entered k, even if its ring buffer evicted k's record: eviction never
makes a rank "missing". The ranks' states come from :mod:`~ddprof.analyses.hang.views`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ddprof.analyses.hang.verdicts import record_verdict
from ddprof.analyses.hang.views import COMPLETED, NO_RECORD, NOT_ENTERED, Group, RankView, op_names, running

__all__ = ["candidate_seqs", "first_missing", "first_incomplete", "collective_finding"]


def candidate_seqs(views: Iterable[RankView]) -> list[int]:
    """Sequence numbers worth checking: every unfinished entry, and each rank's next one after C.

    Example: rank 0 entries {5: scheduled, 6: scheduled}, C=4; rank 1 no entries, E=C=4 -> [5, 6].
    """
    seqs: set[int] = set()
    for v in views:
        seqs.update(k for k, e in v.entries.items() if not e.completed)
        if v.entered_upto is not None and v.completed_upto is not None and v.entered_upto > v.completed_upto:
            seqs.add(v.completed_upto + 1)
    return sorted(seqs)


def first_missing(views: list[RankView], seqs: list[int]) -> int | None:
    """First collective that some member entered and some member provably never entered.

    A collective completed on any member is skipped (everyone must have entered it).
    Example: ranks 12, 13 with E=20536 / 20538 and C=20529 / 20536, rank 13 waiting in 20537
    -> 20537 (rank 12 never entered it). 20530..20536 are skipped: rank 13 completed them.
    """
    for k in seqs:
        states = [v.state_at(k) for v in views]
        if COMPLETED in states:
            continue
        if NOT_ENTERED in states and any(running(s) for s in states):
            return k
    return None


def first_incomplete(views: list[RankView], seqs: list[int]) -> int | None:
    """First collective that some member entered and has not completed (whatever the others did).

    Example: rank 14 still shows 42806 "scheduled", rank 15 completed it -> 42806.
    """
    for k in seqs:
        if any(running(v.state_at(k)) for v in views):
            return k
    return None


def _ranks_where(views: list[RankView], k: int, test: Callable[[str], bool]) -> list[int]:
    return sorted(v.rank for v in views if test(v.state_at(k)))


def _op_at(views: list[RankView], k: int) -> str:
    names = Counter(v.entries[k].op for v in views if k in v.entries)
    return names.most_common(1)[0][0] if names else "unknown"


def _per_rank(views: list[RankView], k: int) -> list[dict[str, Any]]:
    out = []
    for v in views:
        e = v.entries.get(k)
        out.append(
            {
                "rank": v.rank,
                "state": v.state_at(k),
                "entered_upto": v.entered_upto,
                "completed_upto": v.completed_upto,
                "input_sizes": e.input_sizes if e else None,
                "input_dtypes": e.input_dtypes if e else None,
                "time_created_ns": e.time_created_ns if e else None,
            }
        )
    return out


def _summary(views: list[RankView], k: int) -> dict[str, Any]:
    return {
        "index": k,
        **op_names(_op_at(views, k)),
        "not_completed_ranks": _ranks_where(views, k, running),
        "completed_ranks": _ranks_where(views, k, lambda s: s == COMPLETED),
    }


def collective_finding(group: Group, views: list[RankView]) -> dict[str, Any] | None:
    """The record for one group's collectives, or None when nothing in it is unfinished.

    Index: the first collective some members never entered; failing that, the first one some member
    entered and never completed. ``first_incomplete`` adds the earliest unfinished collective when it
    comes before (a rank that stopped completing what its peers completed).
    """
    seqs = candidate_seqs(views)
    k_missing = first_missing(views, seqs)
    k_incomplete = first_incomplete(views, seqs)
    k = k_missing if k_missing is not None else k_incomplete
    if k is None:
        return None
    summary = _summary(views, k)
    waiting_since = [t for v in views if k in v.entries and (t := v.entries[k].time_created_ns) is not None]
    record = {
        **group.header(),
        "kind": "collective",
        "op": summary["op"],
        "op_name": summary["op_name"],
        "index": k,
        "seq_id": k,
        "status": "missing" if k_missing is not None else "not_completed",
        "missing_ranks": _ranks_where(views, k, lambda s: s == NOT_ENTERED),
        "not_completed_ranks": summary["not_completed_ranks"],
        "completed_ranks": summary["completed_ranks"],
        "unknown_ranks": _ranks_where(views, k, lambda s: s in NO_RECORD),
        "waiting_since_ns": min(waiting_since, default=None),
        "per_rank": _per_rank(views, k),
        "first_incomplete": _summary(views, k_incomplete) if k_incomplete is not None else None,
    }
    record["verdict"] = record_verdict(record)
    return record
