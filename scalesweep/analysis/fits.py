"""Amdahl and Gustafson fits of the scaling series (the laws and their sources: docs/metrics.md).

Three fits per group, kept apart because they answer different questions:
- Amdahl on the group's speedup series (target `speedup`: the scaling table's `speedup` column,
  which follows the group's `scaling_basis`, the throughput ratio or the time ratio; the `basis`
  column says which) - strong scaling of the training rate,
- Amdahl on the time-to-solution speedup (start-up, validation and I/O included),
- Gustafson on the same speedup series, read as a scaled speedup: every group holds the per-GPU
  batch fixed, so the work per step grows with N.
The speedup figure draws the `speedup` column and overlays exactly this fit.

Fits use N' = N / N_min, where N_min is the group's baseline (the smallest GPU count with a usable
ok run; the `fit_variable` column says "N/2" when it is not 1). Each fit is one parameter p in
[0, 1], the least squares on the per-GPU-count medians (the baseline's S = 1 included) with
relative residuals ((S - law) / S: timing noise is relative), and its standard error as
`scipy.optimize.curve_fit` gives it, sqrt(diag(pcov)). Inside (0, 1) the minimum is found in
closed form (Gustafson: linear least squares) or from one (Amdahl: 1/S is linear in 1/N', whose
fit starts Newton's method on the objective itself): exact to rounding, where curve_fit stopped
once the objective changed by less than 1e-8 (p then agreed to about 1e-7). A minimum on a bound
of [0, 1] is the bound itself (fit_law_batch's search), where curve_fit's interior-point steps
stopped up to 1.6e-4 short of it; scipy's bounded solver is left only for data no search fits. `r2` is the R^2 of that same objective: weighted by 1/S^2 around the
weighted mean (`objective` says so), so it judges the fit by what the fit minimised. That stderr treats the
points as independent, but every speedup shares the baseline's measurement; with repeats, the
bootstrap accounts for it: it resamples the ok runs within each GPU count (the baseline's too),
rebuilds the speedups and refits; p_ci_low/p_ci_high are its 2.5/97.5 percentiles.

fit_table is tidy: one row per group x (law, target). Predictions for the next two doublings beyond
the largest fitted GPU count are columns pred_gpus_k, pred_speedup_k, pred_efficiency_pct_k
(k = 1, 2); speedups there are relative to baseline_gpus, like the scaling table's.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scalesweep.analysis.scaling import (SCALING_COLUMNS, SUPERLINEAR_FLAG, flagged_gpus, group_basis, is_usable,
                                         scaling_table)
from scalesweep.contract import frameworks
from scalesweep.tidy.table import check_runs, iter_groups, key_tuple, table_group_keys

MIN_POINTS = 3
N_DOUBLINGS = 2
CI_PERCENTILES = (2.5, 97.5)


def amdahl(n, p):
    """Amdahl speedup for fixed work: 1 / ((1 - p) + p / N)."""
    return 1.0 / ((1.0 - p) + p / np.asarray(n, dtype=float))


def gustafson(n, p):
    """Gustafson scaled speedup for work growing with N: (1 - p) + p N."""
    return (1.0 - p) + p * np.asarray(n, dtype=float)


LAWS = {"amdahl": amdahl, "gustafson": gustafson}


@dataclass(frozen=True)
class Target:
    speedup_column: str  # in the scaling table
    run_column: str  # per-run value in runs.csv, for the bootstrap
    higher_is_better: bool  # throughput: S = x(N)/x(N_min); a time: S = x(N_min)/x(N)


# The per-run values behind each speedup series, for the bootstrap.
BASIS_TARGETS = {
    "throughput": Target("speedup", "throughput_img_s", True),
    "time": Target("speedup", "steady_epoch_time_s", False),
    "time_to_solution": Target("tts_speedup", "total_time_s", False),
}
FITS = (("amdahl", "speedup"), ("amdahl", "time_to_solution"), ("gustafson", "speedup"))
OBJECTIVE = "relative least squares (weights 1/S^2); r2 of the same objective"

FIT_COLUMNS = (
    "law", "target", "basis", "baseline_gpus", "fit_variable", "gpus_fitted", "n_points",
    "p", "p_stderr", "p_ci_low", "p_ci_high", "n_bootstrap", "r2", "objective", "limit_speedup",
    *(f"{name}_{k}" for k in range(1, N_DOUBLINGS + 1)
      for name in ("pred_gpus", "pred_speedup", "pred_efficiency_pct")),
    "note", "flags",
)
# A fit whose R^2 is at most 0 explains none of the speedups' variation (a constant would do as
# well): its p and predictions are no finding. Usually superlinear or flat, noisy speedups.
NO_FIT_FLAG = "no_fit"
NO_FIT_NOTE = ("r2 <= 0: the law explains none of these speedups (superlinear or noise-bound "
               "points?); p and predictions are not findings")


# Three points fix a one-parameter curve's shape nearly by themselves: an R² near 1 and a narrow
# band then say little, above all without repeats, where the band knows nothing of the spread
# between runs.
FEW_POINTS_NOTE = (f"fitted through {MIN_POINTS} points, the fewest a fit takes: R² and the band say "
                   "little; with one run per GPU count the band leaves out the run-to-run spread")


@dataclass(frozen=True)
class LawFit:
    p: float
    p_stderr: float
    r2: float


def weighted_r_squared(observed, predicted, weights) -> float:
    """R^2 of a weighted least-squares objective: 1 - sum w (o - p)^2 / sum w (o - mean_w)^2,
    mean_w the weighted mean; NaN when the observations do not vary."""
    observed, predicted = np.asarray(observed, float), np.asarray(predicted, float)
    weights = np.asarray(weights, float)
    centre = float(np.sum(weights * observed) / np.sum(weights))
    total = float(np.sum(weights * (observed - centre) ** 2))
    if total == 0.0:
        return math.nan
    return 1.0 - float(np.sum(weights * (observed - predicted) ** 2)) / total


def fit_law(law: str, scale, speedups) -> LawFit:
    """Least-squares p in [0, 1] of `law` through (N', S) points, relative residuals
    ((S - law) / S: timing noise is relative). One cache for every caller: the fit table, the
    predictions' Amdahl fallback (which fits the same medians for every count it predicts) and,
    through the fit table, the findings."""
    return _cached_fit(law, tuple(np.asarray(scale, float)), tuple(np.asarray(speedups, float)))


@functools.lru_cache(maxsize=65536)
def _cached_fit(law: str, scale: tuple, speedups: tuple) -> LawFit:
    x, y = np.array(scale), np.array(speedups)
    p = exact_p(law, x, y[None, :])[0]
    if not np.isfinite(p):
        # A minimum on a bound (a series slower with every GPU: p = 0; superlinear: p = 1): the
        # batch's search over [0, 1] finds it, the bound itself included.
        p = fit_law_batch(law, x, y[None, :])[0] + 0.0  # + 0.0: a p clipped to 0 from below is -0.0
    if not np.isfinite(p) or len(y) < 2:
        return _bounded_fit(law, x, y)
    stderr = _stderr(law, x, y, p)
    return LawFit(float(p), stderr, weighted_r_squared(y, LAWS[law](x, p), 1.0 / y**2))


def _bounded_fit(law: str, x: np.ndarray, y: np.ndarray) -> LawFit:
    """The fit as scipy's bounded least squares gives it, for data no search can fit (a single
    point, a speedup that is not a finite number > 0): curve_fit's answer or its refusal."""
    # Here, not at the top: scipy.optimize is a third of an analysis' imports, and no fit of
    # a scaling series (3 points or more, every speedup > 0) comes here.
    from scipy.optimize import OptimizeWarning, curve_fit

    with warnings.catch_warnings():
        # pcov is inf when p sits on a bound (e.g. super-linear data): stderr becomes NaN below.
        warnings.simplefilter("ignore", OptimizeWarning)
        # Weighted by S itself; unweighted, the large-N points dominate and the stderr is too small.
        popt, pcov = curve_fit(LAWS[law], x, y, p0=[0.5], bounds=(0.0, 1.0), sigma=y)
    p = float(popt[0])
    variance = float(pcov[0, 0])
    stderr = math.sqrt(variance) if np.isfinite(variance) and variance >= 0 else math.nan
    return LawFit(p, stderr, weighted_r_squared(y, LAWS[law](x, p), 1.0 / y**2))


