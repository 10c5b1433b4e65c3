"""scripts/train_torch.py: rank layout, sampling, models, and real DDP runs under torchrun (gloo, CPU)."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "scripts" / "train_torch.py"
sys.path.insert(0, str(ROOT / "scripts"))

# torchvision segfaults when it loads after tensorflow in one process (REFERENCE.md §4b): fail
# with a readable message instead of killing the whole pytest run.
if "tensorflow" in sys.modules and "torchvision" not in sys.modules:
    raise ImportError(
        "tensorflow is already imported in this pytest process: import torch before it, "
        "or run TensorFlow in subprocesses as tests/test_train_tf.py does"
    )

import torch  # noqa: E402

import make_imagefolder  # noqa: E402
import runlog  # noqa: E402
import train_torch  # noqa: E402
from scalesweep import catalog  # noqa: E402

CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 4, 26, 3  # 104 train images, 12 val


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("torch") / "ds"
    make_imagefolder.make_imagefolder(str(out), CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS, size=32, seed=0)
    return out


# ---------------------------------------------------------------- launch environment


def test_torchrun_variables_give_the_layout():
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "SLURM_PROCID": "0"}
    assert train_torch.world_info_from_env(env) == train_torch.World(5, 1, 8, 4)


def test_srun_step_variables_are_the_fallback():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    }
    world = train_torch.world_info_from_env(env)
    assert world == train_torch.World(3, 1, 4, 2)
    assert world.distributed


def test_batch_script_of_a_multi_task_job_is_one_process():
    env = {"SLURM_NTASKS": "8", "SLURM_PROCID": "0", "SLURM_JOB_ID": "42"}
    world = train_torch.world_info_from_env(env)
    assert world == train_torch.World(0, 0, 1, 1)
    assert not world.distributed


def test_plain_python_is_world_size_one():
    assert train_torch.world_info_from_env({}) == train_torch.World(0, 0, 1, 1)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "rank 2 of world size 2"),
        ({"WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, "local rank 3"),
        ({"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "x"}, "SLURM_STEP_TASKS_PER_NODE"),
    ],
)
def test_inconsistent_launch_environment_is_named(env, message):
    with pytest.raises(ValueError, match=message):
        train_torch.world_info_from_env(env)


def test_cpu_threads_split_the_cores_between_local_processes():
    assert train_torch.cpu_threads_per_process(16, 4) == 4
    assert train_torch.cpu_threads_per_process(2, 4) == 1
    assert train_torch.cpu_threads_per_process(2, 1) == 2


def test_human_lines_carry_the_reference_prefix():
    # REFERENCE.md §2: `[11/14/2025 10:02:17 AM] INFO - ` in front of every line.
    line = train_torch.log_line("Training finished!", when=0)
    assert re.fullmatch(r"\[\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2} [AP]M\] INFO - Training finished!", line)


def test_only_rank_zero_prints(capsys):
    for rank in (1, 0):
        console = train_torch.Console(rank)
        console.info(f"hello from {rank}")
        console.record({"record": "probe", "rank": rank})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].endswith(" INFO - hello from 0") and out[0].startswith("[")
    assert json.loads(out[1].removeprefix(runlog.PREFIX))["rank"] == 0


# ---------------------------------------------------------------- data and sampling


def test_each_epoch_has_its_own_order_and_ranks_split_the_images():
    images = list(range(103))
    world = [train_torch.World(rank, rank, 2, 2) for rank in (0, 1)]
    samplers = [train_torch.make_train_sampler(images, w, seed=0) for w in world]
    first, second = (train_torch.epoch_order(samplers[0], epoch) for epoch in (1, 2))
    assert first != second
    assert sorted(first) != sorted(second)  # a new shard each epoch, not only a new order
    assert train_torch.epoch_order(samplers[0], 1) == first
    ranks = [set(train_torch.epoch_order(sampler, 3)) for sampler in samplers]
    assert not ranks[0] & ranks[1]
    assert len(ranks[0]) == len(ranks[1]) == 51  # the odd image is dropped, never padded


def one_process_trainer(dataset: Path, *options: str) -> "train_torch.Trainer":
    """A world-size-1 CPU Trainer on the dataset, silenced (it believes it is rank 1)."""
    argv = ["--model", "vit_tiny", "--data", str(dataset), "--resolution", "32", "--num-workers", "0",
            *options]
    world = train_torch.World(0, 0, 1, 1)
    return train_torch.Trainer(train_torch.parse_args(argv), world, torch.device("cpu"), train_torch.Console(1))


def test_trainer_reshuffles_every_epoch(dataset):
    trainer = one_process_trainer(dataset, "--per-gpu-batch", "8")
    orders = [
        torch.cat([labels for _, labels in trainer.epoch_batches(epoch)]).tolist() for epoch in (1, 2, 1)
    ]
    assert len(orders[0]) == trainer.steps * 8 == 104
    assert orders[0] != orders[1]
    assert orders[0] == orders[2]


@pytest.mark.parametrize(
    ("images", "world_size", "batch"), [(104, 1, 16), (104, 2, 16), (103, 4, 8), (100, 3, 7), (31, 2, 16)]
)
def test_steps_per_epoch_matches_the_real_sampler_and_loader(images, world_size, batch):
    dataset = list(range(images))
    for rank in range(world_size):
        world = train_torch.World(rank, rank, world_size, world_size)
        sampler = train_torch.make_train_sampler(dataset, world, seed=1)
        loader = train_torch.make_loader(dataset, batch, sampler, 0, torch.device("cpu"), train=True)
        assert sum(1 for _ in loader) == train_torch.steps_per_epoch(images, world_size, batch)


def test_max_train_images_picks_a_seeded_subset_across_classes():
    assert train_torch.subset_indices(100, 0, seed=0) == list(range(100))
    assert train_torch.subset_indices(100, 500, seed=0) == list(range(100))
    picked = train_torch.subset_indices(100, 30, seed=0)
    assert len(set(picked)) == 30 and all(0 <= index < 100 for index in picked)
    assert picked == train_torch.subset_indices(100, 30, seed=0)
    assert picked != train_torch.subset_indices(100, 30, seed=1)
    assert max(picked) >= 50  # images are ordered by class: not just the first classes
    with pytest.raises(ValueError, match="--max-train-images"):
        train_torch.subset_indices(100, -1, seed=0)


def test_load_split_reads_the_generated_folder(dataset):
    train = train_torch.load_split(str(dataset), "train", 32)
    assert train.classes == make_imagefolder.class_names(CLASSES)
    assert len(train) == CLASSES * TRAIN_PER_CLASS
    image, label = train[len(train) - 1]
    assert tuple(image.shape) == (3, 32, 32) and label == CLASSES - 1


def test_missing_split_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "val")):
        train_torch.load_split(str(tmp_path), "val", 32)
    (tmp_path / "train").mkdir()
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "train")):
        train_torch.load_split(str(tmp_path), "train", 32)


# ---------------------------------------------------------------- models and options


def test_model_list_is_the_catalog(capsys):
    assert train_torch.MODELS == catalog.MODELS["pytorch"]
    assert train_torch.main(["--list-models"]) == 0
    assert capsys.readouterr().out.split() == list(catalog.MODELS["pytorch"])


def test_vit_h_14_is_the_reference_model():
    # REFERENCE.md §2: 631,021,000 parameters with 200 classes; built on the meta device, no memory.
    with torch.device("meta"):
        model = train_torch.build_model("vit_h_14", 200, 224)
    assert train_torch.count_parameters(model) == 631_021_000


@pytest.mark.parametrize("name", ["vit_tiny", "resnet18"])
def test_small_models_classify_into_the_dataset_classes(name):
    model = train_torch.build_model(name, 7, 32)
    assert tuple(model(torch.zeros(2, 3, 32, 32)).shape) == (2, 7)


def test_vit_resolution_must_fit_the_patches():
    with pytest.raises(ValueError, match="--resolution 30"):
        train_torch.build_model("vit_tiny", 10, 30)
    with pytest.raises(ValueError, match="--resolution 32"):
        train_torch.build_model("vit_h_14", 10, 32)


def test_learning_rate_scales_with_the_world():
    assert train_torch.scaled_learning_rate(0.01, 4) == pytest.approx(0.04)
    assert train_torch.scaled_learning_rate(0.01, 1) == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--data", "x"], "--model is required"),
        (["--model", "vit_tiny"], "--data is required"),
        (["--model", "vit_tiny", "--data", "x", "--per-gpu-batch", "0"], "--per-gpu-batch must be >= 1"),
        (["--model", "vit_tiny", "--data", "x", "--base-lr", "0"], "--base-lr"),
        (["--model", "vit_tiny", "--data", "x", "--per-gpu"], "unrecognized arguments"),
    ],
)
def test_bad_command_lines_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_torch.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("setting", "batch", "expected"),
    [("oom", 8, "oom"), ("crash", 8, "crash"), ("oom-above:8", 8, None), ("oom-above:8", 16, "oom"),
     ("oom-once", 8, "oom"), ("", 8, None)],
)
def test_trainer_resolves_the_failure_hook_for_its_batch(dataset, monkeypatch, setting, batch, expected):
    monkeypatch.setenv(runlog.FAIL_INJECT_ENV, setting)
    assert one_process_trainer(dataset, "--per-gpu-batch", str(batch)).injected == expected


def test_unknown_failure_hook_value_is_an_error(dataset, monkeypatch):
    monkeypatch.setenv(runlog.FAIL_INJECT_ENV, "explode")
    with pytest.raises(ValueError, match=runlog.FAIL_INJECT_ENV):
        one_process_trainer(dataset)


def test_injected_failures_raise_the_real_error_types():
    train_torch.inject_failure(None)
    with pytest.raises(torch.OutOfMemoryError):
        train_torch.inject_failure("oom")
    with pytest.raises(RuntimeError, match="injected crash"):
        train_torch.inject_failure("crash")


# ---------------------------------------------------------------- real runs in subprocesses


def clean_env(**extra) -> dict:
    """The test's environment without launch or SLURM variables that would change the layout."""
    launch = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    launch.add(runlog.FAIL_INJECT_ENV)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in launch and not key.startswith("SLURM_")
    }
    return {**env, **extra}


