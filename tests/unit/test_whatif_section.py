"""The report's ``whatif`` section (analyses/whatif/section.py): the edits worth most on a run, its
sentence, and why it is left out where it is."""

from __future__ import annotations

import msgspec

from ddprof.analyses.report import build_report
from ddprof.analyses.whatif import section
from ddprof.render.text import render_text


def test_the_gloo_sample_reports_its_sleeping_rank_first(ingested):
    report = build_report(ingested("gloo-ddp-4rank-slow-rank"))
    w = msgspec.convert(report["whatif"], section.WhatIf)
    assert w.computed and w.reason is None and w.replay_error_pct <= 2.0
    assert 1 <= len(w.edits) <= section.KEEP
    assert w.edits[0].edit == "straggler_rank_2" and w.edits[0].saving_pct > 30
    assert [e.saving_us for e in w.edits] == sorted((e.saving_us for e in w.edits), reverse=True)
    assert w.verdict.startswith("making rank 2 as fast as the others would cut the step from ")
    text = render_text(report)
    assert "What if: the step under the edits worth most" in text and w.verdict in text


def test_a_run_larger_than_the_report_replays_is_left_to_ddprof_whatif(ingested, monkeypatch):
    monkeypatch.setattr(section, "MAX_REPORT_EVENTS", 10)
    w = msgspec.convert(build_report(ingested("gloo-ddp-4rank-slow-rank"))["whatif"], section.WhatIf)
    assert not w.computed and w.edits == [] and "run ddprof whatif" in w.reason
