"""scripts/train_torch.py (the backend scalesweep/train/torch_backend/: trainer.py) and its modules
distributed.py and data.py: rank layout, sampling, models, the training step, and real DDP runs
under torchrun (gloo, CPU). The contract both trainers share (OOM policy, maximum-batch search,
protocols) is tests/test_backends.py's."""

import functools
import json
import os
import re
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "scripts" / "train_torch.py"

# torchvision segfaults when it loads after tensorflow in one process (docs/reference.md §5): fail
# with a readable message instead of killing the whole pytest run.
if "tensorflow" in sys.modules and "torchvision" not in sys.modules:
    raise ImportError(
        "tensorflow is already imported in this pytest process: import torch before it, "
        "or run TensorFlow in subprocesses as tests/test_train_tf.py does"
    )

import torch  # noqa: E402

from scalesweep.train.common import faults, harness, measure, runlog  # noqa: E402
from scalesweep.train.datasets import make_imagefolder  # noqa: E402
from scalesweep.train.torch_backend import data as torch_data  # noqa: E402
from scalesweep.train.torch_backend import distributed as torch_distributed  # noqa: E402
from scalesweep.train.torch_backend import model as torch_model  # noqa: E402
from scalesweep.train.torch_backend import probes as torch_probes  # noqa: E402
from scalesweep.train.torch_backend import trainer as train_torch  # noqa: E402

CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 4, 26, 3  # 104 train images, 12 val


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("torch") / "ds"
    make_imagefolder.make_imagefolder(str(out), CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS, size=32, seed=0)
    return out


# ---------------------------------------------------------------- launch environment


def test_torchrun_variables_give_the_layout():
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "SLURM_PROCID": "0"}
    assert torch_distributed.world_info_from_env(env) == torch_distributed.World(5, 1, 8, 4)


def test_srun_step_variables_are_the_fallback():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    }
    world = torch_distributed.world_info_from_env(env)
    assert world == torch_distributed.World(3, 1, 4, 2)
    assert world.distributed


def test_batch_script_of_a_multi_task_job_is_one_process():
    env = {"SLURM_NTASKS": "8", "SLURM_PROCID": "0", "SLURM_JOB_ID": "42"}
    world = torch_distributed.world_info_from_env(env)
    assert world == torch_distributed.World(0, 0, 1, 1)
    assert not world.distributed


def test_plain_python_is_world_size_one():
    assert torch_distributed.world_info_from_env({}) == torch_distributed.World(0, 0, 1, 1)


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
        torch_distributed.world_info_from_env(env)


def test_cpu_threads_split_the_cores_between_local_processes():
    assert torch_distributed.cpu_threads_per_process(16, 4) == 4
    assert torch_distributed.cpu_threads_per_process(2, 4) == 1
    assert torch_distributed.cpu_threads_per_process(2, 1) == 2


def test_human_lines_carry_the_reference_prefix():
    # docs/reference.md §2: `[11/14/2025 10:02:17 AM] INFO - ` in front of every line.
    line = torch_distributed.log_line("Training finished!", when=0)
    assert re.fullmatch(r"\[\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2} [AP]M\] INFO - Training finished!", line)


def test_only_rank_zero_prints(capsys):
    for rank in (1, 0):
        console = torch_distributed.Console(rank)
        console.info(f"hello from {rank}")
        console.record({"record": "probe", "rank": rank})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].endswith(" INFO - hello from 0") and out[0].startswith("[")
    assert json.loads(out[1].removeprefix(runlog.PREFIX))["rank"] == 0


# ---------------------------------------------------------------- data and sampling


def test_each_epoch_has_its_own_order_and_ranks_split_the_images():
    images = list(range(103))
    world = [torch_distributed.World(rank, rank, 2, 2) for rank in (0, 1)]
    samplers = [torch_data.make_train_sampler(images, w, seed=0) for w in world]
    first, second = (torch_data.epoch_order(samplers[0], epoch) for epoch in (1, 2))
    assert first != second
    assert sorted(first) != sorted(second)  # a new shard each epoch, not only a new order
    assert torch_data.epoch_order(samplers[0], 1) == first
    ranks = [set(torch_data.epoch_order(sampler, 3)) for sampler in samplers]
    assert not ranks[0] & ranks[1]
    assert len(ranks[0]) == len(ranks[1]) == 51  # the odd image is dropped, never padded


