"""The scaling prediction (scalesweep/analysis/predict.py, docs/prediction.md): hand-computed
cases of each part, then the course book's chapter-12 ViT-H/14 runs (1/2/4 GPUs) predicting its
8/16/32-GPU efficiencies through `python -m scalesweep analyze --predict`."""

import math
import subprocess
import sys

import pandas as pd
import pytest

from scalesweep.analysis import predict
from scalesweep.analysis.predict import Measured, Network
from scalesweep.plan.analysis_settings import AnalysisSettings

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]

# The book's chapter 12 (J. Torres, Supercomputing for AI, Table 12.x): per-GPU batch 128,
# micro-224 12,500 and tiny-224 100,000 training images; t0 and tau fitted on 1-4 GPUs.
BOOK_T0 = 0.706
BOOK_TAU = {1: 0.5270, 2: 0.5371, 4: 0.5443}
BOOK_IMAGES = {"micro-224": 12_500, "tiny-224": 100_000}
BOOK_EFFICIENCY = {"micro-224": {8: 86.9, 16: 80.1, 32: 67.8}, "tiny-224": {8: 93.9, 16: 92.9, 32: 89.3}}


def measured(**changes) -> Measured:
    base = dict(gpus=(1, 2, 4), step_time_s=(0.5270, 0.5371, 0.5443), epoch_overhead_s=(0.706,) * 3,
                throughput_img_s=(1.0, 2.0, 4.0), noise=0.0, train_images=12_500, per_gpu_batch=128, epochs=5)
    return Measured(**{**base, **changes})


def test_steps_per_epoch_drop_the_last_partial_batch_as_both_trainers_do():
    # Both trainers' own counts are checked against this one in tests/test_backends.py
    # (test_epoch_parts_add_up_in_the_records_and_runs_csv). The book's S(N): 12,500 // 32 = 390 images per rank, // 128 = 3 steps at 32 GPUs.
    assert [predict.steps_per_epoch(12_500, n, 128) for n in (1, 2, 4, 8, 16, 32)] == [97, 48, 24, 12, 6, 3]
    assert [predict.steps_per_epoch(100_000, n, 128) for n in (1, 2, 4, 8, 16, 32)] == [781, 390, 195, 97, 48, 24]
    # 10 images over 4 ranks: 2 each, batch 1: 2 steps (not ceil(10 / 4) = 3: the tail is dropped).
    assert predict.steps_per_epoch(10, 4, 1) == 2 and predict.steps_per_epoch(10, 4, 3) == 0


def test_growth_per_doubling_is_the_least_squares_slope_over_log2_n():
    # Three points a doubling apart: the slope is (last - first) / 2 doublings.
    assert predict.growth_per_doubling((1, 2, 4), (0.5270, 0.5371, 0.5443)) == pytest.approx(0.00865)
    assert predict.growth_per_doubling((1, 2), (0.5, 0.49)) == 0.0  # faster with more GPUs: noise
    assert predict.growth_per_doubling((4,), (0.5,)) == 0.0


def test_ring_allreduce_is_the_nccl_tests_bus_bandwidth_model():
    # 2.52 GB over 8 ranks at 92 GB/s: 2 x 7/8 x 2.52e9 / 92e9 = 47.93 ms; + 14 latencies of 5 us.
    assert predict.ring_allreduce_s(8, 2.52e9, 92.0) == pytest.approx(0.047935, rel=1e-4)
    assert predict.ring_allreduce_s(8, 2.52e9, 92.0, 5e-6) == pytest.approx(0.047935 + 14 * 5e-6, rel=1e-4)
    assert predict.ring_allreduce_s(1, 2.52e9, 92.0) == 0.0


