"""MareNostrum 5 as it is (docs/mn5-site.md): whole-node jobs and what they are charged, the site's
needs the profile declares (an account, a QoS and its limits, no network) refused at the preview,
and dataset/image paths that are missing or empty listed by the preview and refused by a run."""

import os
import subprocess
import sys

import pytest
import yaml

from conftest import LOCAL_ENV, REPO, TINY, snakemake
from mn5site import mn5_profile, run_with_profile
from scalesweep.plan import checks, launch, matrix, preview
from scalesweep.plan.config import training_defaults, validate_config
from scalesweep.plan.cluster.site import (
    account_problem,
    from_command_line,
    job_problems,
    missing_paths_error,
    path_problems,
    qos_problems,
    qos_warning,
)

MN5 = REPO / "config" / "mn5.yaml"
# What the real config/mn5.yaml reads, all missing here.
MN5_PATHS = [
    "datasets.cifar128.path: '/gpfs/projects/YOUR_GROUP/datasets/cifar-10-batches-py' does not exist",
    "datasets.micro-224.path: '/gpfs/projects/YOUR_GROUP/datasets/micro-224' does not exist",
    "datasets.tiny-224.path: '/gpfs/projects/YOUR_GROUP/datasets/tiny-224' does not exist",
    "container.images.pytorch: '/gpfs/apps/MN5/ACC/SINGULARITY/SRC/images/nvidiaPytorch24.07' does not exist",
    "container.images.tensorflow: '/gpfs/projects/YOUR_GROUP/images/MN5-NGC-TensorFlow-23.03.sif' does not exist",
]
MN5_COST = ("GPUs of the jobs to run: 140 (160 charged: whole nodes); GPU-hours they book at their time "
            "limits (75-90 min): 234.0 (all 18 jobs: 234.0)")


def validated(config):
    validate_config(config)
    return config


def settings_of(config, **axes):
    """The settings of the one planned run with these axes."""
    runs, _ = matrix.plan(config, check_paths=False)
    (run,) = [run for run in runs if all(run[key] == value for key, value in axes.items())]
    return matrix.run_settings(run, config)


def mn5_with(**models):
    """config/mn5.yaml with some models' settings replaced."""
    config = yaml.safe_load(MN5.read_text())
    for framework_model, settings in models.items():
        framework, model = framework_model.split("__")
        config["models"][framework][model] = settings
    return validated(config)


# ------------------------------------------------------------------ whole nodes and their cost
@pytest.mark.parametrize("framework, model, gpus, held, hours", [
    # Chapter 10: every TensorFlow job holds its node's 4 GPUs for 75 min = 5 GPU-hours, at 1 GPU too.
    ("tensorflow", "resnet50v2", 1, 4, 4 * 75 / 60),
    ("tensorflow", "resnet152v2", 2, 4, 5.0),
    ("tensorflow", "resnet152v2", 4, 4, 5.0),
    # Chapter 12: whole nodes for 90 min: 1 GPU -> 4 x 1.5 = 6.0; 32 GPUs = 8 nodes -> 32 x 1.5 = 48.0.
    ("pytorch", "vit_h_14", 1, 4, 6.0),
    ("pytorch", "vit_h_14", 8, 8, 12.0),
    ("pytorch", "vit_h_14", 32, 32, 48.0),
])
def test_a_whole_node_job_is_charged_every_gpu_of_its_nodes(framework, model, gpus, held, hours):
    settings = settings_of(validated(yaml.safe_load(MN5.read_text())), framework=framework, model=model,
                           gpus=gpus, dataset="cifar128" if framework == "tensorflow" else "tiny-224")
    assert launch.held_gpus(settings) == held
    assert launch.booked_gpu_hours(settings) == pytest.approx(hours)


