"""Crafted runs tables in the shapes figures must survive (tests/test_layout.py, test_findings.py):
what tidy writes to runs.csv, without running a trainer.

- laptop: the default sweep (config/config.yaml) under the steps protocol with `timed_steps: auto`
  (the timed window differs per run), 4 groups x 1/2/4 stand-in GPUs, a negative `other` part;
- mn5: the 18 configurations of config/mn5.yaml, epochs protocol, up to 32 GPUs on 8 nodes;
- many: 10,000 runs, 250 groups x 8 GPU counts x 5 repeats;
- single: one run;
- failed: the laptop sweep with failed, out-of-memory and timed-out runs (one group loses its
  1-GPU baseline, one its 4-GPU run).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

LAPTOP_GROUPS = (("tensorflow", "cnn_small", "synth-cifar", 0.004, 0.93),
                 ("tensorflow", "mobilenetv3small", "synth-cifar", 0.012, 0.85),
                 ("pytorch", "vit_tiny", "synth-folder", 0.006, 0.55),
                 ("pytorch", "resnet18", "synth-folder", 0.010, 0.75))
MN5_GROUPS = (("tensorflow", "resnet50v2", "cifar128", (1, 2, 4), 2048, 0.0012, 0.97),
              ("tensorflow", "resnet152v2", "cifar128", (1, 2, 4), 1024, 0.0031, 0.98),
              ("pytorch", "vit_h_14", "micro-224", (1, 2, 4, 8, 16, 32), 64, 0.012, 0.96),
              ("pytorch", "vit_h_14", "tiny-224", (1, 2, 4, 8, 16, 32), 64, 0.012, 0.99))


def amdahl_speedup(gpus, p):
    return 1.0 / ((1.0 - p) + p / gpus)


def run_row(framework, model, dataset, gpus, per_gpu_batch, seconds_per_image, p, *,
            protocol="steps", train_images=512, repeat=0, noise=1.0, timed_steps=500,
            ci_pct=1.0, gpus_per_node=4, status="ok", reason=None):
    """One runs.csv row of an Amdahl-like run (parallel fraction p) whose median step splits
    into data, compute, exposed sync (a quarter of it waiting for the slowest rank, the rest
    communication) and other, `other` negative at 4 GPUs and more (the probe windows ran slower
    than the full steps)."""
    nodes = max(1, math.ceil(gpus / gpus_per_node))
    global_batch = per_gpu_batch * gpus
    throughput = noise * amdahl_speedup(gpus, p) / seconds_per_image
    step = global_batch / throughput
    base_step = per_gpu_batch * seconds_per_image
    data, compute = 0.06 * base_step * (1 + 0.3 * math.log2(gpus)), 0.9 * base_step
    other = 0.04 * base_step if gpus < 4 else -0.05 * step
    sync = step - data - compute - other
    window = timed_steps * global_batch / throughput
    epoch_time = window if protocol == "steps" else train_images / throughput
    ci = ci_pct / 100.0 * throughput
    row = {
        "framework": framework, "model": model, "dataset": dataset, "gpus": gpus,
        "nodes": nodes, "repeat": repeat, "per_gpu_batch": per_gpu_batch, "status": status,
        "reason": reason, "protocol": protocol, "epochs": 2 if protocol == "steps" else 5,
        "world_size": gpus, "global_batch": global_batch, "train_images": train_images,
        "steady_epoch_time_s": epoch_time, "throughput_img_s": throughput,
        "throughput_per_gpu_img_s": throughput / gpus,
        "total_time_s": math.nan if protocol == "steps" else 5 * epoch_time + 20.0,
        "timed_steps": timed_steps, "step_time_ci_pct": ci_pct,
        "throughput_ci_low_img_s": throughput - ci, "throughput_ci_high_img_s": throughput + ci,
        "wall_time_s": window + 30.0, "gpu_hours": gpus * (window + 30.0) / 3600.0,
        "breakdown_step_s": step, "data_wait_s": data, "compute_s": compute,
        "sync_wait_s": 0.25 * sync, "sync_comm_s": 0.75 * sync, "sync_exposed_s": sync, "other_s": other, "breakdown_steps": timed_steps,
        "allreduce_s": 0.3 * step if gpus > 1 else math.nan,
        "comm_compute_ratio": 0.3 * step / compute if gpus > 1 else math.nan,
        "busbw_gb_s": (80.0 if nodes == 1 else 20.0) if gpus > 1 else math.nan,
    }
    if status != "ok":
        for column in ("steady_epoch_time_s", "throughput_img_s", "throughput_per_gpu_img_s",
                       "total_time_s", "throughput_ci_low_img_s", "throughput_ci_high_img_s",
                       "breakdown_step_s", "data_wait_s", "compute_s", "sync_wait_s", "sync_comm_s",
                       "sync_exposed_s", "other_s", "allreduce_s", "comm_compute_ratio", "busbw_gb_s"):
            row[column] = math.nan
    return row


def laptop_runs() -> pd.DataFrame:
    """timed_steps: auto stops at different window lengths (228 steps at 1 GPU, 500 beyond), and
    the 4-process runs reach only +-42 % (a 2-core laptop shared by 4 processes)."""
    rows = []
    for framework, model, dataset, seconds, p in LAPTOP_GROUPS:
        for gpus in (1, 2, 4):
            rows.append(run_row(framework, model, dataset, gpus, 32, seconds, p,
                                timed_steps=228 if gpus == 1 else 500,
                                ci_pct={1: 0.9, 2: 3.0, 4: 42.0}[gpus]))
    return pd.DataFrame(rows)


def mn5_runs() -> pd.DataFrame:
    rows = []
    for framework, model, dataset, counts, batch, seconds, p in MN5_GROUPS:
        images = 50_000 if dataset == "cifar128" else 12_480
        for gpus in counts:
            rows.append(run_row(framework, model, dataset, gpus, batch, seconds, p,
                                protocol="epochs", train_images=images, ci_pct=0.5))
    return pd.DataFrame(rows)


def many_runs(n_runs: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """250 groups (model x dataset x per-GPU batch x precision) x 8 GPU counts x 5 repeats, with
    multiplicative noise; every group's own p."""
    rng = np.random.default_rng(seed)
    models = ("resnet50v2", "resnet101v2", "resnet152v2", "vit_h_14", "resnet18")
    datasets = ("tiny-224", "micro-224")
    batches = (16, 32, 64, 128, 256)
    precisions = ("fp32", "bf16", "fp16", "tf32", "fp8")
    counts = (1, 2, 4, 8, 16, 32, 64, 128)
    repeats = n_runs // (len(models) * len(datasets) * len(batches) * len(precisions)
                         * len(counts))
    rows = []
    for m, model in enumerate(models):
        for dataset in datasets:
            for batch in batches:
                for precision in precisions:
                    p = 0.9 + 0.099 * rng.random()
                    for gpus in counts:
                        for repeat in range(repeats):
                            row = run_row("pytorch", model, dataset, gpus, batch,
                                          0.001 * (m + 1), p, protocol="epochs",
                                          train_images=12_480, repeat=repeat,
                                          noise=float(rng.lognormal(0.0, 0.03)), ci_pct=2.0)
                            row["precision"] = precision
                            rows.append(row)
    return pd.DataFrame(rows)


def single_run() -> pd.DataFrame:
    return pd.DataFrame([run_row("pytorch", "vit_tiny", "synth-folder", 2, 32, 0.006, 0.6)])


def failed_runs() -> pd.DataFrame:
    runs = laptop_runs()
    failures = {("cnn_small", 1): ("failed", "exit code 1"),
                ("vit_tiny", 4): ("oom", "CUDA out of memory"),
                ("resnet18", 4): ("timeout", "time limit")}
    for (model, gpus), (status, reason) in failures.items():
        where = (runs["model"] == model) & (runs["gpus"] == gpus)
        failed = run_row(*runs.loc[where, ["framework", "model", "dataset"]].iloc[0], gpus, 32,
                         0.01, 0.5, status=status, reason=reason)
        runs.loc[where, list(failed)] = pd.DataFrame([failed], index=runs.index[where])
    return runs


DATA_SETS = {"laptop": laptop_runs, "mn5": mn5_runs, "many": many_runs, "single": single_run,
             "failed": failed_runs}
