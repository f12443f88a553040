"""Units: ns per µs (the store's unit and the report's), and the one formatter of durations and of sizes
for people (and of percentages, numbers and rank lists), used by the verdicts and by every report table
(:mod:`ddprof.report.display`).

Three significant digits in the largest unit the value reaches; ``None`` (a value that does not apply)
reads ``-``. The value is rounded before the unit is chosen, so 999.96 µs reads ``1 ms``, never
``1e+03 µs``.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Nanoseconds per microsecond: the store keeps integer ns, the report speaks µs.
NS_PER_US = 1_000

_TIME = (("d", 86_400e6), ("h", 3_600e6), ("s", 1e6), ("ms", 1e3), ("µs", 1.0))  # an hour up: h, a day up: d
_SIZE = (("GiB", float(1 << 30)), ("MiB", float(1 << 20)), ("KiB", float(1 << 10)))


def _in_units(value: float, units: tuple[tuple[str, float], ...]) -> str:
    for unit, scale in units:
        x = float(f"{value / scale:.3g}")
        if abs(x) >= 1 or scale == units[-1][1]:
            return f"{x:.3g} {unit}" if abs(x) < 1000 else f"{x:.0f} {unit}"
    raise AssertionError("unreachable: the last unit always matches")


def fmt_us(us: float | None) -> str:
    """A duration given in µs: 1234.5 -> '1.23 ms'; 999.96 -> '1 ms'; 0.5 -> '0.5 µs'; 2.5e6 -> '2.5 s';
    1.2e9 -> '1200 s'; 7.2e9 -> '2 h'; 1.28e13 -> '148 d' (traces of one rank taken months apart); None -> '-'."""
    return "-" if us is None else _in_units(float(us), _TIME)


def fmt_bytes(n: float | None) -> str:
    """A size in bytes (binary units): 1536 -> '1.5 KiB'; 64 << 20 -> '64 MiB'; 100 -> '100 B';
    None -> '-'."""
    if n is None:
        return "-"
    if abs(n) < 1 << 10:
        return f"{int(n)} B"
    return _in_units(float(n), _SIZE)


def fmt_pct(v: float | None) -> str:
    """A percentage (0-100): 12.345 -> '12.35 %'; None -> '-'."""
    return "-" if v is None else f"{v:.2f} %"


def fmt_num(v: float | None) -> str:
    """A number to three significant digits (bandwidths): 12.345 -> '12.3'; None -> '-'."""
    return "-" if v is None else f"{v:.3g}"


def fmt_plain(v: object) -> str:
    """A value as it is (counts, ranks, stages): 3 -> '3'; None -> '-'."""
    return "-" if v is None else f"{v}"


def fmt_ranks(v: Sequence[int] | None) -> str:
    """Ranks, listed up to six: [0, 3] -> '0,3'; eight ranks -> '8 ranks'; none -> '-'."""
    if not v:
        return "-"
    return ",".join(map(str, v)) if len(v) <= 6 else f"{len(v)} ranks"


def step_ranges(steps: list[int]) -> list[list[int]]:
    """Step numbers as inclusive ranges of consecutive steps: ``[1, 2, 3, 7]`` -> ``[[1, 3], [7, 7]]`` (a
    rank's steps in the report: their size does not grow with the steps of a run that has no gaps)."""
    spans: list[list[int]] = []
    for x in sorted(set(steps)):
        if spans and spans[-1][1] == x - 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    return spans


def fmt_spans(spans: Sequence[Sequence[int]]) -> str:
    """Inclusive ranges for people: ``[[1, 3], [7, 7]]`` -> ``'1-3, 7'``."""
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def fmt_rank_count(traced: int, world: int | None) -> str:
    """How many ranks a run holds, for a header: ``'1 rank'``, ``'8 ranks'``, and ``'6 of 8 ranks'`` where the
    traces record a larger world size (no world size recorded: the traced ranks alone)."""
    if world and world > traced:
        return f"{traced} of {world} ranks"
    return f"{traced} rank{'' if traced == 1 else 's'}"


def fmt_ranges(numbers: Sequence[int]) -> str:
    """Numbers (steps, ranks) as ranges for people: ``[1, 2, 3, 7]`` -> ``'1-3, 7'``."""
    return fmt_spans(step_ranges(list(numbers)))
