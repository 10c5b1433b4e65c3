"""PyTorch DDP image-classification trainer of the scaling sweep (reference experiment B).

Launched by torchrun, one process per GPU (options after the script path belong to the script):

    torchrun --standalone --nproc-per-node 2 scripts/train_torch.py --model vit_tiny \
        --data DATASET --gpus 2 --resolution 32 --epochs 3 --per-gpu-batch 16 [--protocol steps]

`python scripts/train_torch.py ...` without torchrun is a one-process run (world size 1, no
process group): the `--gpus 0` CPU baseline. Without CUDA, gloo processes on the CPU stand in for
GPUs and run the same code. Rank 0 prints the reference's human log lines and the
`:::SCALESWEEP` records of docs/records.md. Exit status: 0 when the run finished or ran out of
memory (summary status ok / oom), non-zero on any other failure (summary status failed).

Measurement (the same options as scripts/train_tf.py): every training step is timed from the
fetch of its batch to its device-synchronized end; the run's first --warmup-steps steps are left
out of the step statistics. --protocol epochs times whole epochs (time to solution included);
--protocol steps runs --warmup-steps then --timed-steps steps and records them as two windows.
--oom-policy halve retries an attempt that ran out of memory with half the per-GPU batch;
--find-max-batch searches the largest per-GPU batch that trains instead of training.

Out of memory under DDP: until the run's first epoch record (the steps in which the halve
policy may still retry, whatever the policy), every step runs in three parts: the batch's copy to
the device, the forward pass, and backward with the optimizer step. After each part the ranks
all-reduce an out-of-memory flag, so all stop together and take the same way out (retry, or
status oom written by rank 0), whichever rank ran out. The three small all-reduces (each a host
synchronization) are paid in epoch 1 or the warm-up window only, both outside the steady state.
A rank-local out-of-memory error inside backward's gradient all-reduce, or after the first epoch
record, leaves the other ranks waiting in a collective the failed rank never joins: that run ends
when the process group's timeout or torchrun's teardown ends it (status failed, or a log without
a summary; a rerun repeats it). Identical ranks run out at the same allocation, so in practice the
agreement covers it.
"""

import argparse
import gc
import itertools
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Iterator

# OpenMP threads that spin while they wait make a CPU run 10-30x slower as soon as anything else
# wants the same cores (measured: a laptop's 2 cores shared with data loader workers or another
# rank). Passive waiting cost nothing measurable on an idle CPU; GPU runs, whose heavy work runs on
# the device, should not notice. It must be set before torch loads its OpenMP runtime; an explicit
# setting in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, Sampler, Subset  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402
from torchvision.models.vision_transformer import VisionTransformer  # noqa: E402

import runlog  # noqa: E402

# Must equal scalesweep/catalog.py MODELS["pytorch"] (tests/test_catalog.py); scripts/ cannot
# import the package inside the training containers.
MODELS = ("vit_h_14", "resnet50", "resnet18", "vit_tiny")
# Small enough to train an epoch of a few hundred 32 px images in under a second on a laptop CPU.
VIT_TINY = {"patch_size": 8, "num_layers": 2, "num_heads": 2, "hidden_dim": 64, "mlp_dim": 128}
PATCH_SIZES = {"vit_h_14": 14, "vit_tiny": VIT_TINY["patch_size"]}
PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("sgd", "adamw")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# The reference's log prefix: `[11/14/2025 10:02:17 AM] INFO - `.
LOG_DATE_FORMAT = "%m/%d/%Y %I:%M:%S %p"
EXIT_FAILED = 1
# Measurement options shared with the TensorFlow trainer (one command builder drives both).
from runlog import (  # noqa: E402
    DEFAULT_MAX_BATCH_LIMIT,
    DEFAULT_TIMED_STEPS,
    DEFAULT_WARMUP_STEPS,
    OOM_POLICIES,
    PROBE_STEPS,
    PROTOCOLS,
)
# Batches each loader worker decodes ahead of the training step (torch's own default, made
# explicit): with --num-workers W, 2W batches wait decoded while the device trains.
PREFETCH_BATCHES_PER_WORKER = 2
OUT_OF_MEMORY = (torch.OutOfMemoryError, MemoryError)


# ---------------------------------------------------------------- distributed world and output


@dataclass(frozen=True)
class World:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(environ, names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"environment variable {name}={value!r} is not an integer") from None
    return default


def _slurm_tasks_per_node(environ) -> int | None:
    # SLURM writes per-node task counts like "4(x2)" or "4,4"; the first entry is this layout's count.
    value = environ.get("SLURM_STEP_TASKS_PER_NODE", "").strip()
    if not value:
        return None
    head = value.split(",")[0].split("(")[0]
    if not head.isdigit():
        raise ValueError(f"environment variable SLURM_STEP_TASKS_PER_NODE={value!r} is not a task count")
    return int(head)


def world_info_from_env(environ=None) -> World:
    """Rank layout from torchrun's variables, falling back to those of an `srun` step (timm's idea).

    The SLURM fallback reads the step's variables (SLURM_STEP_NUM_TASKS), not the job's
    (SLURM_NTASKS): a batch script of a multi-task job that runs the trainer directly, outside srun,
    is one process and must not wait for peers that never start.
    """
    env = os.environ if environ is None else environ
    world_size = _env_int(env, ("WORLD_SIZE", "SLURM_STEP_NUM_TASKS"), 1)
    rank = _env_int(env, ("RANK", "SLURM_PROCID"), 0)
    local_rank = _env_int(env, ("LOCAL_RANK", "SLURM_LOCALID"), 0)
    local_world_size = (
        _env_int(env, ("LOCAL_WORLD_SIZE",), 0) or _slurm_tasks_per_node(env) or world_size
    )
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"inconsistent launch environment: rank {rank} of world size {world_size}")
    if not 0 <= local_rank < local_world_size:
        raise ValueError(
            f"inconsistent launch environment: local rank {local_rank} of {local_world_size}"
        )
    return World(rank, local_rank, world_size, local_world_size)