def test_the_mn5_sweep_is_charged_234_gpu_hours_for_140_gpus_it_uses():
    config = validated(yaml.safe_load(MN5.read_text()))
    runs, _ = matrix.plan(config, check_paths=False)
    all_settings = [matrix.run_settings(run, config) for run in runs]
    # TF: 6 jobs x 4 GPUs x 1.25 h = 30.0; ViT: 2 x (4+4+4+8+16+32) = 136 GPUs x 1.5 h = 204.0.
    assert sum(launch.booked_gpu_hours(s) for s in all_settings) == pytest.approx(234.0)
    assert preview.cost_lines(all_settings, all_settings)[-1].strip() == MN5_COST


def test_shared_and_exclusive_jobs_differ_in_what_they_hold_not_in_what_they_run():
    # A shared 2-GPU job holds 2 GPUs for 75 min (2.5 GPU-hours); the same run exclusive holds
    # the node's 4 (5.0) but asks for gpu:2; whole_node asks for gpu:4 and the node's 80 CPUs.
    shared = mn5_with(tensorflow__resnet50v2={"per_gpu_batch": 2048})
    exclusive = mn5_with(tensorflow__resnet50v2={"per_gpu_batch": 2048, "exclusive": "always"})
    whole = mn5_with(tensorflow__resnet50v2={"per_gpu_batch": 2048, "whole_node": True})
    runs = {name: settings_of(config, model="resnet50v2", gpus=2)
            for name, config in (("shared", shared), ("exclusive", exclusive), ("whole", whole))}
    hours = {name: launch.booked_gpu_hours(s) for name, s in runs.items()}
    assert hours == {"shared": 2.5, "exclusive": 5.0, "whole": 5.0}
    resources = {name: launch.slurm_resources(s, shared["cluster"]) for name, s in runs.items()}
    assert [(r["gres"], r["cpus_per_task"], r.get("slurm_extra")) for r in resources.values()] == [
        ("gpu:2", 40, None), ("gpu:2", 40, "--exclusive"), ("gpu:4", 80, None)]
    commands = {launch.job_command(s, shared["container"], "/repo", "/work", "python") for s in runs.values()}
    assert len(commands) == 1 and " --gpus 2 " in commands.pop()
    assert preview.job_shape(runs["whole"]) == "1 node x 2 GPUs, whole node (4 GPUs charged)"
    assert preview.job_shape(runs["shared"]) == "1 node x 2 GPUs"


def test_a_whole_node_pytorch_run_starts_one_process_per_gpu_it_uses():
    settings = settings_of(validated(yaml.safe_load(MN5.read_text())), model="vit_h_14", gpus=1,
                           dataset="micro-224")
    command = launch.job_command(settings, {"runtime": "none"}, "/repo", "/work", "python")
    assert "--nproc-per-node=1 " in command
    assert launch.slurm_resources(settings, {})["gres"] == "gpu:4"


def test_new_keys_have_schema_defaults_and_models_override_the_cluster():
    config = validated(yaml.safe_load(TINY.read_text()))
    assert (config["cluster"]["exclusive"], config["cluster"]["whole_node"]) == ("never", False)
    assert config["site"] == {"name": "", "account_required": False, "account_lookup": "",
                              "qos_required": False, "qos_limits": {}, "network": True}
    settings = settings_of(config, framework="tensorflow", gpus=1)
    assert (settings["exclusive"], settings["whole_node"], settings["time_limit_min"]) == ("never", False, 60)
    config["cluster"].update(exclusive="multinode", whole_node=True, time_limit_min=30)
    config["models"]["tensorflow"]["cnn_small"].update(exclusive="always", time_limit_min=20)
    tf, torch = (settings_of(config, framework=f, gpus=1) for f in ("tensorflow", "pytorch"))
    assert (tf["exclusive"], tf["whole_node"], tf["time_limit_min"]) == ("always", True, 20)
    assert (torch["exclusive"], torch["whole_node"], torch["time_limit_min"]) == ("multinode", True, 30)


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["models"]["tensorflow"]["cnn_small"].update(exclusive="sometimes"),
     "config key 'models.tensorflow.cnn_small.exclusive': 'sometimes' is not one of"),
    (lambda c: c.update(cluster={"whole_node": "yes"}), "config key 'cluster.whole_node': 'yes' is not of type 'boolean'"),
    (lambda c: c.update(site={"qos_limits": {"acc_debug": {"max_nodes": 8, "max_gpus": 32}}}),
     "config key 'site.qos_limits.acc_debug': missing required key 'max_time_min'"),
    (lambda c: c.update(site={"acount_required": True}), "config key 'site': unknown key 'acount_required'"),
])
def test_new_keys_refuse_wrong_values_naming_the_key(edit, message):
    config = yaml.safe_load(TINY.read_text())
    edit(config)
    with pytest.raises(checks.ConfigError) as error:
        validate_config(config)
    assert str(error.value).startswith(message)


