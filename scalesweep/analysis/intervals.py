"""The interval statistics of a comparison of two sweeps (scalesweep/history/compare.py compares,
docs/history.md says what each interval means): one configuration's cell of log throughputs on
one side, the ratio's estimate (bootstrap of the repeats, Welch's t, a pooled run-to-run spread),
its interval and p-value, the repeats a side needs, and the efficiency difference's interval.
Plain numbers in, numbers out: no table, no history, no text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# scipy.special, not scipy.stats: the same distribution functions for a third of the import time.
from scipy.special import ndtr, ndtri, stdtr, stdtrit

CONFIDENCE = 0.95
MIN_BOOTSTRAP_REPEATS = 20
BOOTSTRAP_RESAMPLES = 10_000


@dataclass
class Cell:
    """The ok runs of one configuration on one side: their log throughputs and the run-to-run
    variance of one run's log throughput on its hardware, pooled over repeats (repeat_spread),
    with its degrees of freedom; NaN where no repeats tell it. The pooled variance, where known,
    is used for repeats too: 3 repeats alone give a t interval of 2 degrees of freedom, pooled
    over the sweep's configurations and history dozens."""

    logs: np.ndarray
    run_var: float = math.nan
    statuses: dict = field(default_factory=dict)
    run_df: float = math.inf

    @property
    def n(self) -> int:
        return len(self.logs)

    def variance(self) -> tuple[float, float]:
        """(variance of the mean log throughput, its degrees of freedom); NaN when unknown."""
        if self.n >= 1 and self.pooled:
            return self.run_var / self.n, self.run_df
        if self.n >= 2:
            return float(np.var(self.logs, ddof=1) / self.n), float(self.n - 1)
        return math.nan, math.nan

    @property
    def pooled(self) -> bool:
        return math.isfinite(self.run_var)


def repeats_needed(variance: float, m: int, change: float = 0.05, confidence: float = CONFIDENCE,
                   power: float = 0.8) -> int:
    """Repeats a side that detect a `change` (5 %) at the family-wise `confidence` over m
    configurations with `power`, for runs whose log throughput varies by `variance` (normal
    approximation: n = 2 sigma^2 (z_(1 - alpha / 2m) + z_power)^2 / log(1 + change)^2)."""
    z = float(ndtri(1 - (1 - confidence) / (2 * max(m, 1)))) + float(ndtri(power))
    return max(2, math.ceil(2 * variance * z * z / math.log1p(change) ** 2))


@dataclass
class Estimate:
    """log(candidate / baseline) throughput of one configuration and what its interval rests on."""

    log_ratio: float
    method: str
    variance: float = math.nan
    df: float = math.nan
    resamples: np.ndarray | None = None

    def interval(self, level: float) -> tuple[float, float]:
        """The ratio's interval at `level` (NaN, NaN without one)."""
        if self.resamples is not None:
            tail = (1 - level) / 2
            low, high = np.quantile(self.resamples, [tail, 1 - tail])
            return math.exp(low), math.exp(high)
        if not (math.isfinite(self.variance) and self.variance > 0):
            return math.nan, math.nan
        half = t_quantile(0.5 + level / 2, self.df) * math.sqrt(self.variance)
        return math.exp(self.log_ratio - half), math.exp(self.log_ratio + half)

    def p_value(self) -> float:
        """Two-sided p-value of 'no change' (ratio 1)."""
        if self.resamples is not None:
            below = np.count_nonzero(self.resamples <= 0)
            above = np.count_nonzero(self.resamples >= 0)
            return min(1.0, 2 * (min(below, above) + 1) / (len(self.resamples) + 1))
        if not (math.isfinite(self.variance) and self.variance > 0):
            return math.nan
        return t_two_sided_p(self.log_ratio / math.sqrt(self.variance), self.df)


def welch_df(variances, dfs) -> float:
    """Satterthwaite's degrees of freedom of a sum of variance estimates (inf: known exactly)."""
    total = sum(variances)
    denominator = sum(v * v / d for v, d in zip(variances, dfs) if math.isfinite(d) and d > 0)
    return total * total / denominator if denominator > 0 else math.inf


def estimate(base: Cell, cand: Cell, rng: np.random.Generator,
             resamples: int = BOOTSTRAP_RESAMPLES) -> Estimate | None:
    """The ratio estimate of one configuration; None when a side has no usable run."""
    if base.n == 0 or cand.n == 0:
        return None
    log_ratio = float(cand.logs.mean() - base.logs.mean())
    if min(base.n, cand.n) >= MIN_BOOTSTRAP_REPEATS:
        draws = resampled_means(cand.logs, rng, resamples) - resampled_means(base.logs, rng, resamples)
        return Estimate(log_ratio, "bootstrap", resamples=draws)
    (var_b, df_b), (var_c, df_c) = base.variance(), cand.variance()
    variance = var_b + var_c
    if not (math.isfinite(variance) and variance > 0):
        return Estimate(log_ratio, "none")
    method = "pooled spread" if base.pooled or cand.pooled else "repeats"
    return Estimate(log_ratio, method, variance, welch_df([var_b, var_c], [df_b, df_c]))


def resampled_means(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """bootstrap_means spread by sqrt(n / (n - 1)) around the sample mean: the sample variance's
    spread instead of the plug-in variance's."""
    n, mean = len(values), values.mean()
    return mean + (bootstrap_means(values, rng, resamples) - mean) * math.sqrt(n / (n - 1))


BOOTSTRAP_CHUNK = 4_000_000  # values drawn at once: bounds the memory of many repeats


def bootstrap_means(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Means of `resamples` resamples (with replacement) of `values`, drawn as index arrays in
    chunks (numpy's multinomial, one binomial per value and resample, is ten times slower)."""
    n = len(values)
    rows = max(1, BOOTSTRAP_CHUNK // n)
    return np.concatenate([
        values[rng.integers(0, n, size=(min(rows, resamples - start), n))].mean(axis=1)
        for start in range(0, resamples, rows)
    ])


def t_quantile(probability: float, df: float) -> float:
    """Student's t quantile; the normal one for infinite degrees of freedom."""
    return float(ndtri(probability) if math.isinf(df) else stdtrit(df, probability))


def t_two_sided_p(statistic: float, df: float) -> float:
    tail = ndtr(-abs(statistic)) if math.isinf(df) else stdtr(df, -abs(statistic))
    return float(2 * tail)


def efficiency_interval(diff: float, terms: list, level: float = CONFIDENCE) -> tuple[float, float]:
    variances = [v for v, _ in terms]
    if not terms:
        return diff, diff
    if not all(math.isfinite(v) for v in variances) or not np.isfinite(diff):
        return math.nan, math.nan
    half = t_quantile(0.5 + level / 2, welch_df(variances, [d for _, d in terms])) * math.sqrt(sum(variances))
    return diff - half, diff + half
