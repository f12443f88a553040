"""Hang diagnosis from NCCL Flight Recorder dumps (DESIGN.md §3 "Hang diagnosis", §4 ``hang``).

Per process group (its name from ``pg_config`` plus the ranks in it), find the first collective that some
member ranks never entered, or, when every member entered, the first one some member never completed, and
name the ranks. Then follow "who waits for whom" across groups to name the ranks the hang started from.

Evidence per rank and group, for the collective sequence (``collective_seq_id``, the same number for the
same collective on every member):

- *entered up to* E: the highest sequence number the rank enqueued: its newest entry of the group, or
  ``pg_status.last_enqueued_collective`` when that counter is known to count collectives (see below).
- *completed up to* C: ``pg_status.last_completed_collective`` (same condition), or the newest entry in state
  ``completed``. Work on one group runs in order, so C >= k means collective k completed.
- ``pg_status`` counts collectives and send/recv in one field. It is read as a collective number only for
  groups with no send/recv entry in any dump, or when the rank's newest entry of the group is a collective.

A collective completed on any member was entered by every member (no rank finishes an all_reduce
alone), so such a collective is never "missing" anywhere, even where a rank's own record still says
``scheduled`` (a rank with a GPU fault stops noticing completions). A rank whose newest entries are past k
entered k, even if its ring buffer evicted k's record: eviction never makes a rank "missing".

Send/recv have no cross-rank sequence number (``p2p_seq_id`` counts one rank's own p2p ops), so they are
matched per channel: the pending sends src->dst against the pending recvs dst<-src; a surplus on one side
means the other rank never posted its half.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddprof.errors import BadInputError

from .flight_recorder import FRDump, FREntry, is_flight_recorder_dir, load_dump_dir

__all__ = ["diagnose_hang", "diagnose_dumps", "is_flight_recorder_dir", "terminal_components"]

#: Per-rank states at a collective. "scheduled"/"started" come from the rank's own entry.
ENTERED = "entered"  # no record (evicted), but the rank's frontier is past it
NOT_ENTERED = "not_entered"
COMPLETED = "completed"
UNKNOWN = "unknown"  # the rank's dump says nothing about this group
NO_DUMP = "no_dump"
FAILED = "failed_dump"
_NOT_RUNNING = frozenset({COMPLETED, NOT_ENTERED, UNKNOWN, NO_DUMP, FAILED})
_P2P_NAME = re.compile(r"nccl:(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]


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


def _running(state: str) -> bool:
    """Entered and not completed: "scheduled", "started", "entered" (and any state FR adds later)."""
    return state not in _NOT_RUNNING


# ------------------------------------------------------------------------------------------ catalogue


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


def _group_has_p2p(dumps: Mapping[int, FRDump], name: str) -> bool:
    return any(e.is_p2p and e.pg_name == name for d in dumps.values() for e in d.entries)


def rank_view(
    dump: FRDump | None, group: str, trust_status: bool, rank: int, absent: str = NO_DUMP
) -> RankView:
    """Build a :class:`RankView` of one rank for one group's collectives (see the module rules)."""
    if dump is None:
        return RankView(rank, {}, None, None, absent=absent)
    mine = [e for e in dump.entries if e.pg_name == group]
    coll = {e.collective_seq_id: e for e in mine if not e.is_p2p}
    status = dump.pg_status.get(group)
    newest = max(mine, key=lambda e: e.record_id, default=None)
    counts_collectives = trust_status or (newest is not None and not newest.is_p2p)
    usable = [status] if status is not None and counts_collectives else []
    entered = [*coll, *(st.last_enqueued for st in usable)]
    completed = [k for k, e in coll.items() if e.completed] + [st.last_completed for st in usable]
    return RankView(rank, coll, max(entered, default=None), max(completed, default=None))


# ------------------------------------------------------------------------------------------ collectives


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
        if NOT_ENTERED in states and any(_running(s) for s in states):
            return k
    return None


def first_incomplete(views: list[RankView], seqs: list[int]) -> int | None:
    """First collective that some member entered and has not completed (whatever the others did).

    Example: rank 14 still shows 42806 "scheduled", rank 15 completed it -> 42806.
    """
    for k in seqs:
        if any(_running(v.state_at(k)) for v in views):
            return k
    return None