def one_process_trainer(dataset: Path, *options: str, endless: bool = False) -> "train_torch.Trainer":
    """A world-size-1 CPU Trainer on the dataset, silenced (it believes it is rank 1)."""
    argv = ["--model", "vit_tiny", "--data", str(dataset), "--resolution", "32", "--num-workers", "0",
            *options]
    args = train_torch.parse_args(argv)
    world = torch_distributed.World(0, 0, 1, 1)
    data = torch_data.load_train_data(args)
    return train_torch.Trainer(
        args, world, torch.device("cpu"), torch_distributed.Console(1), data, args.per_gpu_batch, endless=endless
    )


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
        world = torch_distributed.World(rank, rank, world_size, world_size)
        sampler = torch_data.make_train_sampler(dataset, world, seed=1)
        loader = torch_data.make_loader(dataset, batch, sampler, 0, torch.device("cpu"), train=True)
        assert sum(1 for _ in loader) == torch_data.steps_per_epoch(images, world_size, batch)


def test_max_train_images_picks_a_seeded_subset_across_classes():
    # The rule both trainers share (scalesweep/train/common/runlog.py).
    assert measure.subset_indices(100, 0, seed=0) == list(range(100))
    assert measure.subset_indices(100, 500, seed=0) == list(range(100))
    picked = measure.subset_indices(100, 30, seed=0)
    assert len(set(picked)) == 30 and all(0 <= index < 100 for index in picked)
    assert picked == measure.subset_indices(100, 30, seed=0)
    assert picked != measure.subset_indices(100, 30, seed=1)
    assert max(picked) >= 50  # images are ordered by class: not just the first classes
    with pytest.raises(ValueError, match="--max-train-images"):
        measure.subset_indices(100, -1, seed=0)


def test_repeating_sampler_runs_the_passes_back_to_back_each_reshuffled():
    world = torch_distributed.World(1, 1, 2, 2)
    sampler = torch_data.make_train_sampler(range(10), world, 0)
    passes = [torch_data.epoch_order(sampler, epoch) for epoch in (1, 2, 3)]
    endless = iter(torch_data.RepeatingSampler(torch_data.make_train_sampler(range(10), world, 0)))
    assert [next(endless) for _ in range(15)] == passes[0] + passes[1] + passes[2]
    assert passes[0] != passes[1]
    with pytest.raises(ValueError, match="fewer images than processes"):
        torch_data.RepeatingSampler(torch_data.make_train_sampler(range(1), world, 0))


def test_endless_loader_serves_batches_larger_than_the_data(dataset):
    # A max-batch probe may ask for more images per step than the data set holds.
    trainer = one_process_trainer(dataset, "--per-gpu-batch", "128", "--find-max-batch", endless=True)
    images, labels = next(iter(trainer.loader))
    assert tuple(images.shape) == (128, 3, 32, 32)
    assert set(labels.tolist()) == set(range(CLASSES))


def test_too_few_images_for_one_step_names_the_data(dataset):
    for protocol in ("epochs", "steps"):
        with pytest.raises(ValueError, match=f"104 training images in {dataset}"):
            one_process_trainer(dataset, "--per-gpu-batch", "128", "--protocol", protocol, endless=True)


def test_loader_decodes_in_workers_and_pins_only_for_cuda(dataset):
    train = torch_data.load_split(str(dataset), "train", 32)
    loader = torch_data.make_loader(train, 8, None, 2, torch.device("cpu"), train=True)
    assert loader.num_workers == 2 and loader.persistent_workers and not loader.pin_memory
    assert loader.prefetch_factor == torch_data.PREFETCH_BATCHES_PER_WORKER
    evaluation = torch_data.make_loader(train, 8, None, 0, torch.device("cpu"), train=False)
    assert evaluation.num_workers == 0 and not evaluation.persistent_workers


def test_load_split_reads_the_generated_folder(dataset):
    train = torch_data.load_split(str(dataset), "train", 32)
    assert train.classes == make_imagefolder.class_names(CLASSES)
    assert len(train) == CLASSES * TRAIN_PER_CLASS
    image, label = train[len(train) - 1]
    assert tuple(image.shape) == (3, 32, 32) and label == CLASSES - 1


