"""Profiling windows: the stretches of time a rank was traced. Time between two windows was never traced,
so it is never idle.

A rank has one window per trace file (two traces of one rank taken minutes apart are two windows), and a
file is cut in two wherever no event at all, CPU or GPU, covers more than the gap threshold::

    threshold = max(MIN_GAP_NS, GAP_STEPS × median ProfilerStep duration of the file)

with ``MIN_GAP_NS`` = 1 s and ``GAP_STEPS`` = 5 (1 s where the file has no steps). The uncovered time is
found with the running maximum of the event ends: sorted by start, event i opens a new window when
``start_i − max(end_1 .. end_{i−1}) > threshold``. An event that covers the time (a long CPU op, a
``ProfilerStep#N`` annotation around a data-loader stall) keeps the window whole: only time in which
nothing at all was recorded counts as a gap.

Example, threshold 1 s: events [0, 2) s, [1, 3) s, [200, 201) s -> windows [0, 3) s and [200, 201) s;
the 197 s between them are untraced.

Windows never overlap and no event crosses a window's edge (a file's windows are cut between events;
files of one rank whose times overlap are refused at ingest).
"""

from __future__ import annotations

from typing import Final

import numpy as np

#: Shortest gap with no event at all that cuts a trace into two windows.
MIN_GAP_NS: Final = 1_000_000_000
#: A gap must also be longer than this many median step durations.
GAP_STEPS: Final = 5


def gap_threshold_ns(step_durations_ns: np.ndarray) -> int:
    """``max(MIN_GAP_NS, GAP_STEPS × median step duration)``; ``MIN_GAP_NS`` without steps.

    Example: steps of 300 ms -> 1.5 s; steps of 50 ms -> 1 s.
    """
    if len(step_durations_ns) == 0:
        return MIN_GAP_NS
    return max(MIN_GAP_NS, int(GAP_STEPS * float(np.median(step_durations_ns))))


#: Above this many buckets (a trace whose events lie far apart) the coverage test is skipped.
MAX_BUCKETS: Final = 1 << 16


def split_windows(start_ns: np.ndarray, end_ns: np.ndarray, threshold_ns: int) -> list[list[int]]:
    """The windows ``[[start, end], ...]`` (ns, sorted) of one trace's events (module doc); [] for none.

    Most traces have no gap at all, which is found without sorting: cut time into buckets of half the
    threshold; a gap longer than the threshold holds a whole bucket no event touches. When every bucket
    is touched, the trace is one window; else (or with too many buckets) the events are sorted."""
    if len(start_ns) == 0:
        return []
    end_ns = np.maximum(end_ns, start_ns)
    lo, hi = int(start_ns.min()), int(end_ns.max())
    width = max(1, threshold_ns // 2)
    buckets = (hi - lo) // width + 1
    if buckets <= MAX_BUCKETS:
        first, last = (start_ns - lo) // width, (end_ns - lo) // width
        opened = np.bincount(first, minlength=buckets + 1) - np.bincount(last + 1, minlength=buckets + 1)
        if np.cumsum(opened[:buckets]).all():  # every bucket touched by some event: no gap can exceed the threshold
            return [[lo, hi]]
    order = np.argsort(start_ns, kind="stable")
    s, e = start_ns[order], end_ns[order]
    reach = np.maximum.accumulate(e)
    cut = np.flatnonzero(s[1:] - reach[:-1] > threshold_ns) + 1  # event i opens a window
    first_at = np.r_[0, cut]
    last_at = np.r_[cut - 1, len(s) - 1]
    return [[int(s[a]), int(reach[b])] for a, b in zip(first_at, last_at)]
