"""Model FLOPs per trained image, counted by torch.utils.flop_counter on a meta-device copy.

The copy holds no memory and runs no kernel: the counter sees every aten op with its shapes, so
ViT-H/14 at 224 px is counted in well under a second on any machine. Attention runs through the
math backend of scaled_dot_product_attention while counting: the fused kernels are not counted
by FlopCounterMode on every platform (on a CPU none of ViT's attention was), the math backend's
matmuls always are. Convention: a multiply-add is 2 FLOPs (torchvision's `_ops` metadata counts
it once, so forward FLOPs = 2 x `_ops`). Forward + backward of training is counted as it runs
(about 3 x forward); the optimizer's update is left out, as MFU conventionally does.
"""

from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode


def count_flops(build_model, resolution: int, train: bool = True, batch: int = 2) -> float:
    """FLOPs per image of one forward (train=False) or forward + backward (train=True) of the
    model `build_model()` builds, at `resolution` px, counted on a meta-device copy."""
    with torch.device("meta"):
        model = build_model()
        images = torch.empty(batch, 3, resolution, resolution)
    model.train(train)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        logits = model(images)
        if train:
            logits.float().sum().backward()
    return counter.get_total_flops() / batch


def count_flops_or_none(build_model, resolution: int) -> float | None:
    """count_flops of training, or None where the counter cannot follow the model: provenance
    must never fail a run."""
    try:
        return count_flops(build_model, resolution)
    except Exception:  # noqa: BLE001
        return None