def _ranks_where(views: list[RankView], k: int, test) -> list[int]:
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
        "op": _op_at(views, k),
        "not_completed_ranks": _ranks_where(views, k, _running),
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
        "pg": group.name,
        "pg_desc": group.desc,
        "pg_ranks": list(group.ranks),
        "kind": "collective",
        "op": summary["op"],
        "index": k,
        "seq_id": k,
        "status": "missing" if k_missing is not None else "not_completed",
        "missing_ranks": _ranks_where(views, k, lambda s: s == NOT_ENTERED),
        "not_completed_ranks": summary["not_completed_ranks"],
        "completed_ranks": summary["completed_ranks"],
        "unknown_ranks": _ranks_where(views, k, lambda s: s in (UNKNOWN, NO_DUMP, FAILED)),
        "waiting_since_ns": min(waiting_since, default=None),
        "per_rank": _per_rank(views, k),
        "first_incomplete": _summary(views, k_incomplete) if k_incomplete is not None else None,
    }
    record["verdict"] = _record_verdict(record)
    return record


# ------------------------------------------------------------------------------------------ send / recv


@dataclass(frozen=True)
class P2POp:
    rank: int
    peer: int
    send: bool
    entry: FREntry


def parse_p2p(entry: FREntry, rank: int, group: Group) -> P2POp | None:
    """``nccl:send 3->0`` on rank 12 of group [0, 4, 8, 12] -> send from 12 to 0 (names use group ranks)."""
    m = _P2P_NAME.match(entry.op)
    if not m or int(m.group(4)) >= len(group.ranks):
        return None
    return P2POp(rank=rank, peer=group.ranks[int(m.group(4))], send=m.group(1) == "send", entry=entry)


def _channels(ops: Iterable[P2POp]) -> dict[tuple[int, int], tuple[list[P2POp], list[P2POp]]]:
    """Pending ops per directed channel (src, dst): (sends posted by src, recvs posted by dst)."""
    chans: dict[tuple[int, int], tuple[list[P2POp], list[P2POp]]] = {}
    for op in ops:
        key = (op.rank, op.peer) if op.send else (op.peer, op.rank)
        chans.setdefault(key, ([], []))[0 if op.send else 1].append(op)
    return chans


def _time_or_inf(entry: FREntry) -> float:
    return entry.time_created_ns if entry.time_created_ns is not None else float("inf")


def p2p_finding(
    group: Group, dumps: Mapping[int, FRDump], absent: Mapping[int, str]
) -> tuple[dict | None, list[str]]:
    """Unmatched send/recv in one group.

    Rule: per channel src->dst, compare the unfinished sends on src with the unfinished recvs on dst; the
    side with more is waiting for the other, which never posted its half ("missing"). A peer without a dump
    is "unknown". Example: rank 0 has 2 pending ``send 0->1`` (to rank 8), rank 8 has no pending recv
    -> missing [8], waiting [0].
    """
    ops, warnings = [], []
    for r in group.ranks:
        d = dumps.get(r)
        for e in d.entries if d else ():
            if e.pg_name == group.name and e.is_p2p and not e.completed:
                op = parse_p2p(e, r, group)
                if op is None:
                    warnings.append(f"group {group.name}: cannot read peer from {e.op!r} on rank {r}")
                else:
                    ops.append(op)
    unmatched: list[tuple[P2POp, int]] = []  # (first unmatched op, rank it waits for)
    channels = []
    for (src, dst), (sends, recvs) in sorted(_channels(ops).items()):
        if len(sends) == len(recvs):
            continue
        waiting_side, other = (sends, dst) if len(sends) > len(recvs) else (recvs, src)
        first = sorted(waiting_side, key=lambda o: o.entry.seq)[min(len(sends), len(recvs))]
        unmatched.append((first, other))
        channels.append({"src": src, "dst": dst, "pending_sends": len(sends), "pending_recvs": len(recvs)})
    if not unmatched:
        return None, warnings
    first_op, _ = min(unmatched, key=lambda t: (_time_or_inf(t[0].entry), t[0].rank))
    peers = {peer for _, peer in unmatched}
    record = {
        "pg": group.name,
        "pg_desc": group.desc,
        "pg_ranks": list(group.ranks),
        "kind": "p2p",
        "op": first_op.entry.op,
        "index": first_op.entry.p2p_seq_id,
        "seq_id": first_op.entry.p2p_seq_id,
        "seq_rank": first_op.rank,
        "status": "missing" if any(p in dumps for p in peers) else "unknown_peer",
        "missing_ranks": sorted(p for p in peers if p in dumps),
        "unknown_ranks": sorted(p for p in peers if p not in dumps),
        "waiting_ranks": sorted({op.rank for op, _ in unmatched}),
        "waits": sorted({(op.rank, peer) for op, peer in unmatched}),
        "channels": channels,
        "waiting_since_ns": first_op.entry.time_created_ns,
        "absent_reasons": {str(p): absent.get(p, NO_DUMP) for p in peers if p not in dumps},
    }
    record["waits"] = [list(w) for w in record["waits"]]
    record["verdict"] = _record_verdict(record)
    return record, warnings


