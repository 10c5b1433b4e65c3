"""The TensorFlow trainer's models by registry name (trainer.py): uint8 32 x 32 images
resized on the device, a keras.applications backbone (or the laptop-sized cnn_small), a float32
softmax; and how they are compiled.

Keras 2 (TF 2.11, the NGC container) and Keras 3 alike, through compat.py.
"""

from __future__ import annotations

import keras

from scalesweep.train.datasets import cifar
from scalesweep.train.tf_backend import compat

# keras.applications constructors by registry name; the registry's other model, cnn_small, is built here.
APPLICATIONS = {
    "resnet50v2": "ResNet50V2",
    "resnet101v2": "ResNet101V2",
    "resnet152v2": "ResNet152V2",
    "mobilenetv3small": "MobileNetV3Small",
}


def preprocess(images, resolution: int):
    """uint8 32 x 32 images -> float32 resolution x resolution in [0, 1], run on the device.

    The reference host path's operations in its order: bilinear tf.image.resize, then /255.
    Cast first: Keras' Resizing rounds integer input back to uint8. float32 even under mixed
    precision: resizing in bfloat16 would lose 8-bit detail.
    """
    images = compat.cast(images, "float32")
    images = keras.layers.Resizing(resolution, resolution, interpolation="bilinear", dtype="float32", name="resize")(images)
    return keras.layers.Rescaling(1.0 / 255, dtype="float32", name="rescale")(images)


def cnn_small(resolution: int, classes: int) -> keras.Model:
    """Three conv blocks, ~25k parameters: trains in seconds on a laptop CPU."""
    inputs = keras.Input((resolution, resolution, cifar.CHANNELS))
    x = inputs
    for filters in (16, 32, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x), name="cnn_small")


def backbone(model_name: str, resolution: int, classes: int) -> keras.Model:
    """The registry's model, random weights, returning logits."""
    if model_name == "cnn_small":
        return cnn_small(resolution, classes)
    constructor = getattr(compat.applications(), APPLICATIONS[model_name])
    options = dict(weights=None, include_top=True, input_shape=(resolution, resolution, 3), classes=classes)
    if model_name == "mobilenetv3small":
        options["include_preprocessing"] = False  # its own rescaling to [-1, 1] would rescale twice
    return constructor(classifier_activation=None, **options)


def build_model(model_name: str, resolution: int, classes: int = cifar.NUM_CLASSES) -> keras.Model:
    """uint8 32 x 32 input -> device-side preprocessing -> backbone -> float32 softmax."""
    inputs = keras.Input((cifar.SIDE, cifar.SIDE, cifar.CHANNELS), dtype="uint8", name="images")
    logits = backbone(model_name, resolution, classes)(preprocess(inputs, resolution))
    # Softmax and loss in float32 under mixed precision, as the Keras mixed-precision guide asks.
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name=model_name)


def compile_model(model: keras.Model, learning_rate: float, jit_compile: bool = False) -> bool:
    """Compile for training; returns whether XLA is actually on (Keras turns it off, with a
    warning, for models with layers XLA cannot compile)."""
    # Never Keras' "auto": it picks XLA only for GPU runs without a strategy, which would make
    # the 0-GPU and N-GPU points of one sweep run different compilers.
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=jit_compile,
    )
    return compat.jit_compile_on(model)
