"""The regression check: a run against a baseline, rule by rule (:mod:`.rules`), as one result dict.

``check(run, base, rules, more_baselines=[(report, source), ...])`` returns (with more baselines, a rule
fails only when it fails against each; :func:`_against_all`)::

    {status: "ok" | "regression" | "environment_changed" | "workload_changed", cause: {class, rank, summary, evidence} | null,
     environment: "fail" | "warn", confidence, run: {...}, baseline: {...}, more_baselines: [{...}],
     job_differences: [..],
     summary: [sentences], outcomes: [{id, rule, subject, kind, outcome, unit, baseline, run, change,
     change_pct, interval, tolerance, samples, message, cause}]}

``cause`` is what kind of change it is (:mod:`.cause`: environment, code, communication, rank,
workload, or unclear), given when a rule comparing the two runs failed or the workload changed, else null
(an absolute rule compares the run alone: a bound broken is no change to explain). With ``environment``
warn, a change whose cause is the environment does not fail: its relative and straggler outcomes become
``warn`` and the status is ok (absolute rules still fail: a bound is a bound); with fail (the default), its
status is environment_changed (regression where an absolute rule failed too): the gate fails, and says the
machine changed, not the job.

``outcome`` is pass, fail, warn or skip; ``kind`` relative (noise-aware, :mod:`.stats`), absolute (noise-aware
against a fixed bound: :func:`absolute`), straggler or workload. A relative outcome fails when its interval lies wholly on the worse side of zero and its change
is at least the tolerance. When the workload changed (:mod:`.job`), the rules whose numbers depend on it
(step time, exposed communication, overlap, idle, bubble, kernels) are skipped, not failed: the run does
other work, it is not slower. A baseline of another job raises :class:`DifferentJobError` unless
``allow_different_job``. ``status`` is regression when a rule failed (environment_changed when the cause
of the failures is the environment), else workload_changed when the workload did, else ok. ``summary`` is the failures told shortest first, the likely cause leading and the
per-rank step-time rules of a family on one line (:mod:`.group`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np
from ddprof.analyses.compare import samples as S
from ddprof.analyses.compare.cause import (
    classify,
    moved,
    program_only,
    same_work_only,
    shares_only,
    tail_only,
)
from ddprof.analyses.compare.explain import attach_causes, straggler_outcomes
from ddprof.analyses.compare.group import grouped_summary
from ddprof.analyses.compare.job import job_differences, workload_changes
from ddprof.analyses.compare.rules import DEFAULTS
from ddprof.analyses.compare.samples import op_word
from ddprof.analyses.compare.stats import Shift, hodges_lehmann, quantile_interval, quantile_shift
from ddprof.analyses.compare.words import amount, direction, fmt, signed

from ddprof.errors import BadInputError
from ddprof.report.schema import RunSection
from ddprof.vocabulary.collective_ops import MARKER_RE
from ddprof.vocabulary.units import fmt_bytes, fmt_us

#: Whether a change whose cause is the environment fails the check (``--environment``, ``environment`` in
#: the rules file): fail (the default: it is still slower, and says why) or warn (exit 0, the rules marked warn).
ENVIRONMENT_POLICIES = ("fail", "warn")
#: The outcomes a change of the environment explains (an absolute rule's bound is the run's alone).
ENVIRONMENT_KINDS = ("relative", "straggler")
WORKLOAD_BOUND = ("step_time", "step_time_p90", "exposed_comm", "overlap", "idle", "bubble", "kernels", "data_loading")


class DifferentJobError(BadInputError):
    """The baseline is another job (exit 2); the message gives each difference."""


_fmt, _signed = fmt, signed


def relative(rule: str, subject: str, base: np.ndarray, run: np.ndarray, *, what: str, unit: str,
             worse_if_higher: bool, tolerance: float, tolerance_text: str, confidence: float,
             quantile: float | None = None, label: str | None = None,
             groups: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """One noise-aware outcome (module doc): the medians (or quantiles) of both samples, the shift with its
    interval, the decision and a sentence. The sentence begins with ``label`` when given, else
    "WHAT (SUBJECT)"; its direction word follows the sign of the number beside it (:mod:`.words`): the
    change of the medians, or the shift when the two disagree ("rose 1.6 pts (shift, ...; the medians
    53.6 % → 50.7 %)")."""
    out: dict[str, Any] = {"id": f"{rule}[{subject}]", "rule": rule, "subject": subject, "kind": "relative",
                           "unit": unit, "tolerance": tolerance, "samples": [int(base.size), int(run.size)],
                           "cause": None}
    if not base.size or not run.size:
        side = "baseline" if not base.size else "run"
        return {**out, "outcome": "skip", "baseline": None, "run": None, "change": None, "change_pct": None,
                "interval": None, "message": f"{what} ({subject}): nothing to compare in the {side}"}
    stat = (lambda a: float(np.quantile(a, quantile))) if quantile is not None else (lambda a: float(np.median(a)))
    b, r = stat(base), stat(run)
    shift: Shift = (quantile_shift(base, run, quantile, confidence, groups=groups) if quantile is not None
                    else hodges_lehmann(base, run, confidence))
    sign = 1.0 if worse_if_higher else -1.0
    worse = sign * shift.estimate
    iv = shift.interval
    beyond_noise = iv is not None and (iv[0] > 0 if worse_if_higher else iv[1] < 0)
    failed = beyond_noise and worse >= tolerance
    pct = 100 * (r - b) / b if b else None
    interval_text = (f"{100 * confidence:g} % interval {_signed(iv[0], unit)} … {_signed(iv[1], unit)}" if iv
                     else "too few values for an interval at this confidence")
    # the direction word follows the sign of the number beside it: the medians' change, or the shift (what
    # the rule tests) when the two disagree
    head = label or f"{what} ({subject})"
    # a median's change on the other side of the tolerance from the shift's (one slow step moves a median of
    # few steps) would read "rose 8 %; tolerance 10 %" on a failed rule: the shift leads then
    medians_agree = not beyond_noise or (sign * (r - b) >= tolerance) == failed
    if r == b and shift.estimate == 0:
        msg = f"{head} did not change: {_fmt(b, unit)} → {_fmt(r, unit)} ({interval_text}; tolerance {tolerance_text})"
    elif (r - b) * shift.estimate >= 0 and r != b and medians_agree:
        change_text = f"{abs(pct):.0f} %" if pct is not None and unit != "%" else amount(r - b, unit)
        msg = (f"{head} {direction(r - b)} {change_text}: {_fmt(b, unit)} → {_fmt(r, unit)} "
               f"(shift {_signed(shift.estimate, unit)}, {interval_text}; tolerance {tolerance_text})")
    else:
        by = (f"{abs(100 * shift.estimate / b):.0f} % ({_signed(shift.estimate, unit)} " if b and unit != "%"
              else f"{amount(shift.estimate, unit)} (")
        msg = (f"{head} {direction(shift.estimate)} {by}shift, {interval_text}; "
               f"the medians {_fmt(b, unit)} → {_fmt(r, unit)}; tolerance {tolerance_text})")
    if not failed:
        why = ("within tolerance" if beyond_noise else "within the noise" if iv else "not enough values to tell")
        msg += f": {why}"
    return {**out, "outcome": "fail" if failed else "pass", "baseline": b, "run": r, "change": shift.estimate,
            "change_pct": pct, "interval": list(iv) if iv else None, "message": msg}


