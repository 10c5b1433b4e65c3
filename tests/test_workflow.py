"""The workflow end to end on this machine: a tiny sweep through Snakemake with the real trainers,
then what a user does next (preview, rerun after losing a result), and bad configs stopped before
any job runs."""

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, TINY, snakemake
from scalesweep.analysis.predict import METHOD_MODEL, METHOD_NETWORK


def job_counts(dryrun_output):
    """{rule: count} from the 'Job stats' table of a dry run."""
    table = dryrun_output.split("Job stats:")[1].split("\n\n")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


@pytest.mark.slow
def test_sweep_leaves_tidy_tables_and_figures(tiny_sweep):
    runs = pd.read_csv(tiny_sweep / "results/tidy/runs.csv")
    assert sorted(zip(runs.framework, runs.model, runs.gpus)) == [
        ("pytorch", "vit_tiny", 1), ("pytorch", "vit_tiny", 2),
        ("tensorflow", "cnn_small", 1), ("tensorflow", "cnn_small", 2),
    ]
    assert (runs.status == "ok").all()
    assert (runs.world_size == runs.gpus).all()
    assert (runs.global_batch == runs.per_gpu_batch * runs.gpus).all()
    assert (runs.steady_epoch_time_s > 0).all() and (runs.throughput_img_s > 0).all()
    epochs = pd.read_csv(tiny_sweep / "results/tidy/epochs.csv")
    assert len(epochs) == 4 * 2 and set(epochs.epoch) == {1, 2}
    scaling = pd.read_csv(tiny_sweep / "results/tables/scaling.csv")
    assert len(scaling) == 4
    baseline = scaling[scaling.gpus == 1]
    assert (baseline.speedup == 1.0).all() and (baseline.efficiency_pct == 100.0).all()
    two = scaling[scaling.gpus == 2].set_index("framework")
    one = scaling[scaling.gpus == 1].set_index("framework")
    assert two.speedup.to_dict() == pytest.approx((one.time_s / two.time_s).to_dict())
    # The prediction (docs/prediction.md): the next two doublings, 4 and 8 GPUs, from 1-2; every
    # run carries its epoch cut T = t0 + S x tau.
    assert runs.epoch_overhead_s.notna().all() and (runs.step_time_s > 0).all() and (runs.steps_per_epoch > 0).all()
    predictions = pd.read_csv(tiny_sweep / "results/tables/predictions.csv")
    torch_rows = predictions[predictions.framework == "pytorch"].set_index("gpus")
    if "superlinear" in str(two.loc["pytorch", "flags"]):
        # A busy machine slowed the 1-GPU baseline (110 % efficiency at 2 GPUs, seen with a test
        # process beside the sweep): the flagged point is no evidence, and the prediction from
        # 1 GPU alone says why it gives no number instead of extrapolating.
        assert sorted(torch_rows.index) == [2, 4]
        assert torch_rows.inputs.str.startswith("one measured GPU count (1)").all(), torch_rows.inputs
        assert torch_rows.efficiency_pct.isna().all()
    else:
        assert_predicted_from_two_counts(torch_rows)
    # Every run measured where its steps go: the parts add up, the line with `other` is in its log.
    parts = runs[["data_wait_s", "compute_s", "sync_wait_s", "sync_comm_s", "other_s"]].sum(axis=1)
    assert parts.tolist() == pytest.approx(runs.breakdown_step_s.tolist())
    assert (runs[runs.gpus == 1].sync_exposed_s == 0).all() and (runs[runs.gpus == 2].allreduce_s > 0).all()
    for log in runs.log:
        assert " + other " in Path(log if Path(log).is_absolute() else tiny_sweep / log).read_text()
    figures = sorted(p.name for p in (tiny_sweep / "results/figures").glob("*.png"))
    for name in ("time_all.png", "throughput_by_model.png", "speedup_all.png", "efficiency_by_model.png",
                 "step_breakdown.png", "bus_bandwidth.png"):
        assert name in figures


def assert_predicted_from_two_counts(torch_rows: pd.DataFrame) -> None:
    """The next two doublings, 4 and 8 GPUs, from 1-2. Which rule sets the point estimate depends
    on this machine's timings (the gloo all-reduce measured in the run): whichever it is, `method`
    names it, `inputs` opens with it, and it is the larger of the two step times."""
    assert sorted(torch_rows.index) == [4, 8]
    for row in torch_rows.itertuples():
        rule = {METHOD_MODEL: "log", METHOD_NETWORK: "network"}[row.method]
        assert row.inputs.startswith(f"point estimate: {rule} rule"), row.inputs
        other = re.match(r"point estimate: \w+ rule \((?:log|network) rule ([\d.]+) ms\)", row.inputs)
        if other:
            assert float(other.group(1)) <= round(1000 * row.step_time_s, 1) + 0.05, row.inputs
    assert (torch_rows.efficiency_low_pct <= torch_rows.efficiency_pct).all()
    assert (torch_rows.efficiency_pct <= torch_rows.efficiency_high_pct).all()


