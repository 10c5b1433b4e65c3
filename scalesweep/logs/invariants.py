"""What the trainers guarantee across records, checked on read (docs/records.md, "Invariants").

scalesweep/contract/records.py judges each key of one record on its own; a log can pass that and still
contradict itself: a header with `gpus` 8 and `world_size` 2, more epoch records than the header
asks for, breakdown parts that do not add up to the step, a data wait of 1e300 s, an MFU of
149,000 %, two ranks that each printed a full record set into one log. The checks here take the
parsed records and return, for each broken invariant, one reason naming the keys and values; the
parser (scalesweep/logs/read.py) and the tidy stage (scalesweep/tidy/rows.py, the MFU) turn a run with a
reason into a failed row that says why, never an ok one.

Pure functions of plain dicts; every threshold is a named constant with the reason for its size.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from scalesweep.contract.records import BREAKDOWN_PARTS, FIRST_STEADY_EPOCH, is_count, is_number


# breakdown_step_s, and the parts that add up to it (the trainers' stepparts.py imports the same).
STEP_KEY, PART_KEYS = "breakdown_step_s", BREAKDOWN_PARTS

# The writer computes `other_s` as the step minus the other parts, so the parts add up to the step
# to the last float digit, and JSON keeps every digit; 0.1 % leaves room for hand-rounded logs
# only (as records.RATE_TOLERANCE does for images / seconds). The same for the breakdown's step
# against the steady epochs' seconds / steps it was divided from, and train_time_s against the
# epochs' seconds it sums.
SUM_TOLERANCE = 1e-3
# `other_s` may be negative and a part may exceed the step by the noise of taking medians (the
# compute probe and the median step are timed on other steps than the window's mean); a part ten
# steps long is no noise but a broken value (1e300 s of data wait beside a 0.1 s step).
PART_STEP_RATIO_MAX = 10.0
# Model FLOPs per second cannot exceed the device's peak: above 100 % the FLOPs per image, the GPU
# count or the throughput is wrong (an MFU of 149,000 %).
MFU_MAX_PCT = 100.0
# Record lines prefixed by `srun --label` (`3: `) or torchrun (`[rank3]: `): which process wrote
# them. Only rank 0 writes records (docs/records.md), so two numbers are two writers.
_WRITER_PREFIX_RE = re.compile(r"^(?:(\d{1,9}): |\[rank(\d{1,9})\]: ?)")


def run_problems(header: dict, epochs: list[dict], summary: dict | None, seconds_measured: bool = True,
                 ) -> list[str]:
    """Every broken invariant of one run's records (valid one by one), as a one-line reason.
    `seconds_measured` False: the epochs' seconds were derived from a throughput and a world size
    the user may have given (the DDP reference's logs), no clock to hold the run's times against."""
    summary = summary or {}
    containing = _times_shorter_than_epochs(summary, epochs) if seconds_measured else []
    checks = (_replicas_problem(header), _epochs_beyond_header(header, epochs),
              _images_per_epoch_problem(header, epochs), _summary_epochs_problem(summary, epochs),
              _train_time_problem(summary, epochs), *containing, *_breakdown_problems(summary, epochs))
    return [problem for problem in checks if problem]


def _replicas_problem(header: dict) -> str | None:
    """Both trainers train one replica (TF) or process (PyTorch) per GPU asked for; the CPU
    baseline (gpus 0) may split the CPU into any number of them."""
    gpus, world = header.get("gpus"), header.get("world_size")
    if not (is_count(gpus) and is_count(world)) or gpus == world:
        return None
    return (f"header record: 'gpus' {gpus} but 'world_size' {world}: a run trains one replica or "
            "process per GPU")


def _epochs_beyond_header(header: dict, epochs: list[dict]) -> str | None:
    asked = header.get("epochs")
    numbers = [epoch["epoch"] for epoch in epochs if is_count(epoch.get("epoch"))]
    if not is_count(asked, 0) or not numbers or max(numbers) <= asked:
        return None
    return (f"epoch record {max(numbers)} ({len(epochs)} epoch records) but the header asks for "
            f"'epochs' {asked}")


def _images_per_epoch_problem(header: dict, epochs: list[dict]) -> str | None:
    """The header's images_per_epoch is what one epoch (steps protocol: the timed window) trains,
    all replicas together: at least one epoch record counts as many. A header four times every
    epoch would make the throughput the tables derive from it four times too high."""
    said = header.get("images_per_epoch")
    counted = sorted({epoch["images"] for epoch in epochs if is_count(epoch.get("images"))})
    # Within a global batch: a sampler that pads or drops the last partial batch counts a few
    # images more or fewer than the header's planned epoch; a wrong header is off by whole epochs.
    slack = header["global_batch"] if is_count(header.get("global_batch")) else 0
    if not is_count(said) or not counted or any(abs(said - images) <= slack for images in counted):
        return None
    shown = ", ".join(map(str, counted[:3])) + (", ..." if len(counted) > 3 else "")
    return (f"header record: 'images_per_epoch' {said} but no epoch record trained that many "
            f"(their 'images': {shown})")


def _summary_epochs_problem(summary: dict, epochs: list[dict]) -> str | None:
    """The summary's `epochs` counts the epoch records the trainer wrote before it."""
    said = summary.get("epochs")
    if not is_count(said, 0) or said == len(epochs):
        return None
    return f"summary record: 'epochs' {said} but the log holds {len(epochs)} epoch records"


def _train_time_problem(summary: dict, epochs: list[dict]) -> str | None:
    said = summary.get("train_time_s")
    seconds = [epoch.get("seconds") for epoch in epochs]
    if not is_number(said) or not seconds or not all(is_number(value) for value in seconds):
        return None
    total = math.fsum(seconds)
    if math.isclose(said, total, rel_tol=SUM_TOLERANCE, abs_tol=1e-9):
        return None
    return f"summary record: 'train_time_s' {said!r} but the epoch records' seconds add up to {total!r}"


# Both contain every epoch: total_time_s from data loading to the last epoch's end, wall_time_s
# from the trainer's start to the summary.
_CONTAINING_TIMES = ("total_time_s", "wall_time_s")
# Their clocks are read apart from the epochs' and logs round them: a few per cent short is
# bookkeeping, a time to solution short by a whole epoch or more is a wrong number.
CONTAINING_SLACK = 0.02


def _times_shorter_than_epochs(summary: dict, epochs: list[dict]) -> list[str]:
    """A time to solution or a wall time shorter than the epochs it contains (an efficiency of
    943 % of the time to solution)."""
    seconds = [epoch.get("seconds") for epoch in epochs]
    if not seconds or not all(is_number(value) for value in seconds):
        return []
    total = math.fsum(seconds)
    return [f"summary record: '{key}' {summary[key]!r} is shorter than the epoch records' seconds, "
            f"which it contains: they add up to {total!r}"
            for key in _CONTAINING_TIMES
            if is_number(summary.get(key)) and summary[key] < total * (1 - CONTAINING_SLACK)]


def _breakdown_problems(summary: dict, epochs: list[dict]) -> list[str]:
    """The step breakdown: parts that add up to the step, none many steps long, a step that is
    the steady window's seconds / steps, and as many steps as the summary's timed steps."""
    parts = _breakdown_parts(summary)
    given = [key for key in (STEP_KEY, *parts) if summary.get(key) is not None]
    if given and len(given) < 1 + len(parts):
        missing = [key for key in (STEP_KEY, *parts) if key not in given]
        return [f"summary record: the step breakdown gives {', '.join(map(repr, given))} but not "
                f"{', '.join(map(repr, missing))}: its writer gives every part with the step, or none"]
    step = summary.get(STEP_KEY)
    if not is_number(step) or step <= 0:
        return []
    found = []
    huge = [key for key, value in parts.items() if is_number(value) and abs(value) > PART_STEP_RATIO_MAX * step]
    if huge:
        found.append(f"summary record: '{huge[0]}' {parts[huge[0]]!r} is more than "
                     f"{PART_STEP_RATIO_MAX:g} x '{STEP_KEY}' {step!r}")
    if all(is_number(value) for value in parts.values()):
        total = math.fsum(parts.values())
        if not math.isclose(total, step, rel_tol=SUM_TOLERANCE, abs_tol=1e-12):
            found.append(f"summary record: the parts {' + '.join(parts)} add up to {total!r}, "
                         f"not '{STEP_KEY}' {step!r}")
    window = _steady_window(epochs)
    if window is not None and not math.isclose(step, window[0] / window[1], rel_tol=SUM_TOLERANCE):
        found.append(f"summary record: '{STEP_KEY}' {step!r} but the steady epochs' seconds / steps "
                     f"= {window[0]!r} / {window[1]} = {window[0] / window[1]!r}")
    counted, timed = summary.get("breakdown_steps"), summary.get("timed_steps")
    if is_count(counted, 0) and is_count(timed, 0) and counted != timed:
        found.append(f"summary record: 'breakdown_steps' {counted} but 'timed_steps' {timed}: both "
                     "count the timed steps of the steady epochs")
    return found


# The one synchronisation part of the logs written before it was split in wait and communication.
_UNSPLIT_SYNC_KEY = "sync_exposed_s"


def _breakdown_parts(summary: dict) -> dict:
    """The parts that add up to the step: PART_KEYS, or with sync_exposed_s for the two sync parts
    in a log written before the split."""
    split = [key for key in PART_KEYS if key.startswith("sync")]
    if all(summary.get(key) is None for key in split) and summary.get(_UNSPLIT_SYNC_KEY) is not None:
        keys = [key for key in PART_KEYS if key not in split[1:]]
        keys[keys.index(split[0])] = _UNSPLIT_SYNC_KEY
        return {key: summary.get(key) for key in keys}
    return {key: summary.get(key) for key in PART_KEYS}


def _steady_window(epochs: list[dict]) -> tuple[float, int] | None:
    """(seconds, steps) of the steady epochs that count their steps, as the writer divides them
    (scalesweep/train/common/runlog.py, RunLog.steady_window); None without any."""
    steady = [epoch for epoch in epochs if is_count(epoch.get("epoch")) and epoch["epoch"] >= FIRST_STEADY_EPOCH
              and is_count(epoch.get("steps")) and is_number(epoch.get("seconds"))]
    if not steady:
        return None
    return math.fsum(epoch["seconds"] for epoch in steady), sum(epoch["steps"] for epoch in steady)


def mfu_problem(mfu_pct, tflops_per_gpu=None) -> str | None:
    """An MFU above MFU_MAX_PCT (computed by tidy from the header's flops_per_image, the steady
    throughput and the GPU count, against the device's peak)."""
    if not is_number(mfu_pct) or mfu_pct <= MFU_MAX_PCT:
        return None
    achieved = f" ({tflops_per_gpu:.4g} TFLOP/s per GPU)" if is_number(tflops_per_gpu) else ""
    return (f"MFU {mfu_pct:.4g} %{achieved} is above {MFU_MAX_PCT:g} % of the GPU's peak: "
            "'flops_per_image', the GPU count or the throughput is wrong")


def writer_ranks(record_lines) -> list[int]:
    """The distinct rank numbers in the `srun --label` / torchrun prefixes of record lines (the
    text before `:::SCALESWEEP`); lines without one say nothing."""
    ranks = set()
    for line in record_lines:
        match = _WRITER_PREFIX_RE.match(line)
        if match:
            ranks.add(int(match.group(1) or match.group(2)))
    return sorted(ranks)


def writers_problem(record_lines) -> str | None:
    ranks = writer_ranks(record_lines)
    if len(ranks) < 2:
        return None
    shown = ", ".join(map(str, ranks[:5])) + (", ..." if len(ranks) > 5 else "")
    return (f"records written by {len(ranks)} processes (ranks {shown} by their line prefixes): only "
            "rank 0 writes records, one writer per log")


def overlapping_runs(runs: list[tuple[dict, list[dict]]]) -> tuple[int, int] | None:
    """(i, j) of the first two runs of one log, given as (header, epochs), that ran at the same
    time: run j started before run i could have ended (its start_time plus its epochs' seconds, a
    lower bound of its length), or in the same second. Runs one after another cannot overlap, so
    such a log holds one run printed by two processes (or two jobs writing one file). Runs
    without a start_time are not judged."""
    starts = [_start(header) for header, _ in runs]
    lengths = [max(math.fsum(epoch["seconds"] for epoch in epochs if is_number(epoch.get("seconds"))), 1.0)
               for _, epochs in runs]  # at least 1 s: start_time is written to the second
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            if starts[i] is None or starts[j] is None:
                continue
            apart = (starts[j] - starts[i]).total_seconds()
            if -lengths[j] < apart < lengths[i]:
                return i, j
    return None


def _start(header: dict):
    text = header.get("start_time")
    if not isinstance(text, str):
        return None
    try:
        start = datetime.fromisoformat(text)
    except ValueError:
        return None
    return start if start.tzinfo is not None else None  # naive and aware times do not compare
