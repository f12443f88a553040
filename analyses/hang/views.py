"""What each rank's Flight Recorder dump says about one process group's collectives.

A :class:`Group` is a process group (its name from ``pg_config`` plus its member ranks); a
:class:`RankView` is one member's evidence for the group's collective sequence (``collective_seq_id``, the
same number for the same collective on every member):

- *entered up to* E: the highest sequence number the rank enqueued: its newest entry of the group, or
  ``pg_status.last_enqueued_collective`` when that counter is known to count collectives (see below).
- *completed up to* C: ``pg_status.last_completed_collective`` (same condition), or the newest entry in state
  ``completed``. Work on one group runs in order, so C >= k means collective k completed.
- ``pg_status`` counts collectives and send/recv in one field. It is read as a collective number only for
  groups with no send/recv entry in any dump, or when the rank's newest entry of the group is a collective.

From these, :meth:`RankView.state_at` gives the rank's state at any collective.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddprof.readers.flightrec.records import FRDump, FREntry
from ddprof.vocabulary.collective_ops import profiling_op

#: Per-rank states at a collective. "scheduled"/"started" come from the rank's own entry.
ENTERED = "entered"  # no record (evicted), but the rank's frontier is past it
NOT_ENTERED = "not_entered"
COMPLETED = "completed"
UNKNOWN = "unknown"  # the rank's dump says nothing about this group
NO_DUMP = "no_dump"
FAILED = "failed_dump"
#: States that say nothing is known of the rank at a collective.
NO_RECORD = frozenset({UNKNOWN, NO_DUMP, FAILED})
_NOT_RUNNING = NO_RECORD | {COMPLETED, NOT_ENTERED}


def op_names(raw: str) -> dict[str, str]:
    """``op`` (the normalised name other report sections use: :func:`ddprof.vocabulary.collective_ops.profiling_op`)
    and ``op_name`` (Flight Recorder's own): ``nccl:send 1->2`` -> ``{"op": "send", "op_name": "nccl:send 1->2"}``."""
    return {"op": profiling_op(raw), "op_name": raw}


def running(state: str) -> bool:
    """Entered and not completed: "scheduled", "started", "entered" (and any state FR adds later)."""
    return state not in _NOT_RUNNING


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]

    def header(self) -> dict[str, Any]:
        """The fields that open every report record about this group."""
        return {"pg": self.name, "pg_desc": self.desc, "pg_ranks": list(self.ranks)}


def group_catalog(dumps: Mapping[int, FRDump]) -> tuple[dict[str, Group], list[str]]:
    """Every process group named in any dump, with its description and member ranks.

    Names are unique across ranks (torch numbers groups with one counter on every rank), so the name is
    the key; a disagreement on the members is reported and the first dump's view (by rank) kept.
    """
    groups: dict[str, Group] = {}
    warnings: list[str] = []
    for rank in sorted(dumps):
        d = dumps[rank]
        for name, ranks in d.pg_ranks.items():
            g = Group(name, d.pg_desc.get(name, ""), tuple(ranks))
            old = groups.setdefault(name, g)
            if old.ranks != g.ranks:
                warnings.append(
                    f"group {name}: rank {rank} lists members {list(g.ranks)}, others {list(old.ranks)}"
                )
    return groups, warnings


def group_has_p2p(dumps: Mapping[int, FRDump], name: str) -> bool:
    """Whether any dump records a send/recv in the group (then ``pg_status`` may count them)."""
    return any(e.is_p2p and e.pg_name == name for d in dumps.values() for e in d.entries)


@dataclass(frozen=True)
class RankView:
    """What one rank's dump says about one group's collective sequence."""

    rank: int
    entries: Mapping[int, FREntry]  # collective entries by collective_seq_id
    entered_upto: int | None
    completed_upto: int | None
    absent: str | None = None  # NO_DUMP / FAILED when there is no dump to read

    def state_at(self, k: int) -> str:
        """The rank's state at collective k.

        Example: entries {7: scheduled}, entered_upto 8, completed_upto 6 -> k=6 "completed",
        k=7 "scheduled", k=8 "entered" (record evicted), k=9 "not_entered".
        """
        if self.absent:
            return self.absent
        entry = self.entries.get(k)
        if (self.completed_upto is not None and self.completed_upto >= k) or (entry and entry.completed):
            return COMPLETED
        if entry is not None:
            return entry.state
        if self.entered_upto is None:
            return UNKNOWN
        return ENTERED if self.entered_upto >= k else NOT_ENTERED


def rank_view(dump: FRDump | None, group: str, trust_status: bool, rank: int, absent: str) -> RankView:
    """Build a :class:`RankView` of one rank for one group's collectives (see the module rules).

    ``trust_status``: the group has no send/recv anywhere, so its ``pg_status`` counts collectives only.
    ``absent``: the reason to record (NO_DUMP or FAILED) when ``dump`` is None.
    """
    if dump is None:
        return RankView(rank, {}, None, None, absent=absent)
    mine = [e for e in dump.entries if e.pg_name == group]
    coll = {e.collective_seq_id: e for e in mine if not e.is_p2p}
    entered = list(coll)
    completed = [k for k, e in coll.items() if e.completed]
    status = dump.pg_status.get(group)
    newest = max(mine, key=lambda e: e.record_id, default=None)
    if status is not None and (trust_status or (newest is not None and not newest.is_p2p)):
        entered.append(status.last_enqueued)
        completed.append(status.last_completed)
    return RankView(rank, coll, max(entered, default=None), max(completed, default=None))
