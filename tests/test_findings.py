"""results/findings.md: the answer in words, every number the tables' (scalesweep/report/findings.py)."""

import re

import pandas as pd
import pytest

from layout_data import laptop_runs
from scalesweep.analysis import tables
from scalesweep.plan.analysis_settings import DEFAULTS
from scalesweep.report import findings


def hand_tables(r2=0.9, p=0.8):
    """One group measured at 1, 2 and 4 GPUs: at 4, speedup 2.52 (63 %), and the 37 points lost
    split 28 exposed communication, 6 data, 3 compute, 0 other."""
    keys = {"framework": "pytorch", "model": "vit_tiny", "dataset": "synth-folder"}
    scaling = pd.DataFrame([
        {**keys, "gpus": 1, "baseline_gpus": 1, "speedup": 1.0, "efficiency_pct": 100.0,
         "step_efficiency_pct": 100.0, "loss_data_pct": 0.0, "loss_compute_pct": 0.0,
         "loss_sync_comm_pct": 0.0, "loss_other_pct": 0.0},
        {**keys, "gpus": 2, "baseline_gpus": 1, "speedup": 1.7, "efficiency_pct": 85.0,
         "step_efficiency_pct": 84.0, "loss_data_pct": 3.0, "loss_compute_pct": 1.0,
         "loss_sync_comm_pct": 12.0, "loss_other_pct": 0.0},
        {**keys, "gpus": 4, "baseline_gpus": 1, "speedup": 2.52, "efficiency_pct": 63.0,
         "step_efficiency_pct": 63.0, "loss_data_pct": 6.0, "loss_compute_pct": 3.0,
         "loss_sync_comm_pct": 28.0, "loss_other_pct": 0.0},
    ])
    # Amdahl p = 0.8: S(8) = 1/(0.2 + 0.1) = 3.333, S(16) = 1/(0.2 + 0.05) = 4; with p at its
    # interval's ends 0.7 and 0.9: S(8) = 1/(0.3 + 0.0875) = 2.581 and 1/(0.1 + 0.1125) = 4.706,
    # S(16) = 1/(0.3 + 0.04375) = 2.909 and 1/(0.1 + 0.05625) = 6.400.
    fits = pd.DataFrame([{**keys, "law": "amdahl", "target": "speedup", "baseline_gpus": 1,
                          "n_points": 3, "p": p, "p_stderr": 0.05, "p_ci_low": 0.7,
                          "p_ci_high": 0.9, "r2": r2, "pred_gpus_1": 8, "pred_speedup_1": 10 / 3,
                          "pred_efficiency_pct_1": 100 * 10 / 3 / 8, "pred_gpus_2": 16,
                          "pred_speedup_2": 4.0, "pred_efficiency_pct_2": 25.0, "note": ""}])
    sweet = pd.DataFrame([
        {**keys, "intent": "fastest", "gpus": 4, "gpu_hours": 0.0125, "note": "",
         "time_metric": "total_time_s"},
        {**keys, "intent": "efficient", "gpus": 2, "gpu_hours": 0.00735, "note": ""},
        {**keys, "intent": "budget", "gpus": float("nan"), "gpu_hours": float("nan"),
         "note": "no GPU-hour budget given: intent skipped"}])
    return scaling, fits, sweet


def test_findings_by_hand():
    text = findings.findings_text(*hand_tables())
    assert "**pytorch, vit_tiny, synth-folder**" in text
    assert "- Scaling: measured up to 4 GPUs, speedup 2.52× at 63.0 % efficiency." in text
    assert ("- Where to stop: fastest (shortest time to solution) 4 GPUs, 0.0125 GPU-hours; efficient 2 GPUs, 0.00735 "
            "GPU-hours; budget: no GPU-hour budget given: intent skipped.") in text
    assert ("- Why: at 4 GPUs 37.0 points of efficiency are lost: 28.0 to exposed "
            "communication, 6.0 to data, 3.0 to compute.") in text
    assert ("- Prediction (Amdahl, p = 0.800, R² = 0.90): 8 GPUs 3.33× (95 % 2.58–4.71), 41.7 % "
            "efficiency; 16 GPUs 4.00× (95 % 2.91–6.40), 25.0 % efficiency.") in text


def test_the_greenest_sweet_spot_says_its_energy_per_image():
    scaling, fits, sweet = hand_tables()
    # 2 GPUs drew 41,084.575 J over 16,000 images: 2.5677859 J per image.
    greenest = {**sweet.iloc[1].to_dict(), "intent": "greenest", "joules_per_image": 41084.575 / 16000}
    text = findings.findings_text(scaling, fits, pd.concat([sweet, pd.DataFrame([greenest])]))
    assert "greenest 2 GPUs, 0.00735 GPU-hours, 2.57 J per image (GPU energy)." in text
    assert "fastest (shortest time to solution) 4 GPUs, 0.0125 GPU-hours;" in text  # no energy measured: nothing said


