"""The record contract of docs/records.md as one table: for each record kind, key -> rule.

Every parsed run passes through here before anything is computed from it, whatever log format
it came from: a value of the wrong type, out of range, not finite or contradicting the rest of
its record is a problem that names the key, and the run becomes `failed` with that reason (see
docs/records.md, "Validation on read"). Keys not in the table are skipped, as the contract says.

Standard library only: the rules are plain small checks, so that each message says in words what
the key must hold and what it held.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from scalesweep.contract import frameworks

# Counts above 2**53 are no longer exact as floats, and a CSV column of counts is read back as
# floats wherever a failed run leaves a cell empty; no real count comes near it.
MAX_COUNT = 2**53
# Measured times and rates above this are no measurement (3e7 years; a petaimage per second), and
# the medians and ratios computed from them could overflow to infinity.
MAX_MEASURE = 1e15
MAX_FLOAT_INT = int(sys.float_info.max)
# Records nest at most two levels (`versions`, `tried`); anything far deeper is not a record and
# would exhaust the recursion of generic code (deep copies, JSON writers) further on.
MAX_DEPTH = 32
# Logged throughput vs images / seconds: both are the writer's own division of the same numbers,
# so they agree to the last digits; 0.1 % leaves room for hand-rounded logs only.
RATE_TOLERANCE = 1e-3
# The record contract of docs/records.md, for its writer (scalesweep/train/common/runlog.py imports
# these) and every reader (scalesweep/): the line prefix, the schema, the statuses and the steady
# state.
PREFIX = ":::SCALESWEEP "
RECORD_PREFIX = PREFIX.strip()  # what a reader looks for: other text may stand before it
RECORD_SCHEMA = 1
# A trainer's summary says ok, oom or failed; SLURM's accounting may turn a failed run into
# timeout (scalesweep/logs/accounting.py).
SUMMARY_STATUSES = ("ok", "oom", "failed")
STATUSES = ("ok", "failed", "oom", "timeout")
# Epoch 1 carries start-up (graph build, compilation, cache fill): steady state starts at epoch 2.
FIRST_STEADY_EPOCH = 2
# The trainers' option vocabularies (scalesweep/train/common/harness.py builds the trainers' options
# from these; the config schema's enums are checked against them by tests/test_harness.py).
FRAMEWORKS = frameworks.NAMES
PROTOCOLS = ("epochs", "steps")
OOM_POLICIES = ("fail", "halve")
PRECISIONS = ("fp32", "bf16", "fp16")
DEVICE_KINDS = ("gpu", "cpu")
# Where a step's time goes (scalesweep/train/common/stepparts.py computes them,
# scalesweep/analysis/breakdown.py attributes them): parts that add up to the wall time per step,
# `breakdown_step_s`.
BREAKDOWN_PARTS = ("data_wait_s", "compute_s", "sync_wait_s", "sync_comm_s", "other_s")


@dataclass(frozen=True)
class Rule:
    """What one key may hold: `kind` is count, number, text, flag, texts or scalars."""

    kind: str
    minimum: float | None = None
    strict: bool = False  # the minimum itself is excluded
    maximum: float | None = None
    nullable: bool = False
    choices: tuple = ()

    def accepts(self, value) -> bool:
        # Most values of a record are floats or ints of a number or count rule: those are
        # decided before the general dispatch (a log of 10,000 runs checks a million values).
        # x - x is 0.0 for a finite float only (inf and nan give nan).
        if type(value) is float and self.kind == "number":
            return value - value == 0.0 and self._in_range(value)
        if type(value) is int and self.kind == "count":
            return self.minimum <= value <= MAX_COUNT
        if value is None:
            return self.nullable
        if self.kind == "count":  # choices: words allowed in place of a number
            return is_count(value, self.minimum) or (is_text(value) and value in self.choices)
        if self.kind == "number":
            return is_number(value) and self._in_range(value)
        if self.kind == "text":
            return is_text(value) and (not self.choices or value in self.choices)
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "texts":
            return isinstance(value, list) and all(is_text(item) for item in value)
        if self.kind == "scalars":
            return isinstance(value, dict) and all(_is_scalar(item) for item in value.values())
        if self.kind == "numbers":  # per rank: a number >= 0 each, null where the rank had none
            return isinstance(value, list) and all(item is None or (is_number(item) and item >= 0) for item in value)
        raise ValueError(f"unknown rule kind {self.kind!r}")

    def describe(self, nullable: bool | None = None) -> str:
        """The rule in words; `nullable` False leaves out "or null" (a required key)."""
        if self.kind == "count":
            what = f"a whole number from {self.minimum:g} to 2**53"
            what += "".join(f", {choice!r}" for choice in self.choices)
        elif self.kind == "number":
            bounds = [] if self.minimum is None else [f"{'>' if self.strict else '>='} {self.minimum:g}"]
            bounds += [] if self.maximum is None else [f"<= {self.maximum:g}"]
            what = " ".join(["a finite number", " and ".join(bounds)]).strip()
        elif self.kind == "text":
            what = "one of " + ", ".join(map(repr, self.choices)) if self.choices else "a one-line string"
        else:
            what = {
                "flag": "true or false",
                "texts": "a list of one-line strings",
                "scalars": "an object of strings, numbers or nulls",
                "numbers": "a list of finite numbers >= 0 or nulls",
            }[self.kind]
        return what + (" or null" if self.nullable and nullable is not False else "")

    def _in_range(self, value) -> bool:
        if self.maximum is not None and value > self.maximum:
            return False
        if self.minimum is None:
            return True
        return value > self.minimum if self.strict else value >= self.minimum


def count(minimum: int = 1, nullable: bool = False, choices: tuple = ()) -> Rule:
    return Rule("count", minimum=minimum, nullable=nullable, choices=choices)


def number(minimum: float | None = None, strict: bool = False, nullable: bool = True) -> Rule:
    return Rule("number", minimum=minimum, strict=strict, nullable=nullable)


def measure(nullable: bool = True) -> Rule:
    """A measured time or rate: > 0 and at most MAX_MEASURE."""
    return Rule("number", minimum=0, strict=True, maximum=MAX_MEASURE, nullable=nullable)


def percent() -> Rule:
    """A share in %, 0 to 100 (null allowed)."""
    return Rule("number", minimum=0, maximum=100, nullable=True)


def text(nullable: bool = True, choices: tuple = ()) -> Rule:
    return Rule("text", nullable=nullable, choices=choices)


def flag(nullable: bool = False) -> Rule:
    return Rule("flag", nullable=nullable)


# The tables of docs/records.md (tests/test_records.py keeps both in step).
HEADER = {
    "framework": text(nullable=False, choices=FRAMEWORKS),
    "model": text(nullable=False),
    "dataset": text(),
    "resolution": count(nullable=True),
    "gpus": count(0),  # 0 = CPU-only baseline
    "device_kind": text(choices=DEVICE_KINDS),
    "world_size": count(),
    "nodes": count(),
    "per_gpu_batch": count(),
    "global_batch": count(),
    "requested_per_gpu_batch": count(),
    "oom_policy": text(choices=OOM_POLICIES),
    "learning_rate": number(0),
    "precision": text(),
    "compile": flag(),
    "channels_last": flag(),
    "num_workers": count(0),
    "bucket_cap_mb": measure(),
    "gradient_as_bucket_view": flag(nullable=True),
    "static_graph": flag(nullable=True),
    "env": Rule("scalars"),
    "epochs": count(0),  # 0 for max_batch
    "images_per_epoch": count(nullable=True),
    "protocol": text(choices=(*PROTOCOLS, "max_batch")),
    "warmup_steps": count(0),
    "timed_steps": count(nullable=True, choices=("auto",)),  # auto: the window ends when precise
    "max_batch_limit": count(),
    "target_ci_pct": measure(),
    "max_timed_steps": count(nullable=True),
    "train_images": count(nullable=True),
    "flops_per_image": measure(),
    "versions": Rule("scalars"),
    "devices": Rule("texts"),
    "gpu_models": Rule("texts"),
    "gpu_driver": text(),
    "cpu_model": text(),
    "hostname": text(),
    "slurm_job_id": text(),
    "slurm_nodelist": text(),
    "slurm_cluster_name": text(),
    "container_image": text(),
    "start_time": text(),
    "omp_num_threads": count(nullable=True),
    "omp_num_threads_env": text(),
    "scalesweep_version": text(),
    "load_avg_1m": number(minimum=0),
    "node_cpus": count(nullable=True),
    "node_shared": flag(nullable=True),
}
# GPU energy (scalesweep/train/common/energy.py): where it comes from, and why it is missing.
ENERGY = {"energy_source": text(choices=("nvml",)), "energy_note": text()}
EPOCH = {
    "epoch": count(),
    "images": count(nullable=True),
    "seconds": measure(),
    "throughput_img_s": measure(),
    "loss": number(),
    "accuracy": number(),
    "steps": count(nullable=True),
    "step_time_median_s": measure(),
    "step_time_p90_s": measure(),
    "phase": text(choices=("warmup", "timed")),
    "step_time_mean_s": measure(),
    "step_time_ci_pct": number(0),
    "timed_steps_rule": text(choices=("fixed", "auto")),
    "target_ci_pct": measure(),
    "stop_reason": text(choices=("fixed", "target", "cap")),
    "epoch_overhead_s": number(),  # may dip below 0 by clock resolution
    **ENERGY,
    "energy_j": number(0),
    "energy_j_per_rank": Rule("numbers"),
    "energy_read_s": number(0),
}
SUMMARY = {
    "status": text(nullable=False, choices=STATUSES),
    "reason": text(),
    "epochs": count(0),
    "total_time_s": measure(),
    "train_time_s": number(0),  # 0: no epoch finished
    "steady_epoch_time_s": measure(),
    "throughput_img_s": measure(),
    "memory_gb": number(0),
    "peak_host_rss_gb": number(0),
    "oom_retries": count(0),
    "timed_steps": count(0),
    "step_time_mean_s": measure(),
    "step_time_ci_pct": number(0),
    "wall_time_s": measure(),
    # the step breakdown (scalesweep/train/common/stepparts.py): other_s may be negative
    "breakdown_step_s": measure(),
    "data_wait_s": number(0),
    "compute_s": measure(),
    "sync_wait_s": number(0),
    "sync_comm_s": number(0),
    "sync_exposed_s": number(0),
    "other_s": number(),
    "breakdown_steps": count(0, nullable=True),
    "allreduce_s": measure(),
    "allreduce_bytes": count(nullable=True),
    "algbw_gb_s": measure(),
    "busbw_gb_s": measure(),
    "overlap_pct": percent(),
    "comm_compute_ratio": number(0),
    "probe_s": number(0),
    "probe_overhead_pct": percent(),
    **ENERGY,
    "run_energy_j": number(0),
    "run_energy_j_per_rank": Rule("numbers"),
}
RULES = {"header": HEADER, "epoch": EPOCH, "summary": SUMMARY}

# What a `:::SCALESWEEP` record must hold beyond its kind; other formats leave out what their
# logs do not print. The epoch's numbers are needed together: a steady time and a steady
# throughput taken over different epochs would disagree without saying so.
REQUIRED = {"header": ("world_size",), "epoch": ("epoch", "images", "seconds"), "summary": ("status",)}


# ---------------------------------------------------------------------------------------------
# Checks


def problems(kind: str, record: dict, required: bool = False) -> list[tuple[str, str]]:
    """[(key, message)] for every key of `record` that breaks the contract of its `kind`.

    `required`: also report the keys REQUIRED of a `:::SCALESWEEP` record that are missing.
    """
    rules = RULES[kind]
    needed = REQUIRED[kind] if required else ()
    missing = [key for key in needed if record.get(key) is None]
    found = [(key, f"'{key}' is required, got {'null' if key in record else 'nothing'}") for key in missing]
    for key, value in record.items():
        rule = rules.get(key)
        if rule is not None and key not in missing and not rule.accepts(value):
            must = rule.describe(nullable=key not in needed)
            found.append((key, f"'{key}' must be {must}, got {shown(value)}"))
    # Values that agree with each other, among those that are valid on their own.
    check = {"header": _batch_disagreement, "epoch": _rate_disagreement}.get(kind)
    disagreement = check(drop_bad_keys(record, found) if found else record) if check else None
    return found + ([disagreement] if disagreement else [])


def drop_bad_keys(record: dict, found: list[tuple[str, str]]) -> dict:
    """`record` without the keys `problems` found bad: no later step may compute with them."""
    if not found:
        return record
    bad = {key for key, _ in found}
    return {key: value for key, value in record.items() if key not in bad}


def _batch_disagreement(header: dict) -> tuple[str, str] | None:
    per_gpu, world, total = (header.get(key) for key in ("per_gpu_batch", "world_size", "global_batch"))
    if None in (per_gpu, world, total) or total == per_gpu * world:
        return None
    return "global_batch", f"'global_batch' {total} is not per_gpu_batch x world_size = {per_gpu} x {world}"


def _rate_disagreement(epoch: dict) -> tuple[str, str] | None:
    images, seconds, rate = (epoch.get(key) for key in ("images", "seconds", "throughput_img_s"))
    if images is None or seconds is None:
        return None
    implied = images / seconds
    if implied > MAX_MEASURE:
        message = f"'seconds' {seconds!r} for {images} images is {implied:g} img/s, beyond {MAX_MEASURE:g}"
        return "seconds", message
    if rate is None or math.isclose(rate, implied, rel_tol=RATE_TOLERANCE):
        return None
    return (
        "throughput_img_s",
        f"'throughput_img_s' {rate!r} disagrees with images / seconds = {images} / {seconds!r}",
    )


def depth(value) -> int:
    """How deeply JSON arrays and objects nest in `value` (0 for a scalar); no recursion."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level + 1)
            if level + 1 > MAX_DEPTH:
                break
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, level + 1) for child in children)
    return deepest


