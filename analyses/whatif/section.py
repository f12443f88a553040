"""The report's ``whatif`` section: the two or three edits worth most, from the run's dependency model
(:mod:`.projections`), the sentence that leads with the best, and each step's critical path
(:mod:`.critical`: its share by kind and the ops with most time on it).

Computed by :func:`whatif_section` from the run's events (with the hosts' clock offsets the report
applies taken off). **Its cost is bounded by the run's size, the same on every machine**: a report is a
function of its run, so the section is computed, or not, whatever the machine's speed or load (a CPU-time
budget made two analyses of one run differ). It models whole steps, at most :data:`REPORT_STEP_EVENTS`
events of them by the manifest's counts (:func:`step_events`, :func:`chosen_steps`: the steps at evenly
spaced quantiles of the step time, so that slow and fast steps are both represented, as many as fit; at
least one), and says which (``steps_modelled`` of ``steps_in_run``); ``ddprof whatif RUN`` models every
step. The model holds about :data:`MODEL_BYTES_PER_EVENT` an event: where a single step is larger than
:data:`REPORT_STEP_EVENTS`, the section holds that one step's model, the only part of the report that
holds more than a group of ranks' events (one step of 1,024 ranks x 5 k events: 4.5 GB at the report's
peak, against 0.5 GB without the section). A step of more than :data:`REPORT_MAX_EVENTS` events is left
to ``ddprof whatif``, ``reason`` saying so, and so is a step whose model would not fit in
:data:`MEMORY_SHARE` of the memory available now. ``left_out`` lists the edits ``ddprof whatif`` leaves out
under its ``--budget``. Where the model does not explain the run, ``computed`` is false and
``reason`` says why (``ddprof whatif`` projects any edit on any run it explains, with no budget).
``DDPROF_WHATIF=off`` switches the section off (``benchmarks/whatif_cost.py`` compares the two).

The edits tried: the straggler removed (the :data:`REPORT_CANDIDATES` ranks that run longest above their
ops' typical values, one at a time), each group of ranks the stragglers section names slower together
made as fast as the others (one edit a group), communication twice as fast and fully overlapped, the
all-reduces that wait for the whole backward overlapped with it (:mod:`.overlap`), host gaps removed; an edit whose bound (:func:`.projections.bound`) shows it cannot enter the best :data:`KEEP`,
or save 1 % of the step, is not replayed.

Example: ``{computed: true, replay_error_pct: 0.0, step_us: 128622.2, edits: [{edit: "straggler_rank_2",
says: "making rank 2 as fast as the others", step_us: 77894.1, saving_us: 50728.1, saving_pct: 39.4},
...], verdict: "making rank 2 as fast as the others would cut the step from 128.6 ms to 77.9 ms (−39 %)"}``.
The report's verdicts say the best edit that removes a fault (:func:`whatif_verdicts`) only where the
saving is material (:data:`MATERIAL_PCT`) and the replay explains the run.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import msgspec
import polars as pl
from ddprof.analyses.clocks import ClockEstimate, align
from ddprof.analyses.dataloading import exposed, loading_rows
from ddprof.analyses.frames.memo import Prepared, collect
from ddprof.analyses.frames.sets import steps
from ddprof.analyses.sections import Section
from ddprof.analyses.straggler_cause import host_paused
from ddprof.analyses.whatif.projections import _ms, whatif
from msgspec import Meta

from ddprof.report.display import Column, Table
from ddprof.report.schema import Row, rows
from ddprof.store.rundir import Run
from ddprof.vocabulary.units import NS_PER_US, fmt_pct, fmt_ranges, fmt_us

#: The events of the steps the report models (module doc): whole steps up to this many, at least one.
REPORT_STEP_EVENTS = 100_000
#: A step of more events than this is left to ``ddprof whatif`` (module doc): about 6 GB of model, a step
#: of 1,024 ranks x 5 k events.
REPORT_MAX_EVENTS = 6_000_000
#: Peak memory of the model per event of the run (bytes): ``benchmarks/whatif_scale.py`` peaks at 5.8 GB for
#: 12.8 M ops (about 450 B an op), doubled for the store's rows read beside them.
MODEL_BYTES_PER_EVENT = 1_000
#: Event columns the model reads nowhere: left in the store (a third of the step's bytes in memory).
UNREAD = ("pid", "cat", "external_id", "in_bytes", "out_bytes", "dtype", "send_splits", "recv_splits", "shapes")
#: The share of the memory available that the model may take in the report.
MEMORY_SHARE = 0.5


def available_memory() -> int | None:
    """The memory available to this process now (bytes; Linux ``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


#: A saving, in % of the step, that the report's verdicts lead with.
MATERIAL_PCT = 5.0
#: The edits (name prefixes) that remove a fault, which the verdict may name.
FAULT_EDITS = ("straggler_", "no_host_gaps", "rebalanced", "grad_overlap", "no_data_loading")
#: Ranks tried one at a time for the straggler edit in the report.
REPORT_CANDIDATES = 8
#: Edits the section keeps, the best first.
KEEP = 3
#: Ops on the critical path the section lists.
TOP_OPS = 8


class WhatIfEdit(Row):
    """One edit replayed on the run's dependency model."""

    edit: Annotated[str, Meta(description="straggler_rank_R, comm_x2, comm_overlapped, no_host_gaps, ...")]
    says: Annotated[str, Meta(description="the edit in words")]
    step_us: Annotated[float, Meta(description="projected step time, µs (run's step: first start to last end)")]
    saving_us: Annotated[float, Meta(description="recorded step − projected step, µs")]
    saving_pct: Annotated[float, Meta(description="saving as a percentage of the recorded step")]


class CriticalKind(Row):
    """One kind of work or wait on the steps' critical paths."""

    kind: Annotated[str, Meta(description="compute, communication, host launch, data loading or idle")]
    us: Annotated[float, Meta(description="mean µs per step on the critical path")]
    pct: Annotated[float, Meta(description="share of the critical path, %")]


class CriticalOp(Row):
    """One op (rank, lane, name) with time on the steps' critical paths."""

    rank: int
    lane: Annotated[str, Meta(description="stream N (a device stream) or host (a host thread)")]
    name: str
    kind: Annotated[str, Meta(description="as in CriticalKind")]
    us: Annotated[float, Meta(description="mean µs per step on the critical path")]
    pct: Annotated[float, Meta(description="share of the critical path, %")]


class CriticalPath(Row):
    """The chain of work and waits that sets each step's time (analyses/whatif/critical.py)."""

    length_us: Annotated[float | None, Meta(description="mean critical path length per step, µs")] = None
    by_kind: list[CriticalKind] = []
    top_ops: list[CriticalOp] = []


class WhatIf(Row):
    """What the run's step time would be under the edits worth most (ddprof whatif for others)."""

    computed: Annotated[bool, Meta(description="the model was built and explains the run")] = False
    reason: Annotated[str | None, Meta(description="why not computed")] = None
    replay_error_pct: Annotated[float | None, Meta(
        description="replay of the recording: largest miss of a rank's step, % of the mean step")] = None
    step_us: Annotated[float | None, Meta(description="the run's mean step as replayed, µs")] = None
    edits: list[WhatIfEdit] = []
    verdict: Annotated[str | None, Meta(description="the best edit in a sentence")] = None
    left_out: Annotated[list[str], Meta(description="edits not replayed within the report's CPU budget")] = []
    critical_path: CriticalPath = msgspec.field(default_factory=CriticalPath)
    steps_modelled: Annotated[list[int], Meta(
        description="the steps modelled (whole steps at evenly spaced quantiles of the step time, up to the report's "
                    "event budget; ddprof whatif models every step)")] = []
    steps_in_run: Annotated[int | None, Meta(description="the run's steps")] = None


EMPTY: dict[str, Any] = {"computed": False, "reason": None, "replay_error_pct": None, "step_us": None, "edits": [],
                         "verdict": None, "left_out": [], "critical_path": {"length_us": None, "by_kind": [],
                                                                            "top_ops": []}, "steps_modelled": [], "steps_in_run": None}


def chosen_steps(events: Mapping[int, int], times: Mapping[int, float], budget: int) -> list[int]:
    """The steps the report models: of the steps in ``events`` (step → its events), the most ``k`` whose
    events add up to ``budget`` at most (one at least), taken at evenly spaced quantiles of the step time
    (``times``: step → its time; a step without one counts as the slowest), so that the slow steps are
    represented beside the fast ones as often as the run has them. Example: ten steps of 40 k events and a
    budget of 100 k: two steps, those at the 25th and 75th percentiles of the step time."""
    def time_of(s: int) -> float:
        t = times.get(s)
        return math.inf if t is None or t != t else float(t)  # none known (or NaN): the slowest

    order = sorted(events, key=lambda s: (time_of(s), s))
    n = len(order)
    for k in range(n, 0, -1):
        pick = sorted({order[min(n - 1, int((i + 0.5) * n / k))] for i in range(k)})
        if k == 1 or sum(events[s] for s in pick) <= budget:
            return pick
    return []


def step_events(run: Run) -> dict[int, int]:
    """Each step's events by the manifest's counts (no scan of the store): a rank's events spread evenly
    over its steps. Example: two ranks of 50 k events over steps 0-9: 10 k a step."""
    out: dict[int, float] = {}
    for r in run.ranks:
        info = run.rank_info(r)
        own = [int(s) for s in info.get("steps") or []]
        for s in own:
            out[s] = out.get(s, 0.0) + int(info.get("events") or 0) / len(own)
    return {s: math.ceil(v) for s, v in sorted(out.items())}


def step_us(run: Run) -> dict[int, float]:
    """Each step's time, µs: its longest ``ProfilerStep#N`` annotation on any rank (the report's step table,
    ``step_us``, its largest per step), read from the store's annotations alone."""
    st = steps(Prepared(run.events()))
    per = st.group_by("step").agg(((pl.col("end") - pl.col("start")).max() / NS_PER_US).alias("us"))
    return dict(zip(per["step"].to_list(), per["us"].to_list()))


def whatif_section(run: Run, clock: ClockEstimate | None = None,
                   groups: list[list[int]] | Callable[[], list[list[int]]] | None = None) -> dict[str, Any]:
    """The section of ``run`` (module doc), its events on one clock where ``clock`` (the report's estimate
    of the hosts' offsets) applies some; ``groups``: the groups of ranks the stragglers section names slower
    together, each tried as one edit, or a function that gives them when asked (:class:`Beside`). The steps
    modelled are chosen by their times (:func:`chosen_steps`, :func:`step_us`) where not all of them fit."""
    if os.environ.get("DDPROF_WHATIF", "").strip().lower() in ("0", "off", "no", "false"):
        return {**EMPTY, "reason": "switched off (DDPROF_WHATIF=off)"}
    counts = step_events(run)
    fit = sum(counts.values()) <= REPORT_STEP_EVENTS  # every step modelled: their times choose nothing
    chosen = chosen_steps(counts, {} if fit else step_us(run), REPORT_STEP_EVENTS)
    count, in_run = sum(counts[s] for s in chosen), len(counts)
    scope = {"steps_modelled": chosen, "steps_in_run": in_run}
    if count > REPORT_MAX_EVENTS:
        what = "a step of this run has" if len(chosen) == 1 else f"the {len(chosen)} steps modelled have"
        return {**EMPTY, **scope, "reason": (
            f"{what} {count:,} events; the report models steps of up to {REPORT_MAX_EVENTS:,} "
            f"(about {REPORT_MAX_EVENTS * MODEL_BYTES_PER_EVENT / 2**30:.1f} GiB of model): run ddprof whatif RUN "
            f"--steps {chosen[0] if chosen else 'N'} for one")}
    free = available_memory()
    if free is not None and count * MODEL_BYTES_PER_EVENT > MEMORY_SHARE * free:
        return {**EMPTY, **scope, "reason": (
            f"the model of {count:,} events would need about {count * MODEL_BYTES_PER_EVENT / 2**30:,.1f} GiB, more "
            f"than {100 * MEMORY_SHARE:.0f} % of the memory available ({free / 2**30:,.1f} GiB): run ddprof whatif "
            f"on a larger machine")}
    scan = run.events().drop(UNREAD, strict=False)
    scan = scan if len(chosen) == in_run else scan.filter(pl.col("step").is_in(chosen))
    events = Prepared(collect(scan).lazy())  # in memory once: the model's frames each read the events
    if clock is not None:
        events = align(events, clock)
    w = whatif(events, stragglers="auto", comm_k=[2.0, math.inf], host_gaps=True, attribute=False,
               max_candidates=REPORT_CANDIDATES, keep=KEEP, min_saving=0.01, groups=groups)
    if not w.explained:
        return {**EMPTY, **scope, "reason": w.reason}
    us = 1e6  # seconds to µs
    return {"computed": True, "reason": None, "replay_error_pct": w.replay_error_pct,
            "step_us": w.step_s * us,
            "edits": [{"edit": p.edit, "says": p.says, "step_us": p.step_s * us,
                       "saving_us": p.saving_s * us, "saving_pct": p.saving_pct}
                      for p in w.projections[:KEEP]],
            "verdict": w.verdict, "left_out": list(w.left_out), "critical_path": _critical(w), **scope}


class Beside:
    """The section computed on a thread of its own while the report computes the rest. It needs the clock
    estimate to begin (:meth:`start`, which the report's analysis calls as soon as it has it) and the
    stragglers section's groups only at the end (:meth:`result` hands them over and waits for the
    section). On a run of 1,024 ranks its model and replays (16 s) run beside the groups' frames (22 s)
    instead of after them. Leaving the ``with`` block hands over no groups if none were, so that a section
    whose report failed ends. Without :meth:`start`, :meth:`result` computes the section then.

    >>> with Beside(run) as section:                                                        # doctest: +SKIP
    ...     analysis = analyse_run(run, on_clock=section.start)
    ...     report["whatif"] = section.result(groups)
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self._clock: ClockEstimate | None = None
        self._thread: threading.Thread | None = None
        self._groups: list[list[int]] = []
        self._known = threading.Event()
        self._out: dict[str, Any] | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *exc: object) -> None:
        self._known.set()

    def start(self, clock: ClockEstimate | None) -> None:
        """Begin the section on the events on this clock."""
        self._clock = clock
        self._thread = threading.Thread(target=self._compute, name="ddprof-whatif", daemon=True)
        self._thread.start()

    def _compute(self) -> None:
        try:
            self._out = whatif_section(self.run, self._clock, groups=self._handed)
        except BaseException as exc:  # raised again where the report asks for the section
            self._error = exc

    def _handed(self) -> list[list[int]]:
        self._known.wait()
        return self._groups

    def result(self, groups: list[list[int]]) -> dict[str, Any]:
        """The section, with the stragglers section's ``groups`` tried as edits."""
        self._groups = groups
        self._known.set()
        if self._thread is None:
            return whatif_section(self.run, self._clock, groups=groups)
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out


def _critical(w: Any) -> dict[str, Any]:
    cp = w.critical
    if cp is None or cp.steps.is_empty():
        return dict(EMPTY["critical_path"])
    us = 1e6
    return {"length_us": float(cp.steps["length"].mean()) * us,
            "by_kind": [{"kind": k, "us": s * us, "pct": 100 * sh}
                        for k, s, sh in cp.by_kind().iter_rows()],
            "top_ops": [{"rank": int(r["rank"]), "lane": r["lane"], "name": r["name"], "kind": r["kind"],
                         "us": r["s"] * us, "pct": 100 * r["share"]}
                        for r in cp.top_ops(TOP_OPS).iter_rows(named=True)]}


def _diagnosed(edit: str, report: dict[str, Any]) -> bool:
    """Whether the report found the fault ``edit`` removes: its ranks named by the straggler rule or given a
    cause (stalls, a stage holding the pipeline back), a stage holding the pipeline back for a rebalance,
    a device run for the host gaps (the device waits for its host; on a CPU-only run they are the CPU's own
    time outside ops). A projection alone does not make a fault: making any rank of a healthy run "as fast
    as the others" saves something, because ranks and stages never do exactly the same work."""
    st = report.get("stragglers") or {}
    causes = st.get("causes") or []
    if edit.startswith("straggler_"):
        ranks = {int(r) for r in edit.rsplit("_", 1)[-1:] if r.isdigit()} if edit.startswith("straggler_rank_") \
            else {int(r) for r in edit.removeprefix("straggler_ranks_").split("_") if r.isdigit()}
        # a rank not named by arrival order is diagnosed when its verdict says a cause: stalls, a stage
        found = set(st.get("ranks") or []) | {c.get("rank") for c in causes  # not pauses that were the host's
                                              if c.get("cause") in ("stalls", "pipeline imbalance")
                                              and not host_paused(c)} | {
            r for g in st.get("groups") or [] for r in g.get("ranks") or []}  # ranks slower together
        return bool(ranks) and ranks <= found
    if edit.startswith("rebalanced"):
        return any(c.get("cause") == "pipeline imbalance" for c in causes)
    if edit == "no_data_loading":  # the data loading verdict's finding (:mod:`analyses.dataloading`)
        return exposed(loading_rows(report))
    if edit.startswith("no_host_gaps"):
        return (report.get("run") or {}).get("device") == "gpu"
    # Several all-reduces that began only after the whole backward (:mod:`.overlap`): the edit exists only
    # where the trace shows that.
    return edit == "grad_overlap"


def whatif_verdicts(report: dict[str, Any]) -> list[str]:
    """The sentence of the best edit that removes a fault (:data:`FAULT_EDITS`: a straggler, idle host
    gaps, unbalanced pipeline stages, all-reduces held back until the backward ended), where the replay explains the run (``computed``) and the edit saves
    at least :data:`MATERIAL_PCT` of the step; nothing otherwise (a healthy run). Faster or free
    communication is an ideal, not a fault: the overlap verdict speaks for exposed communication.
    Example: "making rank 7 as fast as the others would cut the step from 19.9 ms to 13.1 ms (−34 %)"."""
    w = msgspec.convert(report.get("whatif") or {}, WhatIf)
    if not w.computed or w.step_us is None:
        return []
    best = next((e for e in w.edits if e.edit.startswith(FAULT_EDITS) and _diagnosed(e.edit, report)), None)
    if best is None or best.saving_pct < MATERIAL_PCT:
        return []
    return [f"{best.says} would cut the step from {_ms(w.step_us / 1e6)} to {_ms(best.step_us / 1e6)} "
            f"(−{best.saving_pct:.0f} %)"]


def scope(w: dict[str, Any]) -> str:
    """The steps the section modelled, where not all of them: "on steps 3, 7 of 10"."""
    chosen, total = w.get("steps_modelled") or [], w.get("steps_in_run") or 0
    if not w.get("computed") or not chosen or len(chosen) >= total:
        return ""
    return f"on step{'s' if len(chosen) > 1 else ''} {fmt_ranges(chosen)} of {total}"


WHATIF_TABLE = Table(
    lambda r: (f"What if, {where}: the step under the edits worth most (ddprof whatif RUN models every step)"
               if (where := scope(r.get("whatif") or {})) else
               "What if: the step under the edits worth most (ddprof whatif RUN for more)"),
    (Column("edit", "says"), Column("step", "step_us", fmt_us), Column("saving", "saving_us", fmt_us),
     Column("saving %", "saving_pct", fmt_pct)),
    rows=lambda r: rows((r.get("whatif") or {}).get("edits") or [], WhatIfEdit), left=1, at=45,
    note=lambda r: (r.get("whatif") or {}).get("verdict") or "")


def _cp(r: dict[str, Any]) -> CriticalPath:
    return msgspec.convert(((r.get("whatif") or {}).get("critical_path") or {}), CriticalPath)


CRITICAL_KIND_TABLE = Table(
    lambda r: f"Critical path by kind ({fmt_us(_cp(r).length_us)} a step)",
    (Column("kind", "kind"), Column("per step", "us", fmt_us), Column("share", "pct", fmt_pct)),
    rows=lambda r: [k for k in _cp(r).by_kind if k.us], left=1, at=46)

CRITICAL_OPS_TABLE = Table(
    "Critical path: the ops with most time on it",
    (Column("op", "name"), Column("kind", "kind"), Column("rank", "rank"), Column("lane", "lane"),
     Column("per step", "us", fmt_us), Column("share", "pct", fmt_pct)),
    rows=lambda r: _cp(r).top_ops, left=2, at=47)

SECTIONS = (
    Section("whatif", dict(EMPTY), analysed=False, tables=(WHATIF_TABLE, CRITICAL_KIND_TABLE, CRITICAL_OPS_TABLE),
            verdict=whatif_verdicts, verdict_at=25, record=WhatIf, order=65),
)