def _relative_rules(base: dict[str, Any], run: dict[str, Any], rules: dict[str, Any]) -> list[dict[str, Any]]:
    c = rules["confidence"]
    out: list[dict[str, Any]] = []
    bs, rs = S.step_us(base), S.step_us(run)
    med = float(np.median(bs[None])) if None in bs else 0.0
    st = rules["step_time"]
    if st["enabled"] and None in bs:
        tol = max(st["tolerance_pct"] / 100 * med, st["min_change_us"])
        text = f"{st['tolerance_pct']:g} % = {fmt_us(tol)}"
        out.append(relative("step_time", "all ranks", bs[None], rs.get(None, np.empty(0)), what="median step time",
                            unit="us", worse_if_higher=True, tolerance=tol, tolerance_text=text, confidence=c))
        for rank in sorted(k for k in bs if k is not None):
            rmed = float(np.median(bs[rank]))
            tol_r = max(st["tolerance_pct"] / 100 * rmed, st["min_change_us"])
            out.append(relative("step_time", f"rank {rank}", bs[rank], rs.get(rank, np.empty(0)),
                                what="median step time", unit="us", worse_if_higher=True, tolerance=tol_r,
                                tolerance_text=f"{st['tolerance_pct']:g} % = {fmt_us(tol_r)}", confidence=c))
    p9 = rules["step_time_p90"]
    if p9["enabled"] and None in bs:
        for key in [None, *sorted(k for k in bs if k is not None)]:
            q = float(np.quantile(bs[key], 0.9))
            tol = max(p9["tolerance_pct"] / 100 * q, p9["min_change_us"])
            out.append(relative("step_time_p90", "all ranks" if key is None else f"rank {key}", bs[key],
                                rs.get(key, np.empty(0)), what="p90 step time", unit="us", worse_if_higher=True,
                                tolerance=tol, tolerance_text=f"{p9['tolerance_pct']:g} % = {fmt_us(tol)}",
                                confidence=c, quantile=0.9,
                                groups=(S.step_labels(base), S.step_labels(run)) if key is None else None))
    faster = functools.cache(lambda: _step_fell(bs.get(None, np.empty(0)), rs.get(None, np.empty(0)), c))
    for rule, what, worse_high, get in (
            ("exposed_comm", "exposed communication (% of step)", True, S.exposed_pct),
            ("overlap", "communication overlapped with compute", False, S.overlap_pct),
            ("idle", "idle share of the step", True, S.idle_pct)):
        cfg = rules[rule]
        b_arr, r_arr = get(base), get(run)
        if cfg["enabled"] and b_arr.size:
            o = relative(rule, "all ranks", b_arr, r_arr, what=what, unit="%", worse_if_higher=worse_high,
                         tolerance=cfg["tolerance_pts"], tolerance_text=f"{cfg['tolerance_pts']:g} pts", confidence=c)
            if o["outcome"] == "fail" and (fell := faster()) is not None:
                because = (SHORTER_STEP_HIDES_LESS if rule == "overlap" else "the same time is a larger share "
                           "of a shorter step")
                o = {**o, "outcome": "pass", "message": f"{o['message']}: {fell}: {because}, no slower"}
            out.append(o)
    if rules["bubble"]["enabled"]:
        rb = S.bubble_by_stage(run)
        tol = rules["bubble"]["tolerance_pts"]
        sides = functools.cache(lambda col: (S.bubble_by_stage(base, col), S.bubble_by_stage(run, col)))
        for stage, arr in S.bubble_by_stage(base).items():
            o = relative("bubble", f"stage {stage}", arr, rb.get(stage, np.empty(0)), what="pipeline bubble",
                         unit="%", worse_if_higher=True, tolerance=tol, tolerance_text=f"{tol:g} pts", confidence=c)
            out.append(_faster_stage(o, sides, stage, c) if o["outcome"] == "fail" else o)
    if rules["busbw"]["enabled"]:
        rb2 = S.busbw(run)
        pct, floor = rules["busbw"]["tolerance_pct"], rules["busbw"]["min_bytes"]
        for (op, nbytes), arr in S.busbw(base).items():
            if (op, nbytes) not in rb2:
                continue  # a message size gone is a workload change, reported there
            if nbytes < floor:
                out.append(_latency_bound(op, nbytes, floor))
                continue
            tol = pct / 100 * float(np.median(arr))
            out.append(relative("busbw", f"{op} {fmt_bytes(nbytes)}", arr, rb2[(op, nbytes)], what="busbw",
                                unit="GB/s", worse_if_higher=False, tolerance=tol,
                                tolerance_text=f"{pct:g} % = {tol:.3g} GB/s", confidence=c))
        rl = S.busbw_links(run)
        for (op, nbytes, src, dst), arr in S.busbw_links(base).items():
            if (op, nbytes, src, dst) not in rl or nbytes < floor:
                continue
            tol = pct / 100 * float(np.median(arr))
            out.append(relative("busbw", f"{op} {fmt_bytes(nbytes)} rank {src}→{dst}", arr,
                                rl[(op, nbytes, src, dst)], what="busbw", unit="GB/s", worse_if_higher=False,
                                tolerance=tol, tolerance_text=f"{pct:g} % = {tol:.3g} GB/s", confidence=c))
    dl = rules["data_loading"]
    lb, lr = S.loading_us(base).get(None, np.empty(0)), S.loading_us(run).get(None, np.empty(0))
    if dl["enabled"] and med and (lb.any() or lr.any()):  # only where a side has a data loader
        tol = max(dl["tolerance_pct"] / 100 * float(np.median(lb)) if lb.size else 0.0, dl["min_share_pct"] / 100 * med)
        out.append(relative("data_loading", "all ranks", lb, lr, what="data loading per rank and step", unit="us",
                            worse_if_higher=True, tolerance=tol,
                            tolerance_text=f"{dl['tolerance_pct']:g} %, at least {dl['min_share_pct']:g} % of the step "
                                           f"= {fmt_us(tol)}", confidence=c))
    kc = rules["kernels"]
    if kc["enabled"] and med:
        word = op_word(run)
        held = functools.cache(lambda: _step_held(bs.get(None, np.empty(0)), rs.get(None, np.empty(0)), c))
        rk = S.kernel_steps(run, per_rank=True)
        for (name, kind), arr in S.kernel_steps(base, per_rank=True).items():
            if (name, kind) not in rk or not arr.size:
                continue
            kmed = float(np.median(arr))
            tol = max(kc["tolerance_pct"] / 100 * kmed, kc["min_share_pct"] / 100 * med)
            what = word if kind != "comm" else ("gloo op" if word == "CPU op" else "communication kernel")
            o = relative("kernels", name, arr, rk[(name, kind)], what=f"{what} time per rank and step",
                         unit="us", worse_if_higher=True, tolerance=tol,
                         tolerance_text=f"{kc['tolerance_pct']:g} %, at least {kc['min_share_pct']:g} % of the "
                                        f"step = {fmt_us(tol)}", confidence=c,
                         label=f"{what} {name}: time per rank and step (median of the steps)")
            if o["outcome"] == "fail" and (kind == "comm" or MARKER_RE.match(name)) and (why := held()) is not None:
                o = {**o, "outcome": "pass", "message": f"{o['message']}: {why}"}
            out.append(o)
    return out


