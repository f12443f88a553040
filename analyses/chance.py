"""Chance: the tail probabilities the straggler tests compare a run's arrivals with (:mod:`.stragglers`,
:mod:`.slow_groups`). Pure Python and NumPy, no SciPy."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
            last = d * c
        if abs(last - 1.0) < 1e-13:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, dof: float) -> float:
    """P(T ≥ t) for Student's t with ``dof`` degrees of freedom. Example: t_sf(2.0, 4) = 0.058."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(dof / 2.0, 0.5, dof / (dof + t * t))
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=256)
def _binomial_pmf(n: int, ranks: int) -> np.ndarray:
    """P(K = k), k = 0..n, for K ~ Binomial(n, 1/ranks)."""
    k = np.arange(n + 1)
    q = 1.0 / ranks
    logc = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)])
    with np.errstate(divide="ignore"):
        return np.exp(logc + k * math.log(q) + (n - k) * (math.log1p(-q) if q < 1 else -np.inf))


@lru_cache(maxsize=256)
def last_tail(counts: tuple[tuple[int, int], ...]) -> np.ndarray:
    """P(K ≥ k), k = 0..n, K the number of units a rank is last at by chance: ``counts`` = ((ranks at the
    unit, units), ...), K a sum of Binomial(units, 1/ranks)."""
    pmf = np.ones(1)
    for ranks, n in counts:
        pmf = np.convolve(pmf, _binomial_pmf(n, ranks))
    return np.minimum(1.0, np.cumsum(pmf[::-1])[::-1])


def at_least(k: int, probs: list[float]) -> float:
    """P(K ≥ k), K the number of successes of independent trials with these probabilities (Poisson-binomial).
    Example: at_least(2, [0.5, 0.5]) = 0.25."""
    if k <= 0:
        return 1.0
    pmf = np.ones(1)
    for q in probs:
        pmf = np.convolve(pmf, [1.0 - q, q])
    return float(min(1.0, pmf[k:].sum())) if k < pmf.size else 0.0
