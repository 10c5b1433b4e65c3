"""The framework registry: one frozen entry per framework, holding everything the workflow, the
launcher and the analysis must know about it, so that nothing else branches on a framework's name.

A new framework is a backend under scalesweep/train/ (one module or one folder) and one entry in
FRAMEWORKS naming it (docs/trainers.md, "A new framework, file by file"); the schema, the rules
(workflow/rules/train.smk, max_batch.smk), the launcher and the checks read the entries.
tests/test_frameworks.py checks that each entry's models are what its trainer builds, and that no
framework name is compared as a string elsewhere.

Standard library only, Python 3.8: the trainers import it inside the course's containers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional, Tuple

# How a run's trainer processes start. torchrun starts one process per GPU, on every node of the
# run; a single process drives every GPU of its one node itself (TensorFlow's MirroredStrategy).
PROCESS_PER_GPU = "process per GPU"
SINGLE_PROCESS = "single process"
LAUNCHERS = (PROCESS_PER_GPU, SINGLE_PROCESS)


@dataclass(frozen=True)
class TrainerOption:
    """A run setting that only this framework's trainer takes: `--flag value`, or for a
    `switch` the bare `--flag` when the setting is true and nothing when false. An option added
    after runs were measured gives `unsaid_at` (its trainer's default): at that value it adds no
    words (settings made before it, without it, are at it), so the commands of the runs already
    measured stay the same (Snakemake reruns a job whose command changed)."""

    setting: str
    flag: str
    switch: bool = False
    unsaid_at: object = None

    def words(self, settings) -> list:
        if self.unsaid_at is not None and settings.get(self.setting, self.unsaid_at) == self.unsaid_at:
            return []
        value = settings[self.setting]
        if self.switch:
            return [self.flag] if value else []
        return [self.flag, str(value)]


# The program under scripts/ that runs a framework's backend by the framework's name
# (`train.py NAME OPTIONS...`), for a framework without a program of its own.
GENERIC_TRAINER_SCRIPT = "train.py"

# DistributedDataParallel's own default bucket size (torch.nn.parallel.DistributedDataParallel,
# bucket_cap_mb=25 in torch 2.4 and later): the trainer's default and the schema's.
DDP_BUCKET_CAP_MB = 25


@dataclass(frozen=True)
class Framework:
    """One framework. `models`: model name -> its built-in {"per_gpu_batch", "base_lr"} (the
    config's `models:` section overrides them); `version_key`: the key of the header's `versions`
    that gives the framework's version; `fp32_dtype`: the peak an fp32 run's MFU is measured
    against (contract/hardware.py); `model_aliases`: the reference logs' model names -> ours;
    `reference_log_format`: the scalesweep/logs/formats/ module reading this framework's reference
    logs, if any; `shards_before_batching`: the trainer splits the images over the ranks before
    batching (epoch_steps); `single_node_reason`: why a framework that does not run across nodes stops at one
    (the matrix's `<name>-single-node` exclusion says it); `conda_env`: the rule's conda
    environment file, relative to the repository.

    `backend`: the trainer's module, run as `python -m <backend>` (scalesweep/train/tf_backend/, a
    package with a __main__.py, or one module). `trainer_script`: the program under scripts/ a
    job runs, kept for the frameworks that had one before the backends moved into the package (a
    job whose command changed is rerun by Snakemake); a framework without one runs as
    `scripts/train.py <name>`, which runs its backend (trainer_argv)."""

    name: str
    backend: str
    launcher: str
    multinode: bool
    dataset_formats: Tuple[str, ...]
    models: Mapping[str, Mapping[str, float]]
    version_key: str
    fp32_dtype: str = "fp32"
    model_aliases: Mapping[str, str] = field(default_factory=dict)
    trainer_options: Tuple[TrainerOption, ...] = ()
    reference_log_format: Optional[str] = None
    single_node_reason: str = ""
    conda_env: Optional[str] = None
    shards_before_batching: bool = False
    trainer_script: Optional[str] = None

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"framework {self.name!r}: the name must be an identifier (it names rules and folders)")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"framework {self.name}: launcher {self.launcher!r} is not one of {LAUNCHERS}")
        if self.multinode and self.launcher != PROCESS_PER_GPU:
            raise ValueError(f"framework {self.name}: only a process-per-GPU launcher runs across nodes")
        if not self.multinode and not self.single_node_reason:
            raise ValueError(f"framework {self.name}: say why it stops at one node (single_node_reason)")
        # Read-only all the way down: an entry is shared by every caller in the process.
        frozen = {model: MappingProxyType(dict(defaults)) for model, defaults in self.models.items()}
        object.__setattr__(self, "models", MappingProxyType(frozen))
        object.__setattr__(self, "model_aliases", MappingProxyType(dict(self.model_aliases)))

    @property
    def model_names(self) -> Tuple[str, ...]:
        return tuple(self.models)

    @property
    def trainer_argv(self) -> Tuple[str, ...]:
        """The words before the trainer's options, the first a program under scripts/: its own
        program, or the generic one and the framework's name."""
        return (self.trainer_script,) if self.trainer_script else (GENERIC_TRAINER_SCRIPT, self.name)

    @property
    def one_process_per_gpu(self) -> bool:
        return self.launcher == PROCESS_PER_GPU

    def epoch_steps(self, train_images: int, world_size: int, per_gpu_batch: int) -> int:
        """Optimizer steps of one epoch; both trainers drop the last partial batch. A sharding
        trainer (`shards_before_batching`: DDP's DistributedSampler, then each rank's loader)
        drops the tail that does not split over the ranks first, then each rank's partial batch;
        the others batch the whole set globally."""
        if self.shards_before_batching:
            return (train_images // world_size) // per_gpu_batch
        return train_images // (world_size * per_gpu_batch)


# The ResNet/ViT-H batches are safe starting points for 40-80 GB cards; the course book's
# TensorFlow chapter fits 2048 (ResNet50V2) and 1024 (ResNet152V2) images per 64 GB H100 at 128 px.
# The base learning rate is scaled by the GPU count in the trainers, as the book's scripts do.
FRAMEWORKS = (
    Framework(
        name="tensorflow",
        backend="scalesweep.train.tf_backend",
        trainer_script="train_tf.py",
        launcher=SINGLE_PROCESS,
        multinode=False,
        single_node_reason="MirroredStrategy runs on one node",
        # CIFAR-10 python pickles, as the book's TensorFlow experiment reads (docs/reference.md §1).
        dataset_formats=("cifar10",),
        models={
            "resnet50v2": {"per_gpu_batch": 256, "base_lr": 0.01},
            "resnet101v2": {"per_gpu_batch": 128, "base_lr": 0.01},
            "resnet152v2": {"per_gpu_batch": 128, "base_lr": 0.01},
            "mobilenetv3small": {"per_gpu_batch": 64, "base_lr": 0.01},
            "cnn_small": {"per_gpu_batch": 32, "base_lr": 0.01},
        },
        version_key="tensorflow",
        # TensorFlow runs fp32 matmuls as TF32 on Ampere and later by default (hardware.py).
        fp32_dtype="tf32",
        reference_log_format="keras",
        conda_env="envs/tensorflow.yaml",
    ),
    Framework(
        name="pytorch",
        backend="scalesweep.train.torch_backend",
        trainer_script="train_torch.py",
        launcher=PROCESS_PER_GPU,
        multinode=True,
        # train/<class>/*.jpeg image folders, as the book's DDP experiment reads (docs/reference.md §2).
        dataset_formats=("imagefolder",),
        models={
            "vit_h_14": {"per_gpu_batch": 64, "base_lr": 0.001},
            "resnet50": {"per_gpu_batch": 128, "base_lr": 0.01},
            "resnet18": {"per_gpu_batch": 64, "base_lr": 0.01},
            "vit_tiny": {"per_gpu_batch": 32, "base_lr": 0.01},
        },
        version_key="torch",
        # PyTorch leaves TF32 matmuls off by default: fp32 is measured against the FP32 peak.
        fp32_dtype="fp32",
        model_aliases={"vit": "vit_h_14"},
        trainer_options=(
            TrainerOption("nodes", "--nodes"),
            TrainerOption("num_workers", "--num-workers"),
            TrainerOption("channels_last", "--channels-last", switch=True),
            # DistributedDataParallel's knobs: gradient bucket size, gradients as views of the
            # buckets, and a graph that does not change between steps.
            TrainerOption("bucket_cap_mb", "--bucket-cap-mb", unsaid_at=DDP_BUCKET_CAP_MB),
            TrainerOption("gradient_as_bucket_view", "--gradient-as-bucket-view", switch=True, unsaid_at=False),
            TrainerOption("static_graph", "--static-graph", switch=True, unsaid_at=False),
        ),
        reference_log_format="ddp",
        conda_env="envs/pytorch.yaml",
        shards_before_batching=True,
    ),
)

NAMES = tuple(framework.name for framework in FRAMEWORKS)
_BY_NAME = {framework.name: framework for framework in FRAMEWORKS}
if len(_BY_NAME) != len(FRAMEWORKS):
    raise ValueError(f"two frameworks share a name: {NAMES}")


class UnknownFramework(KeyError):
    """A framework name no entry has."""

    def __str__(self):
        return str(self.args[0])


def get(name) -> Framework:
    """The entry named `name`; an unknown name is an error naming the known ones."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise UnknownFramework(f"unknown framework {name!r} (known: {', '.join(NAMES)})") from None


def find(name) -> Optional[Framework]:
    """The entry named `name`, or None (a log may name a framework no entry has)."""
    return _BY_NAME.get(name) if isinstance(name, str) else None


def with_reference_log_format(fmt: str) -> Framework:
    """The framework whose reference logs `fmt` (a module of scalesweep/logs/formats/) reads."""
    for framework in FRAMEWORKS:
        if framework.reference_log_format == fmt:
            return framework
    raise UnknownFramework(f"no framework writes reference logs of format {fmt!r}")


def trainer_only_settings() -> Tuple[str, ...]:
    """The settings some framework's trainer takes and another's does not (`nodes` aside: every
    run has a node count), in registry order."""
    own = [{option.setting for option in framework.trainer_options} for framework in FRAMEWORKS]
    everyone = set.intersection(*own) if own else set()
    return tuple(dict.fromkeys(option.setting for framework in FRAMEWORKS
                               for option in framework.trainer_options
                               if option.setting not in everyone and option.setting != "nodes"))


def takes(framework: Framework, setting: str) -> bool:
    """Whether the framework's trainer takes `setting` as an option of its own."""
    return any(option.setting == setting for option in framework.trainer_options)


def all_model_names() -> Tuple[str, ...]:
    """Every framework's models, sorted."""
    return tuple(sorted({model for framework in FRAMEWORKS for model in framework.models}))


def network_probe_framework() -> Framework:
    """The framework whose environment runs the network probe: scripts/probe_network.py
    (scalesweep/train/torch_backend/network_probe.py) all-reduces with torch.distributed, whichever
    framework the sweep's runs use."""
    return get("pytorch")
