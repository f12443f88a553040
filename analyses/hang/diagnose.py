"""Hang diagnosis from NCCL Flight Recorder dumps (docs/DESIGN.md §3 "Hang diagnosis", §4 ``hang``).

Per process group (its name from ``pg_config`` plus the ranks in it), find the first collective that some
member ranks never entered, or, when every member entered, the first one some member never completed, and
name the ranks; likewise the send/recv that never found their other half. Then follow "who waits for whom"
across groups to name the ranks the hang started from.

This module assembles the ``hang`` section. The steps live in :mod:`.views` (what each rank's dump says
about a group), :mod:`.collectives` and :mod:`.p2p` (one record per group and kind), :mod:`.waits` (the
wait graph and its suspects) and :mod:`.verdicts` (the one-line verdicts). Reading the dumps is an input
format, :mod:`ddprof.readers.flightrec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from ddprof.analyses.hang.collectives import collective_finding
from ddprof.analyses.hang.p2p import p2p_finding
from ddprof.analyses.hang.verdicts import lagging_completion_ranks, overall_verdict
from ddprof.analyses.hang.views import FAILED, NO_DUMP, group_catalog, group_has_p2p, rank_view
from ddprof.analyses.hang.waits import find_suspects
from ddprof.analyses.sections import Section

from ddprof.readers.flightrec.load import DumpSet
from ddprof.report.display import Column, Table
from ddprof.report.schema import Hang
from ddprof.vocabulary.units import fmt_ranks

__all__ = ["diagnose", "backend_of"]


def _group_order(name: str) -> tuple:
    """Numbered groups first, by number, then the others by name."""
    return (not name.isdigit(), int(name) if name.isdigit() else 0, name)


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


def diagnose(dump_set: DumpSet) -> dict[str, Any]:
    """The ``hang`` section of the report (docs/DESIGN.md §4) from the loaded dumps of one job (pure)::

        {"collectives": [{"pg": "74", "pg_desc": "EXPERT_MODEL_PARALLEL_GROUP", "pg_ranks": [12, 13, 14, 15],
                          "kind": "collective" | "p2p", "op": "all_to_all",  # normalised as in other sections
                          "op_name": "nccl:all_to_all",  # Flight Recorder's name ("nccl:send 1->2" -> op "send")
                          "index": 20537, "seq_id": 20537,
                          "status": "missing" | "not_completed",
                          "missing_ranks": [12],              # never entered it
                          "not_completed_ranks": [13, 14, 15],  # entered, not completed
                          "completed_ranks": [], "unknown_ranks": [],  # no dump / no record
                          "per_rank": [{"rank", "state", "entered_upto", "completed_upto", "input_sizes", ...}],
                          "first_incomplete": {"index", "op", "op_name", "not_completed_ranks", "completed_ranks"},
                          "waiting_since_ns": int | None, "verdict": "pg 74 (...) ..."}, ...],
         "suspect_ranks": [12],          # ranks others wait for, whose own dump shows they wait for nobody
         "unaccounted_ranks": [],        # ranks others wait for that left no usable dump
         "deadlock_cycles": [],          # groups of ranks waiting for each other
         "lagging_completion_ranks": [12, 14],
         "verdict": "hang started at rank 12: ...",
         "world_size", "ranks", "missing_dumps", "failed": [{"path", "rank", "reason"}], "skipped_files",
         "format_versions", "source", "warnings"}

    One record per group and kind with something unfinished; records naming suspect ranks come first.
    Unreadable files are listed in ``failed``; the other ranks are still diagnosed.
    """
    dumps, failures = dump_set.dumps, dump_set.failures
    groups, warnings = group_catalog(dumps)
    expected = sorted({r for g in groups.values() for r in g.ranks} | set(dumps))
    absent = {f.rank: FAILED for f in failures if f.rank is not None and f.rank not in dumps}
    absent.update({r: NO_DUMP for r in expected if r not in dumps and r not in absent})
    records: list[dict[str, Any]] = []
    for name in sorted(groups, key=_group_order):
        g = groups[name]
        trust = not group_has_p2p(dumps, name)
        views = [rank_view(dumps.get(r), name, trust, r, absent.get(r, NO_DUMP)) for r in g.ranks]
        rec = collective_finding(g, views)
        if rec is not None:
            records.append(rec)
        p2p, p2p_warnings = p2p_finding(g, dumps, absent)
        warnings.extend(p2p_warnings)
        if p2p is not None:
            records.append(p2p)
    suspects = find_suspects(records, absent)
    suspect_ranks = suspects.ranks
    records.sort(key=lambda rec: _sort_key(rec, suspect_ranks))
    lagging = lagging_completion_ranks(records)
    for r in sorted(dumps):
        warnings.extend(f"rank {r}: {w}" for w in dumps[r].warnings)
    return {
        "source": dump_set.path,
        "format_versions": sorted({d.version for d in dumps.values()}),
        "world_size": len(expected),
        "ranks": sorted(dumps),
        "missing_dumps": sorted(r for r, why in absent.items() if why == NO_DUMP),
        "failed": [{"path": f.path, "rank": f.rank, "reason": f.cause} for f in failures],
        "skipped_files": list(dump_set.skipped),
        "collectives": records,
        "suspect_ranks": suspects.started,
        "unaccounted_ranks": suspects.unaccounted,
        "deadlock_cycles": suspects.cycles,
        "lagging_completion_ranks": lagging,
        "verdict": overall_verdict(records, suspects, absent, lagging),
        "warnings": warnings,
    }


#: The device each backend's Flight Recorder records.
_DEVICE = {"nccl": "gpu", "gloo": "cpu"}


def backend_of(dump_set: DumpSet) -> tuple[str | None, str | None]:
    """(backend, device) of the job that wrote the dumps, from the namespace of its ops' names
    (``nccl:all_reduce`` -> nccl on a GPU, ``gloo:broadcast`` -> gloo on a CPU), else from the NCCL version
    a dump carries; (None, None) when the dumps do not say. The most frequent namespace wins."""
    counts: dict[str, int] = {}
    for d in dump_set.dumps.values():
        for e in d.entries:
            ns = e.op.split(":", 1)[0] if ":" in e.op else ""
            if ns in _DEVICE:
                counts[ns] = counts.get(ns, 0) + 1
    if counts:
        backend = max(sorted(counts), key=lambda k: counts[k])
    elif any(d.nccl_version for d in dump_set.dumps.values()):
        backend = "nccl"
    else:
        return None, None
    return backend, _DEVICE[backend]


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

def _hang_note(report: dict[str, Any]) -> str:
    hang = msgspec.convert(report.get("hang") or {}, Hang)
    suspects = f"suspect ranks (the hang started there): {fmt_ranks(hang.suspect_ranks)}"
    if hang.unaccounted_ranks:
        suspects += f"; waited for, no usable dump: {fmt_ranks(hang.unaccounted_ranks)}"
    return suspects


#: Flight Recorder findings: per group the first collective (or send/recv) some members never entered
#: (missing) or entered and never completed (for send/recv: the ranks waiting); the suspect ranks above.
HANG_TABLE = Table(
    "Hang: per process group, the first collective not entered or not completed by all",
    (Column("pg", "pg"), Column("group", "pg_desc", lambda v: v or "-"), Column("op", "op"),
     Column("#", "index"), Column("missing", "missing_ranks", fmt_ranks),
     Column("not completed", lambda h: h.not_completed_ranks if h.kind == "collective" else h.waiting_ranks,
            fmt_ranks)),
    rows=lambda r: msgspec.convert(r.get("hang") or {}, Hang).collectives, left=3, note=_hang_note, at=90)

SECTIONS = (
    Section("hang", {"collectives": []}, analysed=False, tables=(HANG_TABLE,), record=Hang, order=90),
)
