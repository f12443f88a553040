"""The world size a trace claims, checked, and the ranks missing from it as ranges.

A world size is a claim, not a fact: ``1e12``, ``0``, ``-8``, ``"8"`` or ``8.5`` are ignored with a warning
naming the value, and nothing is ever sized by it (missing ranks are ranges, never one entry each).
"""

from __future__ import annotations

from typing import Any

#: Largest world size believed: a million ranks, beyond the largest jobs run (about 10^5 GPUs).
MAX_WORLD_SIZE = 1 << 20


def checked_world_size(value: Any, field: str = "world_size") -> tuple[int | None, str | None]:
    """The world size a trace claims if plausible, else None and the warning saying why (``field``: where
    the trace keeps it, e.g. Kineto's ``distributedInfo.world_size``).

    >>> checked_world_size(8)
    (8, None)
    >>> checked_world_size("8", "distributedInfo.world_size")
    (None, "distributedInfo.world_size '8' ignored: a str, not an integer")
    """
    if value is None:
        return None, None
    if not isinstance(value, int) or isinstance(value, bool):
        return None, f"{field} {value!r} ignored: a {type(value).__name__}, not an integer"
    if value <= 0:
        return None, f"{field} {value} ignored: not a positive integer"
    if value > MAX_WORLD_SIZE:
        return None, f"{field} {value} ignored: larger than any plausible job ({MAX_WORLD_SIZE} ranks)"
    return value, None


def missing_ranges(ranks: list[int], world: int) -> list[tuple[int, int]]:
    """The ranks in ``0..world-1`` absent from ``ranks``, as inclusive ``(first, last)`` ranges; the cost
    grows with the ranks present, not with ``world``.

    >>> missing_ranges([0, 1, 5], 8)
    [(2, 4), (6, 7)]
    """
    out, nxt = [], 0
    for r in sorted(set(ranks)):
        if r >= world:
            break
        if r > nxt:
            out.append((nxt, r - 1))
        nxt = max(nxt, r + 1)
    if nxt < world:
        out.append((nxt, world - 1))
    return out


def format_ranges(ranges: list[tuple[int, int]], limit: int = 16) -> str:
    """``[(2, 4), (6, 6)]`` -> ``'2-4, 6'``; past ``limit`` ranges, the count of ranks in all."""
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges[:limit])
    total = sum(b - a + 1 for a, b in ranges)
    return text + (f" ... ({total} in all)" if len(ranges) > limit else "")
