"""Comparing a run with a baseline: the regression check and the side-by-side diff.

:mod:`.load` (a report from a saved JSON report, a run dir or raw traces), :mod:`.job` (same job? same
workload?), :mod:`.samples` (the distributions a report holds), :mod:`.stats` (is a change more than
noise), :mod:`.rules` (default tolerances, TOML), :mod:`.check` (the rules applied), :mod:`.explain`
(the likely cause of each failed rule), :mod:`.cause` (what kind of change it is: environment, code,
communication, one rank or workload), :mod:`.words` (direction words that follow the sign), :mod:`.diff`
(the table per kernel and collective); the text and JUnit XML are in :mod:`ddprof.render.compare`.
"""
