"""The one-line verdicts of a hang report: one per record, and one for the whole run.

Also :func:`lagging_completion_ranks`, the ranks whose completions stopped being noticed, which the
overall verdict mentions. Each reads the records as their declared type
(:class:`ddprof.report.schema.HangCollective`): a renamed field fails at the conversion, naming its path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
from ddprof.analyses.hang.waits import Suspects

from ddprof.report.schema import HangCollective

__all__ = ["record_verdict", "lagging_completion_ranks", "overall_verdict"]


def _fmt(ranks: Iterable[int]) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _records(records: Iterable[Mapping[str, Any]]) -> list[HangCollective]:
    return msgspec.convert([dict(r) for r in records], list[HangCollective])


def record_verdict(record: Mapping[str, Any]) -> str:
    """One line for one record: which ranks wait in which op, and for whom."""
    rec = _records([record])[0]
    where = f"pg {rec.pg} ({rec.pg_desc}) {rec.op_name} #{rec.index}"
    if rec.kind == "p2p":
        gone = rec.missing_ranks + rec.unknown_ranks
        return f"{where}: {_fmt(rec.waiting_ranks)} wait for {_fmt(gone)}, which never posted the matching send/recv"
    if rec.missing_ranks:
        return f"{where}: entered by {_fmt(rec.not_completed_ranks)}, never entered by {_fmt(rec.missing_ranks)}"
    text = f"{where}: entered by {_fmt(rec.not_completed_ranks)}, not completed"
    if rec.completed_ranks:
        text += f" (completed by {_fmt(rec.completed_ranks)})"
    if rec.unknown_ranks:
        text += f"; no record from {_fmt(rec.unknown_ranks)}"
    return text


def lagging_completion_ranks(records: Iterable[Mapping[str, Any]]) -> list[int]:
    """Ranks still showing a collective unfinished that a peer in the same group completed.

    A hint of a GPU or watchdog fault on those ranks (their completions stopped being noticed), also
    seen for a moment on healthy ranks when a dump races a completion.
    """
    lagging: set[int] = set()
    for rec in _records(records):
        inc = rec.first_incomplete
        if inc and inc.completed_ranks:
            lagging.update(inc.not_completed_ranks)
    return sorted(lagging)


def overall_verdict(
    records: Sequence[Mapping[str, Any]], suspects: Suspects, absent: Mapping[int, str], lagging: list[int]
) -> str:
    """One line: where the hang started, or that none was found.

    ``records`` come in report order (records naming a suspect first), so the first record naming a
    suspect is the one quoted.
    """
    recs = _records(records)
    gone = f"; no usable dump from {_fmt(sorted(absent))}" if absent else ""
    if lagging:
        gone += f"; {_fmt(lagging)} stopped completing collectives their peers completed (GPU fault?)"
    if not recs:
        return "no hang found: nothing recorded in the dumps is left unfinished" + gone
    parts = []
    if suspects.unaccounted:
        parts.append(f"peers wait for {_fmt(suspects.unaccounted)}, whose dump is missing or unreadable (crashed?)")
    if suspects.started:
        started = set(suspects.started)
        first = next((r for r in recs if set(r.missing_ranks + r.unknown_ranks) & started), None)
        lead = f"hang started at {_fmt(suspects.started)} (waited for, waiting for no one)"
        parts.append(lead + (f"; first: {first.verdict}" if first else ""))
    for c in suspects.cycles:
        parts.append(f"{_fmt(c)} wait for each other (deadlock: inconsistent collective order?)")
    if not parts:
        stuck = [r for r in recs if r.kind == "collective"]
        parts.append(
            f"no rank is missing: {len(stuck)} group(s) have collectives that members entered but never completed"
            " (NCCL or network level, or a GPU stream blocked elsewhere)"
        )
    return "; ".join(parts) + gone