# ------------------------------------------------------------------------------------------ who waits for whom


def wait_edges(records: Iterable[Mapping[str, Any]]) -> set[tuple[int, int]]:
    """Edges r -> m: rank r is blocked in something rank m never entered.

    Collectives: every member still running the collective waits for each missing rank. Send/recv: the
    waiting side waits for its peer. A rank whose wait no proven-missing rank explains (everyone with a
    record entered, none completed) is taken to wait for the members whose dumps say nothing (no dump,
    unreadable dump, no record of the group).
    Example: ranks 0-2 run #10 of a group whose rank 3 left no dump -> 0->3, 1->3, 2->3; had rank 0 also
    waited for a proven-missing rank 5 elsewhere, only 0->5 would be kept for rank 0.
    """
    proven: set[tuple[int, int]] = set()
    unexplained: set[tuple[int, int]] = set()
    for rec in records:
        if rec["kind"] == "p2p":
            proven.update((int(a), int(b)) for a, b in rec["waits"] if int(b) in rec["missing_ranks"])
            unexplained.update((int(a), int(b)) for a, b in rec["waits"] if int(b) in rec["unknown_ranks"])
        elif rec["missing_ranks"]:
            proven.update((r, m) for r in rec["not_completed_ranks"] for m in rec["missing_ranks"] if r != m)
        elif not rec["completed_ranks"]:
            unexplained.update(
                (r, u) for r in rec["not_completed_ranks"] for u in rec["unknown_ranks"] if r != u
            )
    explained = {a for a, _ in proven}
    return proven | {(a, b) for a, b in unexplained if a not in explained}


