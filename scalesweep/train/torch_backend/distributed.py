"""The PyTorch trainer's devices and distributed world (after timm's utils/distributed.py):
the rank layout from torchrun's or srun's variables, one device per process, the process group,
the few collectives the trainer needs, and rank-0-only output.

Out of memory under DDP: a rank that runs out of memory alone would leave the others waiting in
the next collective; agree_on_oom() makes every rank stop together instead (trainer.py's
docstring says where the trainer uses it).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from scalesweep.train.common import node, runlog

# The reference's log prefix: `[11/14/2025 10:02:17 AM] INFO - `.
LOG_DATE_FORMAT = "%m/%d/%Y %I:%M:%S %p"
OUT_OF_MEMORY = (torch.OutOfMemoryError, MemoryError)


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


def rank_hint(environ=None) -> int:
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
    its own to stderr (the harness does), or a failure on rank 3 would leave no trace."""

    def __init__(self, rank: int):
        self.rank = rank

    def info(self, message: str) -> None:
        if is_primary(self.rank):
            print(log_line(message), flush=True)

    def record(self, record: dict) -> None:
        if is_primary(self.rank):
            runlog.emit(record)


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
        torch.set_num_threads(cpu_threads_per_process(node.usable_cpu_count(), world.local_world_size))


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


def energy_slots(joules: list, world: World, device: torch.device) -> torch.Tensor:
    """One slot per rank holding this rank's joules (NaN when unknown), zeros elsewhere: summed
    over the ranks, every slot holds its rank's value (scalesweep/train/common/energy.py)."""
    slots = torch.zeros(world.world_size, dtype=torch.float64, device=device)
    value = joules[0] if joules and joules[0] is not None else float("nan")
    slots[world.rank] = value
    return slots


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


def check_launch(gpus: int, world: World) -> None:
    if gpus > 0 and gpus != world.world_size:
        raise ValueError(
            f"--gpus {gpus} but {world.world_size} processes were launched: start one process per GPU"
        )


def start_process(gpus: int, console: Console) -> tuple[World, torch.device]:
    """This process's place in the run: rank, device, process group."""
    world = world_info_from_env()
    console.rank = world.rank
    check_launch(gpus, world)
    device = select_device(gpus, world)
    bind_device(device, world)
    init_distributed(world, device)
    return world, device


# How long a rank leaving the gloo group waits for the others (they are normally there within
# milliseconds; a rank that died is not waited for longer than this), and then without the GIL.
TEARDOWN_BARRIER_S = 30
GLOO_SETTLE_S = 0.2


def teardown() -> None:
    """Leave the process group. Gloo (torch 2.4, NGC PyTorch 24.07) can deadlock here: its
    destructor joins its worker threads holding the GIL, while a worker still releases the last
    all-reduce's work, whose tensors need the GIL to free their Python objects (seen with gdb:
    `~ProcessGroupGloo` in `thread::join`, the worker in `~AsyncAllreduceWork` in
    `gil_scoped_acquire`; it hung 6 of 27 two-process CPU runs here). So the ranks meet first
    (monitored_barrier: gloo's barrier with a timeout, a dead peer costs at most
    TEARDOWN_BARRIER_S), then sleep GLOO_SETTLE_S, which releases the GIL for the workers to finish."""
    if dist.is_available() and dist.is_initialized():
        if dist.get_backend() == "gloo":
            with contextlib.suppress(RuntimeError):
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=TEARDOWN_BARRIER_S))
            time.sleep(GLOO_SETTLE_S)
        dist.destroy_process_group()
