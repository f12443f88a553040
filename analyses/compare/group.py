"""A check's failures told shortest first: the likely cause, then the whole-run rules, then one line per
family of per-rank rules.

In a synchronous data-parallel job one slow rank makes every rank's step slower (the others wait for it at
each collective), so every per-rank step-time rule fails together. Listing each would bury the cause, so
the summary is ordered:

1. **causes**: failed straggler rules, then bandwidth, kernels, exposed communication, idle, overlap and
   bubble (the order of :mod:`.explain`);
2. **whole-run rules** (subject ``all ranks``) with their likely cause (said once, on the first rule it
   explains);
3. **per-rank families** (``step_time`` and ``step_time_p90`` with subject ``rank N``): one failed rank keeps
   its own sentence; two or more become one line with how many ranks, the median of their shifts and the
   smallest and largest. Example: shifts of 2.9, 3.0, 3.0 and 3.1 ms on ranks 0–3 of 4 -> "median step time
   rose on all 4 ranks by 3.0 ms (median of the per-rank shifts; +2.9 ms … +3.1 ms)";
4. the workload rule and anything else that failed.

The outcomes themselves are untouched: JSON and JUnit keep one entry per rule.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ddprof.analyses.compare.explain import evidence_key
from ddprof.analyses.compare.words import direction, signed

from ddprof.vocabulary.units import fmt_us

PER_RANK = ("step_time", "step_time_p90")
_WHAT = {"step_time": "median step time", "step_time_p90": "p90 step time"}
_CAUSES = {"straggler", "busbw", "kernels", "exposed_comm", "idle", "overlap", "bubble"}


def _rank(subject: str) -> int | None:
    return int(subject[5:]) if subject.startswith("rank ") and subject[5:].isdigit() else None


def _signed(us: float) -> str:
    return signed(us, "us")


def _ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> "0–2, 5"."""
    parts: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if r is not None:
            start = prev = r
    return ", ".join(parts)


def family_line(rule: str, failed: list[dict[str, Any]], total: int) -> str:
    """One sentence for the failed per-rank outcomes of ``rule`` out of ``total`` ranks checked (module doc)."""
    ranks = sorted(r for r in (_rank(o["subject"]) for o in failed) if r is not None)
    shifts = sorted(o["change"] for o in failed if o["change"] is not None)
    where = (f"all {total} ranks" if len(ranks) == total else f"{len(ranks)} of {total} ranks ({_ranks_text(ranks)})")
    verb = direction(median(shifts))
    return (f"{_WHAT[rule]} {verb} on {where} by {fmt_us(abs(median(shifts)))} (median of the per-rank shifts; "
            f"{_signed(shifts[0])} … {_signed(shifts[-1])})")


def grouped_summary(outcomes: list[dict[str, Any]]) -> list[str]:
    """The failed outcomes as sentences, cause first and per-rank families on one line each (module doc)."""
    fails = [o for o in outcomes if o["outcome"] == "fail"]
    causes = sorted((o for o in fails if o["rule"] in _CAUSES), key=evidence_key)
    whole = [o for o in fails if o["rule"] in PER_RANK and _rank(o["subject"]) is None]
    lines = [o["message"] for o in causes]
    told: set[str] = set()

    def with_cause(o: dict[str, Any]) -> str:
        if not o["cause"] or o["cause"] in told:
            return o["message"]
        told.add(o["cause"])
        return f"{o['message']}; likely cause: {o['cause']}"

    lines += [with_cause(o) for o in whole]
    for rule in PER_RANK:
        family = [o for o in fails if o["rule"] == rule and _rank(o["subject"]) is not None]
        checked = sum(1 for o in outcomes if o["rule"] == rule and _rank(o["subject"]) is not None)
        if len(family) == 1:
            lines.append(with_cause(family[0]))
        elif family:
            lines.append(family_line(rule, family, checked))
    shown = {id(o) for o in causes + whole} | {id(o) for o in fails if o["rule"] in PER_RANK}
    lines += [o["message"] for o in fails if id(o) not in shown]
    return lines


def collapsed(outcomes: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(outcome, sentence, likely cause) per line of the text output: the outcomes in order, except that the
    per-rank outcomes of a family are one line when two or more failed (:func:`family_line`) or when all
    passed ("median step time per rank: all 4 ranks pass")."""
    out: list[tuple[str, str, str | None]] = []
    done: set[str] = set()
    for o in outcomes:
        rule = o["rule"]
        if rule not in PER_RANK or _rank(o["subject"]) is None:
            out.append((o["outcome"], o["message"], o["cause"]))
            continue
        if rule in done:
            continue
        family = [x for x in outcomes if x["rule"] == rule and _rank(x["subject"]) is not None]
        failed = [x for x in family if x["outcome"] == "fail"]
        if len(failed) >= 2:
            done.add(rule)
            out.append(("fail", family_line(rule, failed, len(family)), None))
            out += [(x["outcome"], x["message"], x["cause"]) for x in family if x["outcome"] != "fail"
                    and x["outcome"] != "pass"]
        elif all(x["outcome"] == "pass" for x in family):
            done.add(rule)
            out.append(("pass", f"{_WHAT[rule]} per rank: all {len(family)} ranks pass", None))
        else:
            out.append((o["outcome"], o["message"], o["cause"]))
    return out