def terminal_components(edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Strongly connected components that wait for nobody outside themselves and are waited for.

    A single rank there is where the hang started (it waits for no one); several ranks there wait for
    each other (a deadlock, e.g. collectives issued in different orders).
    Example: edges {0->2, 1->2, 2->3} -> [[3]]; edges {0->1, 1->0, 2->0} -> [[0, 1]].
    """
    graph: dict[int, set[int]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    comp_of = _tarjan(graph)
    comps: dict[int, list[int]] = {}
    for node, c in comp_of.items():
        comps.setdefault(c, []).append(node)
    out_edges = {c: False for c in comps}
    in_edges = {c: False for c in comps}
    for a, succ in graph.items():
        for b in succ:
            if comp_of[a] != comp_of[b]:
                out_edges[comp_of[a]] = True
                in_edges[comp_of[b]] = True
            elif a != b:
                in_edges[comp_of[b]] = True
    return sorted(sorted(ns) for c, ns in comps.items() if not out_edges[c] and in_edges[c])


def _tarjan(graph: Mapping[int, set[int]]) -> dict[int, int]:
    """Iterative Tarjan: node -> component id."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp[w] = node
                    if w == node:
                        break
    return comp


# ------------------------------------------------------------------------------------------ verdicts


def _fmt(ranks: Iterable[int]) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _record_verdict(rec: Mapping[str, Any]) -> str:
    where = f"pg {rec['pg']} ({rec['pg_desc']}) {rec['op']} #{rec['index']}"
    if rec["kind"] == "p2p":
        gone = rec["missing_ranks"] + rec["unknown_ranks"]
        return f"{where}: {_fmt(rec['waiting_ranks'])} wait for {_fmt(gone)}, which never posted the matching send/recv"
    if rec["missing_ranks"]:
        return f"{where}: entered by {_fmt(rec['not_completed_ranks'])}, never entered by {_fmt(rec['missing_ranks'])}"
    text = f"{where}: entered by {_fmt(rec['not_completed_ranks'])}, not completed"
    if rec["completed_ranks"]:
        text += f" (completed by {_fmt(rec['completed_ranks'])})"
    if rec["unknown_ranks"]:
        text += f"; no record from {_fmt(rec['unknown_ranks'])}"
    return text


def lagging_completion_ranks(records: Iterable[Mapping[str, Any]]) -> list[int]:
    """Ranks still showing a collective unfinished that a peer in the same group completed.

    A hint of a GPU or watchdog fault on those ranks (their completions stopped being noticed), also
    seen for a moment on healthy ranks when a dump races a completion.
    """
    lagging: set[int] = set()
    for rec in records:
        inc = rec.get("first_incomplete")
        if inc and inc["completed_ranks"]:
            lagging.update(inc["not_completed_ranks"])
    return sorted(lagging)


def overall_verdict(
    records: list[Mapping[str, Any]], suspects: list[list[int]], absent: Mapping[int, str], lagging: list[int]
) -> str:
    """One line: where the hang started, or that none was found (``records`` sorted by :func:`_sort_key`)."""
    gone = f"; no usable dump from {_fmt(sorted(absent))}" if absent else ""
    if lagging:
        gone += f"; {_fmt(lagging)} stopped completing collectives their peers completed (GPU fault?)"
    if not records:
        return "no hang found: nothing recorded in the dumps is left unfinished" + gone
    singles = sorted(c[0] for c in suspects if len(c) == 1 and c[0] not in absent)
    unaccounted = sorted(c[0] for c in suspects if len(c) == 1 and c[0] in absent)
    cycles = [c for c in suspects if len(c) > 1]
    parts = []
    if unaccounted:
        parts.append(f"peers wait for {_fmt(unaccounted)}, whose dump is missing or unreadable (crashed?)")
    if singles:
        first = next(
            (r for r in records if set(r["missing_ranks"] + r["unknown_ranks"]) & set(singles)), None
        )
        lead = f"hang started at {_fmt(singles)} (waited for, waiting for no one)"
        parts.append(lead + (f"; first: {first['verdict']}" if first else ""))
    for c in cycles:
        parts.append(f"{_fmt(c)} wait for each other (deadlock: inconsistent collective order?)")
    if not parts:
        stuck = [r for r in records if r["kind"] == "collective"]
        parts.append(
            f"no rank is missing: {len(stuck)} group(s) have collectives that members entered but never completed"
            " (NCCL or network level, or a GPU stream blocked elsewhere)"
        )
    return "; ".join(parts) + gone


def _sort_key(rec: Mapping[str, Any], suspects: set[int]) -> tuple:
    """Records naming a suspect first, then other missing ranks, then unfinished ones; within a tier,
    collectives (matched by sequence number) before send/recv (matched by counting), earliest wait first."""
    culprit = set(rec["missing_ranks"] + rec["unknown_ranks"]) & suspects
    tier = 0 if culprit else 1 if rec["missing_ranks"] else 2
    since = rec.get("waiting_since_ns")
    pg = int(rec["pg"]) if str(rec["pg"]).isdigit() else 0
    return (
        tier,
        rec["kind"] != "collective",
        since if since is not None else float("inf"),
        pg,
        str(rec["pg"]),
    )


# ------------------------------------------------------------------------------------------ entry points


def _failure_rows(failures: Iterable[BadInputError]) -> list[dict[str, Any]]:
    return [{"path": f.path, "rank": f.rank, "reason": f.cause} for f in failures]


def diagnose_dumps(
    dumps: Mapping[int, FRDump],
    failures: Iterable[BadInputError] = (),
    *,
    source: str | None = None,
    skipped: Iterable[str] = (),
) -> dict[str, Any]:
    """Diagnose a hang from loaded dumps (pure; see :func:`diagnose_hang` for the result's shape)."""
    failures = list(failures)
    groups, warnings = group_catalog(dumps)
    expected = sorted({r for g in groups.values() for r in g.ranks} | set(dumps))
    absent = {f.rank: FAILED for f in failures if f.rank is not None and f.rank not in dumps}
    absent.update({r: NO_DUMP for r in expected if r not in dumps and r not in absent})
    records: list[dict[str, Any]] = []
    for name in sorted(groups, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n)):
        g = groups[name]
        trust = not _group_has_p2p(dumps, name)
        views = [rank_view(dumps.get(r), name, trust, r, absent.get(r, NO_DUMP)) for r in g.ranks]
        rec = collective_finding(g, views)
        if rec is not None:
            records.append(rec)
        p2p, p2p_warnings = p2p_finding(g, dumps, absent)
        warnings.extend(p2p_warnings)
        if p2p is not None:
            records.append(p2p)
    suspects = terminal_components(wait_edges(records))
    suspect_set = {r for c in suspects for r in c}
    records.sort(key=lambda rec: _sort_key(rec, suspect_set))
    lagging = lagging_completion_ranks(records)
    for r in sorted(dumps):
        warnings.extend(f"rank {r}: {w}" for w in dumps[r].warnings)
    return {
        "source": source,
        "format_versions": sorted({d.version for d in dumps.values()}),
        "world_size": len(expected),
        "ranks": sorted(dumps),
        "missing_dumps": sorted(r for r, why in absent.items() if why == NO_DUMP),
        "failed": _failure_rows(failures),
        "skipped_files": list(skipped),
        "collectives": records,
        "suspect_ranks": sorted(c[0] for c in suspects if len(c) == 1 and c[0] not in absent),
        "unaccounted_ranks": sorted(c[0] for c in suspects if len(c) == 1 and c[0] in absent),
        "deadlock_cycles": [c for c in suspects if len(c) > 1],
        "lagging_completion_ranks": lagging,
        "verdict": overall_verdict(records, suspects, absent, lagging),
        "warnings": warnings,
    }


