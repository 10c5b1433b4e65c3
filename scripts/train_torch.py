"""PyTorch DDP image-classification trainer of the scaling sweep (reference experiment B).

Launched by torchrun, one process per GPU (options after the script path belong to the script):

    torchrun --standalone --nproc-per-node 2 scripts/train_torch.py --model vit_tiny \
        --data DATASET --gpus 2 --resolution 32 --epochs 3 --per-gpu-batch 16

`python scripts/train_torch.py ...` without torchrun is a one-process run (world size 1, no
process group): the `--gpus 0` CPU baseline. Without CUDA, gloo processes on the CPU stand in for
GPUs and run the same code. Rank 0 prints the reference's human log lines and the
`:::SCALESWEEP` records of docs/records.md. Exit status: 0 when the run finished or ran out of
memory (summary status ok / oom), non-zero on any other failure (summary status failed).
"""

import argparse
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass

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
from torch.utils.data import DataLoader, DistributedSampler, Subset  # noqa: E402
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


def gather_device_names(device: torch.device) -> list[str]:
    """One entry per rank, in rank order."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
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
        "nccl": None,
    }
    # CUDA and NCCL are reported only when the run used them; a CUDA build of torch on a CPU run
    # says nothing about the run.
    if device.type == "cuda":
        versions["cuda"] = torch.version.cuda
        nccl = torch.cuda.nccl.version()
        versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return versions


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


def steps_per_epoch(num_images: int, world_size: int, per_gpu_batch: int) -> int:
    """Optimizer steps per epoch: the sampler drops the tail that does not split evenly over ranks,
    the loader drops each rank's last partial batch."""
    return (num_images // world_size) // per_gpu_batch


def make_loader(dataset, batch_size: int, sampler, num_workers: int, device: torch.device, train: bool):
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=device.type == "cuda",
        drop_last=train,
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


def inject_failure(mode: str | None) -> None:
    """Raise what the SCALESWEEP_FAIL_INJECT hook resolved to ("oom", "crash" or None)."""
    if mode == "oom":
        raise torch.OutOfMemoryError(f"injected out-of-memory error ({runlog.FAIL_INJECT_ENV}=oom)")
    if mode == "crash":
        raise RuntimeError(f"injected crash ({runlog.FAIL_INJECT_ENV}=crash)")


def device_memory_gb(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_reserved(device) / 2**30, 3)


# ---------------------------------------------------------------- training


class Trainer:
    """Holds the run's data, model and optimizer; fit() trains, evaluate() validates."""

    def __init__(self, args: argparse.Namespace, world: World, device: torch.device, console: Console):
        self.args, self.world, self.device, self.console = args, world, device, console
        self.epochs: list[dict] = []
        # Resolved once per run: "oom-above:N" depends on the per-GPU batch, "oom-once" on the
        # attempt (this trainer makes one).
        self.injected = runlog.injected_failure(runlog.fail_inject_mode(), args.per_gpu_batch)
        self.memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.dtype = autocast_dtype(args.precision)
        self.global_batch = args.per_gpu_batch * world.world_size
        self.lr = scaled_learning_rate(args.base_lr, world.world_size)
        self._build_data()
        self._build_model()

    def _build_data(self) -> None:
        full = load_split(self.args.data, "train", self.args.resolution)
        self.classes = full.classes
        indices = subset_indices(len(full), self.args.max_train_images, self.args.seed)
        self.train_set = full if len(indices) == len(full) else Subset(full, indices)
        self.steps = steps_per_epoch(len(self.train_set), self.world.world_size, self.args.per_gpu_batch)
        if self.steps == 0:
            raise ValueError(
                f"{len(self.train_set)} training images in {self.args.data} give no full step of "
                f"{self.args.per_gpu_batch} images on each of {self.world.world_size} processes: "
                "lower --per-gpu-batch or use more images"
            )
        self.sampler = make_train_sampler(self.train_set, self.world, self.args.seed)
        self.loader = make_loader(
            self.train_set, self.args.per_gpu_batch, self.sampler, self.args.num_workers,
            self.device, train=True,
        )

    def _build_model(self) -> None:
        # Same seed on every rank; DDP also broadcasts rank 0's weights when it wraps the model.
        torch.manual_seed(self.args.seed)
        model = build_model(self.args.model, len(self.classes), self.args.resolution)
        self.module = model.to(self.device, memory_format=self.memory_format)
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

    def _train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns [loss sum, correct, images] of the batch, still on device."""
        with self._autocast():
            logits = self.model(images)
            loss = self.criterion(logits, labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        correct = (logits.argmax(dim=1) == labels).sum()
        count = labels.new_tensor(labels.numel())
        return torch.stack([loss.detach().double() * labels.numel(), correct.double(), count.double()])

    def epoch_batches(self, epoch: int):
        """The epoch's batches. set_epoch first, or every epoch repeats the first one's order
        (the reference forgot it)."""
        self.sampler.set_epoch(epoch)
        return iter(self.loader)

    def _train_epoch(self, epoch: int) -> dict:
        self.model.train()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        steps = 0
        synchronize(self.device)
        start = time.perf_counter()
        for images, labels in self.epoch_batches(epoch):
            if epoch == 1 and steps == 0:
                inject_failure(self.injected)
            totals += self._train_step(*self._to_device(images, labels))
            steps += 1
        synchronize(self.device)
        seconds = time.perf_counter() - start
        # Loss and accuracy over all ranks' images, reduced after the clock stopped.
        loss_sum, correct, count = all_reduce_sum(totals).tolist()
        images = steps * self.global_batch
        return runlog.epoch_record(epoch, images, seconds, loss_sum / count, correct / count)

    def fit(self) -> list[dict]:
        for epoch in range(1, self.args.epochs + 1):
            self.console.info(f"[EPOCH: {epoch}] Starting training loop...")
            record = self._train_epoch(epoch)
            self.epochs.append(record)
            self.console.record(record)
            rate = record["throughput_img_s"]
            self.console.info(f"[EPOCH: {epoch}] Training throughput: {rate:.3f} imgs/s")
        return self.epochs

    def evaluate(self) -> dict:
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
        return eval_record(self.args.epochs, int(count), seconds, loss_sum / count, correct / count)


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


def header_record(
    args: argparse.Namespace,
    trainer: Trainer,
    world: World,
    device_names: list[str],
    start_timestamp: float,
) -> dict:
    return {
        "record": "header",
        "framework": "pytorch",
        "model": args.model,
        "dataset": args.dataset_name or os.path.basename(os.path.normpath(args.data)),
        "resolution": args.resolution,
        "gpus": args.gpus,
        "device_kind": "gpu" if trainer.device.type == "cuda" else "cpu",
        "world_size": world.world_size,
        "nodes": args.nodes or max(1, world.world_size // world.local_world_size),
        "per_gpu_batch": args.per_gpu_batch,
        "global_batch": trainer.global_batch,
        "learning_rate": trainer.lr,
        "precision": args.precision,
        "epochs": args.epochs,
        "images_per_epoch": trainer.steps * trainer.global_batch,
        "protocol": "epochs",
        "versions": framework_versions(trainer.device),
        "devices": device_names,
        **runlog.provenance(start_timestamp),
        **runlog.device_provenance(),
    }


def announce(console: Console, args: argparse.Namespace, trainer: Trainer, world: World) -> None:
    """The reference's `###` lines; `Total training samples (batches)` is per rank, as there."""
    console.info(f"### model_name: {args.model}")
    console.info(f"### batch_size: {args.per_gpu_batch}")
    console.info(f"### global_batch_size: {trainer.global_batch}")
    console.info(f"### world_size: {world.world_size}")
    console.info(f"### learning_rate: {trainer.lr}")
    console.info(f"### mixed_precision: {args.precision}")
    console.info(f"### Total number of parameters {trainer.num_parameters}")
    console.info(f"### Total training samples (batches): {len(trainer.sampler)} ({trainer.steps})")


def finish_lines(console: Console, summary: dict) -> None:
    console.info("Training finished!")
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


def train_and_report(
    args: argparse.Namespace, console: Console, trainer: Trainer, start: float, start_timestamp: float
) -> None:
    announce(console, args, trainer, trainer.world)
    names = gather_device_names(trainer.device)
    console.record(header_record(args, trainer, trainer.world, names, start_timestamp))
    epochs = trainer.fit()
    # Time to solution ends with the last epoch: validation is reported beside it, not inside it.
    total_time_s = time.perf_counter() - start
    if args.eval:
        result = trainer.evaluate()
        console.record(result)
        console.info(
            f"[EPOCH: {args.epochs}] Accuracy: {result['accuracy']:.3f} | "
            f"Validation throughput: {result['throughput_img_s']:.3f} imgs/s"
        )
    memory_gb = device_memory_gb(trainer.device)
    summary = runlog.summary_record("ok", epochs, total_time_s, memory_gb=memory_gb)
    console.record(summary)
    finish_lines(console, summary)


def run(args: argparse.Namespace, console: Console, start: float, start_timestamp: float) -> int:
    """Set up, train, report. Returns the exit status; out-of-memory is a measured outcome (0)."""
    device = trainer = None
    try:
        world, device = start_process(args, console)
        trainer = Trainer(args, world, device, console)
        train_and_report(args, console, trainer, start, start_timestamp)
        return 0
    except (torch.OutOfMemoryError, MemoryError) as error:
        close_with(console, "oom", error, trainer, device, start)
        return 0
    except Exception as error:
        console.print_traceback()
        close_with(console, "failed", error, trainer, device, start)
        return EXIT_FAILED
    finally:
        teardown()


def close_with(
    console: Console,
    status: str,
    error: BaseException,
    trainer: Trainer | None,
    device: torch.device | None,
    start: float,
) -> None:
    """The summary of a run that stopped early, with the epochs it finished."""
    epochs = trainer.epochs if trainer is not None else []
    reason = f"{type(error).__name__}: {error}"
    memory = device_memory_gb(device) if device is not None else None
    console.record(runlog.summary_record(status, epochs, time.perf_counter() - start, reason, memory))
    outcome = "ran out of memory" if status == "oom" else "failed"
    console.info(f"Training {outcome}: {runlog.one_line(reason)}")


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
    ):
        if value < least:
            parser.error(f"{flag} must be >= {least}, got {value}")
    if args.nodes is not None and args.nodes < 1:
        parser.error(f"--nodes must be >= 1, got {args.nodes}")
    if not math.isfinite(args.base_lr) or args.base_lr <= 0:
        parser.error(f"--base-lr must be a positive number, got {args.base_lr}")
    return args


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