def _rank_hint(environ=None) -> int:
    """Global rank as far as the environment tells, for reporting failures of the set-up itself."""
    env = os.environ if environ is None else environ
    try:
        return _env_int(env, ("RANK", "SLURM_PROCID"), 0)
    except ValueError:
        return 0


def is_primary(rank: int) -> bool:
    return rank == 0


def log_line(message: str, when: float | None = None) -> str:
    """`message` behind the reference's prefix, in local time as the reference prints it."""
    stamp = time.strftime(LOG_DATE_FORMAT, time.localtime(when))
    return f"[{stamp}] INFO - {message}"


class Console:
    """Every line the run prints goes through here: human lines and records from rank 0 only,
    both on stdout so they stay in order. Tracebacks are the exception: every failing rank writes
    its own to stderr, or a failure on rank 3 would leave no trace."""

    def __init__(self, rank: int):
        self.rank = rank

    def info(self, message: str) -> None:
        if is_primary(self.rank):
            print(log_line(message), flush=True)

    def record(self, record: dict) -> None:
        if is_primary(self.rank):
            runlog.emit(record)

    def print_traceback(self) -> None:
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()


def usable_cpu_count() -> int:
    """CPUs this process may run on (the affinity mask a scheduler set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_threads_per_process(cpus: int, local_world_size: int) -> int:
    return max(1, cpus // max(1, local_world_size))


def select_device(gpus: int, world: World) -> torch.device:
    """cuda:<local rank> when GPUs were asked for and CUDA works; otherwise CPU processes stand in."""
    if gpus > 0 and torch.cuda.is_available():
        visible = torch.cuda.device_count()
        if world.local_rank >= visible:
            raise RuntimeError(
                f"local rank {world.local_rank} has no GPU: {visible} visible (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}); launch at most {visible} processes "
                "per node"
            )
        return torch.device("cuda", world.local_rank)
    return torch.device("cpu")


def bind_device(device: torch.device, world: World) -> None:
    """Make `device` this process's own: its GPU, or its share of the CPU cores of the node."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(cpu_threads_per_process(usable_cpu_count(), world.local_world_size))


def init_distributed(world: World, device: torch.device) -> None:
    """Join the process group: nccl between GPUs, gloo between CPU processes."""
    if not world.distributed:
        return
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise RuntimeError(
            f"world size {world.world_size} but {' and '.join(missing)} unset: launch with torchrun, "
            "or export MASTER_ADDR/MASTER_PORT for srun-started processes"
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, rank=world.rank, world_size=world.world_size)


def synchronize(device: torch.device) -> None:
    """Wait for this rank's queued device work, then for every rank: clock reads cover all ranks."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if dist.is_available() and dist.is_initialized():
        if device.type == "cuda":
            dist.barrier(device_ids=[device.index])
        else:
            dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def ranks_flagging(flag: bool, device: torch.device) -> list[int]:
    """The ranks on which `flag` is set, known to every rank (one all-reduce)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [0] if flag else []
    flags = torch.zeros(dist.get_world_size(), dtype=torch.int32, device=device)
    flags[dist.get_rank()] = int(flag)
    dist.all_reduce(flags, op=dist.ReduceOp.SUM)
    return [rank for rank, value in enumerate(flags.tolist()) if value]


def agree_on_oom(action: Callable, device: torch.device):
    """`action()` on every rank; when any rank runs out of memory in it, every rank raises
    torch.OutOfMemoryError, so all take the same way out (retry, or status oom) and none waits
    in a collective for a rank that left.

    Every rank must call it at the same point, with no collective of its own pending inside
    `action` on a rank that failed (see the module's docstring).
    """
    reason = None
    try:
        result = action()
    except OUT_OF_MEMORY as error:
        # Only the text is kept: the traceback would hold the failed step's tensors in memory.
        result, reason = None, oom_text(error)
    failed = ranks_flagging(reason is not None, device)
    if not failed:
        return result
    if not (dist.is_available() and dist.is_initialized()):
        raise torch.OutOfMemoryError(reason)
    ranks = ("rank " if len(failed) == 1 else "ranks ") + ", ".join(map(str, failed))
    if reason is None:
        raise torch.OutOfMemoryError(f"out of memory on {ranks}; every rank stops with it")
    raise torch.OutOfMemoryError(f"{reason} (out of memory on {ranks})")


def oom_text(error: BaseException) -> str:
    """One line on an out-of-memory error; the type is named unless it is torch's own."""
    text = str(error) if isinstance(error, torch.OutOfMemoryError) else f"{type(error).__name__}: {error}"
    return runlog.one_line(text)


def gather_device_names(device: torch.device) -> list[str]:
    """One entry per rank, in rank order (GPU: `GPU:<local index> <model name>`)."""
    if device.type == "cuda":
        name = f"GPU:{device.index} {torch.cuda.get_device_name(device)}"
    else:
        name = "cpu"
    if not (dist.is_available() and dist.is_initialized()):
        return [name]
    names = [None] * dist.get_world_size()
    dist.all_gather_object(names, name)
    return names