def _step_fell_or_held(base: dict[str, Any], run: dict[str, Any]) -> bool:
    """Whether the median step time (pooled over the ranks) did not rise: run's median at most the baseline's."""
    b, r = S.step_us(base).get(None, np.empty(0)), S.step_us(run).get(None, np.empty(0))
    return bool(b.size and r.size and np.median(r) <= np.median(b))


def _step_held(base: np.ndarray, run: np.ndarray, confidence: float) -> str | None:
    """Why a collective whose time per step rose is no regression, where the step time did not rise beyond the
    noise: a collective's time holds its wait for the slowest member, so time the ranks spend elsewhere moves
    into it or out of it (a clean 2-rank DDP run against another: ``c10d::allreduce_`` 183 µs → 434 µs, the
    step within its noise). Its bandwidth is judged by the busbw rule. None where the step rose."""
    step = moved("step", base, run, confidence)
    if step is None or (step.beyond_noise and step.shift > 0):
        return None
    return ("the step time did not rise beyond its noise: a collective's time holds its wait for the slowest "
            "member, and that wait moved, no slower")


#: Why less overlap in a faster run is no regression (a real clean DDP run on a faster machine moment hid
#: 14 % of its communication behind compute, against 33 % in the slower run it was checked against).
SHORTER_STEP_HIDES_LESS = "less compute runs beside the same communication in a shorter step"


