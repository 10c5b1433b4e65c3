"""The PyTorch reference DDP trainer's logs (`ddp-reference`): its INFO lines (`### key: value`
arguments, `[EPOCH: n]` lines, the closing totals); its world size is not in the log and comes
from the caller or the file name."""

from __future__ import annotations

import os
import re

from scalesweep.contract import frameworks
from scalesweep.logs.failures import UNFINISHED_CAUSES, unfinished_summary
from scalesweep.logs.run import (
    AmbiguousName,
    DIGITS,
    Draft,
    LogFormatError,
    ParsedRun,
    as_count,
    as_metric,
    as_number,
    registry_model,
    finished_summary,
    shape_from_filename,
    parse_duration,
)

# The format name a DDP reference log is parsed as (logs/read.py detects it).
FORMAT = "ddp-reference"

# The framework whose reference script writes these logs (its registry entry names this format).
FRAMEWORK = frameworks.with_reference_log_format("ddp").name

_DDP_PREFIX_RE = re.compile(
    r"\[\d{1,2}/\d{1,2}/\d{4} \d{1,2}:\d{2}:\d{2}(?: ?[AP]M)?\]\s*"
    r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s*-\s?"
)
_DDP_ARG_RE = re.compile(r"^###\s*(?P<body>.+?)\s*$")
_DDP_EPOCH_RE = re.compile(rf"^\[EPOCH\s*:?\s*({DIGITS})\s*\]\s*(.*)$", re.IGNORECASE)
_DDP_FINISHED_RE = re.compile(r"^Training finished", re.IGNORECASE)
_DDP_TOTAL_TIME_RE = re.compile(r"^Complete training time\s*:?\s*(.+)$", re.IGNORECASE)
_DDP_THROUGHPUT_RE = re.compile(r"^Training throughput\s*:?\s*([\d.]+)\s*imgs?/s", re.IGNORECASE)
_DDP_MEMORY_RE = re.compile(r"^GPU memory reserved\s*:?\s*([\d.]+)\s*([KMGT]i?B)?", re.IGNORECASE)
_DDP_EPOCH_FIELD_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<value>[-+\d.eE]+|nan|inf)"
)
# The reference prints `Accuracy` on its validation line, so a bare accuracy is a validation one.
_DDP_EPOCH_FIELDS = {
    "training throughput": "throughput_img_s",
    "train throughput": "throughput_img_s",
    "validation throughput": "val_throughput_img_s",
    "accuracy": "val_accuracy",
    "validation accuracy": "val_accuracy",
    "val accuracy": "val_accuracy",
    "training accuracy": "accuracy",
    "train accuracy": "accuracy",
    "loss": "loss",
    "training loss": "loss",
    "train loss": "loss",
    "validation loss": "val_loss",
}
_PRECISIONS = {"none": "fp32", "fp32": "fp32", "no": "fp32", "bf16": "bf16", "fp16": "fp16"}
_MEMORY_UNITS_GB = {"KB": 1 / 1024**2, "KIB": 1 / 1024**2, "MB": 1 / 1024, "MIB": 1 / 1024}


def _ddp_message(line: str) -> str:
    prefix = _DDP_PREFIX_RE.search(line)
    return (line[prefix.end():] if prefix else line).strip()


def is_ddp_line(line: str) -> bool:
    message = _ddp_message(line)
    return bool(re.match(r"^###\s*model_name\b", message) or _DDP_EPOCH_RE.match(message))


def parse_ddp(lines, source, world_size) -> ParsedRun:
    try:
        named_world, nodes = shape_from_filename(source)
    except AmbiguousName as error:
        if world_size is None:
            raise LogFormatError(source, str(error)) from None
        named_world, nodes = None, None  # the world size given settles it; the nodes stay unknown
    world = world_size if world_size is not None else named_world
    if world is None or world < 1:
        raise LogFormatError(
            source,
            "ddp-reference logs do not state the world size: give it (analyze --world-size "
            "FILE=N, a manifest.csv world_size column, or the run's config) or name the file like "
            "vit_4gpus.log / ddp_tiny_2nodes_4gpus.out",
        )
    draft = Draft(lines=list(lines))
    args: dict = {}
    epochs: dict[int, dict] = {}
    final: dict = {}
    for number, line in lines:
        message = _ddp_message(line)
        if _DDP_ARG_RE.match(message):
            key, value = _split_key_value(_DDP_ARG_RE.match(message).group("body"))
            args[key] = value
        elif _DDP_EPOCH_RE.match(message):
            match = _DDP_EPOCH_RE.match(message)
            _add_ddp_epoch_fields(epochs, int(match.group(1)), match.group(2), source, number)
        elif _DDP_FINISHED_RE.match(message):
            final["finished"] = True
        elif _DDP_TOTAL_TIME_RE.match(message):
            final["total_time_s"] = parse_duration(_DDP_TOTAL_TIME_RE.match(message).group(1))
        elif _DDP_THROUGHPUT_RE.match(message):
            final["throughput_img_s"] = as_number(_DDP_THROUGHPUT_RE.match(message).group(1))
        elif _DDP_MEMORY_RE.match(message):
            match = _DDP_MEMORY_RE.match(message)
            # The reference prints its own GB figure; kept as printed unless the unit says MB/KB.
            to_gb = _MEMORY_UNITS_GB.get((match.group(2) or "").upper(), 1.0)
            memory = as_number(match.group(1))  # `[\d.]+` also matches `1.2.3`
            final["memory_gb"] = None if memory is None else memory * to_gb
    draft.header = _ddp_header(args, world)
    if nodes is not None:
        draft.header["nodes"] = nodes
    draft.epochs = _ddp_epochs(epochs, draft.header.get("images_per_epoch"))
    return ParsedRun(FORMAT, source, draft.header, draft.epochs, _ddp_summary(draft, final))