def _stderr(law: str, x: np.ndarray, y: np.ndarray, p: float) -> float:
    """curve_fit's standard error of p (sigma relative, not absolute): the residual variance
    over n - 1 degrees of freedom times (J'J)^-1, J the weighted residuals' derivative in p."""
    residual, slope, _ = _residuals(law, x, y, p)
    curvature = float(np.sum(slope**2))
    if curvature == 0.0:  # p moves no point (every N' is 1): curve_fit's pcov is inf
        return math.nan
    return math.sqrt(float(np.sum(residual**2)) / (len(y) - 1) / curvature)


def _residuals(law: str, x, y, p):
    """Weighted residuals r = law(x, p) / y - 1 and their first and second derivatives in p,
    for p broadcasting against y's rows."""
    if law == "gustafson":
        residual = (1.0 - p + p * x) / y - 1.0
        return residual, (x - 1.0) / y + 0.0 * residual, 0.0 * residual
    share = 1.0 - 1.0 / x  # Amdahl: 1 / S = 1 - p share
    inverse = 1.0 - p * share
    return 1.0 / (y * inverse) - 1.0, share / (y * inverse**2), 2.0 * share**2 / (y * inverse**3)


NEWTON_STEPS = 60
# A minimum this near a bound may be the bound itself, off by rounding: the bounded solver's.
BOUND_MARGIN = 1e-9
# Newton converges quadratically: after a step this small the next would be below rounding.
NEWTON_TOLERANCE = 1e-12


