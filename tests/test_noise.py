"""Noise a reader is told about (issue 28.5): the fit's band widens with the spread between
repeats, a fit through 3 points says what it is worth, findings give the speedup with its
interval and say when the node was busy. Hand-made logs -> runs.csv -> tables -> findings."""

import json

import pandas as pd
import pytest

from epoch_logs import write_epochs_log
from scalesweep import pipeline
from scalesweep.analysis import tables
from scalesweep.analysis.fits import FEW_POINTS_NOTE
from scalesweep.plan.analysis_settings import AnalysisSettings

# Steady epoch medians 10, 5.5, 3.2 s at 1, 2, 4 GPUs; each count's three repeats spread by
# `spread` around that median (the median itself stays: the middle repeat is it).
MEDIANS = {1: 10.0, 2: 5.5, 4: 3.2}


def sweep(folder, spread, busy=False):
    logs = folder / "logs"
    logs.mkdir(parents=True)
    for gpus, median in MEDIANS.items():
        for repeat, factor in enumerate((1 - spread, 1.0, 1 + spread)):
            steady = median * factor
            path = write_epochs_log(logs / f"g{gpus}_r{repeat}.log", gpus, [30.0, steady, steady], repeat=repeat,
                                    load_avg_1m=9.0 if busy else 0.5, node_cpus=2)
    manifest = ["file,repeat"] + [f"g{g}_r{r}.log,{r}" for g in MEDIANS for r in range(3)]
    (logs / "manifest.csv").write_text("\n".join(manifest) + "\n")
    runs_csv, refused, _ = pipeline.collect_runs([logs], folder / "tidy")
    assert refused == []
    outputs = tables.outputs_in(folder / "tables")
    list(pipeline.tables_figures_findings(runs_csv, outputs, AnalysisSettings.from_config({}),
                                          folder / "figures", folder / "findings.md"))
    fits = pd.read_csv(outputs["fits"])
    amdahl = fits[(fits["law"] == "amdahl") & (fits["target"] == "speedup")].iloc[0]
    return amdahl, (folder / "findings.md").read_text(), pd.read_csv(outputs["scaling"])


@pytest.mark.slow
def test_the_same_medians_with_a_larger_spread_give_a_wider_fit_band(tmp_path):
    narrow, _, narrow_scaling = sweep(tmp_path / "narrow", 0.02)
    wide, text, wide_scaling = sweep(tmp_path / "wide", 0.20)
    # the same medians: the same speedups, the same fitted p
    assert list(narrow_scaling["speedup"]) == pytest.approx(list(wide_scaling["speedup"]))
    assert list(narrow_scaling["speedup"]) == pytest.approx([1.0, 10 / 5.5, 10 / 3.2])
    assert narrow["p"] == pytest.approx(wide["p"])
    assert narrow["n_bootstrap"] > 0 and wide["n_bootstrap"] > 0
    assert wide["p_ci_high"] - wide["p_ci_low"] > 2 * (narrow["p_ci_high"] - narrow["p_ci_low"])
    assert FEW_POINTS_NOTE in wide["note"]
    assert "Warning: fitted through 3 points" in text


@pytest.mark.slow
def test_findings_give_the_speedup_with_its_interval_and_say_the_node_was_busy(tmp_path):
    _, text, scaling = sweep(tmp_path / "busy", 0.10, busy=True)
    top = scaling.set_index("gpus").loc[4]
    base = scaling.set_index("gpus").loc[1]
    low = top["throughput_ci_low_img_s"] / base["throughput_ci_high_img_s"]
    high = top["throughput_ci_high_img_s"] / base["throughput_ci_low_img_s"]
    assert low < 10 / 3.2 < high
    assert f"speedup 3.12× (95 % {low:.2f}–{high:.2f}) at 78.1 % efficiency" in text
    assert list(scaling["n_busy"]) == [3, 3, 3]
    assert "The node was busy (load above its CPUs) at the start of 9 of 9 runs" in text
    quiet = sweep(tmp_path / "quiet", 0.10)[1]
    assert "busy" not in quiet