def test_a_fit_that_explains_nothing_or_could_not_be_made_warns():
    text = findings.findings_text(*hand_tables(r2=-0.4))
    assert "warning, the Amdahl fit explains nothing (R² = -0.40): no prediction." in text
    assert "3.33×" not in text
    scaling, fits, sweet = hand_tables(p=float("nan"))
    fits["note"] = "too few GPU counts to fit: 2 with a usable speedup, need 3"
    text = findings.findings_text(scaling, fits, sweet)
    assert ("warning, Amdahl's law could not be fitted (too few GPU counts to fit: 2 with a "
            "usable speedup, need 3): no prediction.") in text


def test_a_part_that_shrank_is_a_gain_and_a_single_count_has_no_speedup():
    scaling, fits, sweet = hand_tables()
    scaling.loc[2, ["loss_other_pct", "loss_sync_comm_pct"]] = [-5.0, 33.0]
    assert "28.0 to" not in findings.findings_text(scaling, fits, sweet)
    assert ("at 4 GPUs 37.0 points of efficiency are lost: 33.0 to exposed communication, 6.0 "
            "to data, 3.0 to compute, 5.0 regained by other.") in findings.findings_text(
        scaling, fits, sweet)
    single = scaling.iloc[[1]].assign(baseline_gpus=2, speedup=1.0, efficiency_pct=100.0)
    assert "no speedup to report" in findings.findings_text(single, fits, sweet)


NUMBER = r"(-?\d+(?:\.\d+)?)"


def test_findings_md_numbers_are_the_tables(tmp_path):
    """The laptop sweep's tables written as CSV, findings.md from them: every group's numbers
    read back from the text equal the CSVs' at the precision printed."""
    outputs = tables.outputs_in(tmp_path / "tables")
    runs = tmp_path / "runs.csv"
    laptop_runs().to_csv(runs, index=False)
    tables.write_tables(runs, outputs, DEFAULTS)
    findings.write_findings(outputs["scaling"], outputs["fits"], outputs["sweet_spot"], outputs["predictions"],
                            tmp_path / "findings.md")
    text = (tmp_path / "findings.md").read_text()
    scaling = pd.read_csv(outputs["scaling"])
    fits = pd.read_csv(outputs["fits"])
    sweet = pd.read_csv(outputs["sweet_spot"])
    blocks = re.findall(r"\*\*(\w+), (\w+), ([\w-]+), requested_per_gpu_batch=32\*\*\n\n"
                        r"(.*?)(?:\n\n|\n?\Z)", text, re.S)
    assert len(blocks) == 4
    for framework, model, dataset, block in blocks:
        rows = scaling[scaling["model"] == model]
        top = rows.loc[rows["gpus"].idxmax()]
        gpus, speedup, efficiency = re.search(
            rf"measured up to {NUMBER} GPUs, speedup {NUMBER}×(?: \(95 % [\d.]+–[\d.]+\))? at {NUMBER} %",
            block).groups()
        assert (int(gpus), float(speedup), float(efficiency)) == (
            4, round(top["speedup"], 2), round(top["efficiency_pct"], 1))
        lost = float(re.search(rf"at 4 GPUs {NUMBER} points", block).group(1))
        assert lost == round(100 - top["step_efficiency_pct"], 1)
        sync = float(re.search(rf"{NUMBER} to exposed communication", block).group(1))
        assert sync == round(top["loss_sync_comm_pct"], 1)
        spots = sweet[(sweet["model"] == model) & sweet["gpus"].notna()]
        for _, spot in spots.iterrows():
            shown = re.search(rf"{re.escape(findings.intent_words(spot))} {NUMBER} GPUs?, {NUMBER} GPU-hours", block)
            assert (int(shown.group(1)), float(shown.group(2))) == (
                int(spot["gpus"]), float(f"{spot['gpu_hours']:.3g}"))
        fit = fits[(fits["model"] == model) & (fits["law"] == "amdahl")
                   & (fits["target"] == "speedup")].iloc[0]
        if framework == "tensorflow":  # MirroredStrategy: one node, no prediction past it
            assert "no prediction beyond 4 GPUs" in block and pd.isna(fit["pred_speedup_1"])
        else:
            predicted = re.search(rf"8 GPUs {NUMBER}×", block).group(1)
            assert float(predicted) == round(fit["pred_speedup_1"], 2)
        assert framework in ("tensorflow", "pytorch") and dataset.startswith("synth")