def framework_versions(device: torch.device) -> dict:
    versions = {
        "python": runlog.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": np.__version__,
        "cuda": None,
        "cudnn": None,
        "nccl": None,
    }
    # CUDA, cuDNN and NCCL are reported only when the run used them; a CUDA build of torch on a
    # CPU run says nothing about the run.
    if device.type == "cuda":
        versions["cuda"] = torch.version.cuda
        versions["cudnn"] = torch.backends.cudnn.version()
        versions["nccl"] = nccl_version()
    return versions


def nccl_version() -> str | None:
    """The NCCL torch runs with ("2.21.5"), or None where this build cannot tell."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - provenance must never fail a run
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


class StepClock:
    """Begin and end time of every training step, 0-based over the trainer's life.

    On CUDA every reading first waits for the device: kernels run asynchronously, so without the
    wait a step would end when its kernels are queued, not done. Steps are timed per rank, with no
    barrier (that would serialize the ranks each step); DDP's gradient all-reduce already makes a
    step wait for the slowest rank.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.begins: list[float] = []
        self.ends: list[float] = []

    def read(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def begin(self) -> None:
        self.begins.append(self.read())

    def end(self) -> None:
        self.ends.append(self.read())

    @property
    def finished(self) -> int:
        return len(self.ends)

    @property
    def durations(self) -> list[float]:
        return [end - begin for begin, end in zip(self.begins, self.ends)]


# ---------------------------------------------------------------- data


def build_transform(resolution: int, train: bool) -> transforms.Compose:
    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if train:
        steps = [transforms.RandomResizedCrop(resolution), transforms.RandomHorizontalFlip()]
    else:
        steps = [transforms.Resize(resolution), transforms.CenterCrop(resolution)]
    return transforms.Compose([*steps, transforms.ToTensor(), normalize])


def load_split(root: str, split: str, resolution: int) -> datasets.ImageFolder:
    """`root/split/<class>/*.jpeg` as an ImageFolder; JPEG decoding happens in the loader workers."""
    folder = os.path.join(root, split)
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"dataset folder {folder} does not exist (expected {split}/<class>/*.jpeg)"
        )
    transform = build_transform(resolution, train=split == "train")
    try:
        return datasets.ImageFolder(folder, transform=transform)
    except (FileNotFoundError, RuntimeError) as error:
        raise FileNotFoundError(f"dataset folder {folder}: {error}") from None


def subset_indices(total: int, max_images: int, seed: int) -> list[int]:
    """Indices of the training images used: all when max_images is 0, else a seeded random pick.

    ImageFolder orders images by class, so taking the first M would drop whole classes.
    """
    if max_images < 0:
        raise ValueError(f"--max-train-images must be >= 0, got {max_images}")
    if max_images == 0 or max_images >= total:
        return list(range(total))
    picked = np.random.default_rng(seed).permutation(total)[:max_images]
    return sorted(int(index) for index in picked)


@dataclass(frozen=True)
class TrainData:
    """The training images of the run, read once: every attempt and probe samples from them."""

    train_set: object  # ImageFolder, or a Subset of it
    classes: list


def load_train_data(args: argparse.Namespace) -> TrainData:
    full = load_split(args.data, "train", args.resolution)
    indices = subset_indices(len(full), args.max_train_images, args.seed)
    train_set = full if len(indices) == len(full) else Subset(full, indices)
    return TrainData(train_set, full.classes)


def make_train_sampler(dataset, world: World, seed: int) -> DistributedSampler:
    # drop_last=True: every rank and every epoch get the same number of images, none repeated
    # (without it the sampler pads the last rank's share with duplicates).
    return DistributedSampler(
        dataset, num_replicas=world.world_size, rank=world.rank, shuffle=True, seed=seed, drop_last=True
    )


def epoch_order(sampler: DistributedSampler, epoch: int) -> list[int]:
    """The dataset indices this rank visits in `epoch`, in order (set_epoch reshuffles per epoch)."""
    sampler.set_epoch(epoch)
    return list(iter(sampler))


class RepeatingSampler(Sampler):
    """The passes of a DistributedSampler one after another, endlessly, each under its own
    set_epoch (a new shuffle and shard): one loader iterator serves any number of steps, with
    batches that may span passes, so no pipeline restart falls between the steps protocol's
    windows and a probe's batch may exceed the data set."""

    def __init__(self, sampler: DistributedSampler):
        super().__init__()
        if len(sampler) == 0:
            raise ValueError("the sampler gives this rank no image: fewer images than processes")
        self.sampler = sampler

    def __iter__(self) -> Iterator[int]:
        for epoch in itertools.count(1):
            self.sampler.set_epoch(epoch)
            yield from self.sampler


