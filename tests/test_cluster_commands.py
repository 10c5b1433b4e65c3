"""What `snakemake -n -p --profile mn5 --configfile config/mn5.yaml` would submit, checked without
a cluster: container commands for a 1-node TF job, a 1-node PyTorch job and a 2-node PyTorch job,
the SLURM resources of each, and the preview's GPU-hours (whole nodes charged)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mn5site import ACCOUNT, mn5_profile, run_with_profile
from scalesweep.plan import containers, launch

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
# The images config/mn5.yaml names: local files, run as they are (the TensorFlow image is each
# user's own build, a placeholder in the project folder; the PyTorch image is the site's).
TF_IMAGE = "/gpfs/projects/YOUR_GROUP/images/MN5-NGC-TensorFlow-23.03.sif"
TORCH_IMAGE = "/gpfs/apps/MN5/ACC/SINGULARITY/SRC/images/nvidiaPytorch24.07"
# Every container runtime starts without another Python's settings (launch.python_env_hygiene).
HYGIENE = launch.shell_words(launch.python_env_hygiene()) + " "


def dryrun(tmp, config_files, site=None, expect_ok=True):
    """`snakemake -n -p --profile mn5 --configfile FILES...` from a working directory laid out like
    the repository root (./mn5 and config/ as there), so the profile is looked up as typed,
    without touching the repository's own .snakemake/. ./mn5 is the repository's profile with an
    account set (and its site changed by `site`). Returns (output, working directory)."""
    workdir = tmp / "workdir"
    mn5_profile(workdir / "mn5", site=site)
    result = run_with_profile(workdir, "-n", "-p", "--configfile", *map(str, config_files))
    assert (result.returncode == 0) == expect_ok, result.stdout + result.stderr
    return result.stdout + result.stderr, workdir


def mn5_config(tmp):
    """config/mn5.yaml with its dataset paths pointing at folders that exist here (the config's
    are MareNostrum 5 placeholders)."""
    config = yaml.safe_load((REPO / "config" / "mn5.yaml").read_text())
    for name, spec in config["datasets"].items():
        (tmp / name).mkdir()
        spec["path"] = str(tmp / name)
    return config


@pytest.fixture(scope="module")
def mn5_dryrun(tmp_path_factory):
    """The dry run as a user types it from the repository root; only the dataset paths differ."""
    tmp = tmp_path_factory.mktemp("mn5")
    config = mn5_config(tmp)
    override = tmp / "datasets.yaml"
    override.write_text(yaml.safe_dump({"datasets": config["datasets"]}))
    output, _ = dryrun(tmp, ["config/mn5.yaml", override])
    return output, tmp


def job_block(output, rule, wildcards):
    """The dry-run block of one job (by its model, dataset and gpus wildcards; the settings
    wildcard after them is the run's path below gpus~N): its resources line and its shell command."""
    for block in output.split("rule ")[1:]:
        if block.startswith(rule + ":") and f"wildcards: {wildcards}, settings=" in block:
            return block
    raise AssertionError(f"no {rule} job with wildcards {wildcards}")


def shell_of(block):
    """The job's command; the rule's shell hands it to scripts/run_attempt.py as --command=COMMAND."""
    line = re.search(r"^Shell command: (.*)$", block, re.MULTILINE).group(1)
    (command,) = [word[len("--command="):] for word in shlex.split(line) if word.startswith("--command=")]
    return command


def resources_of(block):
    line = re.search(r"^\s+resources: (.*)$", block, re.MULTILINE).group(1)
    return dict(item.split("=", 1) for item in line.split(", "))


def test_tensorflow_one_node_runs_python_inside_the_tf_image(mn5_dryrun):
    output, data = mn5_dryrun
    block = job_block(output, "train_tensorflow", "model=resnet50v2, dataset=cifar128, gpus=4")
    assert shell_of(block).startswith(
        "module load singularity && " + HYGIENE + "singularity exec --nv "
        f"--bind {REPO},{data}/workdir,{data}/cifar128 --pwd {data}/workdir "
        f"{TF_IMAGE} python {REPO}/scripts/train_tf.py --model resnet50v2 --data {data}/cifar128 "
        "--dataset-name cifar128 --resolution 128 --gpus 4 --per-gpu-batch 2048 --base-lr 0.01 "
        "--epochs 5"
    )
    resources = resources_of(block)
    assert resources["nodes"] == "1" and resources["gres"] == "gpu:4"
    assert resources["cpus_per_task"] == "80" and resources["runtime"] == "75"
    assert resources["qos"] == "acc_debug" and resources["tasks_per_gpu"] == "0"
    assert resources["slurm_account"] == ACCOUNT
    assert "mpi" not in resources


def test_tensorflow_takes_the_whole_node_at_every_gpu_count_as_the_book_did(mn5_dryrun):
    """Chapter 10's jobs: --gres gpu:4 --cpus-per-task 80 at 1, 2 and 4 GPUs; the trainer still
    uses the run's GPUs."""
    output, _ = mn5_dryrun
    for gpus in (1, 2):
        block = job_block(output, "train_tensorflow", f"model=resnet152v2, dataset=cifar128, gpus={gpus}")
        resources = resources_of(block)
        assert (resources["gres"], resources["cpus_per_task"], resources["runtime"]) == ("gpu:4", "80", "75")
        assert resources["slurm_extra"] == "--exclusive"
        assert f" --gpus {gpus} --per-gpu-batch 1024 " in shell_of(block)


def test_pytorch_one_node_runs_torchrun_standalone_inside_the_pytorch_image(mn5_dryrun):
    output, data = mn5_dryrun
    block = job_block(output, "train_pytorch", "model=vit_h_14, dataset=micro-224, gpus=4")
    shell = shell_of(block)
    assert shell.startswith(
        "module load singularity && " + HYGIENE + "singularity exec --nv "
        f"--bind {REPO},{data}/workdir,{data}/micro-224 --pwd {data}/workdir "
        f"{TORCH_IMAGE} " + OMP_SHARE_4 +
        "python -m torch.distributed.run --standalone --nproc-per-node=4 "
        f"{REPO}/scripts/train_torch.py --model vit_h_14"
    )
    # Chapter 12's settings: per-GPU batch 128, bf16, compile, 10 loader workers, 90 minutes.
    for option in ("--precision bf16", "--per-gpu-batch 128", "--compile", "--num-workers 10", "--epochs 5"):
        assert f" {option} " in shell + " ", option
    assert "srun" not in shell
    resources = resources_of(block)
    assert resources["gres"] == "gpu:4" and resources["nodes"] == "1" and resources["runtime"] == "90"
    assert resources["slurm_extra"] == "--exclusive"


def test_pytorch_two_nodes_srun_starts_one_containerized_torchrun_per_node(mn5_dryrun):
    output, data = mn5_dryrun
    block = job_block(output, "train_pytorch_multinode", "model=vit_h_14, dataset=tiny-224, gpus=8")
    shell = shell_of(block)
    outer, inner = shell.split(" bash -c ", 1)
    assert outer.startswith(
        'module load singularity && MASTER_ADDR=$(scontrol show hostnames "$(squeue -h -j '
        '"$SLURM_JOB_ID" -o %N)" | sed -n 1p)'
    )
    # Each step runs only when the one before it worked (module load, the master's address).
    assert (
        " | sed -n 1p) && MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000)) && "
        "export MASTER_ADDR MASTER_PORT && srun "
    ) in outer
    assert outer.endswith(
        "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --gres=gpu:4 --cpus-per-task=80 "
        "--kill-on-bad-exit=1"
    )
    # srun is outside the container; each node's shell enters it and runs torchrun there.
    assert inner.startswith(
        "'" + HYGIENE + f"singularity exec --nv --bind {REPO},{data}/workdir,{data}/tiny-224 --pwd {data}/workdir "
        f"{TORCH_IMAGE} " + OMP_SHARE_4 + "python -m torch.distributed.run "
        "--nnodes=2 --nproc-per-node=4 --node-rank=$SLURM_NODEID --rdzv-id=$SLURM_JOB_ID "
        "--rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT "
        f"{REPO}/scripts/train_torch.py --model vit_h_14"
    )
    assert "--nodes 2" in inner
    resources = resources_of(block)
    assert resources["nodes"] == "2" and resources["tasks"] == "2" and resources["mpi"] == "srun"
    assert resources["gres"] == "gpu:4" and resources["tasks_per_gpu"] == "0"
    assert resources["slurm_extra"] == "--exclusive"


def test_tensorflow_is_kept_on_one_node(mn5_dryrun):
    output, _ = mn5_dryrun
    assert "tensorflow-single-node: 6" in output
    tf_gpus = {
        int(re.search(r"gpus=(\d+)", block).group(1))
        for block in output.split("rule ")[1:]
        if block.startswith("train_tensorflow:")
    }
    assert tf_gpus == {1, 2, 4}


def test_preview_charges_whole_nodes_before_anything_is_submitted(mn5_dryrun):
    output, _ = mn5_dryrun
    # TF: 2 models x {1,2,4} GPUs used, each job holding its node's 4 for 75 min; PyTorch: 2
    # datasets x {1,2,4,8,16,32}, at least one whole node each, for 90 min.
    used = 2 * (1 + 2 + 4) + 2 * (1 + 2 + 4 + 8 + 16 + 32)
    held_tf, held_torch = 2 * (4 + 4 + 4), 2 * (4 + 4 + 4 + 8 + 16 + 32)
    hours = held_tf * 75 / 60 + held_torch * 90 / 60
    assert (used, held_tf + held_torch, hours) == (140, 160, 234.0)
    assert "18 configurations to run" in output
    assert (f"GPUs of the jobs to run: 140 (160 charged: whole nodes); GPU-hours they book at their "
            f"time limits (75-90 min): 234.0 (all 18 jobs: 234.0)") in output
    assert "1 node x 1 GPU, whole node (4 GPUs charged): 4" in output
    assert "2 nodes x 4 GPUs: 2" in output and "8 nodes x 4 GPUs: 2" in output


def test_local_images_are_run_as_they_are_and_hashed_once_each(mn5_dryrun):
    output, _ = mn5_dryrun
    digest_jobs = [block for block in output.split("rule ")[1:] if block.startswith("image_digest:")]
    # 6 TensorFlow and 12 PyTorch trainings, 2 images: each hashed once, nothing pulled.
    assert len(digest_jobs) == 2
    assert "rule images:" not in output
    assert TORCH_IMAGE + " env OMP_NUM_THREADS" in shell_of(
        job_block(output, "train_pytorch_multinode", "model=vit_h_14, dataset=tiny-224, gpus=32"))


def sweep_file(tmp, config):
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def train_blocks(output):
    return [block for block in output.split("rule ")[1:] if block.startswith("train_")]


def remote_image_sweep(tmp_path, uri):
    config = mn5_config(tmp_path)
    config["matrix"] = {"framework": ["pytorch"], "model": ["vit_h_14"],
                        "dataset": ["micro-224", "tiny-224"], "gpus": [1, 4, 8, 16]}
    config["container"]["images"] = {"pytorch": uri}
    return sweep_file(tmp_path, config)


def test_a_remote_image_is_refused_where_no_node_reaches_a_registry(tmp_path):
    """MareNostrum 5's profile declares no network: the preview names the image's key and the
    route that works (docker save, scp, singularity build from the archive)."""
    uri = "docker://nvcr.io/nvidia/pytorch:24.07-py3"
    output, _ = dryrun(tmp_path, [remote_image_sweep(tmp_path, uri)], expect_ok=False)
    assert f"config key 'container.images.pytorch': '{uri}' is a remote image, but MareNostrum 5 " \
           "declares no network (site.network: false)" in output
    assert "docker save" in output and "singularity build X.sif docker-archive://X.tar" in output
    assert "Job stats" not in output


def test_a_remote_image_is_pulled_once_for_every_job_and_node(tmp_path):
    """On a site whose login node reaches the registry (site.network: true)."""
    uri = "docker://nvcr.io/nvidia/pytorch:24.07-py3"
    config = yaml.safe_load(remote_image_sweep(tmp_path, uri).read_text())
    output, workdir = dryrun(tmp_path, [tmp_path / "sweep.yaml"], site={"network": True})

    pulls = [block for block in output.split("rule images:")[1:]]
    assert len(pulls) == 1
    sif = f"resources/containers/{containers.image_name(uri)}.sif"
    assert sif == "resources/containers/nvcr.io-nvidia-pytorch-24.07-py3-4b8405c6.sif"
    assert f"output: {sif}, {sif}.sha256" in pulls[0]
    trains = train_blocks(output)
    assert len(trains) == 8
    for block in trains:
        command = shell_of(block)
        # Every training and every node runs the one pulled file, never the URI.
        assert f" {workdir}/{sif} " in command and "docker://" not in command
        assert sif in re.search(r"^\s+input: (.*)$", block, re.MULTILINE).group(1)
    # The pull itself: module load, then the runtime's pull into that file (scalesweep/plan/launch.py).
    assert launch.pull_command(config["container"], uri, sif) == (
        f"module load singularity && singularity pull {sif} {uri}")


def test_bound_paths_are_absolute_for_a_generated_dataset(tmp_path):
    config = mn5_config(tmp_path)
    config["matrix"] = {"framework": ["tensorflow"], "model": ["resnet50v2"],
                        "dataset": ["synth"], "gpus": [2]}
    config["datasets"] = {"synth": {"format": "cifar10", "resolution": 32,
                                    "synthetic": {"train_images": 64, "test_images": 16}}}
    config["models"] = {"tensorflow": {"resnet50v2": {"per_gpu_batch": 16}}}  # 64 images: two steps
    config["container"]["binds"] = ["scratch:/scratch:ro", "/abs/path"]
    output, workdir = dryrun(tmp_path, [sweep_file(tmp_path, config)])

    command = shell_of(job_block(output, "train_tensorflow", "model=resnet50v2, dataset=synth, gpus=2"))
    binds = re.search(r" --bind (\S+) ", command).group(1).split(",")
    assert binds == [str(REPO), str(workdir), f"{workdir}/resources/datasets/cifar10/synth",
                     f"{workdir}/scratch:/scratch:ro", "/abs/path"]
    # The trainer itself reads the dataset relative to --pwd, the working directory.
    assert f"--pwd {workdir} " in command and " --data resources/datasets/cifar10/synth " in command
    # One process on 2 GPUs (MirroredStrategy) keeps all the job's CPUs: no share is set.
    assert "OMP_NUM_THREADS" not in command and f"{TF_IMAGE} python " in command


# Each of 4 ranks' share of the job's OMP_NUM_THREADS, worked out by the job's shell.
OMP_SHARE_4 = "env OMP_NUM_THREADS=$((${OMP_NUM_THREADS:-1}/4>0?${OMP_NUM_THREADS:-1}/4:1)) "


@pytest.mark.parametrize("framework, gpus, gpus_per_node, threads, share", [
    ("pytorch", 4, 4, 80, 20),   # a MareNostrum 5 node: 4 ranks share 80 CPUs
    ("pytorch", 32, 4, 80, 20),  # across nodes: per node, as srun gives each node 80
    ("pytorch", 0, 0, 80, 80),   # the CPU baseline is one process
    ("tensorflow", 4, 4, 80, 80),  # MirroredStrategy: one process drives every GPU
    ("pytorch", 4, 4, 2, 1),     # a 2-core laptop with 4 stand-in GPUs: at least 1 each
])
def test_each_trainer_process_gets_its_share_of_the_jobs_cpus(framework, gpus, gpus_per_node, threads, share):
    """The share is worked out by the job's shell from the job's threads (Snakemake exports them as
    OMP_NUM_THREADS), so the command itself is the same wherever and however the job runs."""
    settings = {"framework": framework, "gpus": gpus, "gpus_per_node": gpus_per_node}
    command = launch.shell_words(launch.with_omp_threads(["printenv", "OMP_NUM_THREADS"], settings))
    seen = subprocess.run(["bash", "-c", command], env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                          capture_output=True, text=True, check=True).stdout
    assert int(seen) == share


def test_the_users_slurm_extra_is_added_to_the_workflows(tmp_path):
    """The train rules set slurm_extra themselves (--exclusive), which would replace a profile's
    default-resources slurm_extra and be replaced by --set-resources: all reach sbatch, with the
    config's cluster.slurm_extra, the command line's last (for the rule it names only)."""
    profile = mn5_profile(tmp_path / "profile", {"slurm_extra": "'--mail-type=END'"}, configfile=False)
    config = mn5_config(tmp_path)
    config["cluster"]["slurm_extra"] = "--nice=10"
    config["models"]["pytorch"]["vit_h_14"]["exclusive"] = "multinode"
    path = tmp_path / "mn5.yaml"
    path.write_text(yaml.safe_dump(config))
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    result = subprocess.run(
        [str(SNAKEMAKE), "-n", "-p", "--profile", str(profile), "--snakefile", str(REPO / "Snakefile"),
         "--configfile", str(path), "--set-resources", "train_pytorch_multinode:slurm_extra='--no-requeue'"],
        cwd=workdir, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    output = result.stdout + result.stderr
    multinode = resources_of(job_block(output, "train_pytorch_multinode", "model=vit_h_14, dataset=tiny-224, gpus=8"))
    assert multinode["slurm_extra"] == "--exclusive --nice=10 --mail-type=END --no-requeue"
    single = resources_of(job_block(output, "train_pytorch", "model=vit_h_14, dataset=tiny-224, gpus=1"))
    assert single["slurm_extra"] == "--nice=10 --mail-type=END"
