"""What each trainer can run, known without importing any framework.

The trainers in scripts/ build these models; tests/test_catalog.py checks both lists agree.
"""

MODELS = {
    "tensorflow": (
        "resnet50v2",
        "resnet101v2",
        "resnet152v2",
        "mobilenetv3small",
        "cnn_small",
    ),
    "pytorch": (
        "vit_h_14",
        "resnet50",
        "resnet18",
        "vit_tiny",
    ),
}

# Dataset formats each trainer reads (REFERENCE.md §1-2: CIFAR-10 python pickles for the
# TensorFlow experiment, train/<class>/*.jpeg image folders for the DDP one).
DATASET_FORMATS = {
    "tensorflow": ("cifar10",),
    "pytorch": ("imagefolder",),
}

FRAMEWORK_SHORT = {"tensorflow": "tf", "pytorch": "pt"}