def launch(dataset: Path, processes: int | None, *options: str, **env) -> subprocess.CompletedProcess:
    """The trainer under `torchrun --standalone` with `processes` ranks, or plain python when None."""
    launcher = [sys.executable]
    if processes is not None:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
    command = [*launcher, str(TRAINER), "--data", str(dataset), "--dataset-name", "synthetic",
               "--resolution", "32", "--num-workers", "0", *options]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=clean_env(**env), cwd=ROOT
    )


def records(stdout: str) -> list[dict]:
    return [
        json.loads(line[line.index(runlog.PREFIX) + len(runlog.PREFIX):])
        for line in stdout.splitlines()
        if runlog.PREFIX in line
    ]


def of_kind(recs: list[dict], kind: str) -> list[dict]:
    return [rec for rec in recs if rec["record"] == kind]


@pytest.mark.slow
def test_ddp_run_with_two_processes(dataset):
    run = launch(
        dataset, 2, "--model", "vit_tiny", "--gpus", "2", "--epochs", "3", "--per-gpu-batch", "16", "--eval"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    recs = records(run.stdout)
    assert [rec["record"] for rec in recs] == ["header", "epoch", "epoch", "epoch", "eval", "summary"]
    assert all(rec["schema"] == 1 for rec in recs)
    header = recs[0]
    assert header["framework"] == "pytorch" and header["model"] == "vit_tiny"
    assert header["world_size"] == 2 and header["gpus"] == 2 and header["nodes"] == 1
    assert header["device_kind"] == "cpu" and header["devices"] == ["cpu", "cpu"]
    assert header["global_batch"] == 32 and header["learning_rate"] == pytest.approx(0.02)
    steps = (CLASSES * TRAIN_PER_CLASS // 2) // 16
    assert header["images_per_epoch"] == steps * 32 == 96
    assert [rec["epoch"] for rec in of_kind(recs, "epoch")] == [1, 2, 3]
    for epoch in of_kind(recs, "epoch"):
        assert epoch["images"] == steps * 32
        assert epoch["throughput_img_s"] == pytest.approx(epoch["images"] / epoch["seconds"])
        assert 0 <= epoch["accuracy"] <= 1 and epoch["loss"] > 0
    assert of_kind(recs, "eval")[0]["images"] == CLASSES * VAL_PER_CLASS  # every val image once, no padding
    summary = recs[-1]
    assert summary["status"] == "ok" and summary["epochs"] == 3 and summary["reason"] is None
    assert summary["total_time_s"] >= summary["train_time_s"] > 0
    assert summary["memory_gb"] is None and summary["peak_host_rss_gb"] > 0
    # The reference's human lines, once: only rank 0 prints.
    assert run.stdout.count("Training finished!") == 1
    assert run.stdout.count("### model_name: vit_tiny") == 1
    assert "[EPOCH: 3] Training throughput:" in run.stdout


@pytest.mark.slow
def test_plain_python_run_is_the_one_process_baseline(dataset):
    run = launch(dataset, None, "--model", "resnet18", "--gpus", "0", "--epochs", "2", "--per-gpu-batch", "16",
                 "--max-train-images", "50")
    assert run.returncode == 0, run.stderr[-3000:]
    recs = records(run.stdout)
    header, summary = recs[0], recs[-1]
    assert header["world_size"] == 1 and header["gpus"] == 0 and header["global_batch"] == 16
    assert header["images_per_epoch"] == 48  # 50 images capped, 3 full batches of 16
    assert [rec["images"] for rec in of_kind(recs, "epoch")] == [48, 48]
    assert summary["status"] == "ok"
    assert summary["steady_epoch_time_s"] == of_kind(recs, "epoch")[1]["seconds"]


@pytest.mark.slow
def test_injected_oom_is_a_measured_outcome(dataset):
    run = launch(dataset, 2, "--model", "vit_tiny", "--gpus", "2", "--epochs", "2", "--per-gpu-batch", "16",
                 **{runlog.FAIL_INJECT_ENV: "oom"})
    assert run.returncode == 0, run.stderr[-3000:]
    recs = records(run.stdout)
    assert [rec["record"] for rec in recs] == ["header", "summary"]
    assert recs[-1]["status"] == "oom" and "OutOfMemoryError" in recs[-1]["reason"]
    assert recs[-1]["epochs"] == 0


@pytest.mark.slow
def test_injected_crash_fails_the_run(dataset):
    run = launch(dataset, 2, "--model", "vit_tiny", "--gpus", "2", "--epochs", "2", "--per-gpu-batch", "16",
                 **{runlog.FAIL_INJECT_ENV: "crash"})
    assert run.returncode != 0
    summaries = of_kind(records(run.stdout), "summary")
    assert len(summaries) == 1
    assert summaries[0]["status"] == "failed" and "injected crash" in summaries[0]["reason"]
    assert "RuntimeError: injected crash" in run.stderr


@pytest.mark.slow
def test_sigterm_ends_the_log_with_a_failed_summary(dataset):
    # What SLURM's time limit and scancel do: SIGTERM, then SIGKILL after KillWait.
    command = [sys.executable, str(TRAINER), "--data", str(dataset), "--resolution", "32",
               "--num-workers", "0", "--model", "resnet18", "--epochs", "500", "--per-gpu-batch", "16"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    with subprocess.Popen(command, env=clean_env(), cwd=ROOT, **pipes) as process:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if '"record": "epoch"' in line:
                process.send_signal(signal.SIGTERM)
                break
        out, err = process.communicate(timeout=120)
    recs = records("".join(lines) + out)
    assert process.returncode != 0
    assert recs[-1]["record"] == "summary" and recs[-1]["status"] == "failed"
    assert "SIGTERM" in recs[-1]["reason"]
    assert recs[-1]["epochs"] >= 1


def test_bad_dataset_fails_with_a_summary_naming_the_folder(tmp_path):
    run = launch(tmp_path / "missing", None, "--model", "vit_tiny", "--epochs", "1")
    assert run.returncode != 0
    summary = records(run.stdout)[-1]
    assert summary["status"] == "failed" and str(tmp_path / "missing" / "train") in summary["reason"]
