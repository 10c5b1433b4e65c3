"""The preview's text and the jobs it counts (scalesweep/plan/preview.py), from plain values: what
workflow/rules/preview.smk prints when Snakemake builds the job of `all` or `find_max_batch`."""

import yaml

from conftest import TINY
from scalesweep.plan import matrix, preview
from scalesweep.plan.analysis_settings import AnalysisSettings
from scalesweep.plan.config import validate_config

NETWORK_PROBE = {"framework": "pytorch", "gpus": 8, "nodes": 2, "gpus_per_node": 4, "node_gpus": 4,
                 "whole_node": False, "exclusive": False, "time_limit_min": 10}


def tiny_plan():
    """The tiny sweep's runs, exclusions and jobs {result path: settings}: TensorFlow and PyTorch
    at 1 and 2 GPUs, 60 min each, on nodes of 4 GPUs."""
    config = yaml.safe_load(TINY.read_text())
    validate_config(config)
    runs, excluded = matrix.plan(config, check_paths=False)
    jobs = {f"results/{run['framework']}-{run['gpus']}": matrix.run_settings(run, config) for run in runs}
    return runs, excluded, jobs


def test_the_jobs_to_run_are_those_without_a_result_by_their_run():
    jobs = {"res/a": {"n": 1}, "res/b": {"n": 2}, "res/c": {"n": 3}}
    assert preview.pending_runs(["a", "b", "c"], jobs, {"res/b"}) == {"a": {"n": 1}, "c": {"n": 3}}
    assert preview.pending_runs(["a", "b", "c"], jobs, set()) == {"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 3}}
    assert preview.pending_runs(["a", "b", "c"], jobs, set(jobs)) == {}


def test_the_preview_of_a_cluster_sweep_prices_its_jobs_and_what_the_prediction_saves():
    runs, excluded, jobs = tiny_plan()
    text = preview.preview_text(runs, excluded, jobs, {"results/tensorflow-1"}, AnalysisSettings.from_config(
        {}, {"gpus_per_node": 4}), config_files=["tiny.yaml"], cli_files=["tiny.yaml"])
    # Left to run: TensorFlow at 2 GPUs, PyTorch at 1 and 2: 5 GPUs for 60 min, 5 GPU-hours (all
    # four: 6). Predicted: 4 and 8 GPUs (the next two doublings of 2) from each 2-GPU job, 60 min:
    # 4 GPU-hours each at 4 GPUs; 8 GPUs lie beyond a node, PyTorch's alone: 8. 4 + 4 + 8 = 16.
    assert text.split("\n") == [
        "scalesweep: config from tiny.yaml",
        f"scalesweep: 3 configurations to run (1 already measured) of 4; {preview.left_out(excluded)}",
        "  jobs to run per shape: 1 node x 1 GPU: 1, 1 node x 2 GPUs: 2",
        "  GPUs of the jobs to run: 5; GPU-hours they book at their time limits (60 min): 5.0 (all 4 jobs: 6.0)",
        "  predicted, not run: 4, 8 GPUs per configuration (results/tables/predictions.csv); running them "
        "would book about 16.0 GPU-hours at these time limits",
    ]


def test_the_preview_lists_missing_paths_first_and_adds_the_probe_to_the_sweep_only():
    runs, excluded, jobs = tiny_plan()
    # On nodes of 2 GPUs the prediction of 4 and 8 is PyTorch's alone: (4 + 8) x 1 h = 12.
    analysis = AnalysisSettings.from_config({"gpus_per_node": 2}, {"gpus_per_node": 4})
    missing = [("datasets.real.path", "/data/real", "does not exist")]
    sweep = preview.preview_text(runs, excluded, jobs, set(), analysis, probe=NETWORK_PROBE,
                                 config_files=["a.yaml"], path_problems=missing).split("\n")
    assert sweep[:3] == [
        "scalesweep: warning: 1 path(s) the jobs read are missing or empty; the plan is shown, but a "
        "run is refused until they hold their data:",
        "  datasets.real.path: '/data/real' does not exist",
        "scalesweep: config from a.yaml",
    ]
    # The probe's 2 x 4 GPUs for 10 min join the totals: 6 + 8 GPUs, 6 + 8/6 = 7.3 GPU-hours.
    assert sweep[5:] == [
        "  network probe (probe_network): 2 nodes x 4 GPUs, 10 min: 1.3 GPU-hours",
        "  GPUs of the jobs to run: 14; GPU-hours they book at their time limits (10-60 min): 7.3 "
        "(all 5 jobs: 7.3)",
        "  predicted, not run: 4, 8 GPUs per configuration (results/tables/predictions.csv); running them "
        "would book about 12.0 GPU-hours at these time limits",
    ]
    searches = preview.preview_text(runs, excluded, jobs, set(), analysis, max_batch=True, probe=NETWORK_PROBE,
                                    config_files=["a.yaml"]).split("\n")
    assert searches[1].startswith("scalesweep: find_max_batch: 4 search jobs to run (0 done) for 4 configurations")
    assert not [line for line in searches if "network probe" in line or "predicted, not run" in line]


def test_a_local_preview_counts_minutes_and_prices_no_prediction():
    runs, excluded, jobs = tiny_plan()
    text = preview.preview_text(runs, excluded, jobs, set(), AnalysisSettings.from_config({}, {"gpus_per_node": 4}),
                                local=True, config_files=["tiny.yaml"])
    assert text.split("\n")[-1] == "  minutes at their time limits (60 min): at most 240 (all 4 jobs: 240)"
    assert "predicted, not run" not in text


def test_the_executor_named_is_snakemakes_but_for_a_dry_runs_own():
    assert preview.executor_named("slurm", ["-n"]) == "slurm"
    assert preview.executor_named("dryrun", ["-n", "--executor", "slurm"]) == "slurm"
    assert preview.executor_named("touch", ["-n"]) == "local"
    assert preview.executor_named(None, ["-n", "--executor", "slurm"]) == "slurm"


def test_a_jobs_image_files_are_the_digest_and_a_pulled_images_sif():
    from scalesweep.plan import containers

    assert containers.image_files(None) == []
    local = "/images/pytorch 24.07.sif"
    assert containers.image_files(local) == [containers.digest_file(local)]
    pulled = "docker://nvcr.io/nvidia/pytorch:24.07-py3"
    assert containers.is_pulled(pulled)
    assert containers.image_files(pulled) == [containers.pulled_sif(pulled), containers.digest_file(pulled)]


def test_an_unplanned_run_target_is_named_with_the_layout_and_an_example():
    from scalesweep.plan import matrix

    said = matrix.unplanned_run_message("results/runs/x/train.log", ["results/runs/y/train.log"])
    assert said.startswith("results/runs/x/train.log is no run of this sweep's plan: a run's path is ")
    assert "<framework>/model~<model>/dataset~<dataset>/gpus~<gpus>[/<setting>~<value>...]" in said
    assert "(e.g. results/runs/y/train.log)" in said
    assert "(e.g." not in matrix.unplanned_run_message("results/runs/x/train.log", [])
