"""The PyTorch trainer's models and optimizers by registry name (trainer.py), and the
autocast dtype of each precision."""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torchvision.models.vision_transformer import VisionTransformer

from scalesweep.contract import frameworks  # (standard library only, as records.py)

MODELS = frameworks.get("pytorch").model_names
# Small enough to train an epoch of a few hundred 32 px images in under a second on a laptop CPU.
VIT_TINY = {"patch_size": 8, "num_layers": 2, "num_heads": 2, "hidden_dim": 64, "mlp_dim": 128}
PATCH_SIZES = {"vit_h_14": 14, "vit_tiny": VIT_TINY["patch_size"]}
OPTIMIZERS = ("sgd", "adamw")


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


def count_parameters(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())
