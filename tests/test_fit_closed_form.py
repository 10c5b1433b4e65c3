"""The fits' closed forms against scipy's curve_fit (what every fit was before) and against the
exact minimum computed in 50-digit arithmetic, on random and edge inputs."""

import math
import warnings

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import OptimizeWarning, curve_fit

from scalesweep.analysis import fits
from scalesweep.analysis.fits import LAWS, exact_p, fit_law, fit_law_batch

COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256, 1024)


def curve_fit_law(law, x, y, **tolerances):
    """The fit exactly as fits.py made it before the closed forms: (p, stderr)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        popt, pcov = curve_fit(LAWS[law], x, y, p0=[0.5], bounds=(0.0, 1.0), sigma=y, **tolerances)
    variance = float(pcov[0, 0])
    return float(popt[0]), math.sqrt(variance) if np.isfinite(variance) and variance >= 0 else math.nan


def objective(law, x, y, p):
    return float(np.sum(((LAWS[law](x, p) - y) / y) ** 2))


def exact_minimum(law, x, y, start):
    """The root of the objective's derivative in 50-digit arithmetic, from `start`."""
    with mpmath.workdps(50):
        xs, ys = [mpmath.mpf(v) for v in x], [mpmath.mpf(v) for v in y]

        def gradient(p):
            if law == "gustafson":
                return sum(((1 - p + p * a) / b - 1) * (a - 1) / b for a, b in zip(xs, ys))
            return sum((1 / (b * (1 - p * (1 - 1 / a))) - 1) * (1 - 1 / a) / (b * (1 - p * (1 - 1 / a)) ** 2)
                       for a, b in zip(xs, ys))

        return float(mpmath.findroot(gradient, mpmath.mpf(start)))


@st.composite
def scaling_series(draw):
    """(law, N', S): a law's speedups at 2-8 GPU counts with multiplicative noise of up to 30 %,
    the baseline's S = 1, as the fit table passes them."""
    law = draw(st.sampled_from(sorted(LAWS)))
    counts = sorted(draw(st.sets(st.sampled_from(COUNTS), min_size=2, max_size=8)))
    x = np.array(counts, float) / counts[0]
    p = draw(st.floats(0.0, 1.0))
    noise = np.array(draw(st.lists(st.floats(-0.3, 0.3), min_size=len(x), max_size=len(x))))
    y = LAWS[law](x, p) * np.exp(noise)
    y[0] = 1.0
    return law, x, y


# derandomize: the same examples on every machine, so CI checks what was checked here.
@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True)
@given(scaling_series())
def test_the_closed_form_is_the_exact_minimum_and_never_worse_than_curve_fit(series):
    law, x, y = series
    fit = fit_law(law, x, y)
    before_p, before_stderr = curve_fit_law(law, x, y)
    p = exact_p(law, x, y[None, :])[0]
    if not np.isfinite(p):
        # A minimum on a bound: the bound itself, never worse than where curve_fit stopped
        # (short of it: 1.6e-4 for two equal speedups), run to convergence it gets there too.
        assert fit.p in (0.0, 1.0)
        assert objective(law, x, y, fit.p) <= objective(law, x, y, before_p) * (1 + 1e-12) + 1e-300
        tight_p, _ = curve_fit_law(law, x, y, ftol=1e-15, xtol=1e-15, gtol=1e-15)
        assert fit.p == pytest.approx(tight_p, abs=1e-6)
        return
    assert fit.p == p
    assert p == pytest.approx(exact_minimum(law, x, y, p), rel=1e-12)
    # curve_fit stopped once its cost changed by less than 1e-8: its p lies near, never lower.
    assert objective(law, x, y, p) <= objective(law, x, y, before_p) * (1 + 1e-12) + 1e-300
    if min(p, 1 - p) < 1e-3:
        # A minimum a hair inside a bound (speedups of 1 + 3e-5 put it at 6e-5): curve_fit stops
        # up to 2e-4 short of a bound, so the exact root and the objective above are the check.
        return
    assert p == pytest.approx(before_p, rel=2e-4, abs=1e-4)
    # Run to convergence, curve_fit agrees to the precision its cost test allows (the objective
    # is flat at its minimum: a relative change of 1e-16 in it moves p by about 1e-8).
    tight_p, tight_stderr = curve_fit_law(law, x, y, ftol=1e-15, xtol=1e-15, gtol=1e-15)
    assert p == pytest.approx(tight_p, rel=1e-7, abs=1e-8)
    # The stderr from the exact derivative; curve_fit's from a finite difference.
    assert fit.p_stderr == pytest.approx(tight_stderr, rel=1e-4, abs=1e-9)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True)
