"""Is a change more than noise? Two samples (baseline, run) of one metric over steps and ranks.

**Location shift** (for medians): the Hodges–Lehmann estimate Δ = median of every difference ``b_j − a_i``
(run minus baseline), with its distribution-free confidence interval, the one that inverts the
Mann–Whitney rank-sum test: with N = m·n differences sorted, the interval is ``[d_(K), d_(N+1−K)]``,
``K = ⌊N/2 − z·√(N(m+n+1)/12)⌋``, z the normal quantile of ``(1 + confidence)/2``. When K < 1 the samples are
too small for that confidence and no interval is given. Example: a = [10, 11, 12], b = [13, 14, 15]:
the nine differences are 1..5, Δ = 3; at 80 % confidence z = 1.28, K = ⌊4.5 − 1.28·2.45⌋ = 1, interval [1, 5].

**Quantile difference** (for p90): the difference of the q-quantiles with a percentile-bootstrap interval
(``resamples`` resamplings of each sample, seeded: the same inputs give the same interval); no interval with
fewer than ``MIN_BOOTSTRAP`` values on either side. Values that are not independent are resampled by their
group: the ranks' step times of one step (the ranks of a synchronous job meet at each step's collectives, so
a slow step is slow on every rank), whole steps drawn, each with all its ranks' values: 2 ranks × 24 steps
are 24 draws, not 48, and the interval is as wide as 24 steps make it.

**One sample's quantile** (for absolute rules, a run against a fixed bound): the distribution-free interval
of the q-quantile from order statistics. With n values sorted x_(1) ≤ … ≤ x_(n) and B ~ Binomial(n, q), the
interval is ``[x_(l), x_(u)]`` with l the largest index where P(B ≤ l − 1) ≤ α/2 and u the smallest where
P(B ≤ u − 1) ≥ 1 − α/2 (α = 1 − confidence); it covers the true quantile with probability
P(l ≤ B ≤ u − 1) ≥ confidence. No interval when l < 1 or u > n (too few values). Example: 20 values, the
median at 95 %: P(B ≤ 5) = 0.021, P(B ≤ 6) = 0.058 -> l = 6; P(B ≤ 13) = 0.942, P(B ≤ 14) = 0.979 ->
u = 15: the interval is [x_(6), x_(15)].

Samples larger than ``MAX_SAMPLE`` are thinned to that many values (every k-th of the sorted values), so the
m·n differences stay few.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

MAX_SAMPLE = 2000
MIN_BOOTSTRAP = 10


@dataclass(frozen=True)
class Shift:
    """A change between two samples: ``estimate`` (run − baseline) and its interval (None: too few values)."""

    estimate: float
    low: float | None
    high: float | None

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.low is None or self.high is None else (self.low, self.high)


def _clean(x: object) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    a = np.sort(a[np.isfinite(a)])
    if a.size > MAX_SAMPLE:
        a = a[np.linspace(0, a.size - 1, MAX_SAMPLE).round().astype(int)]
    return a


def z_of(confidence: float) -> float:
    """Two-sided normal quantile: 0.99 -> 2.576."""
    return NormalDist().inv_cdf((1 + confidence) / 2)


def hodges_lehmann(base: object, run: object, confidence: float) -> Shift:
    """Δ and its rank-sum interval (module doc). Raises ValueError on an empty sample."""
    a, b = _clean(base), _clean(run)
    if not a.size or not b.size:
        raise ValueError("a sample is empty")
    d = np.sort((b[:, None] - a[None, :]).ravel())
    m, n, N = a.size, b.size, d.size
    est = float(np.median(d))
    k = math.floor(N / 2 - z_of(confidence) * math.sqrt(N * (m + n + 1) / 12))
    if k < 1:
        return Shift(est, None, None)
    return Shift(est, float(d[k - 1]), float(d[N - k]))


def quantile_shift(base: object, run: object, q: float, confidence: float, resamples: int = 1000,
                   seed: int = 0, groups: tuple[object, object] | None = None) -> Shift:
    """quantile_q(run) − quantile_q(base) with its bootstrap interval (module doc); ``groups`` (one label per
    value of each sample): resample whole groups, the values of one group not being independent (module
    doc)."""
    a, b = _clean(base), _clean(run)
    if not a.size or not b.size:
        raise ValueError("a sample is empty")
    est = float(np.quantile(b, q) - np.quantile(a, q))
    labels = None
    if groups is not None:
        labels = np.asarray(groups[0]), np.asarray(groups[1])
        if labels[0].size != a.size or labels[1].size != b.size:  # a NaN left out misaligns them too
            raise ValueError("one group label per value")
    units = (np.unique(labels[0]).size, np.unique(labels[1]).size) if labels is not None else (a.size, b.size)
    if min(units) < MIN_BOOTSTRAP:
        return Shift(est, None, None)
    rng = np.random.default_rng(seed)
    if labels is not None:
        qa = _grouped_quantiles(a, labels[0], q, resamples, rng)
        qb = _grouped_quantiles(b, labels[1], q, resamples, rng)
    else:
        qa = np.quantile(a[rng.integers(0, a.size, (resamples, a.size))], q, axis=1)
        qb = np.quantile(b[rng.integers(0, b.size, (resamples, b.size))], q, axis=1)
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(qb - qa, [tail, 1 - tail])
    return Shift(est, float(lo), float(hi))


def _grouped_quantiles(x: np.ndarray, labels: np.ndarray, q: float, resamples: int,
                       rng: np.random.Generator) -> np.ndarray:
    """The q-quantile of each of ``resamples`` cluster resamplings of ``x``: as many groups as it holds, drawn
    with replacement, each with all its values."""
    order = np.argsort(labels, kind="stable")
    xs, ls = x[order], labels[order]
    starts = np.flatnonzero(np.r_[True, ls[1:] != ls[:-1]])
    ends = np.r_[starts[1:], xs.size]
    picks = rng.integers(0, starts.size, (resamples, starts.size))
    return np.array([np.quantile(np.concatenate([xs[starts[g]:ends[g]] for g in pick]), q) for pick in picks])


def _binomial_cdf(n: int, q: float) -> np.ndarray:
    """P(B ≤ k) for k = 0..n, B ~ Binomial(n, q), 0 < q < 1 (log-space terms, so large n stays exact)."""
    k = np.arange(n + 1)
    lg = np.array([math.lgamma(i + 1) for i in range(n + 1)])
    log_pmf = lg[n] - lg - lg[::-1] + k * math.log(q) + (n - k) * math.log1p(-q)
    return np.cumsum(np.exp(log_pmf))


def quantile_interval(values: object, q: float, confidence: float) -> Shift:
    """The q-quantile of one sample with its order-statistic interval (module doc); ``estimate`` is
    ``np.quantile(values, q)``. Raises ValueError on an empty sample."""
    x = _clean(values)
    if not x.size:
        raise ValueError("the sample is empty")
    est = float(np.quantile(x, q))
    n, alpha = x.size, 1 - confidence
    cdf = _binomial_cdf(n, q)
    lows = np.nonzero(cdf[:n] <= alpha / 2)[0]  # cdf[l - 1] ≤ α/2, l = index + 1
    highs = np.nonzero(cdf[:n] >= 1 - alpha / 2)[0]  # cdf[u - 1] ≥ 1 − α/2, u = index + 1
    if not lows.size or not highs.size:
        return Shift(est, None, None)
    lo, hi = int(lows[-1]) + 1, int(highs[0]) + 1
    return Shift(est, float(x[lo - 1]), float(x[hi - 1]))