def diagnose_hang(path: str | Path) -> dict[str, Any]:
    """Diagnose a hang from a directory of per-rank Flight Recorder dumps (pickle or JSON).

    Returns the ``hang`` section of the report (DESIGN.md §4)::

        {"collectives": [{"pg": "74", "pg_desc": "EXPERT_MODEL_PARALLEL_GROUP", "pg_ranks": [12, 13, 14, 15],
                          "kind": "collective" | "p2p", "op": "nccl:all_to_all", "index": 20537, "seq_id": 20537,
                          "status": "missing" | "not_completed",
                          "missing_ranks": [12],              # never entered it
                          "not_completed_ranks": [13, 14, 15],  # entered, not completed
                          "completed_ranks": [], "unknown_ranks": [],  # no dump / no record
                          "per_rank": [{"rank", "state", "entered_upto", "completed_upto", "input_sizes", ...}],
                          "first_incomplete": {"index", "op", "not_completed_ranks", "completed_ranks"},
                          "waiting_since_ns": int | None, "verdict": "pg 74 (...) ..."}, ...],
         "suspect_ranks": [12],          # ranks others wait for, whose own dump shows they wait for nobody
         "unaccounted_ranks": [],        # ranks others wait for that left no usable dump
         "deadlock_cycles": [],          # groups of ranks waiting for each other
         "lagging_completion_ranks": [12, 14],
         "verdict": "hang started at rank 12: ...",
         "world_size", "ranks", "missing_dumps", "failed": [{"path", "rank", "reason"}], "skipped_files",
         "format_versions", "source", "warnings"}

    One record per group and kind with something unfinished; records naming suspect ranks come first.
    Unreadable files are listed in ``failed`` (the other ranks are still diagnosed); a directory with no
    readable dump raises BadInputError.
    """
    dump_set = load_dump_dir(path)
    if not dump_set.dumps:
        detail = "; ".join(str(f) for f in dump_set.failures[:3]) or "no candidate files"
        raise BadInputError(f"no readable Flight Recorder dump in this directory ({detail})", path=path)
    return diagnose_dumps(dump_set.dumps, dump_set.failures, source=str(path), skipped=dump_set.skipped)