@given(scaling_series(), st.integers(1, 40))
def test_a_batch_gives_each_row_the_single_fit(series, rows):
    law, x, y = series
    rng = np.random.default_rng(rows)
    data = y * np.exp(rng.normal(0.0, 0.05, (rows, len(x))))
    data[:, 0] = 1.0
    batch = fit_law_batch(law, x, data)
    single = np.array([fit_law(law, x, row).p for row in data])
    interior = np.isfinite(exact_p(law, x, data))
    assert batch[interior] == pytest.approx(single[interior], rel=1e-12)
    # On a bound the single fit is the batch's own search
    assert batch[~interior].tolist() == single[~interior].tolist()


@pytest.mark.parametrize("law, x, y, p", [
    # Exact law data: p itself, both laws.
    ("amdahl", [1, 2, 4, 8, 16], "amdahl 0.9", 0.9),
    ("gustafson", [1, 2, 4, 8], "gustafson 0.75", 0.75),
    ("amdahl", [1, 4, 16, 64, 256, 1024], "amdahl 0.999", 0.999),
    # N_min = 2: N' = N / 2.
    ("amdahl", [1, 2, 4, 8], "amdahl 0.5", 0.5),
])
def test_exact_law_data_gives_p(law, x, y, p):
    x = np.array(x, float)
    name, truth = y.split()
    y = LAWS[name](x, float(truth))
    assert fit_law(law, x, y).p == pytest.approx(p, rel=1e-12)


@pytest.mark.parametrize("law", sorted(LAWS))
@pytest.mark.parametrize("y", [
    [1.0, 1.0, 1.0, 1.0],  # no speedup at all: p = 0
    [1.0, 0.8, 0.6, 0.4],  # slower with every GPU: p = 0
    [1.0, 2.5, 5.5, 11.0],  # superlinear: p = 1
    [1.0, 2.0],  # two points
    [1.0],  # the baseline alone
])
def test_a_minimum_on_a_bound_is_the_bound_and_a_single_point_curve_fits(law, y):
    x = np.array([1.0, 2.0, 4.0, 8.0][:len(y)])
    y = np.array(y)
    fit = fit_law(law, x, y)
    before_p, before_stderr = curve_fit_law(law, x, y)
    if len(y) == 1:  # nothing to fit: curve_fit's answer (its start, p0), as before
        assert (fit.p, math.isnan(fit.p_stderr)) == (before_p, math.isnan(before_stderr))
        return
    # By hand: flat or slower with every GPU, p = 0 (S = 1 is the closest either law comes);
    # superlinear, p = 1 (S = N); two points (1, 1) and (2, 2) lie on S = N exactly.
    expected = 0.0 if y[-1] <= 1.0 else 1.0
    assert str(fit.p) == str(expected)  # not -0.0, not a point beside the bound
    assert fit.p == pytest.approx(before_p, abs=2e-4)  # curve_fit stopped up to 1.6e-4 inside
    assert objective(law, x, y, fit.p) <= objective(law, x, y, before_p)
    if objective(law, x, y, fit.p) == 0.0:  # through every point: no residual, no error
        assert fit.p_stderr == 0.0
    else:
        assert fit.p_stderr == pytest.approx(before_stderr, rel=1e-6)


def test_one_cache_serves_the_fit_table_and_the_predictions():
    from scalesweep.analysis.predict import law_fits

    fits._cached_fit.cache_clear()
    gpus, throughput = (1, 2, 4, 8), (100.0, 190.0, 340.0, 560.0)
    scale = np.array(gpus, float)
    speedups = np.array(throughput) / throughput[0]
    table_fit = fit_law("amdahl", scale, speedups)
    predicted_amdahl, predicted_gustafson = law_fits(gpus, throughput)
    assert predicted_amdahl is table_fit
    assert predicted_gustafson is fit_law("gustafson", scale, speedups)
    assert fits._cached_fit.cache_info().misses == 2
