"""The TensorFlow reference script's logs (`tf-reference-keras2`, `tf-keras3`): a ` Model ResNet50
2 GPUs` header block then Keras `verbose=2` epoch lines; one file may hold several runs (the
reference ran 1/2/4 GPUs one after another in one job)."""

from __future__ import annotations

import re

from scalesweep.contract import frameworks
from scalesweep.logs.failures import UNFINISHED_CAUSES, unfinished_summary
from scalesweep.logs.run import (
    CIFAR10_TRAIN_IMAGES,
    DIGITS,
    Draft,
    LogFormatError,
    ParsedRun,
    as_metric,
    as_rate,
    registry_model,
    finished_summary,
)

# The framework whose reference script writes these logs (its registry entry names this format).
FRAMEWORK = frameworks.with_reference_log_format("keras").name

KERAS_HEADER_RE = re.compile(rf"^\s*Model\s+(?P<model>\S+)\s+(?P<gpus>{DIGITS})\s+GPUs?\s*$")
_KERAS_BATCH_RE = re.compile(rf"^\s*Batch_size\s*:\s*({DIGITS})\s*$", re.IGNORECASE)
_KERAS_REPLICAS_RE = re.compile(rf"^\s*Num_replicas\s*:\s*({DIGITS})\s*$", re.IGNORECASE)
KERAS_EPOCH_RE = re.compile(rf"^\s*Epoch\s+({DIGITS})\s*/\s*({DIGITS})\s*$")
# `13/13 - 9s - <fields>`: Keras prints the elapsed time as whole seconds (`%.0fs`).
KERAS_PROGRESS_RE = re.compile(
    rf"(?:^|\s)(?P<step>{DIGITS})/(?P<steps>{DIGITS}) - (?P<elapsed>\d+(?:\.\d+)?(?:s|ms|us)) *(?P<rest>(?:- .*)?)$"
)
EPOCH_TIME_RE = re.compile(r"(?:^|- )\d+(?:\.\d+)?(?:s|ms|us)/epoch\b")
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(s|ms|us)(?:/(epoch|step|sample))?$")
_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_KERAS_METRICS = {
    "loss": "loss",
    "accuracy": "accuracy",
    "acc": "accuracy",
    "val_loss": "val_loss",
    "val_accuracy": "val_accuracy",
    "val_acc": "val_accuracy",
}


def parse_keras(lines, source, fmt, world_size, images_per_epoch=None) -> list[ParsedRun]:
    drafts: list[Draft] = []
    prelude: list[tuple[int, str]] = []
    pending_epoch = None  # the number of an `Epoch k/E` line still waiting for its progress line
    for number, line in lines:
        header = KERAS_HEADER_RE.match(line)
        if header:
            drafts.append(Draft(header=_keras_header(header), lines=[] if drafts else prelude))
            pending_epoch = None
            continue
        (drafts[-1].lines if drafts else prelude).append((number, line))
        if _KERAS_BATCH_RE.match(line) and drafts:
            drafts[-1].header["global_batch"] = int(_KERAS_BATCH_RE.match(line).group(1))
        elif _KERAS_REPLICAS_RE.match(line) and drafts:
            drafts[-1].header["world_size"] = int(_KERAS_REPLICAS_RE.match(line).group(1))
        elif KERAS_EPOCH_RE.match(line):
            if not drafts:  # epoch lines without the script's header: still a run, less known
                drafts.append(Draft(header={"framework": FRAMEWORK}, lines=prelude))
            pending_epoch = _keras_epoch_line(drafts[-1], KERAS_EPOCH_RE.match(line), source, number)
        elif KERAS_PROGRESS_RE.search(line) and drafts:
            draft = drafts[-1]
            # Keras prints no `Epoch 1/1` line for a one-epoch fit; any other progress line with
            # no epoch waiting is model.evaluate() output, not training.
            first_of_one = pending_epoch is None and not draft.epochs and "epochs" not in draft.header
            if pending_epoch is None and not first_of_one:
                continue
            if first_of_one:
                draft.header["epochs"] = 1
            draft.epochs.append(_keras_epoch(pending_epoch or 1, KERAS_PROGRESS_RE.search(line)))
            pending_epoch = None
    return [_finish_keras(draft, source, fmt, world_size, images_per_epoch) for draft in drafts]


def _keras_header(match) -> dict:
    return {
        "framework": FRAMEWORK,
        "model": registry_model(match.group("model"), FRAMEWORK),
        "gpus": int(match.group("gpus")),
        "protocol": "epochs",
    }


def _keras_epoch_line(draft: Draft, match, source, number) -> int:
    epoch, asked = int(match.group(1)), int(match.group(2))
    if any(seen["epoch"] == epoch for seen in draft.epochs):
        message = f"'Epoch {epoch}/{asked}' appears twice in one run (one header block per run expected)"
        raise LogFormatError(source, message, number)
    draft.header.setdefault("epochs", asked)
    return epoch


