"""The frames the timeline metrics share, each derived once from the event table.

:mod:`.memo` (the memo and the :func:`~.memo.derived` declaration), :mod:`.sets` (which rows are
compute, communication and device work; profiler steps), :mod:`.windows` (profiling windows),
:mod:`.stepwindows` (the device or host step windows per-step numbers are measured in), :mod:`.intervals`
(interval math: merge, difference, clip, union lengths) and :mod:`.lengths` (the union lengths overlap,
breakdown and bubbles read).
"""
