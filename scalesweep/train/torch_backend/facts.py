"""What a PyTorch run's header says about the stack and the node it ran on (docs/records.md):
versions, device names, provenance. Never fails a run: an unknown fact is null."""

from __future__ import annotations

import numpy as np
import torch
import torchvision

from scalesweep.train.common import node
from scalesweep.train.torch_backend.distributed import World, gather_device_names, is_primary


def framework_versions(device: torch.device) -> dict:
    # CUDA, cuDNN and NCCL are reported only when the run used them; a CUDA build of torch on a
    # CPU run says nothing about the run.
    cuda = device.type == "cuda"
    return {
        "python": node.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": np.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": nccl_version() if cuda else None,
    }


def nccl_version() -> str | None:
    """The NCCL torch runs with ("2.21.5"), or None where this build cannot tell."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - provenance must never fail a run
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def run_facts(world: World, device: torch.device, start_timestamp: float) -> dict:
    """Header keys that hold for the whole run. Every rank takes part in gathering the device
    names (a collective); the look-ups (nvidia-smi among them) run on rank 0, the one that prints."""
    names = gather_device_names(device)
    if not is_primary(world.rank):
        return {"devices": names}
    return {
        "versions": framework_versions(device),
        "devices": names,
        **node.device_provenance(),
        **node.provenance(start_timestamp),
        **node.thread_fields(torch.get_num_threads()),
    }