def test_missing_split_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "val")):
        torch_data.load_split(str(tmp_path), "val", 32)
    (tmp_path / "train").mkdir()
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "train")):
        torch_data.load_split(str(tmp_path), "train", 32)


# ---------------------------------------------------------------- models and options


def test_vit_h_14_is_the_reference_model():
    # docs/reference.md §2: 631,021,000 parameters with 200 classes; built on the meta device, no memory.
    with torch.device("meta"):
        model = torch_model.build_model("vit_h_14", 200, 224)
    assert torch_model.count_parameters(model) == 631_021_000


@pytest.mark.parametrize("name", ["vit_tiny", "resnet18"])
def test_small_models_classify_into_the_dataset_classes(name):
    model = torch_model.build_model(name, 7, 32)
    assert tuple(model(torch.zeros(2, 3, 32, 32)).shape) == (2, 7)


def test_vit_resolution_must_fit_the_patches():
    with pytest.raises(ValueError, match="--resolution 30"):
        torch_model.build_model("vit_tiny", 10, 30)
    with pytest.raises(ValueError, match="--resolution 32"):
        torch_model.build_model("vit_h_14", 10, 32)


def test_learning_rate_scales_with_the_world():
    assert harness.scaled_learning_rate(0.01, 4) == pytest.approx(0.04)
    assert harness.scaled_learning_rate(0.01, 1) == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # The PyTorch trainer's own options; the shared ones are tests/test_backends.py's.
        (["--model", "vit_tiny", "--data", "x", "--find-max-batch", "--eval"], "--eval does not go with"),
        (["--model", "vit_tiny", "--data", "x", "--nodes", "0"], "--nodes must be >= 1, got 0"),
        (["--model", "vit_tiny", "--data", "x", "--num-workers", "-1"], "--num-workers must be 0 or more"),
        (["--model", "vit_tiny", "--data", "x", "--eval-batch-size", "0"], "--eval-batch-size must be >= 1"),
        (["--model", "vit_tiny", "--data", "x", "--optimizer", "lamb"], "invalid choice: 'lamb'"),
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
    monkeypatch.setenv(faults.FAIL_INJECT_ENV, setting)
    assert one_process_trainer(dataset, "--per-gpu-batch", str(batch)).injected == expected


def test_unknown_failure_hook_value_is_an_error(dataset, monkeypatch):
    monkeypatch.setenv(faults.FAIL_INJECT_ENV, "explode")
    with pytest.raises(ValueError, match=faults.FAIL_INJECT_ENV):
        one_process_trainer(dataset)


def test_injected_failures_raise_the_real_error_types():
    train_torch.inject_failure(None)
    with pytest.raises(torch.OutOfMemoryError):
        train_torch.inject_failure("oom")
    with pytest.raises(RuntimeError, match="injected crash"):
        train_torch.inject_failure("crash")


# ---------------------------------------------------------------- measurement options


@pytest.mark.slow
def test_step_statistics_leave_out_the_runs_warmup_steps(dataset):
    # 104 images in batches of 16: 6 steps per epoch; the run's first 8 steps are warm-up.
    trainer = one_process_trainer(dataset, "--per-gpu-batch", "16", "--epochs", "2", "--warmup-steps", "8")
    written = []
    lines = []
    meter = harness.WindowMeter(runlog.RunLog(written.append), trainer.clock, trainer.global_batch, 8, lines.append)
    trainer.fit_epochs(meter, 2)
    first, second = written
    assert (first["steps"], second["steps"]) == (6, 6)
    assert first["step_time_median_s"] is None and first["step_time_p90_s"] is None
    durations = trainer.clock.durations
    assert len(durations) == 12 and all(duration > 0 for duration in durations)
    assert second["step_time_median_s"] == statistics.median(durations[8:])
    assert second["step_time_p90_s"] == pytest.approx(measure.percentile(durations[8:], 0.9))
    assert first["phase"] is None and second["images"] == 96
    # A step spans its batch's fetch and its work: the epoch holds its steps and little else.
    assert sum(durations[6:]) <= second["seconds"]
    assert not trainer.guarding_oom  # committed after the first epoch record
    assert lines == [f"[EPOCH: {record['epoch']}] Training throughput: {record['throughput_img_s']:.3f} imgs/s"
                     for record in written]