def _step_fell(base: np.ndarray, run: np.ndarray, confidence: float) -> str | None:
    """Where the step time fell beyond the noise, the clause that says so: a share of the step that rose, or
    overlap that fell, is then no regression (the same time in a shorter step is a larger share of it: a real
    clean pipeline run's idle share rose 5.2 points as its step fell 18.9 ms). None where the step did not
    fall."""
    step = moved("step", base, run, confidence)
    if step is None or not step.beyond_noise or step.shift >= 0:
        return None
    return f"the step time fell {fmt_us(-step.shift)} ({fmt_us(step.base)} → {fmt_us(step.run)})"


def _faster_stage(o: dict[str, Any], sides: Callable[[str], tuple[dict[int, np.ndarray], dict[int, np.ndarray]]],
                  stage: int, confidence: float) -> dict[str, Any]:
    """A failed bubble outcome passed when the stage's compute fell beyond the noise and its step did not
    rise: it waits more for the other stages because it got faster, and the pipeline is no slower.
    ``sides(column)``: the baseline's and the run's ``bubbles`` column per stage."""
    none = np.empty(0)
    (cb, cr), (wb, wr) = sides("compute_us"), sides("window_us")
    comp = moved("compute", cb.get(stage, none), cr.get(stage, none), confidence)
    window = moved("step", wb.get(stage, none), wr.get(stage, none), confidence)
    if comp is None or window is None or not comp.beyond_noise or comp.shift >= 0 or (
            window.beyond_noise and window.shift > 0):
        return o
    return {**o, "outcome": "pass",
            "message": f"{o['message']}: the stage's compute per step fell {fmt_us(-comp.shift)} "
                       f"({fmt_us(comp.base)} → {fmt_us(comp.run)}) and its step did not rise: it waits more for "
                       "the other stages because it got faster, no slower"}


