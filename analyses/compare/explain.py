"""Why a run got slower, as far as the analyses can tell: new stragglers, and the likely cause of each
failed step-time rule.

**Straggler rule**: a rank the run names a straggler (``stragglers.ranks``) that the baseline did not, or
one both name whose wait per step grew by more than the step-time rule's tolerance. Its
wait per step is ``wait_caused_us / waiting_ranks / steps``: the wall-clock time each other rank spent
waiting for it at collectives, per step. Example: rank 5 caused 36 ms of wait to 3 ranks over 4 steps ->
3.0 ms per step; 0.1 ms in the baseline -> "rank 5 became a straggler: the others wait 2.9 ms more per
step (0.1 → 3.0 ms)".

**Likely cause** of a failed step-time rule: the other failed rules, most telling first: a new straggler,
then a bandwidth drop, then a kernel that takes longer (compute before communication kernels, whose time
includes waiting), then exposed communication, idle, overlap, bubble. For a rank's own step time, a
straggler is named only when it is that rank or the rank is not a straggler itself.
"""

from __future__ import annotations

from typing import Any

import msgspec
from ddprof.analyses.compare.words import direction

from ddprof.report.schema import RunSection, Stragglers
from ddprof.vocabulary.units import fmt_us

_ORDER = ("straggler", "busbw", "kernels:compute", "kernels", "exposed_comm", "idle", "overlap", "bubble")


def _stragglers(report: dict[str, Any]) -> Stragglers:
    return msgspec.convert(report["stragglers"], Stragglers)


def wait_per_step(report: dict[str, Any], rank: int) -> float:
    """Mean wall-clock wait per other rank and step that ``rank`` caused, µs (module doc)."""
    per = {p.rank: p for p in _stragglers(report).per_rank}
    p = per.get(rank)
    if not p or not p.wait_caused_us:
        return 0.0
    steps = max(len(msgspec.convert(report["run"], RunSection).steps), 1)
    return p.wait_caused_us / max(p.waiting_ranks or 1, 1) / steps


def straggler_outcomes(base: dict[str, Any], run: dict[str, Any], tolerance_us: float = 0.0) -> list[dict[str, Any]]:
    """One failed outcome per new straggler, and per straggler of both whose wait per step grew by more than
    ``tolerance_us`` (the step-time rule's tolerance); else one passing outcome (module doc)."""
    before = set(_stragglers(base).ranks)
    common = {"rule": "straggler", "kind": "straggler", "unit": "us", "change_pct": None, "interval": None,
              "tolerance": None, "samples": None, "cause": None}
    out = []
    for r in _stragglers(run).ranks:
        b, a = wait_per_step(base, r), wait_per_step(run, r)
        if r not in before:
            msg = (f"rank {r} became a straggler: the others wait {fmt_us(abs(a - b))} "
                   f"{direction(a - b, 'more', 'less', 'as long')} per step ({fmt_us(b)} → {fmt_us(a)})")
        elif a - b > tolerance_us:
            msg = (f"rank {r}, a straggler already, makes the others wait {fmt_us(a - b)} more per step "
                   f"({fmt_us(b)} → {fmt_us(a)}; tolerance {fmt_us(tolerance_us)})")
        else:
            continue
        out.append({**common, "id": f"straggler[rank {r}]", "subject": f"rank {r}", "outcome": "fail", "baseline": b,
                    "run": a, "change": a - b, "tolerance": tolerance_us, "message": msg})
    if not out:
        named = _stragglers(run).ranks
        msg = ("no new straggler" + (f" (rank {', '.join(map(str, named))} already was one, and makes the others "
                                     "wait no longer than the tolerance more)" if named else ""))
        return [{**common, "id": "straggler[all ranks]", "subject": "all ranks", "outcome": "pass", "baseline": None,
                 "run": None, "change": None, "tolerance": tolerance_us, "message": msg}]
    return out


def evidence_key(o: dict[str, Any]) -> int:
    """Where an outcome stands in the order of causes (module doc): lower is more telling."""
    tag = ("kernels:compute" if o["rule"] == "kernels" and o["message"].startswith(("kernel ", "CPU op "))
           else o["rule"])
    return _ORDER.index(tag) if tag in _ORDER else len(_ORDER)


def attach_causes(outcomes: list[dict[str, Any]]) -> None:
    """Fill ``cause`` of each failed step-time outcome from the other failed outcomes (module doc)."""
    evidence = sorted((o for o in outcomes if o["outcome"] == "fail" and o["rule"] in
                       {"straggler", "busbw", "kernels", "exposed_comm", "idle", "overlap", "bubble"}), key=evidence_key)
    stragglers = {o["subject"] for o in evidence if o["rule"] == "straggler"}
    for o in outcomes:
        if o["outcome"] != "fail" or o["rule"] not in ("step_time", "step_time_p90"):
            continue
        usable = [e for e in evidence
                  if not (e["rule"] == "straggler" and o["subject"] in stragglers and e["subject"] != o["subject"])]
        if usable:
            o["cause"] = "; ".join(e["message"].split(" (shift")[0] for e in usable[:2])