def exact_p(law: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The p of each row of y (at the N' of x) minimising fit_law's objective, where that minimum
    lies inside (0, 1); NaN where it does not (a bound, or a degenerate row): those rows are the
    bounded solver's.

    Gustafson's weighted residual c + p d is linear in p: p = -sum(c d) / sum(d^2). Amdahl's
    1 / S = 1 - p (1 - 1/N') is linear in p too, so the weighted linear least squares of that form
    gives the start, and Newton's method on the objective itself (relative residuals of S, as
    curve_fit minimises) takes it to the exact minimum in a few steps, all rows at once.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if law == "gustafson":
            p, converged = _gustafson_p(x, y), np.ones(len(y), bool)
        else:
            share = 1.0 - 1.0 / x
            p = np.sum((y - 1.0) * share * y, axis=1) / np.sum((share * y) ** 2, axis=1)
            p, converged = _newton(x, y, np.clip(p, 0.0, 1.0))
        inside = converged & (p > BOUND_MARGIN) & (p < 1.0 - BOUND_MARGIN) & (len(x) > 1)
        return np.where(inside & _below_bounds(law, x, y, p), p, np.nan)


def _gustafson_p(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unbounded least-squares p of each row: the weighted residual is c + p d."""
    c, d = (1.0 - y) / y, (x - 1.0) / y
    return -np.sum(c * d, axis=1) / np.sum(d * d, axis=1)


def _newton(x: np.ndarray, y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method on the Amdahl objective's derivative, every row at once; also whether each
    row converged to a minimum (positive curvature)."""
    done = np.zeros(len(p), bool)
    for _ in range(NEWTON_STEPS):
        residual, slope, bend = _residuals("amdahl", x, y, p[:, None])
        gradient = np.sum(residual * slope, axis=1)
        curvature = np.sum(slope**2 + residual * bend, axis=1)
        step = np.where(done, 0.0, gradient / curvature)
        p = p - step
        done |= ~(np.abs(step) > NEWTON_TOLERANCE * np.maximum(np.abs(p), 1.0))
        if done.all():
            break
    converged = done & (curvature > 0) & np.isfinite(p)
    return p, converged


def _below_bounds(law: str, x, y, p) -> np.ndarray:
    """Whether the interior minimum is strictly lower than both bounds' objective: else the bounded
    solver decides, as it did for every fit before."""
    def objective(q):
        return np.sum(_residuals(law, x, y, q)[0] ** 2, axis=1)

    at_p = objective(np.nan_to_num(p)[:, None])
    return (at_p < objective(np.zeros((len(y), 1)))) & (at_p < objective(np.ones((len(y), 1))))


def limit_speedup(law: str, p: float) -> float:
    """Largest speedup the law allows: Amdahl 1/(1-p); Gustafson has none (inf) unless p = 0."""
    if law == "amdahl":
        return math.inf if p >= 1.0 else 1.0 / (1.0 - p)
    return math.inf if p > 0.0 else 1.0


def predicted_speedup(law: str, p: float, gpus, baseline_gpus: float):
    """Speedup over `baseline_gpus` the fitted law predicts at `gpus` GPUs."""
    return LAWS[law](np.asarray(gpus, float) / baseline_gpus, p)


def fit_law_batch(law: str, scale, speedups, search_rows: int | None = None) -> np.ndarray:
    """p in [0, 1] of `law` for every row of `speedups` (all at the N' of `scale`): the least
    squares of fit_law (relative residuals) for many data sets at once, as the bootstrap needs.
    NaN for a row with a value that is not finite and > 0.

    Gustafson's objective is a parabola in p, so its closed-form p clipped to the bounds is exact.
    Amdahl's interior minima come from exact_p; a row whose minimum lies on a bound (or whose
    Newton steps did not settle) gets the best p of a grid over [0, 1], refined by golden-section
    search between the grid points beside it, the bounds themselves included. The search stops
    when its widest interval is narrow enough, so a row's last digits depend on the rows searched
    with it: `search_rows` searches each block of that many consecutive rows on its own (the
    bootstrap of several groups at once: each group's p as its own bootstrap would give them).
    """
    x = np.asarray(scale, float)
    y = np.atleast_2d(np.asarray(speedups, float))
    valid = np.all(np.isfinite(y) & (y > 0), axis=1)
    y = np.where(valid[:, None], y, 1.0)
    if law == "gustafson":
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.clip(_gustafson_p(x, y), 0.0, 1.0)
    else:
        p = exact_p(law, x, y)
        searched = ~np.isfinite(p)
        block = search_rows or max(len(y), 1)
        for start in range(0, len(y), block):
            rows = start + np.flatnonzero(searched[start:start + block])
            p[rows] = _amdahl_batch(x, y[rows])
    return np.where(valid, p, np.nan)


_GRID = np.linspace(0.0, 1.0, 101)
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def _amdahl_objective(x: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Sum of squared relative residuals of Amdahl's law; p broadcasts against y's rows."""
    predicted = 1.0 / ((1.0 - p) + p / x)
    return np.sum(((predicted - y) / y) ** 2, axis=-1)


def _amdahl_batch(x: np.ndarray, y: np.ndarray, tolerance: float = 1e-9) -> np.ndarray:
    if not len(y):
        return np.empty(0)
    on_grid = _amdahl_objective(x, y[:, None, :], _GRID[None, :, None])  # rows x grid
    best = _GRID[np.argmin(on_grid, axis=1)]
    step = _GRID[1] - _GRID[0]
    low, high = np.maximum(best - step, 0.0), np.minimum(best + step, 1.0)
    left, right = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    at_left, at_right = _objective_at(x, y, left), _objective_at(x, y, right)
    while np.max(high - low) > tolerance:
        # Keep the side of the lower point; its other interior point is reused, one new one added.
        keep_left = at_left <= at_right
        high, low = np.where(keep_left, right, high), np.where(keep_left, low, left)
        kept, at_kept = np.where(keep_left, left, right), np.where(keep_left, at_left, at_right)
        new = np.where(keep_left, high - _GOLDEN * (high - low), low + _GOLDEN * (high - low))
        at_new = _objective_at(x, y, new)
        left, at_left = np.where(keep_left, new, kept), np.where(keep_left, at_new, at_kept)
        right, at_right = np.where(keep_left, kept, new), np.where(keep_left, at_kept, at_new)
    p = (low + high) / 2.0
    # A minimum on a bound (p = 0: no speedup at all) is the bound itself, not a point beside it.
    for bound in (0.0, 1.0):
        at_bound = _objective_at(x, y, np.full(len(y), bound))
        p = np.where(at_bound <= _objective_at(x, y, p), bound, p)
    return p


def _objective_at(x: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    return _amdahl_objective(x, y, p[:, None])


@dataclass(frozen=True)
class BootstrapRequest:
    """One fit's bootstrap: `samples` maps GPU count -> the per-run values (throughput or time)
    of its ok runs."""

    law: str
    samples: dict
    baseline_gpus: int
    higher_is_better: bool
    n_resamples: int
    seed: int

    def draws(self) -> tuple:
        """What fixes the resampled run positions: requests that agree on it draw the same ones."""
        counts = tuple(sorted(self.samples))
        return (self.law, counts, tuple(len(self.samples[g]) for g in counts), self.baseline_gpus,
                self.higher_is_better, self.n_resamples, self.seed)


def bootstrap_intervals(requests: list[BootstrapRequest]) -> list[tuple[float, float, int]]:
    """Percentile interval of p from resampling the runs within each GPU count, per request:
    (low, high, resamples that fitted).

    Each resample takes the medians again, rebuilds the speedups against the resampled baseline
    and refits. Every request draws from its own generator seeded with its seed, so requests with
    the same draws() resample the same positions: they are computed together, one median and one
    fit over all their groups' resamples (a sweep of 10,000 runs has hundreds of groups and a few
    such classes), each interval what that request alone would give.
    """
    intervals: list = [None] * len(requests)
    classes: dict = {}
    for position, request in enumerate(requests):
        classes.setdefault(request.draws(), []).append(position)
    for positions in classes.values():
        for position, interval in zip(positions, _same_draw_intervals([requests[p] for p in positions])):
            intervals[position] = interval
    return intervals


def _same_draw_intervals(requests: list[BootstrapRequest]) -> list[tuple[float, float, int]]:
    first = requests[0]
    rng = np.random.default_rng(first.seed)
    counts = sorted(first.samples)
    scale = np.array(counts, float) / first.baseline_gpus
    def resampled_medians(gpus) -> np.ndarray:  # groups x resamples
        values = np.array([np.asarray(request.samples[gpus], float) for request in requests])
        runs = values.shape[1]
        return np.median(values[:, rng.integers(0, runs, size=(first.n_resamples, runs))], axis=2)

    # groups x resamples x GPU counts: the median of each count's runs drawn with replacement, the
    # counts drawn in order, as each group's own generator would draw them
    medians = np.stack([resampled_medians(gpus) for gpus in counts], axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = medians / medians[:, :, [counts.index(first.baseline_gpus)]]
        speedups = ratio if first.higher_is_better else 1.0 / ratio
    ps = fit_law_batch(first.law, scale, speedups.reshape(-1, len(counts)), search_rows=first.n_resamples)
    intervals = []
    for group_ps in ps.reshape(len(requests), first.n_resamples):
        fitted = group_ps[np.isfinite(group_ps)]
        if not len(fitted):
            intervals.append((math.nan, math.nan, 0))
            continue
        low, high = np.percentile(fitted, CI_PERCENTILES)
        intervals.append((float(low), float(high), len(fitted)))
    return intervals


def fit_table(data: pd.DataFrame, n_bootstrap: int = 200, seed: int = 0,
              scaling: pd.DataFrame | None = None) -> pd.DataFrame:
    """Amdahl/Gustafson fits per group, from a runs table (with bootstrap intervals when there
    are repeats) or from a scaling table (no per-run data: no interval).

    With a runs table, `scaling` may pass its scaling_table when the caller has it already: on a
    large sweep it costs as much as the fits.

    Columns: the group keys, then FIT_COLUMNS; one row per group x FITS entry.
    """
    if "status" in data.columns:
        runs = check_runs(data)
        scaling = scaling_table(runs) if scaling is None else scaling
        keys = table_group_keys(scaling, SCALING_COLUMNS)
        ok = runs[(runs["gpus"] >= 1) & (runs["status"] == "ok")]
        runs_by_group = {key_tuple(v, keys): r for v, r in iter_groups(ok, keys)}
    elif {"scale_factor", "speedup", "tts_speedup"} <= set(data.columns):
        scaling, runs_by_group = data, None
        keys = table_group_keys(scaling, SCALING_COLUMNS)
    else:
        raise ValueError("fit_table: expected a runs table (with 'status') or a scaling table "
                         "(with 'scale_factor', 'speedup', 'tts_speedup')")
    rows, pending = [], []
    for values, group in iter_groups(scaling, keys):
        group_runs = None
        if runs_by_group is not None:
            group_runs = runs_by_group.get(key_tuple(values, keys), pd.DataFrame())
        for law, target in FITS:
            row, request = _fit_row(law, target, group, group_runs, n_bootstrap, seed)
            rows.append({**values, **row})
            if request is not None:
                pending.append((rows[-1], request))
    intervals = bootstrap_intervals([request for _, request in pending])
    for (row, _), (low, high, fitted) in zip(pending, intervals):
        row.update(p_ci_low=low, p_ci_high=high, n_bootstrap=fitted)
    return pd.DataFrame(rows, columns=[*keys, *FIT_COLUMNS])


def single_node_limit(group: pd.DataFrame) -> tuple[int | None, str]:
    """For a framework that does not run across nodes: the most GPUs it was measured on (its node
    holds at least those; the sweep does not say more) and why no prediction goes past them."""
    framework = frameworks.find(str(group["framework"].iloc[0])) if "framework" in group else None
    if framework is None or framework.multinode:
        return None, ""
    largest = int(group["gpus"].max())
    return largest, (f"no prediction beyond {largest} GPUs: {framework.name}'s "
                     f"{framework.single_node_reason}")


def _fit_row(law: str, target: str, group: pd.DataFrame, group_runs: pd.DataFrame | None,
             n_bootstrap: int, seed: int) -> tuple[dict, BootstrapRequest | None]:
    """A fit's row, and the bootstrap that fills its interval (None: the row says why there is
    none), for fit_table to run with every other group's."""
    basis = target if target != "speedup" else group_basis(group)
    spec = BASIS_TARGETS.get(basis, BASIS_TARGETS["time"])
    flagged = flagged_gpus(group)
    points = group[group[spec.speedup_column].map(is_usable) & ~group["gpus"].isin(flagged)].sort_values("gpus")
    baseline = group["baseline_gpus"].iloc[0]
    row = {column: math.nan for column in FIT_COLUMNS}
    row.update(flags="", law=law, target=target, basis=basis, baseline_gpus=baseline, n_points=len(points),
               gpus_fitted=",".join(str(int(g)) for g in points["gpus"]), n_bootstrap=0,
               objective=OBJECTIVE)
    notes = [f"left out the flagged point(s) at N={', '.join(map(str, flagged))} ({SUPERLINEAR_FLAG})"] * bool(flagged)
    if pd.notna(baseline):
        row["fit_variable"] = "N" if baseline == 1 else f"N/{int(baseline)}"
        if baseline != 1:
            notes.append(f"fitted on N' = N/{int(baseline)} (baseline N={int(baseline)}, not 1)")
    if len(points) < MIN_POINTS:
        series = "speedup" if target == "speedup" else f"{target.replace('_', ' ')} speedup"
        notes.append(f"too few GPU counts to fit: {len(points)} with a usable {series}, "
                     f"need {MIN_POINTS}")
        row["note"] = "; ".join(notes)
        return row, None

    fit = fit_law(law, points["scale_factor"], points[spec.speedup_column])
    row.update(p=fit.p, p_stderr=fit.p_stderr, r2=fit.r2, limit_speedup=limit_speedup(law, fit.p))
    largest = int(points["gpus"].max())
    node_limit, node_note = single_node_limit(group)
    for k in range(1, N_DOUBLINGS + 1):
        gpus = largest * 2 ** k
        if node_limit is not None and gpus > node_limit:
            notes.append(node_note)
            break
        speedup = float(predicted_speedup(law, fit.p, gpus, baseline))
        row[f"pred_gpus_{k}"] = gpus
        row[f"pred_speedup_{k}"] = speedup
        row[f"pred_efficiency_pct_{k}"] = speedup / (gpus / baseline) * 100.0

    request, interval_note = _bootstrap_request(law, spec, points, group_runs, baseline, n_bootstrap, seed)
    if len(points) == MIN_POINTS:
        notes.append(FEW_POINTS_NOTE)
    explains_nothing = bool(fit.r2 <= 0)  # NaN (speedups that do not vary) is no verdict
    row["flags"] = NO_FIT_FLAG if explains_nothing else ""
    row["note"] = "; ".join(notes + ([interval_note] if interval_note else [])
                            + [NO_FIT_NOTE] * explains_nothing)
    return row, request


def _bootstrap_request(law: str, spec: Target, points: pd.DataFrame, group_runs: pd.DataFrame | None,
                       baseline_gpus, n_bootstrap: int, seed: int) -> tuple[BootstrapRequest | None, str | None]:
    """The bootstrap of a fit's interval, or None and a note when no interval can be given."""
    if group_runs is None:
        return None, "fitted from a scaling table: no per-run data, no bootstrap interval"
    if n_bootstrap <= 0:
        return None, None
    gpus_of_run = group_runs["gpus"].to_numpy()
    values = group_runs[spec.run_column].to_numpy(float)
    usable = np.isfinite(values) & (values > 0)  # is_usable, for a whole column at once
    samples = {gpus: values[usable & (gpus_of_run == gpus)] for gpus in points["gpus"].astype(int)}
    if max(len(v) for v in samples.values()) < 2:
        return None, "one run per GPU count: no bootstrap interval"
    return BootstrapRequest(law, samples, int(baseline_gpus), spec.higher_is_better, n_bootstrap, seed), None