def _latency_bound(op: str, nbytes: int, floor: int) -> dict[str, Any]:
    """The skipped busbw outcome of a message under the busbw rule's ``min_bytes``."""
    subject = f"{op} {fmt_bytes(nbytes)}"
    return {"id": f"busbw[{subject}]", "rule": "busbw", "subject": subject, "kind": "relative", "unit": "GB/s",
            "tolerance": None, "samples": None, "cause": None, "outcome": "skip", "baseline": None, "run": None,
            "change": None, "change_pct": None, "interval": None,
            "message": f"busbw ({subject}): not compared, under {fmt_bytes(floor)}: its time is mostly the "
                       "collective's fixed cost, not bandwidth (it counts in the step time and the op's time per step)"}


def _absolute_sample(run: dict[str, Any], rule: dict[str, Any]) -> tuple[np.ndarray | None, float, str, str, str]:
    """(the run's values, the quantile compared, unit, subject, what one value is) of an absolute rule."""
    m = rule["metric"]
    if m == "busbw_gbps":
        return (S.busbw(run).get((rule["op"], rule["bytes"])), 0.5, "GB/s", f"{rule['op']} {fmt_bytes(rule['bytes'])}",
                "instances")
    arrays = {"step_time_us": S.step_us(run).get(None), "step_time_p90_us": S.step_us(run).get(None),
              "exposed_comm_pct": S.exposed_pct(run), "overlap_pct": S.overlap_pct(run),
              "idle_pct": S.idle_pct(run),
              "bubble_pct": S.bubble_pct(run)}
    return (arrays[m], 0.9 if m == "step_time_p90_us" else 0.5, "us" if m.endswith("_us") else "%", "all ranks",
            "(rank, step) values")


def absolute(rule: dict[str, Any], values: np.ndarray | None, q: float, unit: str, subject: str, per: str,
             confidence: float) -> dict[str, Any]:
    """One absolute rule, noise-aware: the run's median (p90 for step_time_p90_us) with its order-statistic
    interval (:func:`~.stats.quantile_interval`) against the bound. It fails when the whole interval is beyond
    the bound (a violation the noise cannot explain) and passes when the whole interval is within it; when the
    bound lies inside the interval the noise cannot tell: it passes, or fails with ``strict = true``. Too few
    values for an interval: judged on the statistic alone, and said so. Example: busbw ≥ 150 GB/s, median
    104 GB/s with 99 % interval 101 … 107 GB/s -> fail; median 148 GB/s, interval 139 … 156 GB/s -> pass
    (not beyond the noise)."""
    bound = " and ".join(f"{'≥' if k == 'min' else '≤'} {_fmt(rule[k], unit)}" for k in ("min", "max") if k in rule)
    name = rule.get("name") or f"{rule['metric']} {bound}"
    stat = "p90" if q == 0.9 else "median"
    out: dict[str, Any] = {"id": f"absolute[{name}]", "rule": "absolute", "subject": subject, "kind": "absolute",
                           "unit": unit, "baseline": None, "change": None, "change_pct": None, "tolerance": None,
                           "cause": None}
    if values is None or not values.size:
        return {**out, "outcome": "fail", "run": None, "interval": None, "samples": [0, 0],
                "message": f"{rule['metric']} ({subject}): the run has no such value, required {bound}"}
    shift = quantile_interval(values, q, confidence)
    value, iv = shift.estimate, shift.interval

    def within(x: float) -> bool:
        return ("min" not in rule or x >= rule["min"]) and ("max" not in rule or x <= rule["max"])

    if iv is None:
        ok = within(value)
        verdict = (f"{'meets' if ok else 'violates'} the bound, judged on the {stat} alone: too few values for an "
                   f"interval at {100 * confidence:g} %")
    elif within(iv[0]) and within(iv[1]):
        ok, verdict = True, "the whole interval meets the bound"
    elif ("min" in rule and iv[1] < rule["min"]) or ("max" in rule and iv[0] > rule["max"]):
        ok, verdict = False, "the whole interval violates the bound: beyond the noise"
    else:
        ok = not rule.get("strict", False)
        verdict = ("the bound lies inside the interval: the noise cannot tell"
                   + (" (strict: fails unless the whole interval meets it)" if not ok else ", so not a violation"))
    interval_text = (f"{100 * confidence:g} % interval {_fmt(iv[0], unit)} … {_fmt(iv[1], unit)}, " if iv else "")
    msg = (f"{rule['metric']} ({subject}): {stat} {_fmt(value, unit)} ({interval_text}{values.size} {per}), "
           f"required {bound}: {verdict}")
    return {**out, "outcome": "pass" if ok else "fail", "run": value, "interval": list(iv) if iv else None,
            "samples": [0, int(values.size)], "message": msg}


