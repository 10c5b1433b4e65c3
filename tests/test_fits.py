"""Amdahl/Gustafson fits recover known serial fractions from synthetic runs tables."""

import math

import numpy as np
import pandas as pd
import pytest

from scalesweep.analysis.fits import (
    FIT_COLUMNS,
    amdahl,
    fit_law,
    fit_table,
    gustafson,
    limit_speedup,
    weighted_r_squared,
)
from scalesweep.analysis.scaling import scaling_table

IMAGES = 50_000  # images per epoch: throughput = IMAGES / epoch time


def synthetic_runs(gpus, p_throughput, p_total, law=amdahl, repeats=1, noise=0.0, seed=0,
                   model="m"):
    """Runs whose epoch time follows `law` with p_throughput and whose total time follows Amdahl
    with p_total, times multiplied by log-normal noise of relative size `noise`."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in gpus:
        for repeat in range(repeats):
            time = 100.0 / law(n, p_throughput) * rng.lognormal(0.0, noise)
            total = 1000.0 / amdahl(n, p_total) * rng.lognormal(0.0, noise)
            rows.append({"model": model, "gpus": n, "repeat": repeat, "status": "ok",
                         "steady_epoch_time_s": time, "throughput_img_s": IMAGES / time,
                         "total_time_s": total})
    return pd.DataFrame(rows)


def one_fit(fits, law, target):
    rows = fits[(fits["law"] == law) & (fits["target"] == target)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_laws_by_hand():
    # Amdahl p=0.9: N=10 -> 1/(0.1 + 0.09) = 5.263; Gustafson p=0.9: N=10 -> 0.1 + 9 = 9.1
    assert amdahl(10, 0.9) == pytest.approx(1 / 0.19)
    assert gustafson(10, 0.9) == pytest.approx(9.1)
    assert amdahl(1, 0.3) == 1.0 and gustafson(1, 0.3) == 1.0
    assert limit_speedup("amdahl", 0.9) == pytest.approx(10.0)
    assert limit_speedup("amdahl", 1.0) == math.inf
    assert limit_speedup("gustafson", 0.5) == math.inf
    # R^2 = 1 - SS_res/SS_tot: obs 1,2,3 (mean 2, SS_tot 2), pred 1,2,4 (SS_res 1) -> 0.5
    assert weighted_r_squared([1, 2, 3], [1, 2, 4], [1, 1, 1]) == 0.5
    assert math.isnan(weighted_r_squared([2, 2], [2, 2], [1, 1]))


def test_exact_amdahl_data_gives_p_and_predictions_by_hand():
    fits = fit_table(synthetic_runs([1, 2, 4, 8, 16], 0.9, 0.6))
    assert list(fits.columns) == ["model", *FIT_COLUMNS]
    fit = one_fit(fits, "amdahl", "speedup")
    assert fit["p"] == pytest.approx(0.9, abs=1e-6)
    assert fit["p_stderr"] == pytest.approx(0.0, abs=1e-6)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["limit_speedup"] == pytest.approx(10.0, rel=1e-5)
    assert fit["fit_variable"] == "N" and fit["gpus_fitted"] == "1,2,4,8,16"
    assert fit["n_points"] == 5
    # next doublings after 16: 32 -> 1/(0.1 + 0.9/32) = 7.8049 (24.39 %), 64 -> 8.7671 (13.70 %)
    assert fit["pred_gpus_1"] == 32 and fit["pred_gpus_2"] == 64
    assert fit["pred_speedup_1"] == pytest.approx(1 / (0.1 + 0.9 / 32), rel=1e-5)
    assert fit["pred_efficiency_pct_1"] == pytest.approx(100 / (0.1 + 0.9 / 32) / 32, rel=1e-5)
    assert fit["pred_speedup_2"] == pytest.approx(1 / (0.1 + 0.9 / 64), rel=1e-5)
    # time to solution is fitted on its own and finds its own p
    assert one_fit(fits, "amdahl", "time_to_solution")["p"] == pytest.approx(0.6, abs=1e-6)
    assert "one run per GPU count" in fit["note"]


def test_noisy_repeats_recover_p_within_the_bootstrap_interval():
    runs = synthetic_runs([1, 2, 4, 8, 16], 0.9, 0.7, repeats=5, noise=0.03, seed=1)
    fits = fit_table(runs, n_bootstrap=200, seed=0)
    for target, truth in (("speedup", 0.9), ("time_to_solution", 0.7)):
        fit = one_fit(fits, "amdahl", target)
        assert fit["n_bootstrap"] == 200
        assert fit["p_ci_low"] <= truth <= fit["p_ci_high"], target
        assert fit["p_ci_low"] < fit["p"] < fit["p_ci_high"]
        assert fit["p_ci_high"] - fit["p_ci_low"] < 0.05  # an interval that says something
    # the same seed gives the same interval
    again = one_fit(fit_table(runs, n_bootstrap=200, seed=0), "amdahl", "speedup")
    assert again["p_ci_low"] == one_fit(fits, "amdahl", "speedup")["p_ci_low"]


def test_bootstraps_computed_together_give_each_fit_its_own_interval():
    """fit_table runs the bootstraps of every group together (one median and one fit per set of
    groups that draw alike): each interval exactly what its group's bootstrap alone gives, also
    where Amdahl's minimum lies on a bound (a superlinear group: the bounded search, whose last
    digits depend on the rows searched with it) beside an interior one."""
    from scalesweep.analysis.fits import BootstrapRequest, bootstrap_intervals

    rng = np.random.default_rng(3)
    def samples(speedups, runs=4):
        return {g: 100.0 * s * rng.lognormal(0.0, 0.03, runs) for g, s in zip((1, 2, 4, 8), speedups)}
    sublinear = [samples([1, 1.8, 3.1, 4.7]) for _ in range(3)]
    superlinear = samples([1, 2.3, 5.0, 11.0])
    requests = [BootstrapRequest("amdahl", s, 1, True, 200, 0) for s in [*sublinear, superlinear]]
    requests += [BootstrapRequest("gustafson", sublinear[0], 1, True, 200, 0),
                 BootstrapRequest("amdahl", samples([1, 1.8, 3.1, 4.7], runs=3), 1, True, 200, 0),
                 BootstrapRequest("amdahl", sublinear[1], 1, False, 200, 0)]
    assert len({request.draws() for request in requests}) == 4  # four of them drawn together
    together = bootstrap_intervals(requests)
    assert together == [bootstrap_intervals([request])[0] for request in requests]
    (low, high, fitted), (bound_low, bound_high, _) = together[0], together[3]
    assert fitted == 200 and 0.8 < low < high < 0.95
    assert bound_high == 1.0 and bound_low > 0.99  # superlinear: the bound, not a point beside it
    assert together[6][1] < 0.5  # a time basis reads the same values as a slowdown


def test_a_bounded_search_gives_each_block_of_rows_what_it_alone_gives():
    """The golden-section search stops when its widest interval is narrow enough. A row whose
    minimum lies just inside a bound starts narrower than one from inside the grid: searched
    together the first one takes more steps, and its p changes in the ninth digit. search_rows
    (one group's resamples) keeps each group's bootstrap what it is alone."""
    from scalesweep.analysis.fits import fit_law_batch

    x = np.array([1.0, 2.0, 4.0, 8.0])
    near_bound = [1.0, 0.86947759, 23.05172667, 14.41324445]  # p ~ 0.0047 (grid best: p = 0)
    inside = [1.0, 0.927446, 4.30039122, 20.61422433]  # p ~ 0.47, from inside the grid
    alone = [fit_law_batch("amdahl", x, [row])[0] for row in (near_bound, inside)]
    assert 0.004 < alone[0] < 0.005 and 0.47 < alone[1] < 0.48
    assert fit_law_batch("amdahl", x, [near_bound, inside])[0] != alone[0]
    assert fit_law_batch("amdahl", x, [near_bound, inside], search_rows=1).tolist() == alone


def test_gustafson_recovers_p_of_scaled_speedup():
    runs = synthetic_runs([1, 2, 4, 8, 16], 0.8, 0.5, law=gustafson, repeats=5, noise=0.03,
                          seed=2)
    fit = one_fit(fit_table(runs), "gustafson", "speedup")
    assert fit["p_ci_low"] <= 0.8 <= fit["p_ci_high"]
    assert fit["limit_speedup"] == math.inf
    # prediction at 32 GPUs: (1 - p) + 32 p, and efficiency = that / 32
    assert fit["pred_speedup_1"] == pytest.approx(gustafson(32, fit["p"]))
    assert fit["pred_efficiency_pct_1"] == pytest.approx(gustafson(32, fit["p"]) / 32 * 100)


@pytest.mark.parametrize("law, truth", [("amdahl", 0.9), ("amdahl", 0.99), ("gustafson", 0.8)])
def test_reported_stderr_covers_the_truth(law, truth):
    """Independent 3 % noise on every point but the exact baseline: the truth should lie within
    3 standard errors in nearly every one of 40 data sets (a too small stderr would fail)."""
    n = np.array([1, 2, 4, 8, 16, 32], float)
    law_function = amdahl if law == "amdahl" else gustafson
    covered = 0
    for seed in range(40):
        noise = np.r_[1.0, np.random.default_rng(seed).normal(1.0, 0.03, len(n) - 1)]
        fit = fit_law(law, n, law_function(n, truth) * noise)
        covered += abs(fit.p - truth) <= 3 * fit.p_stderr
    assert covered >= 36


def test_baseline_not_one_fits_on_n_over_n_min():
    # 1 GPU failed: speedups are over N=2; data follow Amdahl p=0.8 in N' = N/2
    runs = synthetic_runs([2, 4, 8, 16], 0.8, 0.8)
    runs["steady_epoch_time_s"] = [100.0 / amdahl(n / 2, 0.8) for n in runs["gpus"]]
    runs["throughput_img_s"] = IMAGES / runs["steady_epoch_time_s"]
    failed = {"model": "m", "gpus": 1, "repeat": 0, "status": "failed"}
    runs = pd.concat([pd.DataFrame([failed]), runs], ignore_index=True)
    fit = one_fit(fit_table(runs), "amdahl", "speedup")
    assert fit["baseline_gpus"] == 2 and fit["fit_variable"] == "N/2"
    assert "baseline N=2, not 1" in fit["note"]
    assert fit["p"] == pytest.approx(0.8, abs=1e-6)
    # next doubling after 16 is 32 GPUs = N' 16: S = 1/(0.2 + 0.8/16) = 4.0, E = 4/16 = 25 %
    assert fit["pred_gpus_1"] == 32
    assert fit["pred_speedup_1"] == pytest.approx(4.0, rel=1e-5)
    assert fit["pred_efficiency_pct_1"] == pytest.approx(25.0, rel=1e-5)


@pytest.mark.parametrize("gpus", [[1], [1, 2], [4, 8]])
def test_too_few_gpu_counts_give_a_note_not_a_crash(gpus):
    fits = fit_table(synthetic_runs(gpus, 0.9, 0.9, repeats=2, noise=0.01))
    assert len(fits) == 3
    assert fits["p"].isna().all() and fits["pred_speedup_1"].isna().all()
    assert fits["note"].str.contains("too few GPU counts to fit").all()


def test_missing_total_times_leave_only_the_time_to_solution_fit_empty():
    runs = synthetic_runs([1, 2, 4], 0.9, 0.9).assign(total_time_s=math.nan)
    fits = fit_table(runs)
    assert math.isnan(one_fit(fits, "amdahl", "time_to_solution")["p"])
    assert one_fit(fits, "amdahl", "speedup")["p"] == pytest.approx(0.9, abs=1e-6)


def test_fit_from_a_scaling_table_matches_and_says_why_no_interval():
    runs = synthetic_runs([1, 2, 4, 8], 0.95, 0.8, repeats=3, noise=0.02, seed=3)
    from_runs = one_fit(fit_table(runs), "amdahl", "speedup")
    from_table = one_fit(fit_table(scaling_table(runs)), "amdahl", "speedup")
    assert from_table["p"] == pytest.approx(from_runs["p"])
    assert math.isnan(from_table["p_ci_low"])
    assert "no bootstrap interval" in from_table["note"]


def test_groups_are_fitted_separately():
    runs = pd.concat([synthetic_runs([1, 2, 4, 8], 0.9, 0.9, model="a"),
                      synthetic_runs([1, 2, 4, 8], 0.5, 0.5, model="b")], ignore_index=True)
    fits = fit_table(runs)
    p = fits[(fits["law"] == "amdahl") & (fits["target"] == "speedup")].set_index("model")["p"]
    assert p["a"] == pytest.approx(0.9, abs=1e-6) and p["b"] == pytest.approx(0.5, abs=1e-6)


def test_unknown_table_is_refused():
    with pytest.raises(ValueError, match="expected a runs table"):
        fit_table(pd.DataFrame({"gpus": [1, 2]}))


def test_batch_fit_matches_curve_fit():
    from scalesweep.analysis.fits import amdahl, fit_law, fit_law_batch, gustafson

    rng = np.random.default_rng(0)
    n = np.array([1, 2, 4, 8, 16], float)
    for law, function in (("amdahl", amdahl), ("gustafson", gustafson)):
        data = np.array([function(n, p) * np.r_[1.0, rng.lognormal(0, 0.05, len(n) - 1)]
                         for p in rng.uniform(0, 1, 50)])
        batch = fit_law_batch(law, n, data)
        single = np.array([fit_law(law, n, row).p for row in data])
        assert batch == pytest.approx(single, abs=1e-4)
    assert np.isnan(fit_law_batch("amdahl", n, [[1, 2, np.nan, 3, 4]])[0])