# ------------------------------------------------------------------ what the site demands
MN5_SITE = yaml.safe_load((REPO / "profiles" / "mn5" / "config.yaml").read_text())["config"]["site"]


def test_the_profile_declares_the_books_qos_limits():
    assert MN5_SITE["qos_limits"] == {
        "acc_debug": {"max_nodes": 8, "max_gpus": 32, "max_time_min": 120},
        "acc_interactive": {"max_nodes": 1, "max_gpus": 4, "max_time_min": 120},
        "acc_training": {"max_nodes": 4, "max_gpus": 16, "max_time_min": 1440},
    }
    assert MN5_SITE["account_required"] and MN5_SITE["qos_required"] and not MN5_SITE["network"]


def test_a_site_declared_by_a_profile_is_read_back_from_snakemakes_text():
    # What Snakemake hands over of a profile's `config:` entry (BaseLoader: every value text).
    as_text = {"name": "MareNostrum 5", "account_required": "True", "network": "false",
               "qos_limits": {"acc_debug": {"max_nodes": "8", "max_gpus": "32", "max_time_min": "120"}}}
    assert from_command_line(as_text) == {
        "name": "MareNostrum 5", "account_required": True, "network": False,
        "qos_limits": {"acc_debug": {"max_nodes": 8, "max_gpus": 32, "max_time_min": 120}}}


def full_site(**given):
    config = validated({**yaml.safe_load(TINY.read_text()), "site": given})
    return config["site"]


def test_no_account_is_refused_only_where_the_site_requires_one():
    site = full_site(**MN5_SITE)
    problem = account_problem(site, None, ["qos=acc_debug", "mem_mb=0", "tmpdir=system_tmpdir"])
    assert problem.startswith("MareNostrum 5 refuses jobs without an account (site.account_required)")
    assert "`slurm_account: <account>` under `default-resources:`" in problem
    # --default-resources replaces the profile's: the command-line form restates them.
    assert "`--default-resources slurm_account=<account> qos=acc_debug mem_mb=0`" in problem
    assert "`bsc_project list` lists yours" in problem
    assert account_problem(site, "  ", []) is not None
    assert account_problem(site, "abc123", []) is None
    assert account_problem(full_site(), None, []) is None


def mn5_jobs():
    """{run path: settings} of config/mn5.yaml's runs."""
    config = validated(yaml.safe_load(MN5.read_text()))
    runs, _ = matrix.plan(config, check_paths=False)
    return {matrix.run_path(s, training_defaults()): s for s in (matrix.run_settings(run, config) for run in runs)}


