"""The report's ``whatif`` section: the two or three edits worth most, from the run's dependency model
(:mod:`.projections`), and the sentence that leads with the best.

Computed by :func:`whatif_section` from the run's events (with the hosts' clock offsets the report
applies taken off), only for a run of at most
:data:`MAX_REPORT_EVENTS` events (the report otherwise reads a group of ranks at a time, and the model
needs every rank at once); beyond, or where the model does not explain the run, ``computed`` is false
and ``reason`` says why (``ddprof whatif`` projects any edit on any run it explains). The edits tried:
the straggler removed (the :data:`REPORT_CANDIDATES` ranks that run longest above their ops' typical
values, one at a time), communication twice as fast and fully overlapped, host gaps removed.

Example: ``{computed: true, replay_error_pct: 0.0, step_us: 128622.2, edits: [{edit: "straggler_rank_2",
says: "making rank 2 as fast as the others", step_us: 81038.4, saving_us: 47583.8, saving_pct: 37.0},
...], verdict: "making rank 2 as fast as the others would cut the step from 128.6 ms to 81.0 ms (−37 %)"}``.
The sentence stays in the section: the report's verdicts are unchanged by it.
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Any

from ddprof.analyses.clocks import ClockEstimate, align
from ddprof.analyses.sections import Section
from ddprof.analyses.whatif.projections import whatif
from msgspec import Meta

from ddprof.report.display import Column, Table
from ddprof.report.schema import Row, rows
from ddprof.store.rundir import Run
from ddprof.vocabulary.units import fmt_pct, fmt_us

#: The report replays runs of at most this many events (ddprof whatif has no such limit).
MAX_REPORT_EVENTS = 1_000_000
#: Ranks tried one at a time for the straggler edit in the report.
REPORT_CANDIDATES = 8
#: Edits the section keeps, the best first.
KEEP = 3


class WhatIfEdit(Row):
    """One edit replayed on the run's dependency model."""

    edit: Annotated[str, Meta(description="straggler_rank_R, comm_x2, comm_overlapped, no_host_gaps, ...")]
    says: Annotated[str, Meta(description="the edit in words")]
    step_us: Annotated[float, Meta(description="projected step time, µs (run's step: first start to last end)")]
    saving_us: Annotated[float, Meta(description="recorded step − projected step, µs")]
    saving_pct: Annotated[float, Meta(description="saving as a percentage of the recorded step")]


class WhatIf(Row):
    """What the run's step time would be under the edits worth most (ddprof whatif for others)."""

    computed: Annotated[bool, Meta(description="the model was built and explains the run")] = False
    reason: Annotated[str | None, Meta(description="why not computed")] = None
    replay_error_pct: Annotated[float | None, Meta(
        description="replay of the recording: largest miss of a rank's step, % of the mean step")] = None
    step_us: Annotated[float | None, Meta(description="the run's mean step as replayed, µs")] = None
    edits: list[WhatIfEdit] = []
    verdict: Annotated[str | None, Meta(description="the best edit in a sentence")] = None


EMPTY: dict[str, Any] = {"computed": False, "reason": None, "replay_error_pct": None, "step_us": None, "edits": [],
                         "verdict": None}


def whatif_section(run: Run, clock: ClockEstimate | None = None) -> dict[str, Any]:
    """The section of ``run`` (module doc), its events on one clock where ``clock`` (the report's estimate
    of the hosts' offsets) applies some."""
    if os.environ.get("DDPROF_WHATIF", "").strip().lower() in ("0", "off", "no", "false"):
        return {**EMPTY, "reason": "switched off (DDPROF_WHATIF=off)"}
    count = sum(int(run.rank_info(r).get("events") or 0) for r in run.ranks)
    if count > MAX_REPORT_EVENTS:
        return {**EMPTY, "reason": f"the run has {count:,} events, more than the report replays "
                                   f"({MAX_REPORT_EVENTS:,}): run ddprof whatif"}
    events = align(run.events(), clock) if clock is not None else run.events()
    w = whatif(events, stragglers="auto", comm_k=[2.0, math.inf], host_gaps=True, attribute=False,
               max_candidates=REPORT_CANDIDATES)
    if not w.explained:
        return {**EMPTY, "reason": w.reason}
    us = 1e6  # seconds to µs
    return {"computed": True, "reason": None, "replay_error_pct": w.replay_error_pct, "step_us": w.step_s * us,
            "edits": [{"edit": p.edit, "says": p.says, "step_us": p.step_s * us, "saving_us": p.saving_s * us,
                       "saving_pct": p.saving_pct} for p in w.projections[:KEEP]],
            "verdict": w.verdict}


WHATIF_TABLE = Table(
    "What if: the step under the edits worth most (ddprof whatif RUN for more)",
    (Column("edit", "says"), Column("step", "step_us", fmt_us), Column("saving", "saving_us", fmt_us),
     Column("saving %", "saving_pct", fmt_pct)),
    rows=lambda r: rows((r.get("whatif") or {}).get("edits") or [], WhatIfEdit), left=1, at=45,
    note=lambda r: (r.get("whatif") or {}).get("verdict") or "")

SECTIONS = (
    Section("whatif", dict(EMPTY), analysed=False, tables=(WHATIF_TABLE,), record=WhatIf, order=65),
)
