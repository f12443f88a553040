"""Comparing a run with a baseline: the regression check and the side-by-side diff.

:mod:`.load` (a report from a saved JSON report, a run dir or raw traces), :mod:`.job` (same job? same
workload?), :mod:`.samples` (the distributions a report holds), :mod:`.stats` (is a change more than
noise), :mod:`.rules` (default tolerances, TOML), :mod:`.check` (the rules applied), :mod:`.explain`
(the likely cause), :mod:`.diff` (the table per kernel and collective), :mod:`.render` (text, JUnit XML).
"""