def test_a_job_beyond_its_qos_is_named_with_the_limit_it_exceeds():
    site, jobs = full_site(**MN5_SITE), mn5_jobs()
    assert qos_problems(site, "acc_debug", jobs) == []
    problems = qos_problems(site, "acc_training", jobs)
    vit = ("pytorch/model~vit_h_14/dataset~{}/gpus~{}/compile~true/epochs~5/num_workers~10/per_gpu_batch~128/"
           "precision~bf16")
    assert problems == [
        f"job {vit.format(dataset, gpus)}: {value} {unit} exceed QoS acc_training's limit of {limit} {unit} "
        f"(site.qos_limits.acc_training.max_{key})"
        for dataset in ("micro-224", "tiny-224") for gpus in (16, 32)
        for key, value, limit, unit in (("nodes", gpus // 4, 4, "nodes"), ("gpus", gpus, 16, "GPUs"))
        if value > limit
    ]
    assert len(problems) == 4  # 16 GPUs on 4 nodes fit; 32 GPUs on 8 nodes exceed both limits
    # One node of 4 GPUs: every whole-node TensorFlow job fits, a ViT job of 2 nodes does not.
    interactive = qos_problems(site, "acc_interactive", jobs)
    assert not any(p.startswith("job tensorflow/") for p in interactive)
    assert interactive[0].startswith(f"job {vit.format('micro-224', 8)}: 2 nodes exceed QoS acc_interactive's")
    assert qos_problems(site, None, jobs) == [
        "MareNostrum 5 refuses jobs without a QoS (site.qos_required), and none is set: set `qos: <name>` "
        "under the profile's `default-resources:` (acc_debug, acc_interactive, acc_training)"]
    assert qos_problems(site, "acc_bscls", jobs) == []
    assert qos_warning(site, "acc_bscls").startswith("QoS acc_bscls has no limits in site.qos_limits")


def test_each_rules_jobs_are_checked_against_the_qos_it_is_submitted_with():
    site, jobs = full_site(**MN5_SITE), mn5_jobs()
    rule_of = lambda settings: "multi" if settings["nodes"] > 1 else "single"  # noqa: E731
    qos = {"multi": "acc_training", "single": "acc_interactive"}
    # Every one-node job fits acc_interactive (1 node, 4 GPUs); of the jobs across nodes only the
    # ViT ones at 32 GPUs (8 nodes) exceed acc_training's 4 nodes and 16 GPUs: 2 datasets x 2.
    refusals, warnings = job_problems(site, None, ["qos=acc_debug"], jobs, rule_of, qos.get)
    assert refusals[0].startswith("MareNostrum 5 refuses jobs without an account")
    assert [refusal.split(":")[0] for refusal in refusals[1:]] == [
        f"job pytorch/model~vit_h_14/dataset~{dataset}/gpus~32/compile~true/epochs~5/num_workers~10/"
        "per_gpu_batch~128/precision~bf16" for dataset in ("micro-224", "micro-224", "tiny-224", "tiny-224")]
    assert warnings == []
    # A QoS without limits is said once per rule submitted with it, and checks nothing.
    refusals, warnings = job_problems(site, "abc123", [], jobs, rule_of, {"multi": "acc_bscls"}.get)
    assert len(refusals) == 1 and refusals[0].startswith("MareNostrum 5 refuses jobs without a QoS")
    assert len(warnings) == 1 and warnings[0].startswith("QoS acc_bscls has no limits")
    # Nothing to run: only the account is checked.
    assert job_problems(site, "abc123", [], {}, rule_of, qos.get) == ([], [])


def test_time_beyond_the_qos_is_refused():
    site = full_site(qos_limits={"short": {"max_nodes": 8, "max_gpus": 32, "max_time_min": 60}})
    config = validated(yaml.safe_load(TINY.read_text()))
    config["cluster"]["time_limit_min"] = 61
    settings = settings_of(config, framework="pytorch", gpus=2)
    assert qos_problems(site, "short", {"p": settings}) == [
        "job p: 61 minutes exceed QoS short's limit of 60 minutes (site.qos_limits.short.max_time_min)"]


# ------------------------------------------------------------------ paths the jobs read
def test_missing_empty_and_misplaced_paths_are_all_listed(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "hollow" / "train" / "a").mkdir(parents=True)
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "full" / "train" / "a").mkdir(parents=True)
    (tmp_path / "full" / "train" / "a" / "1.jpeg").write_bytes(b"x")
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "self").symlink_to(tmp_path / "loop")
    (tmp_path / "empty.sif").write_bytes(b"")
    (tmp_path / "tf.sif").write_bytes(b"image")
    config = validated(yaml.safe_load(TINY.read_text()))
    names = ["missing", "empty", "hollow", "a-file", "full", "loop"]
    config["datasets"] = {name: {"format": "imagefolder", "resolution": 32, "path": name} for name in names}
    config["datasets"]["cifar"] = {"format": "cifar10", "resolution": 32, "path": "full"}
    config["matrix"]["dataset"] = [*names, "cifar"]
    config["container"] = {**config["container"], "runtime": "apptainer",
                           "images": {"pytorch": "empty.sif", "tensorflow": "tf.sif"}}
    runs, _ = matrix.plan(config, check_paths=False)
    problems = path_problems(config, [matrix.run_settings(r, config) for r in runs], tmp_path)
    where = f" in {tmp_path.resolve()}"  # relative paths are read from the working folder
    assert problems == [
        ("datasets.a-file.path", "a-file", "is a file, not the dataset's folder" + where),
        ("datasets.empty.path", "empty", "is empty (no file in it or below it)" + where),
        ("datasets.hollow.path", "hollow", "is empty (no file in it or below it)" + where),
        ("datasets.loop.path", "loop", "is empty (no file in it or below it)" + where),
        ("datasets.missing.path", "missing", "does not exist" + where),
        ("container.images.pytorch", "empty.sif", "is an empty file" + where),
    ]
    error = missing_paths_error(problems)
    assert error.splitlines()[0].startswith("6 path(s) the jobs read are missing or empty; nothing runs")
    assert f"  datasets.missing.path: 'missing' does not exist{where}" in error.splitlines()


