"""Acceptance of the sweep comparison with the real trainers (issue 11, criterion 1).

Two sweeps of the PyTorch tiny ViT through the whole workflow (Snakemake, trainers, tidy, tables,
the archive rule into one shared history folder): the baseline with 4 repeats, the candidate with 2
repeats and a known slowdown injected into every training step (SCALESWEEP_INJECT_STEP_DELAY_S,
scalesweep/train/common/faults.py), compared by the workflow itself (config key compare_with). Then
the regression gate (--fail-above) on the injected slowdown and on two sides that differ only by
noise, the baseline's even and odd repeats: it fails the one and passes the other.

PyTorch only: the TensorFlow tiny model adds 20-50 s of graph building per run and nothing the
comparison would see differently. About 2-3 minutes on 2 cores.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import snakemake
from scalesweep.cli import main
from scalesweep.history import archive, query
from scalesweep.report.compare_figure import SLOWER

from scalesweep.train.common import faults  # noqa: E402

pytestmark = pytest.mark.slow

# Seconds spent (busy) in every training step of the candidate: 4 steps per epoch at 1 GPU (64 images,
# batch 16) and 2 per rank at 2 make the candidate's epoch 1 s / 0.5 s longer than the baseline's
# ~0.05 s, a factor the noise of a shared 2-core machine cannot hide or imitate.
DELAY_S = 0.25


def sweep_config(history_dir: Path, repeats: int, compare_with: str | None = None) -> dict:
    return {
        "matrix": {"framework": ["pytorch"], "model": ["vit_tiny"], "dataset": ["synth-folder"],
                   "gpus": [1, 2], "repeat": list(range(repeats))},
        "training": {"epochs": 2, "precision": "fp32", "num_workers": 0, "seed": 0},
        "models": {"pytorch": {"vit_tiny": {"per_gpu_batch": 16}}},
        "datasets": {"synth-folder": {"format": "imagefolder", "resolution": 32, "synthetic": {
            "classes": 4, "train_per_class": 16, "val_per_class": 4, "size": 32}}},
        "history_dir": str(history_dir),
        "compare_with": compare_with,
    }


def run_sweep(workdir: Path, config: dict, *args) -> Path:
    workdir.mkdir()
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(workdir, "--cores", "2", *args, configfile=path)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


def expected_ratio(baseline_runs: pd.DataFrame) -> dict:
    """Per GPU count: baseline epoch time / (that time + steps per epoch x DELAY_S), the
    throughput ratio the injected delay alone makes (each rank spends it in each of its steps)."""
    expected = {}
    for gpus, runs in baseline_runs.groupby("gpus"):
        epoch_s = math.exp(np.log(runs["steady_epoch_time_s"]).mean())
        steps = (runs["images_per_epoch"] / runs["global_batch"]).iloc[0]
        expected[str(gpus)] = epoch_s / (epoch_s + steps * DELAY_S)
    return expected


def test_injected_slowdown_is_found_and_sized_and_noise_is_not(tmp_path, monkeypatch):
    shared = tmp_path / "history"  # one history folder for both checkouts
    baseline = run_sweep(tmp_path / "baseline", sweep_config(shared, repeats=4))
    archived = json.loads((baseline / "results" / "tables" / "archived.json").read_text())
    assert Path(archived["file"]).is_file() and archived["runs"] == 8

    monkeypatch.setenv(faults.STEP_DELAY_ENV, str(DELAY_S))
    candidate = run_sweep(tmp_path / "candidate", sweep_config(shared, 2, compare_with=archived["sweep_id"]))
    monkeypatch.delenv(faults.STEP_DELAY_ENV)
    table = pd.read_csv(candidate / "results" / "compare" / "compare.csv", dtype={"gpus": str})
    assert table["gpus"].tolist() == ["1", "2"]
    assert table["verdict"].tolist() == [SLOWER, SLOWER], table.to_string()
    # the repeats' variance pooled over both GPU counts and both sides (same settings, same CPU)
    assert table["ci_method"].unique().tolist() == ["pooled spread"]
    assert (table["n_baseline"].tolist(), table["n_candidate"].tolist()) == ([4, 4], [2, 2])
    baseline_runs = pd.read_csv(baseline / "results" / "tidy" / "runs.csv")
    expected = expected_ratio(baseline_runs)
    for _, row in table.iterrows():
        assert row["ratio_ci_low"] <= expected[row["gpus"]] <= row["ratio_ci_high"], (expected, table.to_string())
    summary = (candidate / "results" / "compare" / "summary.txt").read_text()
    assert "verdicts: 2 slower, 0 faster, 0 no detectable difference, 0 unknown" in summary
    assert len(query.sweeps_table(shared)) == 2

    report = candidate / "report.html"
    result = snakemake(candidate, "--report", str(report), configfile=candidate / "config.yaml")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Comparison" in report.read_text() and "compare.png" in report.read_text()

    # Noise only: the baseline's repeats 0, 2 against 1, 3 (runs tables: archived, they are the
    # baseline sweep's runs again, and archiving them adds nothing). Whether noise alone calls a
    # difference is a rate (test_compare.py measures it on simulated noise: at most the
    # confidence's complement); two runs a side on a shared machine are one draw of it, and a
    # busy neighbour during the odd repeats makes a real difference. What the gate must do on
    # real runs is tell the injected slowdown from noise: at a tolerance of half the injected
    # slowdown it fails the candidate and passes the noise.
    assert archive.archive(baseline_runs[baseline_runs["repeat"] % 2 == 0], shared).runs == 0
    even, odd = tmp_path / "even.csv", tmp_path / "odd.csv"
    baseline_runs[baseline_runs["repeat"] % 2 == 0].to_csv(even, index=False)
    baseline_runs[baseline_runs["repeat"] % 2 == 1].to_csv(odd, index=False)
    tolerance = str(100 * (1 - max(expected.values())) / 2)
    injected = candidate / "results" / "tidy" / "runs.csv"
    assert main(["compare", str(baseline / "results" / "tidy" / "runs.csv"), str(injected),
                 "--history", str(shared), "--out", str(tmp_path / "injected"),
                 "--fail-above", tolerance]) == 1
    out = tmp_path / "noise"
    assert main(["compare", str(even), str(odd), "--history", str(shared), "--out", str(out),
                 "--confidence", "0.99", "--fail-above", tolerance]) == 0
    noise = pd.read_csv(out / "compare.csv")
    assert (noise["n_baseline"].tolist(), noise["n_candidate"].tolist()) == ([2, 2], [2, 2])
    assert noise["ci_method"].unique().tolist() == ["pooled spread"]
    assert (noise["ratio_ci_low"] <= noise["ratio"]).all() and (noise["ratio"] <= noise["ratio_ci_high"]).all()
