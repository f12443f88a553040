"""Short sentences that say what the report's numbers mean, most important first.

Pure: reads the report sections as their declared records (:mod:`ddprof.report.schema`), returns a list of
strings. A section whose numbers call for a verdict declares its rule (``verdict``, at its place
``verdict_at``: :data:`ddprof.analyses.sections.SECTIONS`), written beside its analysis; each rule names its
threshold, and one whose section is empty says nothing. Here: the declared rules in their order, then the
run's warnings count, and the hang's own sentence (:mod:`.hang`) placed first or last.
"""

from __future__ import annotations

from typing import Any

from ddprof.analyses import sections

from ddprof.report.schema import Hang, RunSection, field_of, parse


def verdicts(report: dict[str, Any]) -> list[str]:
    """The verdicts in their final order: a hang first, then what the trace cannot tell that changes a
    headline number (:mod:`.health`), stragglers, communication, idle time, steps
    (pipeline bubbles where there is a pipeline), bandwidth (the declared rules, by ``verdict_at``), the
    warnings count, and "no hang found" last where Flight Recorder dumps showed none. Example: ["rank 7 is
    the straggler: each of the 7 other ranks spent 5.08 ms per step on average waiting for it at
    collectives (wall-clock; last at 5 of 8 collectives)", "exposed communication is 35 % of step time
    (worst: rank 1, 56 %); 5 % of communication overlaps compute", ...]."""
    rules = sorted((s for s in sections.SECTIONS if s.verdict is not None), key=lambda s: s.verdict_at)
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