def test_without_a_process_group_any_out_of_memory_error_becomes_torchs():
    device = torch.device("cpu")
    assert torch_distributed.agree_on_oom(lambda: 7, device) == 7

    def host_runs_out():
        raise MemoryError("cannot allocate 3 GiB")

    with pytest.raises(torch.OutOfMemoryError, match="^MemoryError: cannot allocate 3 GiB$"):
        torch_distributed.agree_on_oom(host_runs_out, device)
    with pytest.raises(RuntimeError, match="not memory"):
        torch_distributed.agree_on_oom(lambda: (_ for _ in ()).throw(RuntimeError("not memory")), device)


# ---------------------------------------------------------------- real runs in subprocesses


def clean_env(**extra) -> dict:
    """The test's environment without launch or SLURM variables that would change the layout."""
    launch = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    launch.add(faults.FAIL_INJECT_ENV)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in launch and not key.startswith("SLURM_")
    }
    return {**env, **extra}


def launch(dataset: Path, processes: int | None, *options: str, **env) -> subprocess.CompletedProcess:
    """The trainer under `torchrun --standalone` with `processes` ranks, or plain python when None;
    `env`: extra environment variables (the delay injections)."""
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
    assert (header["protocol"], header["warmup_steps"], header["timed_steps"]) == ("epochs", 5, None)
    assert (header["requested_per_gpu_batch"], header["oom_policy"], header["compile"]) == (16, "fail", False)
    assert header["versions"]["torch"] == torch.__version__ and header["versions"]["nccl"] is None
    assert {"gpu_models", "gpu_driver", "cpu_model", "container_image", "slurm_job_id"} <= set(header)
    assert [rec["epoch"] for rec in of_kind(recs, "epoch")] == [1, 2, 3]
    for epoch in of_kind(recs, "epoch"):
        assert epoch["images"] == steps * 32 and epoch["steps"] == steps and epoch["phase"] is None
        assert epoch["throughput_img_s"] == pytest.approx(epoch["images"] / epoch["seconds"])
        assert 0 <= epoch["accuracy"] <= 1 and epoch["loss"] > 0
    # 3 steps per epoch, the run's first 5 are warm-up: epoch 1 has no step left, epoch 2 one.
    medians = [rec["step_time_median_s"] for rec in of_kind(recs, "epoch")]
    assert medians[0] is None and medians[1] is not None and medians[2] is not None
    assert of_kind(recs, "epoch")[1]["step_time_p90_s"] == medians[1]
    assert of_kind(recs, "eval")[0]["images"] == CLASSES * VAL_PER_CLASS  # every val image once, no padding
    summary = recs[-1]
    assert summary["status"] == "ok" and summary["epochs"] == 3 and summary["reason"] is None
    assert summary["total_time_s"] >= summary["train_time_s"] > 0
    assert summary["memory_gb"] is None and summary["peak_host_rss_gb"] > 0
    # The reference's human lines, once: only rank 0 prints.
    assert run.stdout.count("Training finished!") == 1
    assert run.stdout.count("### model_name: vit_tiny") == 1
    assert "[EPOCH: 3] Training throughput:" in run.stdout


