"""Per process group, the send/recv that never found its other half.

Send/recv have no cross-rank sequence number (``p2p_seq_id`` counts one rank's own p2p ops), so they are
matched per channel: the pending sends src->dst against the pending recvs dst<-src; a surplus on one side
means the other rank never posted its half. Op names use group-local ranks (``nccl:send 3->0``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ddprof.analyses.hang.verdicts import record_verdict
from ddprof.analyses.hang.views import NO_DUMP, Group, op_names

from ddprof.readers.flightrec.records import FRDump, FREntry

__all__ = ["P2POp", "parse_p2p", "p2p_finding"]

_P2P_NAME = re.compile(r"nccl:(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")


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


def _pending_ops(group: Group, dumps: Mapping[int, FRDump]) -> tuple[list[P2POp], list[str]]:
    """The unfinished send/recv of the group on each member, and warnings for names without a peer."""
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
    return ops, warnings


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
) -> tuple[dict[str, Any] | None, list[str]]:
    """Unmatched send/recv in one group.

    Rule: per channel src->dst, compare the unfinished sends on src with the unfinished recvs on dst; the
    side with more is waiting for the other, which never posted its half ("missing"). A peer without a dump
    is "unknown". Example: rank 0 has 2 pending ``send 0->1`` (to rank 8), rank 8 has no pending recv
    -> missing [8], waiting [0].
    """
    ops, warnings = _pending_ops(group, dumps)
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
        **group.header(),
        "kind": "p2p",
        **op_names(first_op.entry.op),
        "index": first_op.entry.p2p_seq_id,
        "seq_id": first_op.entry.p2p_seq_id,
        "seq_rank": first_op.rank,
        "status": "missing" if any(p in dumps for p in peers) else "unknown_peer",
        "missing_ranks": sorted(p for p in peers if p in dumps),
        "unknown_ranks": sorted(p for p in peers if p not in dumps),
        "waiting_ranks": sorted({op.rank for op, _ in unmatched}),
        "waits": [list(w) for w in sorted({(op.rank, peer) for op, peer in unmatched})],
        "channels": channels,
        "waiting_since_ns": first_op.entry.time_created_ns,
        "absent_reasons": {str(p): absent.get(p, NO_DUMP) for p in peers if p not in dumps},
    }
    record["verdict"] = record_verdict(record)
    return record, warnings