def is_integer(value) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def is_number(value) -> bool:
    """An int or float that converts to a finite float (an int past 1e308 does not)."""
    if type(value) is float:
        return value - value == 0.0
    if is_integer(value):
        return abs(value) <= MAX_FLOAT_INT
    return isinstance(value, float) and math.isfinite(value)


def is_count(value, minimum: int = 1) -> bool:
    """A whole number from `minimum` to MAX_COUNT (a bool is not one)."""
    return is_integer(value) and minimum <= value <= MAX_COUNT


def is_text(value) -> bool:
    """A string that a CSV cell keeps on one line and UTF-8 can write."""
    if not isinstance(value, str) or "\n" in value or "\r" in value or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a `\ud800` escape
        return False
    return True


def shown(value, limit: int = 60) -> str:
    """`value` for a message: repr, shortened (a hostile value may be megabytes long)."""
    if isinstance(value, (dict, list)) and depth(value) > MAX_DEPTH:
        return f"a {type(value).__name__} nested deeper than {MAX_DEPTH} levels"
    try:
        text_form = repr(value)
    except (RecursionError, ValueError):  # ValueError: an int past the repr digit limit
        return f"a {type(value).__name__} too large to show"
    return text_form if len(text_form) <= limit else text_form[: limit - 3] + "..."


def _is_scalar(value) -> bool:
    return value is None or is_number(value) or is_text(value) or isinstance(value, bool)