def two_real_datasets(tmp_path):
    """The tiny sweep reading two datasets from paths: one missing, one an empty folder."""
    config = yaml.safe_load(TINY.read_text())
    config["datasets"]["synth-cifar"] = {"format": "cifar10", "resolution": 32, "path": "data/cifar"}
    config["datasets"]["synth-folder"] = {"format": "imagefolder", "resolution": 32, "path": "data/folder"}
    (tmp_path / "data" / "folder").mkdir(parents=True)
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_preview_lists_every_missing_path_and_a_run_is_refused(tmp_path):
    configfile = two_real_datasets(tmp_path)
    # relative paths are read from the working folder, and the line says which one that is
    listed = [f"  datasets.synth-cifar.path: 'data/cifar' does not exist in {tmp_path.resolve()}",
              f"  datasets.synth-folder.path: 'data/folder' is empty (no file in it or below it) in {tmp_path.resolve()}"]
    preview_run = snakemake(tmp_path, "-n", configfile=configfile, timeout=120)
    assert preview_run.returncode == 0, preview_run.stderr[-3000:]
    lines = preview_run.stderr.splitlines()
    assert all(line in lines for line in listed)
    assert "2 path(s) the jobs read are missing or empty; the plan is shown" in preview_run.stderr
    assert "scalesweep: 4 configurations to run" in preview_run.stderr and "Job stats" in preview_run.stdout

    run = snakemake(tmp_path, "--cores", "1", configfile=configfile, timeout=120)
    assert run.returncode != 0
    output = run.stdout + run.stderr
    assert "2 path(s) the jobs read are missing or empty; nothing runs until they hold their data" in output
    assert all(line.strip() in output for line in listed)
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs" / "train").exists()

    check = subprocess.run([sys.executable, "-m", "scalesweep", "check-config", str(configfile)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert check.returncode == 1
    assert all(line.strip() in check.stderr for line in listed)


# ------------------------------------------------------------------ `snakemake -n --profile mn5`
def test_the_mn5_preview_without_an_account_is_refused_naming_the_setting(tmp_path):
    (tmp_path / "mn5").symlink_to(REPO / "profiles" / "mn5")  # the profile as shipped
    result = run_with_profile(tmp_path, "-n", env={**os.environ, **LOCAL_ENV})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "MareNostrum 5 refuses jobs without an account (site.account_required)" in output
    assert "`slurm_account: <account>` under `default-resources:`" in output
    assert "`--default-resources slurm_account=<account> mem_mb=0 qos=acc_debug`" in output
    assert "`bsc_project list` lists yours" in output
    assert "Job stats" not in output


def test_default_resources_on_the_command_line_replace_the_profiles(tmp_path):
    """Snakemake 9.27: `--default-resources slurm_account=X` drops the profile's qos and mem_mb,
    so MareNostrum 5 would refuse every job for want of a QoS; restating them works."""
    (tmp_path / "mn5").symlink_to(REPO / "profiles" / "mn5")
    env = {**os.environ, **LOCAL_ENV}
    alone = run_with_profile(tmp_path, "-n", "--default-resources", "slurm_account=abc123", env=env)
    assert alone.returncode != 0
    assert "MareNostrum 5 refuses jobs without a QoS (site.qos_required)" in alone.stdout + alone.stderr
    restated = run_with_profile(tmp_path, "-n", "--default-resources", "slurm_account=abc123",
                                "qos=acc_debug", "mem_mb=0", env=env)
    assert "refuses jobs without" not in restated.stdout + restated.stderr
    assert MN5_COST in restated.stderr


def test_the_mn5_preview_shows_the_plan_and_every_missing_path_and_a_submission_is_refused(tmp_path):
    mn5_profile(tmp_path / "mn5")
    env = {**os.environ, **LOCAL_ENV}
    preview_run = run_with_profile(tmp_path, "-n", env=env)
    assert preview_run.returncode == 0, preview_run.stderr[-3000:]
    lines = preview_run.stderr.splitlines()
    warning = lines.index("scalesweep: warning: 5 path(s) the jobs read are missing or empty; the plan is "
                          "shown, but a run is refused until they hold their data:")
    assert lines[warning + 1:warning + 6] == [f"  {path}" for path in MN5_PATHS]
    assert "scalesweep: 18 configurations to run (0 already measured) of 18" in preview_run.stderr
    assert f"  {MN5_COST}" in lines
    assert "1 node x 1 GPU, whole node (4 GPUs charged): 4" in preview_run.stderr

    # The submission stops before sbatch (the slurm plugin never starts: no SLURM is asked).
    submission = run_with_profile(tmp_path, env=env)
    assert submission.returncode != 0
    output = submission.stdout + submission.stderr
    assert "5 path(s) the jobs read are missing or empty; nothing runs until they hold their data" in output
    assert all(path in output for path in MN5_PATHS)
    assert "submitted" not in output and not (tmp_path / ".snakemake" / "slurm_logs").exists()

    check = subprocess.run([sys.executable, "-m", "scalesweep", "check-config", "--profile", "mn5"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert check.returncode == 1
    assert MN5_COST in check.stdout
    assert all(path in check.stderr for path in MN5_PATHS)
    assert "refuses jobs without an account" not in check.stderr


def test_a_job_beyond_the_qos_is_refused_at_the_preview(tmp_path):
    mn5_profile(tmp_path / "mn5", resources={"qos": "acc_training"})
    result = run_with_profile(tmp_path, "-n", env={**os.environ, **LOCAL_ENV})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert ("job pytorch/model~vit_h_14/dataset~tiny-224/gpus~32/compile~true/epochs~5/num_workers~10/"
            "per_gpu_batch~128/precision~bf16: 8 nodes exceed QoS acc_training's limit of 4 nodes "
            "(site.qos_limits.acc_training.max_nodes)") in output
    assert "Job stats" not in output
    check = subprocess.run([sys.executable, "-m", "scalesweep", "check-config", "--profile", "mn5"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "8 nodes exceed QoS acc_training's limit of 4 nodes" in check.stderr


@pytest.mark.slow
def test_a_local_run_needs_no_account(tmp_path):
    """The same site declaration on a local run (no slurm executor): it trains and finishes."""
    config = yaml.safe_load(TINY.read_text())
    config["matrix"].update(framework=["pytorch"], gpus=[1])
    config["site"] = {"name": "MareNostrum 5", "account_required": True, "qos_required": True}
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--cores", "2", configfile=path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~1").exists()
