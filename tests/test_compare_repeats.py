"""Comparing sweeps of one run each (issue 16, item 5): the run-to-run spread decides, not a
run's own step-time interval.

Twelve configurations on one machine whose runs land a log-normal sd of 7 % apart from run to
run (two runs' ratio then spans about +-20 % over 12 configurations, as two `make sweep` runs of
one commit did on the 2-core laptop), each run timed to +-1 % by its own steps.
"""

import math

import numpy as np
import pandas as pd
import pytest

from scalesweep.history import archive, compare, query, sides
from scalesweep.analysis import intervals
from scalesweep.history.compare import compare_runs
from scalesweep.report import compare_text
from scalesweep.report.compare_figure import SAME, SLOWER, UNKNOWN_NO_REPEATS

SD = 0.07
CONFIGS = [(model, gpus) for model in ("resnet18", "resnet50", "vit_b_16") for gpus in (1, 2, 4, 8)]
TRUE_THROUGHPUT = {config: 100.0 * (i + 1) for i, config in enumerate(CONFIGS)}


def sweep(rng, repeats=1, factor=1.0, tag="a"):
    """runs.csv rows of one sweep: every configuration `repeats` times, throughput x `factor`."""
    rows = []
    for model, gpus in CONFIGS:
        for repeat in range(repeats):
            throughput = TRUE_THROUGHPUT[(model, gpus)] * factor * math.exp(rng.normal(0, SD))
            rows.append({"framework": "pytorch", "model": model, "dataset": "synth", "gpus": gpus,
                         "nodes": 1, "repeat": repeat, "status": "ok", "throughput_img_s": throughput,
                         "steady_epoch_time_s": 1000.0 / throughput,
                         "throughput_ci_low_img_s": throughput / 1.01,
                         "throughput_ci_high_img_s": throughput / 0.99,
                         "gpu_model": None, "cpu_model": "laptop CPU",
                         "settings_hash": f"{model}-{gpus}", "run_id": f"{tag}-{model}-{gpus}-{repeat}"})
    return pd.DataFrame(rows)


def significant(table):
    return int((table["verdict"] != SAME).sum())


def test_step_intervals_alone_would_call_unchanged_configurations_changed():
    # What the issue saw: with the runs' own +-1 % as their spread, most configurations differ.
    rng = np.random.default_rng(1)
    a, b = sweep(rng, tag="a"), sweep(rng, tag="b")
    z = np.abs(np.log(b["throughput_img_s"] / a["throughput_img_s"])) / (math.sqrt(2) * math.log(1.01) / 1.96)
    assert (z > 2.87).sum() >= 6  # Bonferroni over 12 at 95 %: |z| > 2.87


def test_single_run_sweeps_without_repeats_give_no_verdict_but_the_ratio():
    rng = np.random.default_rng(1)
    a, b = sweep(rng, tag="a"), sweep(rng, tag="b")
    table, facts = compare_runs(a, b)
    assert set(table["verdict"]) == {UNKNOWN_NO_REPEATS} and facts["m"] == 0
    expected = (b["throughput_img_s"] / a["throughput_img_s"]).to_numpy()
    assert table.sort_values(["model", "gpus"])["ratio"].to_numpy() == pytest.approx(
        expected[np.lexsort((a["gpus"], a["model"]))])


@pytest.mark.slow
def test_single_run_sweeps_with_history_repeats_give_no_false_alarm(tmp_path):
    rng = np.random.default_rng(1)
    store = tmp_path / "history"
    archive.archive(sweep(rng, repeats=3, tag="old"), store)  # an earlier sweep with 3 repeats
    alarms = []
    for round_ in range(10):  # ten pairs of single-run sweeps of the same code on the same machine
        a, b = sweep(rng, tag=f"a{round_}"), sweep(rng, tag=f"b{round_}")
        table, facts = compare_runs(a, b, history_runs=query.spread_runs(store))
        assert set(table["ci_method"]) == {"pooled spread"} and facts["m"] == 12
        alarms.append(significant(table))
    # The first pair, as in the issue: no significant verdict. Over the ten pairs the family-wise
    # level allows a false alarm in 1 pair of 20; measured with this seed: one configuration in
    # one pair.
    assert alarms[0] == 0
    assert sum(1 for count in alarms if count) <= 2
    variance, df = facts["spread"]["laptop CPU"]
    assert df == 12 * 2 and math.sqrt(variance) == pytest.approx(SD, rel=0.3)


def test_a_twenty_percent_slowdown_with_three_repeats_a_side_is_found(tmp_path):
    rng = np.random.default_rng(2)
    base, cand = sweep(rng, repeats=3, tag="base"), sweep(rng, repeats=3, factor=0.8, tag="cand")
    table, facts = compare_runs(base, cand)
    # pooled within the sides: 12 configurations x 2 sides x 2 df = 48 df
    assert facts["spread"]["laptop CPU"][1] == 48
    # z = ln(0.8) / (0.07 x sqrt(2 / 3)) = -3.9 against a Bonferroni t of about 2.95: found with
    # about 83 % power per configuration; measured with this seed: 10 of 12, none called faster
    assert (table["verdict"] == SLOWER).sum() >= 9
    assert set(table["verdict"]) <= {SLOWER, SAME}
    assert table["ratio"].mean() == pytest.approx(0.8, rel=0.05)


def test_the_summary_says_how_many_repeats_a_five_percent_change_needs(tmp_path):
    rng = np.random.default_rng(1)
    store = tmp_path / "history"
    archive.archive(sweep(rng, repeats=3, tag="old"), store)
    a, b = sweep(rng, tag="a"), sweep(rng, tag="b")
    table, facts = compare_runs(a, b, history_runs=query.spread_runs(store))
    variance, _ = facts["spread"]["laptop CPU"]
    # n = 2 sigma^2 (z(1 - 0.05 / 24) + z(0.8))^2 / ln(1.05)^2
    from scipy.stats import norm

    needed = math.ceil(2 * variance * (norm.ppf(1 - 0.05 / 24) + norm.ppf(0.8)) ** 2 / math.log(1.05) ** 2)
    assert intervals.repeats_needed(variance, 12) == needed
    text = compare_text.comparison_summary(table, facts, sides.Side("a", a), sides.Side("b", b))
    assert f"a 5 % change needs about {needed} repeats a side" in text


def test_the_history_is_read_only_when_some_configuration_lacks_bootstrap_repeats():
    rng, calls = np.random.default_rng(3), []

    def history_runs():
        calls.append(1)
        return sweep(rng, repeats=3, tag="old")

    compare_runs(sweep(rng, repeats=intervals.MIN_BOOTSTRAP_REPEATS, tag="a"),
                 sweep(rng, repeats=intervals.MIN_BOOTSTRAP_REPEATS, tag="b"), history_runs=history_runs)
    assert calls == []  # every configuration is bootstrapped: no spread needed
    _, facts = compare_runs(sweep(rng, tag="c"), sweep(rng, tag="d"), history_runs=history_runs)
    assert calls == [1] and facts["spread"]["laptop CPU"][1] == 24