@pytest.mark.slow
def test_preview_after_losing_one_result_lists_only_that_run_and_its_dependents(sweep_copy):
    tiny_sweep = sweep_copy
    finished = snakemake(tiny_sweep, "-n")
    assert "Nothing to be done" in finished.stdout
    assert "scalesweep: 0 configurations to run (4 already measured) of 4;" in finished.stderr
    assert "  nothing to run: every job has its result" in finished.stderr
    lost = tiny_sweep / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16/train.log"
    lost.unlink()
    preview = snakemake(tiny_sweep, "-n")
    assert preview.returncode == 0, preview.stderr
    # The cost line counts the one job to run (60 min), the matrix beside it, in a local run's terms.
    assert "scalesweep: 1 configuration to run (3 already measured) of 4;" in preview.stderr
    assert "  minutes at their time limits (60 min): at most 60 (all 4 jobs: 240)" in preview.stderr
    assert job_counts(preview.stdout) == {
        "train_pytorch": 1, "tidy": 1, "tables": 1, "figures": 1, "findings": 1, "history": 1,
        "all": 1, "total": 7,
    }
    assert "gpus=2" in preview.stdout.split("rule train_pytorch:")[1].split("\n\n")[0]


@pytest.mark.slow
def test_regenerating_a_dataset_does_not_rerun_measured_runs(sweep_copy):
    tiny_sweep = sweep_copy
    synthetic = tiny_sweep / "resources/datasets/cifar10/synth-cifar"
    synthetic.touch()
    preview = snakemake(tiny_sweep, "-n").stdout
    assert "train_tensorflow" not in (job_counts(preview) if "Job stats" in preview else {})


def test_dryrun_prints_the_plan_and_imports_no_framework(tmp_path):
    # The default config, previewed from an empty working directory: the repository's own
    # results/ (after `make sweep`) must not change what this test sees.
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "snakemake", "-n", "--snakefile",
         str(REPO / "Snakefile"), "--configfile", str(REPO / "config" / "config.yaml")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "snakemake" in imported
    assert not imported & {"tensorflow", "torch", "keras"}
    assert "scalesweep: 12 configurations to run (0 already measured) of 12; 36 combinations left out" in result.stderr
    assert job_counts(result.stdout)["train_tensorflow"] == 6


def bad_config(tmp_path, edit):
    config = yaml.safe_load(TINY.read_text())
    edit(config)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["matrix"].update(framework=["jax"]), "config key 'matrix.framework[0]': unknown framework 'jax'"),
        (lambda c: c["matrix"].update(model=["resnet5"]), "config key 'matrix.model[0]': unknown model 'resnet5'"),
        (lambda c: c["matrix"].update(gpus=[0, -2]), "-2 is less than the minimum of 0"),
        (lambda c: c["matrix"].update(gpus=[1.5]), "1.5 is not of type 'integer'"),
        (lambda c: c["matrix"].update(dataset=["imagenet"]), "config key 'matrix.dataset[0]'"),
    ],
)
def test_bad_config_stops_before_any_job_with_the_key_named(tmp_path, edit, message):
    result = snakemake(tmp_path, "-n", configfile=bad_config(tmp_path, edit), timeout=120)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert "Job stats" not in result.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_find_max_batch_target_bisects_to_the_largest_batch_that_fits(tmp_path, monkeypatch):
    # CPUs rarely run out of memory: the trainers' injection hook makes every batch above 32 fail
    # as a real out-of-memory error would, through the same code path.
    monkeypatch.setenv("SCALESWEEP_FAIL_INJECT", "oom-above:32")
    preview = snakemake(tmp_path, "-n", "find_max_batch")
    # The preview counts the search's jobs (one single-GPU configuration per framework, 60 min
    # each), not the sweep's 4 configurations.
    assert "scalesweep: find_max_batch: 2 search jobs to run (0 done) for 4 configurations;" in preview.stderr
    assert "  minutes at their time limits (60 min): at most 120" in preview.stderr
    result = snakemake(tmp_path, "--cores", "2", "find_max_batch")
    assert result.returncode == 0, result.stderr[-3000:]
    table = pd.read_csv(tmp_path / "results/tables/max_batch.csv")
    assert sorted(table.framework) == ["pytorch", "tensorflow"]
    assert (table.gpus == 1).all() and (table.max_per_gpu_batch == 32).all()
    assert (table.tried.str.startswith("16:ok 32:ok 64:oom")).all()
    assert not (tmp_path / "results/runs").exists()