def test_the_node_boundary_switches_the_communication_rule():
    steps = lambda n: (12_500 // n) // 128  # noqa: E731
    with_bytes = measured(allreduce_bytes=2.52e9, intra_busbw_gb_s=370.0)
    # Beyond the node with a probe: tau(4) + ring(8 ranks at 92 GB/s) - ring(4 ranks at 370 GB/s)
    # = 544.3 + 47.93 - 10.22 = 582.0 ms.
    rules = predict.step_time_rules(8, with_bytes, 4, Network(92.0))
    assert rules["comm"] == pytest.approx(0.5443 + 0.047935 - 0.010216, rel=1e-4)
    assert rules["flat"] == 0.5443 and rules["log"] == pytest.approx(0.5443 + 0.00865)
    # Without a probe beyond the node: twice the growth per doubling (561.6 ms at 8).
    assert predict.step_time_rules(8, with_bytes, 4, None)["comm"] == pytest.approx(0.5443 + 2 * 0.00865)
    # Inside a node of 8 the intra-node ring is tiny: the comm rule never goes below the log rule.
    inside = predict.step_time_rules(8, with_bytes, 8, Network(92.0))
    assert inside["comm"] == pytest.approx(inside["log"])
    # The epoch: t0 + S x tau, micro-224 at 8 GPUs with the log rule: 0.706 + 12 x 0.55295 = 7.3414 s.
    row = predict.predict_model(8, measured(throughput_img_s=(128 * 97 / (0.706 + 97 * 0.527),) * 3), steps, 4, None)
    assert row["steps_per_epoch"] == 12 and row["epoch_overhead_s"] == pytest.approx(0.706)
    assert row["epoch_time_s"] == pytest.approx(7.3414, abs=1e-4)


def test_t0_is_the_median_overhead_and_the_band_widens_by_the_noise():
    steps = lambda n: (12_500 // n) // 128  # noqa: E731
    base_rate = 128 * 97 / (0.706 + 97 * 0.527)
    quiet = predict.predict_model(32, measured(epoch_overhead_s=(0.5, 0.706, 2.0), throughput_img_s=(base_rate,) * 3),
                                  steps, 4, None)
    assert quiet["epoch_overhead_s"] == pytest.approx(0.706)  # the median, not the mean 1.07
    # Flat rule at micro 32: T = 0.706 + 3 x 0.5443 = 2.3389 s, E = 3 x 51.825 / (97 x 2.3389) = 68.53 %.
    assert quiet["efficiency_high_pct"] == pytest.approx(68.53, abs=0.01)
    assert quiet["efficiency_pct"] == pytest.approx(66.32, abs=0.01)  # log rule, 570.25 ms per step
    noisy = predict.predict_model(32, measured(noise=0.02, throughput_img_s=(base_rate,) * 3), steps, 4, None)
    assert noisy["efficiency_high_pct"] == pytest.approx(quiet["efficiency_high_pct"] * 1.02)
    assert noisy["efficiency_low_pct"] == pytest.approx(quiet["efficiency_low_pct"] * 0.98)
    assert noisy["efficiency_pct"] == quiet["efficiency_pct"]


def settings(predict_gpus, gpus_per_node):
    """The analysis settings of a sweep predicting `predict_gpus` (None: the default counts) on
    nodes of `gpus_per_node` (None: the largest measured count)."""
    return AnalysisSettings.from_config({"predict_gpus": predict_gpus, "gpus_per_node": gpus_per_node})


def book_runs(with_columns=True) -> pd.DataFrame:
    rows = []
    for dataset, images in BOOK_IMAGES.items():
        for gpus, tau in BOOK_TAU.items():
            steps = (images // gpus) // 128
            seconds = BOOK_T0 + steps * tau
            row = {"framework": "pytorch", "model": "vit_h_14", "dataset": dataset, "gpus": gpus, "nodes": 1,
                   "repeat": 0, "status": "ok", "per_gpu_batch": 128, "epochs": 5,
                   "steady_epoch_time_s": seconds, "throughput_img_s": gpus * 128 * steps / seconds}
            if with_columns:
                row.update(steps_per_epoch=steps, step_time_s=tau, epoch_overhead_s=BOOK_T0,
                           dataset_train_images=images)
            else:
                row.update(train_images=images)
            rows.append(row)
    return pd.DataFrame(rows)


def test_without_step_times_the_amdahl_fit_is_the_labelled_fallback():
    table = predict.prediction_table(book_runs(with_columns=False), settings((8,), 4))
    assert set(table["method"]) == {predict.METHOD_AMDAHL}
    assert (table["efficiency_low_pct"] <= table["efficiency_pct"]).all()
    one = book_runs()
    one = one[one.gpus == 1]
    table = predict.prediction_table(one, settings((8,), 4))
    # Step times at one count and no network rule: no growth to continue, and a band of the flat
    # rule alone would be zero wide (issue 38): no prediction, said.
    assert set(table["method"]) == {predict.METHOD_NONE}
    assert table["inputs"].str.startswith("one measured GPU count (1) and no network rule").all()
    lonely = predict.prediction_table(book_runs(with_columns=False).query("gpus == 1"), settings((8,), 4))
    assert set(lonely["method"]) == {predict.METHOD_NONE} and lonely["efficiency_pct"].isna().all()
    assert "one measured GPU count" in lonely["inputs"].iloc[0]


def test_without_counts_the_next_two_doublings_are_predicted_on_a_node_of_the_largest_count():
    table = predict.prediction_table(book_runs(), settings(None, None))
    # Measured 1, 2, 4: 4 is held out and checked, 8 = 2 x 4 and 16 = 4 x 4 are predicted, on
    # nodes of 4 GPUs (the largest measured count): 2 and 4 nodes.
    assert sorted(set(table.gpus)) == [4, 8, 16]
    assert table.groupby("gpus")["nodes"].unique().map(list).to_dict() == {4: [1], 8: [2], 16: [4]}


def test_a_single_node_framework_gets_no_prediction_beyond_its_node():
    runs = book_runs().assign(framework="tensorflow")
    table = predict.prediction_table(runs, settings((4, 8), 4))
    beyond = table[table.gpus == 8]
    assert set(beyond["method"]) == {predict.METHOD_NONE}
    assert beyond["inputs"].str.contains("one node").all()


def test_a_measured_count_is_predicted_from_the_counts_below_it():
    table = predict.prediction_table(book_runs(), settings((8,), 4))
    at_four = table[table.gpus == 4].set_index("dataset")
    assert (at_four["measured_gpus"] == "1/2").all()
    # Predicting 4 from 1 and 2 with the log rule: tau(4) = 537.1 + 10.1 = 547.2 ms against 544.3.
    assert at_four.loc["micro-224", "step_time_s"] == pytest.approx(0.5472)
    assert at_four["error_pts"].abs().max() < 0.6
    assert (at_four["measured_efficiency_pct"] - at_four["efficiency_pct"] == -at_four["error_pts"]).all()


@pytest.mark.command
def test_the_books_chapter_12_efficiencies_are_predicted_within_2_5_points(tmp_path):
    runs_csv = tmp_path / "runs.csv"
    book_runs().to_csv(runs_csv, index=False)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "scalesweep", "analyze", str(runs_csv), "--out", str(out),
                           "--predict", "8,16,32", "--gpus-per-node", "4"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = pd.read_csv(out / "tables" / "predictions.csv")
    for dataset, expected in BOOK_EFFICIENCY.items():
        for gpus, book in expected.items():
            row = table[(table.dataset == dataset) & (table.gpus == gpus)].iloc[0]
            assert row["method"] == predict.METHOD_MODEL and row["nodes"] == gpus // 4
            assert abs(row["efficiency_pct"] - book) <= 2.5, (dataset, gpus, row["efficiency_pct"], book)
            assert row["efficiency_low_pct"] <= book <= row["efficiency_high_pct"], (dataset, gpus, book)
            assert not math.isnan(row["throughput_low_img_s"]) and row["throughput_low_img_s"] < row["throughput_high_img_s"]


@pytest.mark.slow
def test_predictions_reach_the_tables_figures_and_findings(tmp_path):
    """analysis.predict_gpus through the tables stage into predictions.csv, the speedup and
    efficiency figures (the points drawn are the table's) and findings.md's words."""
    from scalesweep.analysis import tables
    from scalesweep.report import figures, findings

    runs_csv = tmp_path / "runs.csv"
    book_runs().to_csv(runs_csv, index=False)
    outputs = tables.outputs_in(tmp_path / "tables")
    settings = AnalysisSettings.from_config({"predict_gpus": [8, 16]}, {"gpus_per_node": 4})
    tables.write_tables(runs_csv, outputs, settings)
    table = pd.read_csv(outputs["predictions"])
    assert sorted(table[table.dataset == "micro-224"].gpus) == [4, 8, 16]  # 4: held out, measured
    drawn = figures.build_figures(pd.read_csv(outputs["scaling"]), pd.read_csv(outputs["fits"]), table)
    points = drawn["efficiency_all"].curves
    points = points[points["kind"] == "predicted"].sort_values(["label", "gpus"])
    expected = table[table.gpus > 4].sort_values(["dataset", "gpus"])
    assert points["y"].tolist() == pytest.approx(expected["efficiency_pct"].tolist())
    assert points["y_low"].tolist() == pytest.approx(expected["efficiency_low_pct"].tolist())
    speedups = drawn["speedup_by_model"].curves
    speedups = speedups[speedups["kind"] == "predicted"].sort_values(["series", "gpus"])
    assert speedups["y"].tolist() == pytest.approx((expected["efficiency_pct"] / 100 * expected["gpus"]).tolist())
    text = findings.findings_text(pd.read_csv(outputs["scaling"]), pd.read_csv(outputs["fits"]),
                                  pd.read_csv(outputs["sweet_spot"]), table)
    micro = table[(table.dataset == "micro-224") & (table.gpus == 8)].iloc[0]
    assert (f"Predicted, not measured: 8 GPUs {micro.efficiency_pct:.1f} % efficiency (band "
            f"{micro.efficiency_low_pct:.1f}–{micro.efficiency_high_pct:.1f} %)") in text
    assert "Prediction checked against measurement: 4 GPUs from 1/2:" in text
    assert text.count("Predicted, not measured") == 2


def test_the_preview_prices_the_predicted_counts_it_saves():
    from scalesweep.plan import preview

    jobs = [{"framework": framework, "gpus": gpus, "time_limit_min": 30}
            for framework in ("pytorch", "tensorflow") for gpus in (1, 2, 4)]
    # PyTorch at 4 GPUs, 30 min: 8 and 16 GPUs would book 8 x 0.5 + 16 x 0.5 = 12 GPU-hours;
    # TensorFlow stays on its node of 4: nothing to price.
    def savings(analysis, node):
        return preview.prediction_savings(jobs, AnalysisSettings.from_config(analysis, {"gpus_per_node": node}))

    counts, hours = savings({"predict_gpus": None, "gpus_per_node": None}, 4)
    assert counts == (8, 16) and hours == pytest.approx(12.0)
    line = preview.savings_line(counts, hours)
    assert line == ("  predicted, not run: 8, 16 GPUs per configuration (results/tables/predictions.csv); "
                    "running them would book about 12.0 GPU-hours at these time limits")
    # On a node of 8 both frameworks may go to 8: + 8 x 0.5 for TensorFlow.
    assert savings({"predict_gpus": [8]}, 8)[1] == pytest.approx(8.0)
    # The analysis section's node of 8 comes before the cluster's 4: the same 8 GPU-hours.
    assert savings({"predict_gpus": [8], "gpus_per_node": 8}, 4)[1] == pytest.approx(8.0)
    assert preview.savings_line(*savings({"predict_gpus": [2]}, 4)) == ""
    summary = preview.plan_summary(["a"], [], {}, set(), savings=line)
    assert summary.endswith(line)


def test_without_the_training_set_size_the_prediction_is_per_step():
    # Steps-protocol runs of older trainers: no D, no t0; thr(N) = N x b / tau(N), so micro's
    # efficiency at 8 with the log rule is (527.0 / 552.95) = 95.31 % of the 1-GPU step rate.
    runs = book_runs().drop(columns=["dataset_train_images", "epoch_overhead_s", "steps_per_epoch"])
    runs["throughput_img_s"] = runs["gpus"] * 128 / runs["step_time_s"]
    row = predict.prediction_table(runs, settings((8,), 4)).query("gpus == 8 and dataset == 'micro-224'").iloc[0]
    assert row["method"] == predict.METHOD_MODEL and pd.isna(row["epoch_time_s"])
    assert row["efficiency_pct"] == pytest.approx(100 * 0.5270 / 0.55295, abs=0.01)
    assert "training-set size unknown" in row["inputs"]