AGREEMENT_PROBE = """
import sys
import torch
import torch.distributed as dist
sys.path.insert(0, {root!r})
from scalesweep.train.torch_backend import distributed as torch_distributed

dist.init_process_group("gloo")
rank = dist.get_rank()

def say(line):
    # One write per line: two ranks share the pipe, and print() writes text and newline apart.
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()

def runs_out_on_rank_1():
    if rank == 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return "fine"

try:
    torch_distributed.agree_on_oom(runs_out_on_rank_1, torch.device("cpu"))
    say(f"rank {{rank}} went on")
except torch.OutOfMemoryError as error:
    say(f"rank {{rank}} stopped: {{error}}")
say(f"rank {{rank}} next: {{torch_distributed.agree_on_oom(lambda: rank + 10, torch.device('cpu'))}}")
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_rank_local_out_of_memory_stops_every_rank(tmp_path):
    probe = tmp_path / "agreement_probe.py"
    probe.write_text(textwrap.dedent(AGREEMENT_PROBE.format(root=str(ROOT))))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(probe)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=180, env=clean_env(), cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rank 0 stopped: out of memory on rank 1; every rank stops with it" in run.stdout
    own = "CUDA out of memory. Tried to allocate 2.00 GiB"
    assert f"rank 1 stopped: {own} (out of memory on rank 1)" in run.stdout
    assert "went on" not in run.stdout
    # The ranks are still in step: the next agreement passes on both.
    assert "rank 0 next: 10" in run.stdout and "rank 1 next: 11" in run.stdout


def test_max_train_images_subset_is_the_shared_rule(dataset):
    args = train_torch.parse_args(["--model", "vit_tiny", "--data", str(dataset), "--resolution", "32",
                                   "--max-train-images", "30", "--seed", "5"])
    data = torch_data.load_train_data(args)
    assert list(data.train_set.indices) == measure.subset_indices(CLASSES * TRAIN_PER_CLASS, 30, 5)


# ---------------------------------------------------------------- the step breakdown

@pytest.mark.parametrize("optimizer_name", torch_model.OPTIMIZERS)
def test_a_probe_step_does_a_whole_step_and_changes_nothing(optimizer_name):
    """Two real steps (momentum / moments and AdamW's step count exist), then a probe step doing a
    whole step (forward, backward, the optimizer's step): weights, optimizer state and batch-norm
    statistics are as before it, the learning rate is back, and its optimizer step did run."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    optimizer = torch_model.build_optimizer(optimizer_name, model.parameters(), 0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    images, labels = torch.randn(16, 4), torch.randint(0, 2, (16,))
    stepped = []
    optimizer.register_step_post_hook(lambda *_: stepped.append(True))

    def step():
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(torch.nn.functional.cross_entropy(model(images), labels)).backward()
        scaler.step(optimizer)
        scaler.update()

    step(), step()
    state = lambda: [t.clone() for t in (*model.parameters(), *model.buffers(),  # noqa: E731
                                         *(v for s in optimizer.state.values() for v in s.values()))]
    before = state()
    seconds, spent = torch_probes.probe_step(step, lambda: None, None, model, optimizer, scaler)
    assert len(stepped) == 3 and 0 < seconds <= spent
    assert all(torch.equal(a, b) for a, b in zip(before, state())) and len(state()) == len(before)
    assert optimizer.param_groups[0]["lr"] == 0.1


PART_KEYS = ("data_wait_s", "compute_s", "sync_wait_s", "sync_comm_s", "other_s")
BREAKDOWN_RUN = ("--model", "vit_tiny", "--per-gpu-batch", "8", "--protocol", "steps",
                 "--warmup-steps", "3", "--timed-steps", "30")


def breakdown_of(dataset, processes, **env) -> dict:
    return breakdown_run(dataset, processes, **env)[-1]


# Each of these runs once per session, its tests asserting on the same records: the plain 2-rank
# run is the baseline of three tests, the delayed all-reduce's that of two, and the one-process
# run gives both its summary and its header (--gpus 0 is the trainer's default).
@functools.lru_cache(maxsize=None)
def breakdown_run(dataset, processes, **env) -> list[dict]:
    run = launch(dataset, processes, *BREAKDOWN_RUN, "--gpus", str(processes or 0), **env)
    assert run.returncode == 0, run.stderr[-3000:]
    recs = records(run.stdout)
    summary = recs[-1]
    assert summary["record"] == "summary" and summary["status"] == "ok"
    assert "step breakdown:" in run.stdout and " + other " in run.stdout  # `other` is printed
    return recs


@pytest.mark.slow
def test_breakdown_parts_add_up_and_one_process_has_no_sync(dataset):
    one = breakdown_of(dataset, None)
    timed = one["timed_steps"]
    assert sum(one[key] for key in PART_KEYS) == pytest.approx(one["breakdown_step_s"])
    assert one["breakdown_step_s"] == pytest.approx(one["steady_epoch_time_s"] / timed)
    # one process synchronises nothing, and the compute probe accounts for the step: what is
    # left (host work between steps, the medians' noise) is small
    assert one["sync_exposed_s"] == 0.0 and abs(one["other_s"]) <= 0.2 * one["breakdown_step_s"]
    assert one["compute_s"] > 0 and one["data_wait_s"] > 0
    assert one["allreduce_s"] is None and "flops_per_image" not in one  # a header key
    header = breakdown_run(dataset, None)[0]
    # vit_tiny at 32 px: counted on a meta-device copy; a trained image ~ 3 forwards
    assert 0 < header["flops_per_image"] < 1e9


@pytest.mark.slow
def test_synchronisation_is_measured_at_two_and_four_processes(dataset):
    """Both runs break their steps down, with their all-reduce probe; the pure all-reduce of the
    same gradients over 4 gloo ranks takes longer than over 2 (twice the ring's steps, and 4
    processes on a 2-core machine: 5-9 ms against 0.4-0.7 ms). How much of it is exposed at 4
    processes on 2 cores is the scheduler's choice (1.1 and 7.2 ms in two runs): the fault
    injection tests (test_a_slow_rank_is_waiting_and_a_slow_all_reduce_is_communication) tell
    whether the exposed part is found and split."""
    two, four = breakdown_of(dataset, 2), breakdown_of(dataset, 4)
    for summary in (two, four):
        assert sum(summary[key] for key in PART_KEYS) == pytest.approx(summary["breakdown_step_s"])
        assert summary["busbw_gb_s"] > 0 and summary["allreduce_bytes"] > 0
        assert summary["sync_exposed_s"] >= 0 and summary["compute_s"] > 0
    assert four["allreduce_bytes"] == two["allreduce_bytes"] and four["allreduce_s"] > two["allreduce_s"]


@pytest.mark.slow
def test_injected_delays_land_in_their_own_part(dataset):
    """200 ms in the gradient all-reduce (a DDP comm hook: vit_tiny's gradients are one bucket)
    moves into exposed synchronisation, not compute or data; 200 ms in the loader into data wait.
    (A delay far above what a shared 2-core machine moves medians by between runs: with 100 ms,
    a full suite with a benchmark beside it measured 123 ms of added exposed synchronisation, the
    ranks waiting for a core as well as for the delay. Within 20 % of 200 ms, and a misplaced
    delay still moves another part by all of it.)"""
    delay = 0.2
    base = breakdown_of(dataset, 2)
    synced = breakdown_of(dataset, 2, **{faults.SYNC_DELAY_ENV: str(delay)})
    loaded = breakdown_of(dataset, 2, **{faults.DATA_DELAY_ENV: str(delay)})
    assert synced["sync_exposed_s"] - base["sync_exposed_s"] == pytest.approx(delay, rel=0.2)
    assert abs(synced["compute_s"] - base["compute_s"]) < 0.2 * delay
    assert abs(synced["data_wait_s"] - base["data_wait_s"]) < 0.2 * delay
    assert loaded["data_wait_s"] - base["data_wait_s"] == pytest.approx(delay, rel=0.2)
    assert abs(loaded["sync_exposed_s"] - base["sync_exposed_s"]) < 0.2 * delay


@pytest.mark.slow
def test_a_slow_rank_is_waiting_and_a_slow_all_reduce_is_communication(dataset):
    """200 ms before rank 1's backward every step: rank 0 waits for it in the all-reduce, so
    sync_wait_s grows by ~200 ms and sync_comm_s does not; 200 ms inside the all-reduce (the comm
    hook, after the join): the reverse. Overlap stays in [0, 100] % either way. (Steps of a few
    ms: 200 ms is far above what a busy 2-core machine moves medians by; the part a delay does not
    belong to may move by 20 % of it, 40 ms, as 21 ms were seen with benchmarks beside the suite,
    while a misplaced delay would move it by all 200 ms.)"""
    delay = 0.2
    base = breakdown_of(dataset, 2)
    slow_rank = breakdown_of(dataset, 2, **{faults.RANK_DELAY_ENV: str(delay), faults.RANK_DELAY_RANK_ENV: "1"})
    slow_sync = breakdown_of(dataset, 2, **{faults.SYNC_DELAY_ENV: str(delay)})
    assert slow_rank["sync_wait_s"] - base["sync_wait_s"] == pytest.approx(delay, rel=0.2)
    assert abs(slow_rank["sync_comm_s"] - base["sync_comm_s"]) < 0.2 * delay
    assert slow_sync["sync_comm_s"] - base["sync_comm_s"] == pytest.approx(delay, rel=0.2)
    assert abs(slow_sync["sync_wait_s"] - base["sync_wait_s"]) < 0.2 * delay
    for summary in (base, slow_rank, slow_sync):
        assert 0 <= summary["overlap_pct"] <= 100
        assert summary["sync_wait_s"] + summary["sync_comm_s"] == pytest.approx(summary["sync_exposed_s"])
