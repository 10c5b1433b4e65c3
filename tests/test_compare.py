"""Comparison of two sweeps: intervals (repeats, pooled spread, bootstrap), family-wise verdicts,
efficiency differences, the provenance diff, the outputs and the CLI."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from scalesweep.cli import main
from scalesweep.history import archive, compare
from scalesweep.analysis import intervals
from scalesweep.analysis.intervals import Cell, estimate
from scalesweep.history.compare import compare_runs
from scalesweep.report import compare_text
from scalesweep.report.compare_figure import FASTER, SAME, SLOWER, UNKNOWN, UNKNOWN_NO_REPEATS
from scalesweep.tidy.rows import runs_table

RNG = np.random.default_rng(0)


def cell(throughputs, spread=None):
    """A cell; `spread` = (run-to-run variance of one run's log throughput, its df)."""
    logs = np.log(np.asarray(throughputs, float))
    run_var, run_df = spread or (math.nan, math.nan)
    return Cell(logs, run_var, run_df=run_df)


# sd 0.0511924 of one run's log throughput, as from many repeats (df infinite)
SPREAD = (0.0511924**2, math.inf)


# ----------------------------------------------------------------------------- one configuration

def test_repeats_give_welch_t_interval_hand_checked():
    # log throughputs 4.6 +- 0.1 and 4.4 +- 0.1, three repeats each: variance of each mean
    # 0.01 / 3, Satterthwaite df = 4, t(0.975, 4) = 2.776445, se = sqrt(0.02 / 3) = 0.0816497.
    est = estimate(cell(np.exp([4.6, 4.7, 4.5])), cell(np.exp([4.4, 4.5, 4.3])), RNG)
    assert est.method == "repeats" and est.df == pytest.approx(4.0)
    assert math.exp(est.log_ratio) == pytest.approx(math.exp(-0.2))
    # exp(-0.2 -+ 2.776445 x 0.0816497)
    assert est.interval(0.95) == pytest.approx((0.652662, 1.027055), rel=1e-5)
    assert est.p_value() == pytest.approx(0.070484, rel=1e-4)


def test_single_runs_use_the_run_to_run_spread_hand_checked():
    # 100 img/s against 80, one run a side, runs spread by sd 0.0511924 (log):
    # se = sqrt(2) x sd = 0.0723970 (normal: df infinite).
    est = estimate(cell([100.0], SPREAD), cell([80.0], SPREAD), RNG)
    assert est.method == "pooled spread" and math.isinf(est.df)
    assert est.interval(0.95) == pytest.approx((0.694169, 0.921965), rel=1e-5)  # 0.8 exp(-+1.96 se)
    assert est.p_value() == pytest.approx(0.0020546, rel=1e-3)
    assert compare.verdict(est.interval(0.95)) == SLOWER


def test_without_repeats_or_run_intervals_there_is_no_verdict():
    assert estimate(cell([100.0]), cell([80.0]), RNG).method == "none"
    assert estimate(cell([100.0], SPREAD), cell([80.0]), RNG).method == "none"
    assert estimate(cell([]), cell([80.0, 81.0]), RNG) is None
    assert compare.verdict((math.nan, math.nan)) == UNKNOWN


def test_repeats_against_a_single_run_with_the_spread():
    est = estimate(cell([100.0, 104.0, 96.0]), cell([80.0], SPREAD), RNG)
    assert est.method == "pooled spread"
    # Only the repeats' variance has finite degrees of freedom: df = v^2 / (v_b^2 / 2).
    var_b = np.var(np.log([100.0, 104.0, 96.0]), ddof=1) / 3
    var_c = SPREAD[0]
    assert est.df == pytest.approx((var_b + var_c) ** 2 / (var_b**2 / 2))


def test_bootstrap_false_alarm_rate_at_its_threshold():
    rng, rejected, trials = np.random.default_rng(5), 0, 400
    n = intervals.MIN_BOOTSTRAP_REPEATS
    for _ in range(trials):
        base, cand = rng.normal(4.6, 0.05, (2, n))
        est = estimate(Cell(base), Cell(cand), rng, resamples=2000)
        rejected += compare.verdict(est.interval(0.95)) != SAME
    assert est.method == "bootstrap" and rejected / trials <= 0.08


def test_bootstrap_with_many_repeats_agrees_with_theory():
    base = np.exp(RNG.normal(4.6, 0.05, 40))
    cand = np.exp(RNG.normal(4.5, 0.05, 40))
    est = estimate(cell(base), cell(cand), np.random.default_rng(1))
    assert est.method == "bootstrap"
    low, high = est.interval(0.95)
    # The percentile interval is close to the normal one for 40 normal repeats a side.
    se = math.sqrt(np.var(np.log(base), ddof=1) / 40 + np.var(np.log(cand), ddof=1) / 40)
    assert math.log(high / low) == pytest.approx(2 * 1.96 * se, rel=0.1)
    assert low < math.exp(est.log_ratio) < high < 1 and est.p_value() < 0.01


def test_bootstrap_means_are_means_of_resamples():
    values = np.array([1.0, 2.0, 6.0])
    means = intervals.bootstrap_means(values, np.random.default_rng(2), 20000)
    possible = {round(sum(c) / 3, 9) for c in __import__("itertools").product(values, repeat=3)}
    assert {round(m, 9) for m in means} <= possible
    assert means.mean() == pytest.approx(3.0, abs=0.03)
    assert means.var() == pytest.approx(np.var(values) / 3, rel=0.05)  # plug-in variance / n


def null_rejection_rate(repeats: int, method: str, trials: int = 1500) -> float:
    """How often a 95 % interval excludes 1.0 when nothing changed (normal noise on the log scale)."""
    rng = np.random.default_rng(7)
    rejected = 0
    for _ in range(trials):
        base, cand = rng.normal(0, 0.05, (2, repeats))
        if method == "percentile bootstrap":
            draws = (intervals.bootstrap_means(cand, rng, 2000) - intervals.bootstrap_means(base, rng, 2000))
            low, high = np.quantile(draws, [0.025, 0.975])
            rejected += low > 0 or high < 0
        else:
            est = estimate(Cell(base + 4.6), Cell(cand + 4.6), rng)
            rejected += compare.verdict(est.interval(0.95)) != SAME
    return rejected / trials


def test_few_repeats_false_alarm_rate_stays_at_five_percent_where_the_bootstrap_would_not():
    # Why few repeats get Welch's t and not the percentile bootstrap: under no change at all.
    # (Measured with these seeds: t 3.7 % and 2.3 %; bootstrap 20 % and 32 %.)
    assert 0.02 <= null_rejection_rate(3, "repeats") <= 0.06
    assert null_rejection_rate(2, "repeats") <= 0.06
    assert null_rejection_rate(3, "percentile bootstrap", trials=600) >= 0.15
    assert null_rejection_rate(2, "percentile bootstrap", trials=600) >= 0.25


# ----------------------------------------------------------------------------- whole comparisons

def side(factor_at_4=1.0, driver="535.104.05", d=0.02, image=None):
    """Three GPU counts x three repeats; efficiencies 100 / 90 / 80 % exactly (the middle repeat
    is the median), repeats spread by exp(-d), 1, exp(d); candidate: throughput at 4 GPUs x factor."""
    rows = []
    for gpus, efficiency in ((1, 1.0), (2, 0.9), (4, 0.8)):
        for repeat, spread in enumerate((math.exp(-d), 1.0, math.exp(d))):
            throughput = 100.0 * gpus * efficiency * spread * (factor_at_4 if gpus == 4 else 1.0)
            rows.append({"framework": "pytorch", "model": "resnet50", "dataset": "tiny-224",
                         "gpus": gpus, "nodes": 1, "repeat": repeat, "status": "ok",
                         "throughput_img_s": throughput, "steady_epoch_time_s": 1000.0 / throughput,
                         "gpu_driver": driver, "container_image": image,
                         "start_time": f"2026-11-0{repeat + 1}T00:00:00+00:00"})
    return pd.DataFrame(rows)


def test_a_halved_configuration_is_slower_and_the_others_unchanged():
    table, facts = compare_runs(side(), side(factor_at_4=0.5, driver="550.54.15"))
    assert table["gpus"].tolist() == ["1", "2", "4"] and facts["m"] == 3
    assert table["verdict"].tolist() == [SAME, SAME, SLOWER]
    assert table["ratio"].tolist() == pytest.approx([1.0, 1.0, 0.5])
    assert table["change_pct"].iloc[2] == pytest.approx(-50.0)
    assert table["ci_method"].unique().tolist() == ["repeats"]
    assert facts["adjusted_level"] == pytest.approx(1 - 0.05 / 3)
    assert (table["ratio_ci_adj_low"] < table["ratio_ci_low"]).all()  # family-wise is wider
    assert table["efficiency_baseline_pct"].tolist() == pytest.approx([100.0, 90.0, 80.0])
    assert table["efficiency_candidate_pct"].tolist() == pytest.approx([100.0, 90.0, 40.0])
    assert table["efficiency_diff_pp"].tolist() == pytest.approx([0.0, 0.0, -40.0])
    assert facts["provenance"] == {"gpu_driver": (("535.104.05",), ("550.54.15",))}
    assert set(table["provenance_diff"]) == {"gpu_driver"}


def test_efficiency_interval_by_the_delta_method():
    table, _ = compare_runs(side(), side(factor_at_4=0.5))
    # Var of each mean log time: d^2 / 3 (spread -d, 0, d); efficiency at 4 GPUs uses the means at
    # 4 and 1 GPU: Var(E) = E^2 x 2 d^2 / 3 per side, E = 80 % and 40 %; df 2 per mean.
    v = 0.02**2 / 3
    terms = [80.0**2 * v] * 2 + [40.0**2 * v] * 2
    df = sum(terms) ** 2 / sum(t * t / 2 for t in terms)
    from scipy import stats

    half = stats.t.ppf(0.975, df) * math.sqrt(sum(terms))
    row = table.iloc[2]
    assert (row["efficiency_diff_ci_low"], row["efficiency_diff_ci_high"]) == pytest.approx((-40 - half, -40 + half))
    assert (table.iloc[0]["efficiency_diff_ci_low"], table.iloc[0]["efficiency_diff_ci_high"]) == (0.0, 0.0)


def test_bonferroni_turns_a_lone_significant_interval_into_no_detectable_difference():
    # At 4 GPUs: 6 % slower with spread 0.02: significant at 95 % on its own, not at 1 - 0.05 / 3.
    table, facts = compare_runs(side(), side(factor_at_4=0.94))
    row = table.iloc[2]
    assert row["ratio_ci_high"] < 1 < row["ratio_ci_adj_high"]
    assert row["verdict"] == SAME and row["p_value"] < 0.05 < row["p_adjusted"]
    alone, _ = compare_runs(side().query("gpus == 4"), side(factor_at_4=0.94).query("gpus == 4"))
    assert alone["verdict"].tolist() == [SLOWER]


def test_configurations_match_on_axes_not_provenance_nor_types():
    base = side()
    cand = side(factor_at_4=2.0).assign(gpus=lambda f: f["gpus"].astype(float).astype(str))  # "4.0"
    cand["precision"] = "fp32"  # an axis only the candidate names, with one value
    table, facts = compare_runs(base, cand)
    assert len(table) == 3 and table["verdict"].tolist() == [SAME, SAME, FASTER]
    assert facts["notes"] == ["axis precision only in the candidate (fp32): ignored"]
    two_values = pd.concat([cand, cand.assign(precision="bf16")])
    table, facts = compare_runs(base, two_values)
    assert table.empty and len(facts["only_candidate"]) == 6


def test_failed_configurations_are_unknown_with_a_note():
    cand = side()
    cand.loc[cand["gpus"] == 4, ["status", "throughput_img_s"]] = ["oom", np.nan]
    table, _ = compare_runs(side(), cand)
    row = table.iloc[2]
    assert row["verdict"] == UNKNOWN and row["ci_method"] == "none"
    assert row["note"] == "candidate: no ok run with a throughput (oom x3)"


def test_single_runs_without_repeats_say_so():
    table, facts = compare_runs(side().query("repeat == 1"), side(factor_at_4=0.5).query("repeat == 1"))
    assert table["verdict"].unique().tolist() == [UNKNOWN_NO_REPEATS] and facts["m"] == 0
    assert table["ratio"].iloc[2] == pytest.approx(0.5)  # the ratio is still given
    assert "no repeats of its settings on its hardware" in table["note"].iloc[0]


def test_single_runs_with_step_time_intervals_alone_get_no_verdict():
    # +-2 % from a run's own steps says nothing of how far the next run lands
    def one(factor):
        runs = side(factor_at_4=factor).query("repeat == 1").copy()
        runs["throughput_ci_low_img_s"] = runs["throughput_img_s"] * 0.98
        runs["throughput_ci_high_img_s"] = runs["throughput_img_s"] * 1.02
        return runs

    table, _ = compare_runs(one(1.0), one(0.5))
    assert table["verdict"].unique().tolist() == [UNKNOWN_NO_REPEATS]


# ----------------------------------------------------------------------------- provenance diff

def header(**changes):
    base = {
        "framework": "pytorch", "model": "resnet50", "dataset": "tiny-224", "resolution": 224,
        "gpus": 4, "world_size": 4, "nodes": 1, "per_gpu_batch": 64, "global_batch": 256,
        "learning_rate": 0.4, "precision": "bf16", "epochs": 2, "protocol": "epochs",
        "versions": {"torch": "2.4.0", "cuda": "12.5", "cudnn": 90100, "nccl": "2.21.5"},
        "gpu_models": ["NVIDIA H100"] * 4, "gpu_driver": "535.104.05", "cpu_model": "Xeon 8460Y+",
        "hostname": "as01r1b01", "slurm_job_id": "1", "slurm_nodelist": "as01r1b01",
        "slurm_cluster_name": "mn5", "container_image": "/images/pytorch_24.07.sif",
        "start_time": "2026-11-01T00:00:00+00:00",
    }  # fmt: skip
    return {**base, **changes}


def runs_from_header(tmp_path, name, head):
    lines = [{"record": "header", "schema": 1, **head},
             {"record": "epoch", "schema": 1, "epoch": 1, "images": 256, "seconds": 2.0},
             {"record": "epoch", "schema": 1, "epoch": 2, "images": 256, "seconds": 1.0},
             {"record": "summary", "schema": 1, "status": "ok", "total_time_s": 3.5}]
    path = tmp_path / f"{name}.log"
    path.write_text("\n".join(":::SCALESWEEP " + json.dumps(line) for line in lines) + "\n")
    return runs_table([(path, {"repeat": 0})])[1]


def test_provenance_diff_lists_exactly_the_fields_that_differ(tmp_path):
    base = runs_from_header(tmp_path, "base", header())
    changed = header(gpu_driver="550.54.15", container_image="/images/pytorch_24.10.sif",
                     versions={"torch": "2.4.0", "cuda": "12.5", "cudnn": 90100, "nccl": "2.22.3"},
                     learning_rate=0.2, slurm_job_id="2", start_time="2026-11-20T00:00:00+00:00")
    cand = runs_from_header(tmp_path, "cand", changed)
    diff = compare.provenance_diff(base, cand)
    assert list(diff) == ["gpu_driver", "nccl_version", "container_image", "settings_hash"]
    assert diff["gpu_driver"] == (("535.104.05",), ("550.54.15",))
    assert diff["nccl_version"] == (("2.21.5",), ("2.22.3",))
    # Another start time and job id alone are no difference.
    later = runs_from_header(tmp_path, "later", header(slurm_job_id="3", start_time="2026-12-01T00:00:00+00:00"))
    assert compare.provenance_diff(base, later) == {}
    other_place = runs_from_header(tmp_path, "place", header(slurm_cluster_name=None, hostname="laptop",
                                                              slurm_nodelist=None))
    assert list(compare.provenance_diff(base, other_place)) == ["cluster", "slurm_nodelist"]
    assert compare_text.provenance_lines(diff)[1] == "  gpu_driver: 535.104.05 -> 550.54.15"


# ----------------------------------------------------------------------------- outputs and CLI

def test_regressions_need_significance_and_size():
    table, _ = compare_runs(side(), side(factor_at_4=0.5))
    assert compare.regressions(table, 30.0)["gpus"].tolist() == ["4"]
    assert compare.regressions(table, 60.0).empty
    same, _ = compare_runs(side(), side(factor_at_4=0.94))  # 6 % slower, not significant family-wise
    assert compare.regressions(same, 1.0).empty


def archived_pair(folder):
    a = archive.archive(side(), folder)
    b = archive.archive(side(factor_at_4=0.5, driver="550.54.15").assign(
        start_time=lambda f: f["start_time"].str.replace("2026-11", "2026-12")), folder)
    return a, b


@pytest.mark.slow
def test_cli_history_and_compare(tmp_path, capsys):
    hist, out = tmp_path / "history", tmp_path / "compare"
    a, b = archived_pair(hist)
    assert main(["history", "--history", str(hist)]) == 0
    listing = capsys.readouterr().out
    assert a.sweep_id in listing and b.sweep_id in listing
    assert main(["history", "--history", str(hist), "--csv", "gpu_driver=550.54.15"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 2 and rows[1].startswith(b.sweep_id)

    assert main(["compare", a.sweep_id, "gpu_driver=550.54.15", "--history", str(hist), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verdicts: 1 slower, 0 faster, 2 no detectable difference, 0 unknown" in text
    assert "gpu_driver: 535.104.05 -> 550.54.15" in text
    table = pd.read_csv(out / "compare.csv")
    assert table["verdict"].tolist() == [SAME, SAME, SLOWER]
    assert (out / "compare.png").stat().st_size > 10_000
    assert (out / "summary.txt").read_text() == text.split("written:")[0]

    gate = ["compare", a.sweep_id, b.sweep_id, "--history", str(hist), "--out", str(out)]
    assert main([*gate, "--fail-above", "30"]) == 1
    assert "1 configuration(s) significantly slower by more than 30 %" in capsys.readouterr().err
    assert main([*gate, "--fail-above", "60"]) == 0
    assert main([*gate, "--where", "gpus < 4", "--fail-above", "1"]) == 0


def test_cli_compare_errors_name_the_problem(tmp_path, capsys):
    hist = tmp_path / "history"
    a, _ = archived_pair(hist)
    assert main(["compare", a.sweep_id, "20991231", "--history", str(hist), "--out", str(tmp_path)]) == 2
    assert "no archived sweep '20991231'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main(["compare", a.sweep_id, a.sweep_id, "--history", str(hist), "--confidence", "95"])
    assert refused.value.code == 2
    assert "argument --confidence: 95: must be a finite number > 0 and < 1" in capsys.readouterr().err


def test_write_compare_is_the_workflow_step(tmp_path):
    hist = tmp_path / "history"
    a, b = archived_pair(hist)
    archived = tmp_path / "archived.json"
    archived.write_text(b.as_json())
    line = compare.write_compare(a.sweep_id, archived, hist, tmp_path / "out")
    assert line == f"3 configurations compared with {a.sweep_id}: 2 {SAME}, 1 {SLOWER}"
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert f"candidate: this sweep ({b.sweep_id})" in summary