def _split_key_value(body: str) -> tuple[str, str]:
    """`model_name: vit` and `Total number of parameters 631021000` alike -> (key, value)."""
    if ":" in body:
        key, _, value = body.partition(":")
    else:
        key, _, value = body.rpartition(" ")
    key = re.sub(r"\(.*?\)", "", key)
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_"), value.strip()


def _add_ddp_epoch_fields(epochs: dict, epoch: int, body: str, source, number) -> None:
    fields = {}
    for part in body.split("|"):
        match = _DDP_EPOCH_FIELD_RE.match(part)
        name = " ".join(match.group("name").lower().split()) if match else None
        if name in _DDP_EPOCH_FIELDS:
            target = _DDP_EPOCH_FIELDS[name]
            # A diverged loss prints `nan`: no metric, as the record writer has it; a throughput
            # keeps its value, for the record contract to refuse.
            read = as_number if "throughput" in target else as_metric
            fields[target] = read(match.group("value"))
    entry = epochs.setdefault(epoch, {})
    if "throughput_img_s" in fields and "throughput_img_s" in entry:
        message = f"epoch {epoch} reports its training throughput twice (one run per file expected)"
        raise LogFormatError(source, message, number)
    entry.update(fields)


def _ddp_header(args: dict, world: int) -> dict:
    header = {
        "framework": FRAMEWORK,
        "world_size": world,
        "protocol": "epochs",
        "reference_args": dict(args),
    }
    if "model_name" in args:
        header["model"] = registry_model(args["model_name"], FRAMEWORK)
    if "dataset" in args:
        header["dataset"] = os.path.basename(args["dataset"].rstrip("/")) or args["dataset"]
    renamed = (("batch_size", "per_gpu_batch"), ("num_epochs", "epochs"), ("resolution", "resolution"))
    for key, target in renamed:
        value = as_count(args.get(key))
        if value is not None:
            header[target] = value
    if "per_gpu_batch" in header:
        header["global_batch"] = header["per_gpu_batch"] * world
    if "mixed_precision" in args:
        header["precision"] = _PRECISIONS.get(args["mixed_precision"].lower(), args["mixed_precision"])
    parameters = as_count(args.get("total_number_of_parameters"))
    if parameters is not None:
        header["parameters"] = parameters
    samples = args.get("total_training_samples", "").replace(",", "")
    counts = [int(number) for number in re.findall(rf"(?<!\d){DIGITS}(?!\d)", samples)]
    if counts:
        # `Total training samples (batches)` counts one rank's share (the DistributedSampler's).
        header["samples_per_rank"] = counts[0]
        header["images_per_epoch"] = counts[0] * world
        if len(counts) > 1:
            header["batches_per_rank"] = counts[1]
    return header


def _ddp_epochs(epochs: dict, images_per_epoch) -> list[dict]:
    """Epochs that finished training (reported a throughput), images = samples per rank x world."""
    finished = []
    for number in sorted(epochs):
        entry = epochs[number]
        if "throughput_img_s" not in entry:
            continue
        throughput = entry.pop("throughput_img_s")
        seconds = images_per_epoch / throughput if images_per_epoch and throughput else None
        # Throughput before seconds: it is what the log printed, the seconds follow from it, and
        # the record check reports a bad value's keys in this order.
        finished.append(
            {
                "epoch": number,
                "images": images_per_epoch,
                "throughput_img_s": throughput,
                "seconds": seconds,
                "loss": entry.pop("loss", None),
                "accuracy": entry.pop("accuracy", None),
                **entry,
            }
        )
    return finished


def _ddp_summary(draft: Draft, final: dict) -> dict:
    done, asked = len(draft.epochs), draft.header.get("epochs")
    if not final.get("finished"):
        why = f"log ends before 'Training finished!' after {done} of {asked or '?'} epochs"
        return unfinished_summary(draft.lines, len(draft.epochs), f"{why} ({UNFINISHED_CAUSES})")
    if asked is not None and done < asked:
        return {
            "status": "failed",
            "reason": f"'Training finished!' but only {done} of {asked} epochs reported a throughput",
            "epochs": done,
        }
    return finished_summary(
        draft.epochs,
        total_time_s=final.get("total_time_s"),
        throughput_img_s=final.get("throughput_img_s"),
        memory_gb=final.get("memory_gb"),
    )