def steps_per_epoch(num_images: int, world_size: int, per_gpu_batch: int) -> int:
    """Optimizer steps per epoch: the sampler drops the tail that does not split evenly over ranks,
    the loader drops each rank's last partial batch."""
    return (num_images // world_size) // per_gpu_batch


def make_loader(dataset, batch_size: int, sampler, num_workers: int, device: torch.device, train: bool):
    """The loader of one split. ImageFolder reads and decodes a JPEG in __getitem__, so with
    workers the decoding and the transforms run in the worker processes, off the training loop."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        # Pinned host batches let the copy to the GPU run asynchronously (non_blocking=True).
        pin_memory=device.type == "cuda",
        drop_last=train,
        prefetch_factor=PREFETCH_BATCHES_PER_WORKER if num_workers > 0 else None,
        # Validation runs once; keeping its workers alive would only hold memory.
        persistent_workers=train and num_workers > 0,
    )


# ---------------------------------------------------------------- model and optimisation


def build_model(name: str, num_classes: int, resolution: int) -> nn.Module:
    patch = PATCH_SIZES.get(name)
    if patch and resolution % patch:
        raise ValueError(f"--resolution {resolution}: {name} needs a multiple of its patch size {patch}")
    if name == "vit_h_14":
        return torchvision.models.vit_h_14(weights=None, num_classes=num_classes, image_size=resolution)
    if name == "vit_tiny":
        return VisionTransformer(image_size=resolution, num_classes=num_classes, **VIT_TINY)
    if name in ("resnet50", "resnet18"):
        return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    raise ValueError(f"--model {name!r}: expected one of {', '.join(MODELS)}")


def build_optimizer(name: str, parameters, lr: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=lr)
    raise ValueError(f"--optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32."""
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def scaled_learning_rate(base_lr: float, world_size: int) -> float:
    return base_lr * max(1, world_size)


def count_parameters(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def inject_failure(mode: str | None, setting: str | None = None) -> None:
    """Raise what the SCALESWEEP_FAIL_INJECT hook resolved to ("oom", "crash" or None); `setting`
    is the variable's value ("oom-once", "oom-above:64"), for the message."""
    source = f"{runlog.FAIL_INJECT_ENV}={setting or mode}"
    if mode == "oom":
        raise torch.OutOfMemoryError(f"injected out-of-memory error ({source})")
    if mode == "crash":
        raise RuntimeError(f"injected crash ({source})")


def device_memory_gb(device: torch.device) -> float | None:
    """Peak device memory the caching allocator reserved since the attempt began, in GiB."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_reserved(device) / 2**30, 3)


def release_memory(device: torch.device, compiled: bool) -> None:
    """Give a failed attempt's or a finished probe's memory back before the next one."""
    # Model, optimizer, DDP reducer and loader workers hang together in reference cycles.
    gc.collect()
    if compiled:
        torch._dynamo.reset()  # compiled graphs hold on to the old model's parameters
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- training


class Trainer:
    """One attempt: the loader and the model at one per-GPU batch. fit() runs the epochs protocol,
    fit_steps() the steps protocol, probe() one probe of the maximum-batch finder, evaluate()
    validates."""

    def __init__(
        self,
        args: argparse.Namespace,
        world: World,
        device: torch.device,
        console: Console,
        data: TrainData,
        per_gpu_batch: int,
        attempt: int = 1,
        endless: bool = False,
    ):
        self.args, self.world, self.device, self.console = args, world, device, console
        self.classes = data.classes
        self.per_gpu_batch = per_gpu_batch
        # "oom-above:N" depends on the per-GPU batch, "oom-once" on the attempt (1-based).
        self.inject_setting = runlog.fail_inject_mode()
        self.injected = runlog.injected_failure(self.inject_setting, per_gpu_batch, attempt)
        self.memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.dtype = autocast_dtype(args.precision)
        self.global_batch = per_gpu_batch * world.world_size
        self.lr = scaled_learning_rate(args.base_lr, world.world_size)
        self.clock = StepClock(device)
        # Until the run's first epoch record every step agrees on out-of-memory across the ranks
        # (the module's docstring says why, and what it costs).
        self.guarding_oom = True
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)  # the summary reports the attempt used
        self._build_data(data.train_set, endless)
        self._build_model()

    def _build_data(self, train_set, endless: bool) -> None:
        """The epochs protocol's loader runs epoch by epoch; the endless one (steps protocol,
        probes) runs one iterator across passes."""
        self.train_set = train_set
        self.steps = steps_per_epoch(len(train_set), self.world.world_size, self.per_gpu_batch)
        if self.steps == 0 and not self.args.find_max_batch:
            raise ValueError(
                f"{len(train_set)} training images in {self.args.data} give no full step of "
                f"{self.per_gpu_batch} images on each of {self.world.world_size} processes: "
                "lower --per-gpu-batch or use more images"
            )
        self.sampler = make_train_sampler(train_set, self.world, self.args.seed)
        sampler = RepeatingSampler(self.sampler) if endless else self.sampler
        self.loader = make_loader(
            train_set, self.per_gpu_batch, sampler, self.args.num_workers, self.device, train=True
        )

    def _build_model(self) -> None:
        # Same seed on every rank; DDP also broadcasts rank 0's weights when it wraps the model.
        torch.manual_seed(self.args.seed)
        model = build_model(self.args.model, len(self.classes), self.args.resolution)
        # Agreed before DDP's constructor: its broadcast would wait for a rank that failed here.
        self.module = agree_on_oom(
            lambda: model.to(self.device, memory_format=self.memory_format), self.device
        )
        self.num_parameters = count_parameters(self.module)
        wrapped = self.module
        if self.world.distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = DistributedDataParallel(self.module, device_ids=device_ids)
        self.model = torch.compile(wrapped) if self.args.compile else wrapped
        self.optimizer = build_optimizer(self.args.optimizer, self.model.parameters(), self.lr)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.args.precision == "fp16")
        self.criterion = nn.CrossEntropyLoss()

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None)

    def _to_device(self, images: torch.Tensor, labels: torch.Tensor):
        images = images.to(self.device, non_blocking=True, memory_format=self.memory_format)
        return images, labels.to(self.device, non_blocking=True)

    def _forward(self, images: torch.Tensor, labels: torch.Tensor):
        """(logits, loss) of one batch already on the device."""
        if self.clock.finished == 0:
            inject_failure(self.injected, self.inject_setting)
        with self._autocast():
            logits = self.model(images)
            loss = self.criterion(logits, labels)
        return logits, loss

    def _update(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def _train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns [loss sum, correct, images] of the batch, still on device."""
        if self.guarding_oom:
            # Three agreed parts: DDP's forward begins with a broadcast of the model's buffers, its
            # backward all-reduces gradients; a rank out of memory in the part before must not
            # leave the others waiting there.
            images, labels = agree_on_oom(lambda: self._to_device(images, labels), self.device)
            logits, loss = agree_on_oom(lambda: self._forward(images, labels), self.device)
            agree_on_oom(lambda: self._update(loss), self.device)
        else:
            images, labels = self._to_device(images, labels)
            logits, loss = self._forward(images, labels)
            self._update(loss)
        correct = (logits.argmax(dim=1) == labels).sum()
        count = labels.new_tensor(labels.numel())
        return torch.stack([loss.detach().double() * labels.numel(), correct.double(), count.double()])

    def _run_steps(self, batches: Iterator, count: int) -> torch.Tensor:
        """`count` timed steps, each from the fetch of its batch to its synchronized end;
        [loss sum, correct, images] over them, on the device."""
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        for _ in range(count):
            self.clock.begin()
            images, labels = next(batches)
            totals += self._train_step(images, labels)
            runlog.inject_step_delay()
            self.clock.end()
        return totals

    def _window(self, number: int, steps: int, open_batches: Callable[[], Iterator], phase=None) -> dict:
        """The epoch record of `steps` steps. Its seconds run between two barriers after the
        device work, so rank 0's time covers every rank; its step statistics leave out the run's
        first --warmup-steps steps."""
        self.model.train()
        first_step = self.clock.finished
        synchronize(self.device)
        started = time.perf_counter()
        totals = self._run_steps(open_batches(), steps)
        synchronize(self.device)
        seconds = time.perf_counter() - started
        # Loss and accuracy over all ranks' images, reduced after the clock stopped.
        loss_sum, correct, count = all_reduce_sum(totals).tolist()
        stats = runlog.step_statistics(self.clock.durations[first_step:], first_step, self.args.warmup_steps)
        return runlog.epoch_record(
            number, steps * self.global_batch, seconds, loss_sum / count, correct / count,
            step_stats=stats, phase=phase,
        )

    def _commit(self, log: runlog.RunLog, record: dict) -> None:
        log.epoch(record)
        # The run is now committed to this batch: no retry, so no agreement is needed any more.
        self.guarding_oom = False

    def epoch_batches(self, epoch: int):
        """The epoch's batches. set_epoch first, or every epoch repeats the first one's order
        (the reference forgot it)."""
        self.sampler.set_epoch(epoch)
        return iter(self.loader)

    def fit(self, log: runlog.RunLog) -> None:
        """The epochs protocol: one epoch record per epoch."""
        for epoch in range(1, self.args.epochs + 1):
            self.console.info(f"[EPOCH: {epoch}] Starting training loop...")
            record = self._window(epoch, self.steps, lambda: self.epoch_batches(epoch))
            self._commit(log, record)
            rate = record["throughput_img_s"]
            self.console.info(f"[EPOCH: {epoch}] Training throughput: {rate:.3f} imgs/s")

    def fit_steps(self, log: runlog.RunLog) -> None:
        """The steps protocol: --warmup-steps steps as epoch record 1, then --timed-steps steps as
        record 2, from one loader iterator (no pipeline restart between or inside the windows)."""
        stream = iter(self.loader)
        windows = ((1, "warmup", self.args.warmup_steps), (2, "timed", self.args.timed_steps))
        for number, phase, steps in windows:
            record = self._window(number, steps, lambda: stream, phase)
            self._commit(log, record)
            self.console.info(window_line(record))

    def probe(self, steps: int) -> None:
        """`steps` training steps, agreed on out-of-memory: torch.OutOfMemoryError on every rank
        when any rank ran out."""
        self.model.train()
        self._run_steps(iter(self.loader), steps)
        synchronize(self.device)

    def evaluate(self, epoch: int) -> dict:
        """Accuracy on the val split, each rank on its own interleaved shard, without padding.

        The unwrapped module runs it: no DDP collectives, so shards of unequal length cannot hang.
        """
        val_set = load_split(self.args.data, "val", self.args.resolution)
        if val_set.classes != self.classes:
            raise ValueError(f"{self.args.data}: val classes differ from train classes")
        shard = Subset(val_set, range(self.world.rank, len(val_set), self.world.world_size))
        loader = make_loader(
            shard, self.args.eval_batch_size, None, self.args.num_workers, self.device, train=False
        )
        self.module.eval()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        synchronize(self.device)
        start = time.perf_counter()
        with torch.inference_mode(), self._autocast():
            for images, labels in loader:
                images, labels = self._to_device(images, labels)
                logits = self.module(images)
                loss = nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
                correct = (logits.argmax(dim=1) == labels).sum()
                count = totals.new_tensor(labels.numel())
                totals += torch.stack([loss.double(), correct.double(), count])
        synchronize(self.device)
        seconds = time.perf_counter() - start
        loss_sum, correct, count = all_reduce_sum(totals).tolist()
        return eval_record(epoch, int(count), seconds, loss_sum / count, correct / count)


def eval_record(epoch: int, images: int, seconds: float, loss: float, accuracy: float) -> dict:
    return {
        "record": "eval",
        "epoch": epoch,
        "images": images,
        "seconds": seconds,
        "throughput_img_s": images / seconds if seconds > 0 else None,
        "loss": loss,
        "accuracy": accuracy,
    }


def window_line(record: dict) -> str:
    """The human line of a steps-protocol window (the same as scripts/train_tf.py prints)."""
    line = f"{record['phase']} window: {record['steps']} steps, {record['seconds']:.2f} s"
    if record["phase"] == "warmup":
        return line + " (left out of the step statistics)"
    return (
        line + f", {record['throughput_img_s']:.1f} img/s, step median {record['step_time_median_s']:.4f} s, "
        f"p90 {record['step_time_p90_s']:.4f} s"
    )


# ---------------------------------------------------------------- records


def run_facts(world: World, device: torch.device, start_timestamp: float) -> dict:
    """Header keys that hold for the whole run. Every rank takes part in gathering the device
    names (a collective); the look-ups (nvidia-smi among them) run on rank 0, the one that prints."""
    names = gather_device_names(device)
    if not is_primary(world.rank):
        return {"devices": names}
    return {
        "versions": framework_versions(device),
        "devices": names,
        **runlog.device_provenance(),
        **runlog.provenance(start_timestamp),
    }


def header_record(
    args: argparse.Namespace,
    world: World,
    device: torch.device,
    data: TrainData,
    facts: dict,
    per_gpu_batch: int,
) -> dict:
    """The header of an attempt at `per_gpu_batch` (the batch the run trains with, once it is
    committed to it)."""
    global_batch = per_gpu_batch * world.world_size
    steps = steps_per_epoch(len(data.train_set), world.world_size, per_gpu_batch)
    return {
        "record": "header",
        "framework": "pytorch",
        "model": args.model,
        "dataset": args.dataset_name or os.path.basename(os.path.normpath(args.data)),
        "resolution": args.resolution,
        "gpus": args.gpus,
        "device_kind": "gpu" if device.type == "cuda" else "cpu",
        "world_size": world.world_size,
        "nodes": args.nodes or max(1, world.world_size // world.local_world_size),
        "per_gpu_batch": per_gpu_batch,
        "global_batch": global_batch,
        "requested_per_gpu_batch": args.per_gpu_batch,
        "oom_policy": args.oom_policy,
        "learning_rate": scaled_learning_rate(args.base_lr, world.world_size),
        "precision": args.precision,
        "compile": args.compile,
        "channels_last": args.channels_last,
        "num_workers": args.num_workers,
        **runlog.protocol_fields(args, global_batch, steps),
        **facts,
    }


def announce(console: Console, args: argparse.Namespace, trainer: Trainer) -> None:
    """The reference's `###` lines; `Total training samples (batches)` is per rank, as there."""
    console.info(f"### model_name: {args.model}")
    console.info(f"### batch_size: {trainer.per_gpu_batch}")
    console.info(f"### global_batch_size: {trainer.global_batch}")
    console.info(f"### world_size: {trainer.world.world_size}")
    console.info(f"### learning_rate: {trainer.lr}")
    console.info(f"### mixed_precision: {args.precision}")
    console.info(f"### Total number of parameters {trainer.num_parameters}")
    console.info(f"### Total training samples (batches): {len(trainer.sampler)} ({trainer.steps})")


def finish_lines(console: Console, summary: dict) -> None:
    console.info("Training finished!")
    # The steps protocol measures no time to solution.
    if summary["total_time_s"] is not None:
        console.info(f"Complete training Time: {summary['total_time_s']:.0f} s")
    # The reference's final throughput leaves epoch 1 out; with one epoch there is none to print.
    if summary["throughput_img_s"] is not None:
        console.info(f"Training throughput:    {summary['throughput_img_s']:.0f} imgs/s")
    if summary["memory_gb"] is not None:
        console.info(f"GPU memory reserved:    {summary['memory_gb']:.0f} GB")


def check_launch(args: argparse.Namespace, world: World) -> None:
    if args.gpus > 0 and args.gpus != world.world_size:
        raise ValueError(
            f"--gpus {args.gpus} but {world.world_size} processes were launched: "
            "start one process per GPU"
        )


def start_process(args: argparse.Namespace, console: Console) -> tuple[World, torch.device]:
    """This process's place in the run: rank, device, process group."""
    world = world_info_from_env()
    console.rank = world.rank
    check_launch(args, world)
    device = select_device(args.gpus, world)
    bind_device(device, world)
    init_distributed(world, device)
    return world, device


@dataclass(frozen=True)
class RunContext:
    """What every attempt and probe of the run shares."""

    args: argparse.Namespace
    console: Console
    world: World
    device: torch.device
    data: TrainData
    facts: dict
    log: runlog.RunLog


def train_attempt(ctx: RunContext, per_gpu_batch: int, attempt: int) -> Trainer:
    """One training run at `per_gpu_batch`; its records go to the run's log."""
    args, log = ctx.args, ctx.log
    # Pending before the model build: an out-of-memory error there still gets its header.
    log.expect(header_record(args, ctx.world, ctx.device, ctx.data, ctx.facts, per_gpu_batch))
    endless = args.protocol == "steps"
    trainer = Trainer(args, ctx.world, ctx.device, ctx.console, ctx.data, per_gpu_batch, attempt, endless)
    announce(ctx.console, args, trainer)
    if args.oom_policy == "fail":
        log.open()
    if args.protocol == "steps":
        trainer.fit_steps(log)
    else:
        trainer.fit(log)
    return trainer


def train_with_oom_policy(ctx: RunContext) -> Trainer:
    """Train; with --oom-policy halve, an attempt that runs out of memory before its first epoch
    record is retried at half the per-GPU batch, down to 1."""
    args, log = ctx.args, ctx.log
    batch, attempt = args.per_gpu_batch, 1
    while True:
        try:
            return train_attempt(ctx, batch, attempt)
        except OUT_OF_MEMORY as error:
            if not may_retry(args, log, batch):
                raise
            reason = runlog.one_line(f"{type(error).__name__}: {error}")
        # Retried outside the except block: the traceback, and the failed model with it, is gone.
        release_memory(ctx.device, args.compile)
        log.emit({"record": "oom_retry", "per_gpu_batch": batch, "next_per_gpu_batch": batch // 2,
                  "reason": reason})
        ctx.console.info(
            f"Out of memory at per-GPU batch {batch}; retrying with {batch // 2} (--oom-policy halve)"
        )
        log.oom_retries += 1
        batch, attempt = batch // 2, attempt + 1


def may_retry(args: argparse.Namespace, log: runlog.RunLog, batch: int) -> bool:
    return args.oom_policy == "halve" and batch > 1 and not log.header_emitted


def probe_fits(ctx: RunContext, per_gpu_batch: int, attempt: int) -> bool:
    """Whether PROBE_STEPS training steps at `per_gpu_batch` run on every rank without running out
    of memory."""
    try:
        run_probe(ctx, per_gpu_batch, attempt)
        note = "fits"
    except OUT_OF_MEMORY as error:
        note = f"runs out of memory ({runlog.one_line(f'{type(error).__name__}: {error}')})"
    release_memory(ctx.device, ctx.args.compile)
    ctx.console.info(f"max batch: per-GPU batch {per_gpu_batch} {note}")
    return note == "fits"


def run_probe(ctx: RunContext, per_gpu_batch: int, attempt: int) -> None:
    """One probe; its model and loader go with this frame, before the next probe builds its own."""
    trainer = Trainer(
        ctx.args, ctx.world, ctx.device, ctx.console, ctx.data, per_gpu_batch, attempt, endless=True
    )
    trainer.probe(PROBE_STEPS)


def find_max_batch(ctx: RunContext) -> dict:
    """Search the largest per-GPU batch that trains; emits the `max_batch` record."""
    args, log = ctx.args, ctx.log
    log.expect(header_record(args, ctx.world, ctx.device, ctx.data, ctx.facts, args.per_gpu_batch))
    log.open()
    attempts = itertools.count(1)
    result = runlog.search_max_batch(
        lambda batch: probe_fits(ctx, batch, next(attempts)), args.per_gpu_batch, args.max_batch_limit
    )
    log.emit({"record": "max_batch", **result, "max_batch_limit": args.max_batch_limit,
              "probe_steps": PROBE_STEPS, "resolution": args.resolution, "precision": args.precision,
              "compile": args.compile})
    limit_note = ""
    if result["limit_reached"]:
        limit_note = f" (the --max-batch-limit {args.max_batch_limit} was reached)"
    ctx.console.info(f"max batch: largest per-GPU batch that trains: {result['per_gpu_batch']}{limit_note}")
    return result


def time_to_solution(args: argparse.Namespace, start: float) -> float | None:
    """Seconds since the run started; None under the steps protocol, which measures throughput."""
    if args.protocol == "steps" and not args.find_max_batch:
        return None
    return time.perf_counter() - start


def train_and_report(ctx: RunContext, start: float) -> None:
    trainer = train_with_oom_policy(ctx)
    # Time to solution ends with the last epoch: validation is reported beside it, not inside it.
    total_time_s = time_to_solution(ctx.args, start)
    if ctx.args.eval:
        result = trainer.evaluate(len(ctx.log.epochs))
        ctx.log.emit(result)
        ctx.console.info(
            f"[EPOCH: {result['epoch']}] Accuracy: {result['accuracy']:.3f} | "
            f"Validation throughput: {result['throughput_img_s']:.3f} imgs/s"
        )
    summary = ctx.log.close("ok", total_time_s, memory_gb=peak_memory_or_none(ctx.device))
    finish_lines(ctx.console, summary)


def search_and_report(ctx: RunContext, start: float) -> None:
    args = ctx.args
    status, reason = "ok", None
    if find_max_batch(ctx)["per_gpu_batch"] is None:
        status = "oom"
        reason = f"no per-GPU batch fits, not even 1 ({args.resolution} px, {args.precision})"
    ctx.log.close(status, time_to_solution(args, start), reason, peak_memory_or_none(ctx.device))


def run(args: argparse.Namespace, console: Console, start: float, start_timestamp: float) -> int:
    """Set up, train (or search the maximum batch), report; always close the log with a summary.
    Returns the exit status; out-of-memory is a measured outcome (0)."""
    log = runlog.RunLog(console.record)
    device = None
    try:
        world, device = start_process(args, console)
        data = load_train_data(args)
        facts = run_facts(world, device, start_timestamp)
        ctx = RunContext(args, console, world, device, data, facts, log)
        if args.find_max_batch:
            search_and_report(ctx, start)
        else:
            train_and_report(ctx, start)
        return 0
    except OUT_OF_MEMORY as error:
        reason = oom_reason(args, log, error)
        close_early(console, log, "oom", reason, device, time_to_solution(args, start))
        return 0
    except Exception as error:
        console.print_traceback()
        reason = f"{type(error).__name__}: {error}"
        close_early(console, log, "failed", reason, device, time_to_solution(args, start))
        return EXIT_FAILED
    finally:
        teardown()


def oom_reason(args: argparse.Namespace, log: runlog.RunLog, error: BaseException) -> str:
    batch = log.header["per_gpu_batch"] if log.header else args.per_gpu_batch
    halvings = f" after {log.oom_retries} halving(s) from {args.per_gpu_batch}" if log.oom_retries else ""
    return (f"out of memory at per-GPU batch {batch}{halvings} ({args.resolution} px, {args.precision}): "
            f"{type(error).__name__}: {error}")


def close_early(
    console: Console, log: runlog.RunLog, status: str, reason: str, device: torch.device | None, total_time_s
) -> None:
    """The summary of a run that stopped early, with the epochs it finished."""
    log.close(status, total_time_s, reason, peak_memory_or_none(device))
    outcome = "ran out of memory" if status == "oom" else "failed"
    console.info(f"Training {outcome}: {runlog.one_line(reason)}")


def peak_memory_or_none(device: torch.device | None) -> float | None:
    # The summary must get out even when the failure left the device unusable.
    try:
        return device_memory_gb(device) if device is not None else None
    except Exception:  # noqa: BLE001 - any error here would hide the run's own failure
        return None


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------- command line


def parse_args(argv=None) -> argparse.Namespace:
    # allow_abbrev=False: a prefix of one option must never silently mean another.
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    add = parser.add_argument
    add("--model", choices=MODELS, help="model to train (see --list-models)")
    add("--data", help="dataset folder with train/<class>/*.jpeg and val/<class>/*.jpeg")
    add("--dataset-name", help="dataset name for the records (default: the folder's name)")
    add("--resolution", type=int, default=224, help="training resolution in px (default 224)")
    add("--gpus", type=int, default=0, help="GPUs asked for, all nodes together; 0 = CPU baseline")
    add("--nodes", type=int, help="nodes of the run (default: WORLD_SIZE / LOCAL_WORLD_SIZE)")
    add("--per-gpu-batch", type=int, default=64, help="images per process per step (default 64)")
    add("--eval-batch-size", type=int, default=128, help="images per process per eval step")
    add("--base-lr", type=float, default=0.01, help="learning rate of one process (x world size)")
    add("--epochs", type=int, default=5, help="epochs to train (default 5)")
    add("--max-train-images", type=int, default=0, help="cap on training images, 0 = all")
    add("--precision", choices=PRECISIONS, default="fp32", help="fp32, or bf16/fp16 autocast")
    add("--compile", action="store_true", help="torch.compile the model")
    add("--channels-last", action="store_true", help="channels-last memory format")
    add("--num-workers", type=int, default=2, help="loader workers per process (default 2)")
    add("--optimizer", choices=OPTIMIZERS, default="sgd", help="sgd (momentum 0.9) or adamw")
    add("--seed", type=int, default=0, help="random seed (default 0)")
    add("--eval", action="store_true", help="run validation after the last epoch")
    add("--protocol", choices=PROTOCOLS, default="epochs",
        help="epochs: time whole epochs; steps: --warmup-steps then --timed-steps steps")
    add("--warmup-steps", type=int, default=DEFAULT_WARMUP_STEPS,
        help=f"first steps of the run, left out of the step statistics (default {DEFAULT_WARMUP_STEPS})")
    add("--timed-steps", type=int, default=DEFAULT_TIMED_STEPS,
        help=f"timed steps of the steps protocol (default {DEFAULT_TIMED_STEPS})")
    add("--oom-policy", choices=OOM_POLICIES, default="fail",
        help="out of memory: fail (status oom) or halve the per-GPU batch and retry, down to 1")
    add("--find-max-batch", action="store_true",
        help="search the largest per-GPU batch that trains, from --per-gpu-batch up")
    add("--max-batch-limit", type=int, default=DEFAULT_MAX_BATCH_LIMIT,
        help=f"largest per-GPU batch the search tries (default {DEFAULT_MAX_BATCH_LIMIT})")
    add("--list-models", action="store_true", help="print the model names and exit")
    args = parser.parse_args(argv)
    if args.list_models:
        return args
    for flag, value in (("--model", args.model), ("--data", args.data)):
        if value is None:
            parser.error(f"{flag} is required")
    for flag, value, least in (
        ("--resolution", args.resolution, 1),
        ("--gpus", args.gpus, 0),
        ("--per-gpu-batch", args.per_gpu_batch, 1),
        ("--eval-batch-size", args.eval_batch_size, 1),
        ("--epochs", args.epochs, 1),
        ("--max-train-images", args.max_train_images, 0),
        ("--num-workers", args.num_workers, 0),
        ("--warmup-steps", args.warmup_steps, 0),
        ("--timed-steps", args.timed_steps, 1),
        ("--max-batch-limit", args.max_batch_limit, 1),
    ):
        if value < least:
            parser.error(f"{flag} must be >= {least}, got {value}")
    _check_measurement_args(parser, args)
    if args.nodes is not None and args.nodes < 1:
        parser.error(f"--nodes must be >= 1, got {args.nodes}")
    if not math.isfinite(args.base_lr) or args.base_lr <= 0:
        parser.error(f"--base-lr must be a positive number, got {args.base_lr}")
    return args


def _check_measurement_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.protocol == "steps" and args.warmup_steps < 1:
        parser.error("--protocol steps needs --warmup-steps of at least 1: the first step holds "
                     "the model's first allocations, compilation and the loader's first fill")
    if args.find_max_batch and args.max_batch_limit < args.per_gpu_batch:
        parser.error(f"--max-batch-limit {args.max_batch_limit} is below the starting "
                     f"--per-gpu-batch {args.per_gpu_batch}")
    if args.find_max_batch and args.eval:
        parser.error("--eval does not go with --find-max-batch: the search trains no model to validate")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list_models:
        print("\n".join(MODELS))
        return 0
    # Time to solution starts before data loading, model build and the process-group rendezvous.
    start = time.perf_counter()
    start_timestamp = time.time()
    console = Console(_rank_hint())
    # SLURM's time limit and scancel send SIGTERM: end with a `failed` summary saying so.
    runlog.raise_on_sigterm()
    return run(args, console, start, start_timestamp)


if __name__ == "__main__":
    sys.exit(main())
