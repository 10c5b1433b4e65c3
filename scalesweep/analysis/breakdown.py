"""Where a step's time goes, and which part of it grew when efficiency fell.

Every run of our trainers splits its median timed step into four parts that add up to it by
construction (docs/records.md, summary keys):

    step = data wait + compute + sync wait + sync comm + other

data wait: blocked on the next batch (host-to-device copy included); compute: forward + backward
+ optimizer at the same per-GPU batch without gradient synchronisation (probe steps between the
timed steps); exposed synchronisation, the full step minus those two, split into sync wait (the
reporting rank waiting for the slowest one: skew, not communication) and sync comm (the
communication overlap with the backward pass did not hide); other: the rest. An all-reduce probe
of the gradients' size gives the pure synchronisation time, the bus bandwidth and the overlap.

Attribution. Per image, GPU time is c(N) = N x step(N) / B(N) (B = images per step, all GPUs),
and each part j has c_j(N) = N x part_j(N) / B(N), so c = sum of c_j. Parallel efficiency is
E(N) = c(N_min) / c(N) whether the per-GPU or the global batch is fixed, and its loss splits
exactly into the parts that grew:

    1 - E(N) = sum_j (c_j(N) - c_j(N_min)) / c(N)

`loss_<part>_pct` are those terms in % (a negative one is a part that shrank: a gain); they add
up to 100 - `step_efficiency_pct`, the efficiency of the median step times (close to the
throughput efficiency, which also holds the host work between steps).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalesweep.contract.records import BREAKDOWN_PARTS

PARTS = BREAKDOWN_PARTS
PART_NAMES = {"data_wait_s": "data", "compute_s": "compute", "sync_wait_s": "sync wait",
              "sync_comm_s": "sync comm", "other_s": "other"}
LOSS_COLUMNS = ("step_efficiency_pct", *(f"loss_{PART_NAMES[p].replace(' ', '_')}_pct" for p in PARTS))
NO_BREAKDOWN_NOTE = "no step breakdown in the log (reference or older records): columns left empty"


def per_image_gpu_seconds(gpus, seconds, images_per_step):
    """GPU-seconds per image of a per-step time: N x seconds / B."""
    return np.asarray(gpus, float) * np.asarray(seconds, float) / np.asarray(images_per_step, float)


def attribute_loss(gpus, images_per_step, parts: dict, base: int) -> dict:
    """Loss columns (LOSS_COLUMNS) of one group's GPU counts against row `base`.

    `parts` maps each of PARTS to an array over the group's rows (median seconds per step)."""
    per_part = {p: per_image_gpu_seconds(gpus, parts[p], images_per_step) for p in PARTS}
    total = sum(per_part.values())
    with np.errstate(invalid="ignore", divide="ignore"):
        columns = {"step_efficiency_pct": 100.0 * total[base] / total}
        for p in PARTS:
            name = f"loss_{PART_NAMES[p].replace(' ', '_')}_pct"
            columns[name] = 100.0 * (per_part[p] - per_part[p][base]) / total
    return columns


def loss_table(cells: pd.DataFrame, base: int | None) -> dict:
    """LOSS_COLUMNS for one group's aggregate rows (NaN without a baseline or a breakdown)."""
    n = len(cells)
    if base is None or not all(p in cells for p in PARTS):
        return {column: np.full(n, math.nan) for column in LOSS_COLUMNS}
    parts = {p: cells[p].to_numpy(float) for p in PARTS}
    return attribute_loss(cells["gpus"].to_numpy(float), cells["global_batch"].to_numpy(float),
                          parts, base)


def long_parts(scaling: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The scaling table's breakdown as a long table for the stacked-bar figure: one row per group
    x GPU count x part, `ms_per_image` = per-image GPU milliseconds of that part."""
    rows = scaling.dropna(subset=list(PARTS), how="all")
    if rows.empty:
        return pd.DataFrame(columns=[*keys, "gpus", "nodes", "part", "ms_per_image"])
    frames = []
    for part in PARTS:
        ms = 1000.0 * per_image_gpu_seconds(rows["gpus"], rows[part], rows["global_batch"])
        frames.append(rows[[*keys, "gpus", "nodes"]].assign(part=PART_NAMES[part], ms_per_image=ms))
    return pd.concat(frames, ignore_index=True)