def _absolute_rules(run: dict[str, Any], rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [absolute(rule, *_absolute_sample(run, rule), rules["confidence"]) for rule in rules["absolute"]]


def describe(report: dict[str, Any], source: str) -> dict[str, Any]:
    r = msgspec.convert(report["run"], RunSection)
    return {"source": source, "world_size": r.world_size, "ranks": r.ranks, "steps": r.steps, "device": r.device,
            "backend": r.backend}


def _against_all(per_base: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One outcome per rule from its outcomes against each baseline (the first's order): a failure
    against every baseline stays one, told against the baseline it moved least from; otherwise the first
    outcome that did not fail, which says so."""
    n = len(per_base)
    index = [{o["id"]: o for o in outcomes} for outcomes in per_base]
    out = []
    for o in per_base[0]:
        each = [ix[o["id"]] for ix in index if o["id"] in ix]
        failed = [x for x in each if x["outcome"] == "fail"]
        if len(failed) == n:
            out.append(min(failed, key=lambda x: abs(x["change"]) if x.get("change") is not None else 0.0))
        elif failed:
            kept = next(x for x in each if x["outcome"] != "fail")
            out.append({**kept, "message": f"{kept['message']} (worse than {len(failed)} of the {n} baselines, "
                                           "not all: within their spread)"})
        else:
            out.append(o)
    return out


def check(run: dict[str, Any], base: dict[str, Any], rules: dict[str, Any] | None = None, *,
          allow_different_job: bool = False, run_source: str = "run", base_source: str = "baseline",
          environment: str | None = None,
          more_baselines: Sequence[tuple[dict[str, Any], str]] = ()) -> dict[str, Any]:
    """The check of report ``run`` against report ``base`` (module doc). ``environment`` (``fail`` or
    ``warn``; default: the rules' ``environment``, itself ``fail``): whether a change whose cause is the
    environment fails the check. ``more_baselines``: (report, source) of further runs of the same job: a
    rule fails only when it fails against every baseline (:func:`_against_all`). Two runs of one job differ
    by more than one run's steps do (another night, another machine's load): the baselines show that
    spread, and a run within it is no regression."""
    rules = rules if rules is not None else DEFAULTS
    policy = environment or rules.get("environment", "fail")
    if policy not in ENVIRONMENT_POLICIES:
        raise BadInputError(f"environment must be one of {', '.join(ENVIRONMENT_POLICIES)}, got {policy!r}")
    diffs = job_differences(base, run)
    for b, source in ((base, base_source), *more_baselines):
        d = diffs if b is base else job_differences(b, run)
        if d and not allow_different_job:
            raise DifferentJobError("the baseline is another job: " + "; ".join(d)
                                    + " (compare anyway with --allow-different-job)", path=source)
    changes = workload_changes(base, run, rules["workload"]) if rules["workload"]["enabled"] else []
    outcomes = _outcomes(run, base, rules, changes)
    if more_baselines:
        outcomes = _against_all([outcomes, *(_outcomes(run, b, rules, changes) for b, _ in more_baselines)])
    return _finish(run, base, rules, policy, diffs, changes, outcomes, run_source, base_source, more_baselines)


def _outcomes(run: dict[str, Any], base: dict[str, Any], rules: dict[str, Any],
              changes: list[str]) -> list[dict[str, Any]]:
    """Every rule's outcome of ``run`` against ``base``: workload, relative, straggler, absolute."""
    outcomes: list[dict[str, Any]] = []
    if rules["workload"]["enabled"]:
        outcomes.append({"id": "workload[per step]", "rule": "workload", "subject": "per step", "kind": "workload",
                         "outcome": "fail" if changes else "pass", "unit": None, "baseline": None, "run": None,
                         "change": None, "change_pct": None, "interval": None, "tolerance": None, "samples": None,
                         "message": ("the workload changed (not a slowdown): " + "; ".join(changes)) if changes
                         else f"the same work per step: collectives, {op_word(run)}s and message sizes", "cause": None})
    for o in _relative_rules(base, run, rules):
        if changes and o["rule"] in WORKLOAD_BOUND:
            o = {**o, "outcome": "skip", "message": f"not compared, the workload changed: {o['message']}"}
        outcomes.append(o)
    if rules["straggler"]["enabled"]:
        bs_all = S.step_us(base).get(None)
        st = rules["step_time"]
        tol = max(st["tolerance_pct"] / 100 * float(np.median(bs_all)), st["min_change_us"]) if bs_all is not None \
            else st["min_change_us"]
        outcomes.extend(straggler_outcomes(base, run, tol))
    outcomes.extend(_absolute_rules(run, rules))
    attach_causes(outcomes)
    return outcomes


def _finish(run: dict[str, Any], base: dict[str, Any], rules: dict[str, Any], policy: str, diffs: list[str],
            changes: list[str], outcomes: list[dict[str, Any]], run_source: str, base_source: str,
            more_baselines: Sequence[tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """The result of the outcomes: their cause (against the first baseline), summary and status."""
    failed = [o for o in outcomes if o["outcome"] == "fail" and o["kind"] != "workload"]
    cause = None
    if changes or any(o["kind"] != "absolute" for o in failed):  # a bound broken alone is no change to explain
        st = rules["step_time"]
        cause = classify(base, run, confidence=rules["confidence"], tolerance_pct=st["tolerance_pct"],
                         min_change_us=st["min_change_us"], workload_rule=rules["workload"],
                         bw_min_bytes=rules["busbw"]["min_bytes"])
        moved_only = [o for o in failed if o["kind"] != "absolute"]
        if cause is None:
            cause = (shares_only(run, [o["rule"] for o in moved_only]) or same_work_only(base, run, moved_only)
                     or tail_only(base, run, moved_only) or program_only(base, run, moved_only)) or {
                "class": "unclear", "rank": None, "summary": "rules failed, and no cause stands out beyond the noise",
                "evidence": [o["message"] for o in moved_only][:2]}
        elif cause["class"] == "unclear" and _step_fell_or_held(base, run):
            # what changed is a step time that fell; what failed, a p90 alone, is told by its own reading
            cause = tail_only(base, run, moved_only) or program_only(base, run, moved_only) or cause
        elif cause["class"] == "environment":  # not the rule that moved most: the machine moved them all
            for o in outcomes:
                if o["cause"]:
                    o["cause"] = f"the environment: {cause['summary']}"
    summary = grouped_summary(outcomes)  # told before a warning policy marks them, so a warning says what changed
    environmental = cause is not None and cause["class"] == "environment"
    if environmental and policy == "warn":
        for o in outcomes:
            if o["outcome"] == "fail" and o["kind"] in ENVIRONMENT_KINDS:
                o["outcome"] = "warn"
        failed = [o for o in failed if o["outcome"] == "fail"]
    # a bound broken (an absolute rule) is a regression whatever moved the rest: a bound is a bound
    machine_only = environmental and all(o["kind"] in ENVIRONMENT_KINDS for o in failed)
    status = ("environment_changed" if machine_only else "regression") if failed \
        else "workload_changed" if changes else "ok"
    if not summary:
        summary = [f"no regression: {sum(o['outcome'] == 'pass' for o in outcomes)} rules pass"]
    return {"status": status, "cause": cause, "environment": policy, "confidence": rules["confidence"],
            "run": describe(run, run_source), "baseline": describe(base, base_source),
            "more_baselines": [describe(b, source) for b, source in more_baselines], "job_differences": diffs,
            "summary": summary, "outcomes": outcomes}
