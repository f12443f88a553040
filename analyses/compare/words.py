"""The words a comparison says a change in: the direction word always follows the sign of the number it
stands beside, and a signed amount is written once, with its sign (never "fell −3 %").

Example: ``direction(-2.9)`` -> "fell"; ``direction(1.6)`` -> "rose"; ``direction(0.0)`` -> "did not change";
``signed(-120, "us")`` -> "−120 µs"; ``ratio_text(1.482)`` -> "×1.48".
"""

from __future__ import annotations

from ddprof.vocabulary.units import fmt_us


def direction(change: float, up: str = "rose", down: str = "fell", same: str = "did not change") -> str:
    """The verb for a change of sign ``change``: ``up`` when positive, ``down`` when negative."""
    if change > 0:
        return up
    if change < 0:
        return down
    return same


def fmt(value: float, unit: str) -> str:
    """A value in its unit: µs (scaled: 1.2 ms), GB/s, or % (a share)."""
    if unit == "us":
        return fmt_us(value)
    if unit == "GB/s":
        return f"{value:.3g} GB/s"
    return f"{value:.1f} %"


def signed(value: float, unit: str) -> str:
    """A change with its sign: "+1.2 ms", "−24.1 GB/s", "+1.6 pts" (a change of a share is in points)."""
    sign = "+" if value >= 0 else "−"
    return sign + (fmt(abs(value), unit) if unit != "%" else f"{abs(value):.1f} pts")


def amount(value: float, unit: str) -> str:
    """A change without its sign, for after a direction word: "1.2 ms", "1.6 pts"."""
    return fmt(abs(value), unit) if unit != "%" else f"{abs(value):.1f} pts"


def ratio_text(ratio: float) -> str:
    """A factor: 1.482 -> "×1.48"."""
    return f"×{ratio:.2f}"


def ratio_range(ratios: list[float]) -> str:
    """The smallest and largest factor: "×1.47–×1.49", or one factor when they print alike."""
    lo, hi = ratio_text(min(ratios)), ratio_text(max(ratios))
    return lo if lo == hi else f"{lo}–{hi}"