def _keras_epoch(epoch: int, match) -> dict:
    """An epoch from a Keras progress line; images and throughput are filled in by _finish_keras."""
    steps = int(match.group("steps"))
    fields = [token.strip() for token in match.group("rest")[1:].split(" - ") if token.strip()]
    times = {}
    metrics = {}
    for token in fields:
        duration = _DURATION_RE.match(token)
        if duration and duration.group(3):
            times[duration.group(3)] = _duration(duration)
        elif ":" in token:
            name, _, value = token.partition(":")
            if name.strip() in _KERAS_METRICS:
                metrics[_KERAS_METRICS[name.strip()]] = as_metric(value)
    elapsed = _duration(_DURATION_RE.match(match.group("elapsed")))
    return {
        "epoch": epoch,
        "steps": steps,
        "images": None,
        "seconds": _keras_epoch_seconds(elapsed, times, steps),
        "throughput_img_s": None,
        "loss": metrics.pop("loss", None),
        "accuracy": metrics.pop("accuracy", None),
        **metrics,
    }


def _duration(match) -> tuple[float, float]:
    """(seconds, half the printed unit): Keras rounds every duration with `%.0f`."""
    unit = _UNIT_SECONDS[match.group(2)]
    return float(match.group(1)) * unit, 0.5 * unit


def _keras_epoch_seconds(elapsed, times: dict, steps: int) -> float:
    """The most precise epoch time a Keras line gives, of (seconds, resolution) candidates.

    Keras 2 prints `9s/epoch - 712ms/step` where the step time is the epoch time divided by the
    steps, so steps x 712 ms (+-6.5 ms for 13 steps) beats the whole-second epoch field. Keras 3
    prints no epoch field and its elapsed time in whole seconds (`0s` for a short epoch); its
    step time is the mean of steps 2..n, so steps x it counts the first step as an average one,
    still far closer than +-0.5 s unless the step time itself is in whole seconds.
    """
    candidates = [elapsed]
    if "epoch" in times:
        candidates.insert(0, times["epoch"])
    if "step" in times:
        seconds, resolution = times["step"]
        candidates.insert(1, (seconds * steps, resolution * steps))
    best = min(candidates, key=lambda candidate: candidate[1])
    return round(best[0], 6)


def _finish_keras(draft: Draft, source, fmt, world_size, images_per_epoch=None) -> ParsedRun:
    header = draft.header
    if "world_size" not in header:
        # 0 GPUs is the CPU baseline: its replica count is unknown unless Num_replicas says.
        replicas = header.get("gpus") or world_size
        if replicas:
            header["world_size"] = replicas
    global_batch, replicas = header.get("global_batch"), header.get("world_size")
    if global_batch and replicas and global_batch % replicas == 0:
        # An uneven split (TF allows one) has no per-GPU batch: a fraction is no batch size.
        header["per_gpu_batch"] = global_batch // replicas
    steps = [epoch.pop("steps") for epoch in draft.epochs]
    images, images_source = keras_epoch_images(steps, global_batch, images_per_epoch, source)
    for epoch in draft.epochs:
        epoch["images"] = images
        epoch["throughput_img_s"] = as_rate(images, epoch["seconds"])
    if draft.epochs and images:
        header["images_per_epoch"] = images
    asked = header.get("epochs")
    if asked is not None and len(draft.epochs) >= asked:
        summary = finished_summary(draft.epochs)
    else:
        why = f"log ends after {len(draft.epochs)} of {asked or '?'} epochs ({UNFINISHED_CAUSES})"
        summary = unfinished_summary(draft.lines, len(draft.epochs), why)
    return ParsedRun(fmt, source, header, draft.epochs, summary, images_source=images_source)


def keras_epoch_images(steps: list[int], global_batch, dataset_images, source) -> tuple[int | None, str]:
    """(images of one epoch, IMAGE_SOURCES entry) of a Keras run from its epochs' step counts.

    Keras counts the last, partial batch as a whole step, so steps x global batch only bounds the
    images from above (53,248 for CIFAR-10's 50,000 at 13 x 4096) and differs between GPU counts
    for the same dataset. The dataset's size is the count: `dataset_images` when given, else
    CIFAR-10's 50,000, what the reference script trains on, when the steps agree with it. Given
    images that the steps contradict are an error naming the log.
    """
    if not global_batch or not steps:
        return None, "estimate"
    if dataset_images is not None:
        expected = -(-dataset_images // global_batch)  # Keras' steps, the last batch partial
        if any(count != expected for count in steps):
            raise LogFormatError(
                source,
                f"images per epoch {dataset_images} give {expected} steps of global batch "
                f"{global_batch}, the log shows {sorted(set(steps))}: wrong --images-per-epoch?",
            )
        return dataset_images, "dataset"
    if all(count == -(-CIFAR10_TRAIN_IMAGES // global_batch) for count in steps):
        return CIFAR10_TRAIN_IMAGES, "dataset"
    return max(steps) * global_batch, "estimate"
