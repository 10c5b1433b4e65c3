"""What each trainer can run, known without importing any framework.

The trainers in scripts/ build these models; tests/test_backends.py (test_model_list_is_the_catalog)
checks both lists agree.
"""

# Per-model defaults: per-GPU batch and the base learning rate (scaled by the GPU count in the
# trainers, as the reference does). The config's `models:` section overrides them. The
# ResNet/ViT-H batches are safe starting points for 40-80 GB cards; the reference fits 2048
# (ResNet50V2) and 1024 (ResNet152V2) images per 64 GB H100 at 128 px.
MODEL_DEFAULTS = {
    "tensorflow": {
        "resnet50v2": {"per_gpu_batch": 256, "base_lr": 0.01},
        "resnet101v2": {"per_gpu_batch": 128, "base_lr": 0.01},
        "resnet152v2": {"per_gpu_batch": 128, "base_lr": 0.01},
        "mobilenetv3small": {"per_gpu_batch": 64, "base_lr": 0.01},
        "cnn_small": {"per_gpu_batch": 32, "base_lr": 0.01},
    },
    "pytorch": {
        "vit_h_14": {"per_gpu_batch": 64, "base_lr": 0.001},
        "resnet50": {"per_gpu_batch": 128, "base_lr": 0.01},
        "resnet18": {"per_gpu_batch": 64, "base_lr": 0.01},
        "vit_tiny": {"per_gpu_batch": 32, "base_lr": 0.01},
    },
}

MODELS = {framework: tuple(models) for framework, models in MODEL_DEFAULTS.items()}

# Dataset formats each trainer reads (docs/reference.md §1-2: CIFAR-10 python pickles for the
# TensorFlow experiment, train/<class>/*.jpeg image folders for the DDP one).
DATASET_FORMATS = {
    "tensorflow": ("cifar10",),
    "pytorch": ("imagefolder",),
}

