"""A run's epoch cut into what scales with the GPU count and what does not: the runs.csv columns
the scaling prediction (scalesweep/analysis/predict.py, docs/prediction.md) rests on.

An epoch is T = t0 + S x tau: `steps_per_epoch` (S), `step_time_s` (tau, the mean of the steady
steps the step clock timed) and `epoch_overhead_s` (t0: the epoch's wall time less its steps',
the loader start, evaluation, barriers and logging that stay when more GPUs share the images),
beside `dataset_train_images` (D, which S follows from). A log that cannot tell them apart leaves
them empty and says why in `epoch_parts_note`.
"""

from __future__ import annotations

import statistics

from scalesweep.contract import records
from scalesweep.contract.records import FIRST_STEADY_EPOCH

EPOCH_PART_COLUMNS = ["steps_per_epoch", "step_time_s", "epoch_overhead_s", "dataset_train_images"]
EPOCH_PART_NOTE_COLUMN = "epoch_parts_note"

NO_OVERHEAD_NOTES = {
    "keras": "Keras logs time an epoch as its steps x the printed ms/step (the s/epoch field is whole "
             "seconds): no epoch overhead to tell apart",
    "ddp": "the reference DDP log prints a throughput per epoch, no step time: no epoch overhead to tell apart",
}
STEPS_PROTOCOL_NOTE = "steps protocol: its windows cross no epoch boundary, so no epoch overhead is measured"


def epoch_parts(epochs: list[dict], train_images, protocol: str | None, log_format: str | None) -> dict:
    """The EPOCH_PART_COLUMNS of one finished run from its epoch records (and its note).

    Under the epochs protocol: the medians over the steady epochs (epoch >= 2) of their steps and
    overhead, and their mean step time weighted by steps (every steady step counts once). Under
    the steps protocol: the timed window's mean step; S is left to the predictor, which knows the
    framework's batching (contract/frameworks.py, epoch_steps)."""
    steady = [epoch for epoch in epochs if epoch.get("epoch", 0) >= FIRST_STEADY_EPOCH]
    parts = {"dataset_train_images": train_images if records.is_number(train_images) else None,
             "steps_per_epoch": None, "step_time_s": mean_step_time(steady), "epoch_overhead_s": None}
    note = None
    if protocol == "steps":
        note = STEPS_PROTOCOL_NOTE
    else:
        steps = [epoch["steps"] for epoch in steady if records.is_number(epoch.get("steps"))]
        overheads = [epoch["epoch_overhead_s"] for epoch in steady if records.is_number(epoch.get("epoch_overhead_s"))]
        parts["steps_per_epoch"] = round(statistics.median(steps)) if steps else None
        if overheads and len(overheads) == len(steady):
            parts["epoch_overhead_s"] = statistics.median(overheads)
        else:
            note = NO_OVERHEAD_NOTES.get(log_format, "the log's steady epochs carry no epoch_overhead_s "
                                                     "(written before it was recorded)")
    return {**parts, EPOCH_PART_NOTE_COLUMN: note}


def mean_step_time(steady: list[dict]):
    """The steady steps' mean time: each epoch's mean weighted by its steps; None where an epoch
    has no step time (every steady step must count, or the mean leans on some epochs)."""
    pairs = [(epoch.get("steps"), epoch.get("step_time_mean_s")) for epoch in steady]
    if not pairs or not all(records.is_number(steps) and steps > 0 and records.is_number(mean) for steps, mean in pairs):
        return None
    return sum(steps * mean for steps, mean in pairs) / sum(steps for steps, _ in pairs)
