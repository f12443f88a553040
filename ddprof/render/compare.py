"""A check's result and a diff as text (the cause class first, then the failures grouped, likely cause
first: :mod:`.group`), and a check as JUnit XML (one test case per rule outcome).

The first line of a check names its verdict and the cause class, so a script can read it:
``ddprof check: REGRESSION, cause: one rank (rank 2)`` / ``ddprof check: ENVIRONMENT CHANGED, cause:
environment (not the job: --environment warn passes it)`` / ``OK: no regression``; the next line is the
cause's summary, then its evidence.

JUnit: ``<testsuites><testsuite name="ddprof check" tests= failures= errors="0" skipped= time="0">`` with one
``<testcase classname="ddprof.check.RULE" name="SUBJECT" time="0">`` per outcome, a ``<failure message=
type="regression">`` (``environment_changed``, ``workload_changed``: the status) on a failed one (its text: the cause, then the explanation), ``<skipped message=>`` on a
skipped one and ``<system-err>`` on a warned one: the elements and attributes the JUnit schema requires,
which CI systems read. The suite's properties carry ``cause`` (the class, or "none"), ``cause_rank`` (the
rank of a one-rank cause, else empty) and ``cause_summary``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ddprof.analyses.compare.cause import cause_line
from ddprof.analyses.compare.group import collapsed
from ddprof.vocabulary.units import fmt_bytes, fmt_us

_MARK = {"pass": "ok  ", "fail": "FAIL", "warn": "WARN", "skip": "skip"}
_HEAD = {"ok": "OK: no regression", "regression": "REGRESSION", "environment_changed": "ENVIRONMENT CHANGED",
         "workload_changed": "WORKLOAD CHANGED"}


def _ranks(side: dict[str, Any]) -> str:
    """``8 ranks``; with no world size recorded (an Nsight Systems export, a trace without distributedInfo),
    the ranks there are: ``2 ranks (world size not recorded)``."""
    if side.get("world_size") is not None:
        return f"{side['world_size']} ranks"
    return f"{len(side.get('ranks') or [])} ranks (world size not recorded)"


def cause_lines(cause: dict[str, Any] | None) -> list[str]:
    """The cause as text: its summary and evidence (nothing when there is none)."""
    if cause is None:
        return []
    return [f"cause: {cause_line(cause)}: {cause['summary']}"] + [f"  evidence: {e}" for e in cause["evidence"]]


def headline(result: dict[str, Any]) -> str:
    """The first line of a check (module doc)."""
    head = f"ddprof check: {_HEAD[result['status']]}"
    cause = result.get("cause")
    if cause is None:
        return head
    if result["status"] == "ok":
        return f"{head}, but slower: cause: {cause_line(cause)} (--environment warn)"
    if result["status"] == "environment_changed":
        return f"{head}, cause: {cause_line(cause)} (not the job: --environment warn passes it)"
    return f"{head}, cause: {cause_line(cause)}"


def check_text(result: dict[str, Any]) -> str:
    b, r = result["baseline"], result["run"]
    lines = [headline(result), *cause_lines(result.get("cause")),
             f"run      {r['source']}: {_ranks(r)}, {len(r['steps'] or [])} steps",
             f"baseline {b['source']}: {_ranks(b)}, {len(b['steps'] or [])} steps",
             *(f"baseline {m['source']}: {_ranks(m)}, {len(m['steps'] or [])} steps"
               for m in result.get("more_baselines", [])),
             f"rule: a change fails when its {100 * result['confidence']:g} % interval excludes zero and it "
             "exceeds the tolerance" + (f", against each of the {1 + len(result['more_baselines'])} baselines"
                                        if result.get("more_baselines") else "")]
    for d in result["job_differences"]:
        lines.append(f"note: another job, compared anyway: {d}")
    if result["status"] != "ok" or result.get("cause"):
        lines += ["", "what changed, likely cause first:"] + [f"  - {s}" for s in result["summary"]]
    lines += ["", "rules:"]
    for outcome, message, cause in collapsed(result["outcomes"]):
        lines.append(f"{_MARK[outcome]}  {message}")
        if cause:
            lines.append(f"      likely cause: {cause}")
    return "\n".join(lines) + "\n"


def junit_xml(result: dict[str, Any]) -> str:
    outcomes = result["outcomes"]
    suites = ET.Element("testsuites", name="ddprof check")
    suite = ET.SubElement(suites, "testsuite", name="ddprof check", tests=str(len(outcomes)),
                          failures=str(sum(o["outcome"] == "fail" for o in outcomes)), errors="0",
                          skipped=str(sum(o["outcome"] == "skip" for o in outcomes)), time="0")
    props = ET.SubElement(suite, "properties")
    for k in ("run", "baseline"):
        ET.SubElement(props, "property", name=k, value=str(result[k]["source"]))
    ET.SubElement(props, "property", name="confidence", value=str(result["confidence"]))
    cause = result.get("cause")
    ET.SubElement(props, "property", name="cause", value=cause["class"] if cause else "none")
    ET.SubElement(props, "property", name="cause_rank",
                  value="" if not cause or cause["rank"] is None else str(cause["rank"]))
    ET.SubElement(props, "property", name="cause_summary", value=cause["summary"] if cause else "")
    told = f"cause: {cause_line(cause)}: {cause['summary']}\n" if cause else ""
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=f"ddprof.check.{o['rule']}", name=o["subject"], time="0")
        if o["outcome"] == "fail":
            f = ET.SubElement(case, "failure", message=o["message"], type="workload_changed"
                              if o["kind"] == "workload" else result["status"])
            f.text = told + o["message"] + (f"\nlikely cause: {o['cause']}" if o["cause"] else "")
        elif o["outcome"] == "warn":
            ET.SubElement(case, "system-err").text = f"warning, not failed ({told.strip()}): {o['message']}"
        elif o["outcome"] == "skip":
            ET.SubElement(case, "skipped", message=o["message"])
        else:
            ET.SubElement(case, "system-out").text = o["message"]
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _us(v: float | None) -> str:
    return "-" if v is None else fmt_us(v)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.0f} %"


def _num(v: Any) -> str:
    return "-" if v is None else str(v)


def diff_text(d: dict[str, Any], limit: int = 20) -> str:
    st = d["step_time"]
    word = d.get("op_word", "kernel")
    kinds = {"cpu_op": "CPU op", "comm": "gloo op" if word == "CPU op" else "comm"}
    cause = d.get("cause")
    lines = [f"ddprof diff: {d['run']['source']} (run) vs {d['baseline']['source']} (baseline)",
             *(cause_lines(cause) or ["cause: none: nothing changed beyond the noise and the check's tolerances"]),
             f"median step time: {_us(st['base_median_us'])} → {_us(st['run_median_us'])} {_pct(st['change_pct'])}",
             *([f"median data loading per rank and step: {_us(dl['base_median_us'])} → {_us(dl['run_median_us'])} "
                f"{_pct(dl['change_pct'])}"] if (dl := d.get("data_loading")) else []),
             "", f"{word}s (time per rank and step, the mean of the steps; sorted by change; "
                 f"{d['kernels_scope']['note'].replace('kernel', word)})",
             f"  {'count':>13}  {'per step':>21}  {'change':>16}  name"]
    for k in d["kernels"][:limit]:
        lines.append(f"  {_num(k['base_count']):>6}→{_num(k['run_count']):<6}  "
                     f"{_us(k['base_per_step_us']):>10}→{_us(k['run_per_step_us']):<10}  "
                     f"{_us(k['change_us']):>9} {_pct(k['change_pct']):>6}  {k['name'][:70]} "
                     f"({kinds.get(k['kind'], k['kind'])})")
    if len(d["kernels"]) > limit:
        lines.append(f"  … {len(d['kernels']) - limit} more {word}s, each in `--format json`")
    lines += ["", "collectives (per step: the transfers' time; sorted by change)",
              f"  {'count':>13}  {'per step':>21}  {'busbw GB/s':>15}  {'change':>16}  op"]
    for c in d["collectives"][:limit]:
        bw = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
        lines.append(f"  {_num(c['base_count']):>6}→{_num(c['run_count']):<6}  "
                     f"{_us(c['base_per_step_us']):>10}→{_us(c['run_per_step_us']):<10}  "
                     f"{bw(c['base_busbw_gbps']):>7}→{bw(c['run_busbw_gbps']):<7}  "
                     f"{_us(c['change_us']):>9} {_pct(c['change_pct']):>6}  {c['op']} {fmt_bytes(c['bytes'])}")
    return "\n".join(lines) + "\n"
