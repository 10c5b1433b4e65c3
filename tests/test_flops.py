"""Model FLOPs from torch.utils.flop_counter (scalesweep/train/torch_backend/flops.py) against the
operation counts torchvision publishes in its weights' metadata (`_ops`: GFLOPs of one forward at
the weights' resolution with a multiply-add counted once; forward FLOPs = 2 x `_ops` in our
convention)."""

import sys
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
torch = pytest.importorskip("torch")
import torchvision  # noqa: E402

from scalesweep.train.torch_backend import flops  # noqa: E402

# builds each model (ViT-H/14: 632 M parameters) to count it, seconds a test
pytestmark = pytest.mark.slow

WEIGHTS = {
    "resnet50": torchvision.models.ResNet50_Weights.IMAGENET1K_V1,
    "vit_b_16": torchvision.models.ViT_B_16_Weights.IMAGENET1K_V1,
}


@pytest.mark.parametrize("name", sorted(WEIGHTS))
def test_forward_flops_match_torchvision_within_two_percent(name):
    counted = flops.count_flops(getattr(torchvision.models, name), 224, train=False)
    published = WEIGHTS[name].meta["_ops"] * 1e9  # multiply-adds
    assert counted / 2 == pytest.approx(published, rel=0.02)


def test_training_counts_forward_and_backward():
    """Backward costs about twice the forward: a trained image ~ 3 forwards."""
    build = partial(torchvision.models.resnet50, num_classes=10)
    forward = flops.count_flops(build, 64, train=False)
    trained = flops.count_flops(build, 64, train=True)
    assert 2.7 < trained / forward < 3.1


def test_vit_h_14_per_trained_image_matches_the_reference_figure():
    """docs/reference.md §6: _ops 167.3 at 224 px -> ~335 GFLOP forward, ~1,004 GFLOP trained."""
    trained = flops.count_flops(partial(torchvision.models.vit_h_14, num_classes=200), 224)
    assert trained / 1e9 == pytest.approx(1004, rel=0.02)
