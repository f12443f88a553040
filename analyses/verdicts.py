"""Short sentences that say what the report's numbers mean, most important first.

Pure: reads the report sections as their declared records (:mod:`ddprof.report.schema`), returns a list of
strings. A section whose numbers call for a verdict declares its rule (``verdict``, at its place
``verdict_at``: :data:`ddprof.analyses.sections.SECTIONS`), written beside its analysis; each rule names its
threshold, and one whose section is empty says nothing. Here: the declared rules in their order, then the
run's warnings count, and the hang's own sentence (:mod:`.hang`) placed first or last.

:func:`badge` is what the dashboard and the HTML report show beside the verdicts: the status, except that a
report whose status is ``ok`` but whose verdicts name a problem (a straggler, a trace finding that changes a
headline number) is not shown as a green OK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from ddprof.analyses import sections
from ddprof.analyses.dataloading import loading_verdicts
from ddprof.analyses.health import accelerator_unread, health_verdicts
from ddprof.analyses.stragglers import straggler_verdicts

from ddprof.report.schema import Hang, RunSection, Stragglers, field_of, parse

#: Sections whose verdicts read the timeline as the device's work: not said for a run whose accelerator's
#: activity was not analysed (:func:`ddprof.analyses.health.accelerator_unread`).
HOST_AS_DEVICE = frozenset({"overlap", "idle", "bubbles"})


def verdicts(report: dict[str, Any]) -> list[str]:
    """The verdicts in their final order: a hang first, then what the trace cannot tell that changes a
    headline number (:mod:`.health`), all-to-all load imbalance (it says which waits are load, not a
    straggler), stragglers, communication, idle time, steps
    (pipeline bubbles where there is a pipeline), bandwidth (the declared rules, by ``verdict_at``), the
    warnings count, and "no hang found" last where Flight Recorder dumps showed none. Example: ["rank 7 is
    the straggler: each of the 7 other ranks spent 5.08 ms per step on average waiting for it at
    collectives (wall-clock; last at 5 of 8 collectives)", "exposed communication is 35 % of step time
    (worst: rank 1, 56 %); 5 % of communication overlaps compute", ...]."""
    rules = sorted((s for s in sections.SECTIONS if s.verdict is not None), key=lambda s: s.verdict_at)
    if accelerator_unread(report):  # the timeline describes host operators, not the accelerator (health says so)
        rules = [s for s in rules if s.name not in HOST_AS_DEVICE]
    out = [line for s in rules if s.verdict is not None for line in s.verdict(report)]
    nwarn = len(field_of(report["run"], RunSection, "warnings"))
    if nwarn:
        out.append(f"{nwarn} warning(s) about the input: see the warnings below")
    hang = parse(report["hang"], Hang)
    if hang.verdict and hang.collectives:
        out.insert(0, hang.verdict)  # a hang comes first
    elif hang.verdict:
        out.append(hang.verdict)  # "no hang found" (a healthy capture's dumps) is worth a line, last
    return out


@dataclass(frozen=True)
class Badge:
    """The report's state in one word, for a coloured badge: ``kind`` (``ok``, ``attention``, ``partial``,
    ``problem``: its colour), ``label`` (the word shown) and ``why`` (the verdicts that made it so)."""

    kind: str
    label: str
    why: tuple[str, ...]


def badge(report: dict[str, Any]) -> Badge:
    """The status (``problem``: a hang; ``partial``: inputs failed), or, for a report whose status is ``ok``,
    ``attention`` where its verdicts name a problem the exit code does not follow: a straggler or a group of
    ranks slower together, a data loader that holds the steps back (:mod:`.dataloading`), or a trace
    finding that changes a headline number (GPU side not captured, events lost, ranks missing); ``ok``
    only where they name none. Example: the DLRM sample, status ok with "rank 7 is the straggler: ..." ->
    Badge("attention", "ATTENTION", ("rank 7 is the straggler: ...",))."""
    status = str(report.get("status") or "ok")
    why: list[str] = []
    st = msgspec.convert(report.get("stragglers") or {}, Stragglers)
    if st.ranks or st.groups:  # a straggler, or ranks slower together (analyses/slow_groups.py)
        why += [v for v in straggler_verdicts(report) if not v.startswith("no straggler")]
    why += loading_verdicts(report)
    why += health_verdicts(report)
    if status != "ok":
        return Badge(status, status.upper(), tuple(why))
    return Badge("attention", "ATTENTION", tuple(why)) if why else Badge("ok", "OK", ())
