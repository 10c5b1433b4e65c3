"""Benchmark of the analysis (issue 36's rows): `python -m scalesweep analyze` of the default
sweep's 12 run logs and of 10,000, and `snakemake -n` on a 1,000-configuration matrix, each on
this checkout and on a base (817bbc2 unless told), alternating (benchmarks/paired.py).

    .venv/bin/python benchmarks/bench_analysis.py [--runs 10000] [--configs 1000] [--rounds 3]
        [--base PATH | --base-commit 817bbc2 | --no-base] [--only sweep|analyze|dryrun ...]

Prints, per row (analyze_12_runs, analyze_10k_runs, dryrun_1000_configs), `name value unit`
lines: `<row>_cpu_s`, `<row>_wall_s` (median, `_min`, `_max`) for this checkout,
`<row>_base_...` for the base, `<row>_cpu_ratio_to_base` and `<row>_wall_ratio_to_base` (median,
min, max of each pair's ratio), and `<row>_wall_goal_ratio` (the median over issue 36's goal: 5 s,
10 s, 2 s). The dry run is also paired with its floor, `snakemake -n` of a one-rule workflow of as
many jobs (no checkout's code: Snakemake's own imports, DAG and job printing, which no Snakefile
avoids): `dryrun_<n>_configs_vs_floor_...` (this checkout again, in that pairing),
`..._vs_floor_floor_...` and `..._wall_ratio_to_floor`. For the analysis rows,
`<row>_outputs_equal` and `<row>_outputs_differing` (files of both sides' first analysis, figures aside: benchmarks/outputs_diff.py), each differing file named on
stderr with how it differs. Both sides are whole commands in a subprocess (interpreter start, imports, parsing,
tables, figures, DAG building), as a user waits for them, run from a folder outside both
checkouts on the same input, made once by this checkout. They measure, they do not judge: the
benchmark exits non-zero only when a step fails or its output is wrong (runs missing from
runs.csv, another configuration count than asked).

The logs are what the trainers print (docs/records.md, written by scalesweep/train/common/runlog.py,
the trainers' own record writer): Keras / reference-DDP human lines and `:::SCALESWEEP` records,
over 264 groups (framework x model x dataset x per-GPU batch x precision) x GPU counts x repeats,
with Amdahl-like epoch times, noise, and a few crashed, killed, timed-out and out-of-memory runs. A
manifest.csv beside them gives each log's axes, as the workflow passes them to the tidy step. The
default sweep's 12 logs are written the same way: one finished run per configuration that
config/config.yaml plans, on its synthetic datasets' sizes.
"""

import argparse
import copy
import csv
import math
import random
import re
import shutil
import statistics
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import outputs_diff  # noqa: E402  (beside this file)
import paired  # noqa: E402
from paired import BenchmarkFailure  # noqa: E402

from scalesweep.train.common import runlog  # noqa: E402  (the trainers' record writer)

from scalesweep.plan import config as config_files, matrix  # noqa: E402

PYTHON = sys.executable
# Issue 36's goals (wall seconds on the 2-core machine) and the commit its table was measured on.
DEFAULT_SWEEP_GOAL_S = 5.0
ANALYZE_GOAL_S = 10.0
DRYRUN_GOAL_S = 2.0
BASE_COMMIT = "817bbc2"
ROWS = ("sweep", "analyze", "dryrun")
DEFAULT_RUNS = 10_000
DEFAULT_CONFIGS = 1_000

# ---------------------------------------------------------------------------------------------
# Synthetic run logs

# (training images, resolution) of the datasets of the reference setups (docs/reference.md §1-2) and
# of their smaller siblings a user would sweep beside them.
TF_DATASETS = {"cifar128": (50_000, 128), "cifar32": (50_000, 32)}
TORCH_DATASETS = {
    "tiny-224": (100_000, 224), "micro-224": (12_480, 224), "tiny-64": (100_000, 64),
}
TF_GPUS = (0, 1, 2, 4)  # MirroredStrategy: one node; 0 = the CPU-only baseline
TORCH_GPUS = (1, 2, 4, 8, 16, 32)
BATCHES = (32, 64, 128, 256)
PRECISIONS = ("fp32", "bf16", "fp16")
GPUS_PER_NODE = 4
# (models, datasets, GPU counts, seconds per image at 224 px on one GPU) per framework.
FRAMEWORKS = {
    "tensorflow": (("resnet50v2", "resnet101v2", "resnet152v2", "mobilenetv3small", "cnn_small"),
                   TF_DATASETS, TF_GPUS, 1.2e-3),
    "pytorch": (("vit_h_14", "resnet50", "resnet18", "vit_tiny"),
                TORCH_DATASETS, TORCH_GPUS, 1e-3),
}
# Time per image relative to ResNet-50.
MODEL_COST = {
    "resnet50v2": 1.0, "resnet101v2": 1.8, "resnet152v2": 2.6, "mobilenetv3small": 0.3,
    "cnn_small": 0.1, "vit_h_14": 12.0, "resnet50": 1.0, "resnet18": 0.45, "vit_tiny": 0.2,
}
PRECISION_SPEED = {"fp32": 1.0, "bf16": 0.55, "fp16": 0.6}
# Shares of runs that end badly, beside the configurations that never fit (out_of_memory).
CRASHED, KILLED, TIMED_OUT, OOM = 0.006, 0.01, 0.004, 0.003


def out_of_memory(config: dict) -> bool:
    """ViT-H/14 at 256 images per GPU in fp32 does not fit an 80 GB card: every such run is oom."""
    return (config["model"] == "vit_h_14" and config["per_gpu_batch"] == 256
            and config["precision"] == "fp32")


@dataclass(frozen=True)
class Run:
    file: str
    config: dict  # the axes, as the workflow's run_axes() gives them (plus repeat)
    outcome: str  # ok | crashed | killed | timeout | oom
    serial_fraction: float
    seconds_per_image: float
    dataset_size: tuple  # (training images, resolution)

    @property
    def expected_status(self) -> str:
        """What the parser must make of the log."""
        return {"crashed": "failed", "killed": "failed"}.get(self.outcome, self.outcome)


def sweep_configurations() -> list[dict]:
    """Every group x GPU count of the synthetic sweep, in sweep order (without repeat)."""
    configs = []
    for framework, (models, datasets, gpu_counts, _) in FRAMEWORKS.items():
        for model in models:
            for dataset in datasets:
                for batch in BATCHES:
                    for precision in PRECISIONS:
                        for gpus in gpu_counts:
                            configs.append({
                                "framework": framework, "model": model, "dataset": dataset,
                                "gpus": gpus, "nodes": matrix.nodes_for(gpus, GPUS_PER_NODE),
                                "per_gpu_batch": batch, "precision": precision,
                            })
    return configs


def plan_runs(n_runs: int, seed: int = 0) -> list[Run]:
    """n_runs runs: every configuration once per repeat, repeats until n_runs (the last partial)."""
    rng = random.Random(seed)
    configs = sweep_configurations()
    # One serial fraction per group: the scaling of a group is a property of what it trains.
    fractions = {}
    runs = []
    for index in range(n_runs):
        repeat, config = divmod(index, len(configs))
        config = {**configs[config], "repeat": repeat}
        group = tuple(v for k, v in config.items() if k not in ("gpus", "nodes", "repeat"))
        serial = fractions.setdefault(group, rng.uniform(0.01, 0.15))
        runs.append(planned_run(config, FRAMEWORKS[config["framework"]][1][config["dataset"]],
                                serial, draw_outcome(config, rng)))
    return runs


def planned_run(config: dict, dataset_size: tuple, serial_fraction: float, outcome: str) -> Run:
    cost = MODEL_COST[config["model"]] * PRECISION_SPEED[config["precision"]]
    pixels = (dataset_size[1] / 224) ** 2
    per_image = FRAMEWORKS[config["framework"]][3] * cost * pixels
    per_image *= 30 if config["gpus"] == 0 else 1
    return Run(run_file_name(config), config, outcome, serial_fraction, per_image, dataset_size)


def default_sweep_runs(configfile: Path = REPO / "config" / "config.yaml") -> list[Run]:
    """One finished run per configuration of the default sweep (12 on config/config.yaml), as
    the workflow plans them, on its synthetic datasets' sizes; each group scales alike."""
    config = {"container": {"runtime": "none"}, **yaml.safe_load(configfile.read_text())}
    config_files.validate_config(config)  # fills in the schema's defaults
    planned, _ = matrix.plan(config, check_paths=False)
    runs = []
    for run in planned:
        settings = matrix.run_settings(run, config)
        axes = {axis: settings[axis] for axis in MANIFEST_AXES if axis != "repeat"}
        runs.append(planned_run({**axes, "repeat": settings.get("repeat", 0)},
                                synthetic_size(config["datasets"][run["dataset"]]), 0.05, "ok"))
    return runs


def synthetic_size(dataset: dict) -> tuple:
    """(training images, resolution) of a synthetic dataset of the config."""
    synthetic = dataset["synthetic"]
    images = synthetic.get("train_images") or synthetic["classes"] * synthetic["train_per_class"]
    return images, dataset["resolution"]


def run_file_name(config: dict) -> str:
    """e.g. tensorflow-resnet50v2-cifar128-g4-r1-b256-bf16.log: unique per configuration."""
    parts = [config[k] for k in ("framework", "model", "dataset")]
    parts += [f"g{config['gpus']}", f"r{config['repeat']}", f"b{config['per_gpu_batch']}", config["precision"]]
    return "-".join(map(str, parts)) + ".log"


def draw_outcome(config: dict, rng: random.Random) -> str:
    if out_of_memory(config):
        return "oom"
    draw = rng.random()
    for outcome, share in (("crashed", CRASHED), ("killed", KILLED), ("timeout", TIMED_OUT),
                           ("oom", OOM)):
        if draw < share:
            return outcome
        draw -= share
    return "ok"


def images_per_epoch(run: Run) -> int:
    """Images an epoch trains: the dataset, less the last partial global batch (drop_last)."""
    global_batch = run.config["per_gpu_batch"] * max(1, run.config["gpus"])
    return run.dataset_size[0] // global_batch * global_batch


def epoch_seconds(run: Run, images: int, epoch: int, rng: random.Random) -> float:
    """Amdahl-like time of one epoch: a serial share that does not shrink with N, plus noise;
    epoch 1 carries graph build / compilation / cache fill."""
    gpus = max(1, run.config["gpus"])
    ideal = images * run.seconds_per_image
    seconds = ideal * (run.serial_fraction + (1 - run.serial_fraction) / gpus)
    seconds *= rng.lognormvariate(0.0, 0.03)
    return seconds * (1.6 if epoch == 1 else 1.0) + (8.0 if epoch == 1 else 0.0)


def header_record(run: Run, images: int, epochs: int) -> dict:
    config = run.config
    gpus, framework = config["gpus"], config["framework"]
    world = max(1, gpus)
    kind = "cpu" if gpus == 0 else "gpu"
    if framework == "tensorflow":
        devices = [f"/job:localhost/replica:0/task:0/device:{kind.upper()}:{i}"
                   for i in range(world)]
    else:
        devices = [f"cuda:{i % GPUS_PER_NODE}" for i in range(world)]
    nodes = config["nodes"]
    base_lr = 0.001 if config["model"] == "vit_h_14" else 0.01
    versions = {"python": "3.11.2", "numpy": "2.4.0", "cuda": "12.8"}
    versions.update({"tensorflow": "2.21.0", "keras": "3.12.0"} if framework == "tensorflow"
                    else {"torch": "2.14.1"})
    return {
        "record": "header", "framework": framework, "model": config["model"],
        "dataset": config["dataset"], "resolution": run.dataset_size[1],
        "gpus": gpus, "device_kind": kind, "world_size": world, "nodes": config["nodes"],
        "per_gpu_batch": config["per_gpu_batch"], "global_batch": config["per_gpu_batch"] * world,
        "learning_rate": base_lr * world, "precision": config["precision"], "compile": False,
        "epochs": epochs,
        "images_per_epoch": images, "protocol": "epochs", "versions": versions,
        "devices": devices, "hostname": "as01r1b05",
        "slurm_job_id": str(4_000_000 + zlib.crc32(run.file.encode()) % 99_999),
        "slurm_nodelist": "as01r1b05" if nodes == 1 else f"as01r1b[05-{4 + nodes:02d}]",
        "start_time": "2025-11-14T10:00:00+00:00",
    }


class LogWriter:
    """The lines one trainer prints: its human lines (Keras, or the reference DDP's INFO lines)
    interleaved with the records."""

    def __init__(self, framework: str):
        self.framework = framework
        self.lines: list[str] = []

    def human(self, message: str) -> None:
        if self.framework == "pytorch":
            message = f"[11/14/2025 10:02:17 AM] INFO - {message}"
        self.lines.append(message)

    def record(self, record: dict) -> None:
        # torchrun with --tee / srun --label put their own prefix before rank 0's lines.
        prefix = "[rank0]: " if self.framework == "pytorch" else ""
        self.lines.append(prefix + runlog.format_record(record))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def log_text(run: Run, rng: random.Random) -> str:
    """The whole log of one run, as its trainer would have printed it."""
    config = run.config
    images = images_per_epoch(run)
    epochs = 5
    header = header_record(run, images, epochs)
    log = LogWriter(config["framework"])
    _human_header(log, header)
    log.record(header)
    if run.outcome == "oom":
        return _oom_ending(log, config)
    epochs_done = epochs if run.outcome in ("ok", "crashed") else rng.randint(1, epochs - 1)
    startup = rng.uniform(15.0, 45.0) + 2.0 * header["nodes"]
    seconds = []
    for epoch in range(1, epochs_done + 1):
        seconds.append(epoch_seconds(run, images, epoch, rng))
        _epoch_lines(log, header, epoch, seconds[-1], rng)
    if run.outcome == "killed":
        return log.text()  # log ends before the summary record
    if run.outcome == "timeout":
        log.lines.append(f"slurmstepd: error: *** JOB {header['slurm_job_id']} ON as01r1b05 "
                         "CANCELLED AT 2025-11-14T11:15:02 DUE TO TIME LIMIT ***")
        return log.text()
    if run.outcome == "crashed":
        return _crash_ending(log, epochs_done, startup + sum(seconds))
    summary = {
        "record": "summary", "status": "ok", "reason": None, "epochs": epochs_done,
        "train_time_s": sum(seconds), "steady_epoch_time_s": statistics.median(seconds[1:]),
        "throughput_img_s": statistics.median(images / s for s in seconds[1:]),
        "total_time_s": startup + sum(seconds),
        "memory_gb": None if header["device_kind"] == "cpu" else round(
            2.0 + config["per_gpu_batch"] * MODEL_COST[config["model"]] * 0.05, 2),
        "peak_host_rss_gb": round(rng.uniform(3.0, 9.0), 2), "oom_retries": 0,
    }
    _human_summary(log, summary)
    log.record(summary)
    return log.text()


def _human_header(log: LogWriter, header: dict) -> None:
    if header["framework"] == "tensorflow":
        log.human(f" Model {header['model']} {header['gpus']} GPUs")
        log.human("-----------------------")
        log.human(f"Batch_size: {header['global_batch']}")
        log.human(f"Num_replicas: {header['world_size']}")
        return
    steps = header["images_per_epoch"] // header["global_batch"]
    for line in (f"### model_name: {header['model']}",
                 f"### batch_size: {header['per_gpu_batch']}",
                 f"### global_batch_size: {header['global_batch']}",
                 f"### world_size: {header['world_size']}",
                 f"### mixed_precision: {header['precision']}",
                 f"### Total training samples (batches): "
                 f"{header['images_per_epoch'] // header['world_size']} ({steps})"):
        log.human(line)


def _epoch_lines(log: LogWriter, header: dict, epoch: int, seconds: float, rng) -> None:
    images = header["images_per_epoch"]
    loss, accuracy = round(2.3 / epoch + rng.uniform(0, 0.1), 4), round(0.1 * epoch, 4)
    if header["framework"] == "tensorflow":
        steps = images // header["global_batch"]
        log.human(f"Epoch {epoch}/{header['epochs']}")
        log.human(f"{steps}/{steps} - {seconds:.0f}s - {seconds / steps * 1000:.0f}ms/step "
                  f"- accuracy: {accuracy:.4f} - loss: {loss:.4f}")
    else:
        log.human(f"[EPOCH: {epoch}] Starting training loop...")
        log.human(f"[EPOCH: {epoch}] Training throughput: {images / seconds:.3f} imgs/s")
    steps = images // header["global_batch"]
    step = seconds / steps
    warm = epoch == 1 and steps <= 5  # every step of the epoch is a warm-up step
    log.record({"record": "epoch", "epoch": epoch, "images": images, "seconds": seconds,
                "throughput_img_s": images / seconds, "loss": loss, "accuracy": accuracy,
                "steps": steps, "step_time_median_s": None if warm else step,
                "step_time_p90_s": None if warm else step * 1.04, "phase": None})


def _human_summary(log: LogWriter, summary: dict) -> None:
    if log.framework == "tensorflow":
        log.human(f"train_tf: steady epoch time {summary['steady_epoch_time_s']:.3f} s, "
                  f"throughput {summary['throughput_img_s']:.1f} img/s")
        return
    log.human("Training finished!")
    log.human(f"Complete training Time: {summary['total_time_s']:.0f} s")
    log.human(f"Training throughput:    {summary['throughput_img_s']:.0f} imgs/s")


def _oom_ending(log: LogWriter, config: dict) -> str:
    reason = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
              if config["framework"] == "pytorch" else
              "ResourceExhaustedError: OOM when allocating tensor with shape[256,64,64,256]")
    log.human(f"out of memory at the first training step: {reason}")
    log.record({"record": "summary", "status": "oom", "reason": reason, "epochs": 0,
                "train_time_s": 0, "steady_epoch_time_s": None, "throughput_img_s": None,
                "total_time_s": 41.2, "memory_gb": 79.1, "peak_host_rss_gb": 5.4,
                "oom_retries": 0})
    return log.text()


def _crash_ending(log: LogWriter, epochs_done: int, total: float) -> str:
    """A crash after the last epoch (writing a checkpoint): the trainer's own failed summary."""
    reason = "OSError: [Errno 122] Disk quota exceeded: '/gpfs/scratch/ckpt'"
    log.lines += ["Traceback (most recent call last):", '  File "train.py", line 600, in <module>',
                  reason]
    log.record({"record": "summary", "status": "failed", "reason": reason, "epochs": epochs_done,
                "train_time_s": None, "steady_epoch_time_s": None, "throughput_img_s": None,
                "total_time_s": total, "memory_gb": None, "peak_host_rss_gb": None,
                "oom_retries": 0})
    return log.text()


MANIFEST_AXES = ("framework", "model", "dataset", "gpus", "nodes", "per_gpu_batch", "precision",
                 "repeat")


def write_logs(folder: Path, runs: list[Run], seed: int = 0) -> None:
    """Every run's log, and folder/manifest.csv naming each log's axes."""
    rng = random.Random(seed + 1)
    folder.mkdir(parents=True, exist_ok=True)
    for run in runs:
        (folder / run.file).write_text(log_text(run, rng))
    with open(folder / "manifest.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["file", *MANIFEST_AXES])
        for run in runs:
            writer.writerow([run.file, *(run.config[axis] for axis in MANIFEST_AXES)])


# ---------------------------------------------------------------------------------------------
# The 1,000-configuration matrix

DRYRUN_MATRIX = {
    # 5 TensorFlow models x 3 GPU counts (one node) + 2 PyTorch models x 5 GPU counts = 25
    # configurations per (repeat, batch, precision); the rest of the product is left out by the
    # model-framework, dataset-format and tensorflow-single-node rules, as in a real sweep.
    "framework": ["tensorflow", "pytorch"],
    "model": ["resnet50v2", "resnet101v2", "resnet152v2", "mobilenetv3small", "cnn_small",
              "resnet18", "vit_tiny"],
    "dataset": ["synth-cifar", "synth-folder"],
    "gpus": [1, 2, 4, 8, 16],
    "per_gpu_batch": [32, 64, 128, 256],
    "precision": ["fp32", "bf16"],
}
DRYRUN_BLOCK = 25


def dryrun_config(n_configs: int) -> dict:
    """config/config.yaml with a matrix that leaves exactly n_configs configurations (a multiple
    of 25): repeats of the 200 configurations above, the last repeat's surplus excluded by
    `exclude` patterns of 25 configurations each."""
    if n_configs < DRYRUN_BLOCK or n_configs % DRYRUN_BLOCK:
        raise ValueError(f"--configs must be a positive multiple of {DRYRUN_BLOCK}, "
                         f"got {n_configs}")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    blocks = [(b, p) for b in DRYRUN_MATRIX["per_gpu_batch"] for p in DRYRUN_MATRIX["precision"]]
    per_repeat = DRYRUN_BLOCK * len(blocks)
    repeats = math.ceil(n_configs / per_repeat)
    surplus = (repeats * per_repeat - n_configs) // DRYRUN_BLOCK
    config["matrix"] = {**copy.deepcopy(DRYRUN_MATRIX), "repeat": list(range(repeats))}
    # Every configuration must pass today's checks: a dataset smaller than one full step of the
    # largest global batch (256 x 16) would be refused before the preview.
    largest_step = max(DRYRUN_MATRIX["per_gpu_batch"]) * max(DRYRUN_MATRIX["gpus"])
    for dataset in config["datasets"].values():
        synthetic = dataset["synthetic"]
        if "train_images" in synthetic:
            synthetic["train_images"] = max(synthetic["train_images"], largest_step)
        else:
            synthetic["train_per_class"] = max(synthetic["train_per_class"],
                                               math.ceil(largest_step / synthetic["classes"]))
    config["exclude"] = [{"repeat": repeats - 1, "per_gpu_batch": b, "precision": p}
                         for b, p in blocks[len(blocks) - surplus:]]
    return config


def planned_configurations(config: dict) -> int:
    """Configurations the workflow will plan (scalesweep.plan.matrix, with the schema's defaults)."""
    full = {"container": {"runtime": "none"}, **copy.deepcopy(config)}
    full["cluster"] = {"gpus_per_node": GPUS_PER_NODE, **full.get("cluster", {})}
    runs, _ = matrix.plan(full, check_paths=False)
    return len(runs)


# ---------------------------------------------------------------------------------------------
# Timing: each row on this checkout and on the base (paired.py), alternating


def analyze_side(logs: Path, runs: list[Run], workdir: Path, tables_checked: bool):
    """run_side for paired.run_pairs: `python -m scalesweep analyze` of `logs` by a checkout,
    from a folder outside it; its runs.csv checked, and (this checkout) every table and figure."""

    def run_side(side, checkout, index):
        out = workdir / f"analysis-{side}-{index}"
        timing, _ = paired.timed([PYTHON, "-m", "scalesweep", "analyze", str(logs), "--out", str(out)],
                                 cwd=workdir, env=paired.side_env(checkout))
        check_analysis(out, runs, tables_checked and side == paired.HEAD)
        if index > 0:  # the first of each side stays, for outputs_diff
            shutil.rmtree(out, ignore_errors=True)
        return timing

    return run_side


def check_analysis(out: Path, runs: list[Run], tables_checked: bool) -> None:
    """runs.csv holds every run with the status its log implies; every table and figure exists."""
    with open(out / "tidy" / "runs.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    expected = {str(run.file): run.expected_status for run in runs}
    found = {Path(row["log"]).name: row["status"] for row in rows}
    if len(rows) != len(runs) or found != expected:
        wrong = [name for name in expected if found.get(name) != expected[name]][:5]
        raise BenchmarkFailure(f"runs.csv has {len(rows)} rows for {len(runs)} logs; "
                               f"wrong or missing status for e.g. {wrong}")
    if not tables_checked:
        return
    from scalesweep.analysis import tables  # the package's own lists of what analyze writes
    from scalesweep.report import figures

    missing = [f"tables/{name}.csv" for name in tables.TABLES
               if not (out / "tables" / f"{name}.csv").exists()]
    missing += [f"figures/{name}.png" for name in figures.FIGURE_NAMES
                if not (out / "figures" / f"{name}.png").exists()]
    if missing:
        raise BenchmarkFailure(f"analyze did not write {', '.join(missing)}")


def dryrun_side(configfile: Path, n_configs: int, workdir: Path):
    """run_side for paired.run_pairs: `snakemake -n` of a checkout's Snakefile on `configfile`."""

    def run_side(side, checkout, index):
        rundir = workdir / f"dryrun-{side}-{index}"
        rundir.mkdir()
        timing, result = paired.timed([
            PYTHON, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(configfile),
            "-d", str(rundir), "--snakefile", str(checkout / "Snakefile"),
        ], cwd=workdir, env=paired.side_env(checkout))
        expected = f"scalesweep: {n_configs} configurations to run"
        if expected not in result.stderr + result.stdout:
            raise BenchmarkFailure(f"snakemake -n ({side}) did not print '{expected}':\n"
                                   f"{result.stderr[-3000:]}")
        shutil.rmtree(rundir, ignore_errors=True)
        return timing

    return run_side


# The least a workflow planning n jobs costs Snakemake: one rule with a params function, threads
# and resources, as each of our training jobs has, and the target rule.
FLOOR_SNAKEFILE = """\
rule all:
    input: expand("runs/{run}/train.log", run=range(int(config["jobs"])))

rule train:
    output: "runs/{run}/train.log"
    threads: 1
    resources: runtime=10
    params: command=lambda wildcards: f"train --run {wildcards.run}"
    shell: "{params.command} > {output:q}"
"""


def dryrun_floor(n_configs: int, workdir: Path):
    """floor for paired.floor_pairs: `snakemake -n` of FLOOR_SNAKEFILE with n_configs jobs."""
    snakefile = workdir / "floor.smk"
    snakefile.write_text(FLOOR_SNAKEFILE)

    def run_floor(index):
        rundir = workdir / f"dryrun-floor-{index}"
        rundir.mkdir()
        timing, result = paired.timed([
            PYTHON, "-m", "snakemake", "-n", "--cores", "1", "--snakefile", str(snakefile),
            "-d", str(rundir), "--config", f"jobs={n_configs}",
        ], cwd=workdir)
        if not re.search(rf"^train\s+{n_configs}$", result.stdout + result.stderr, re.MULTILINE):
            raise BenchmarkFailure(f"the floor's snakemake -n did not plan {n_configs} train jobs:\n"
                                   f"{result.stderr[-3000:]}")
        shutil.rmtree(rundir, ignore_errors=True)
        return timing

    return run_floor


def dryrun_configfile(workdir: Path, n_configs: int) -> Path:
    config = dryrun_config(n_configs)
    planned = planned_configurations(config)
    if planned != n_configs:
        raise BenchmarkFailure(f"the dry-run matrix plans {planned} configurations, "
                               f"not {n_configs}")
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    return configfile


def count_label(n: int) -> str:
    """10000 -> 10k (the issue's name for the figure), 1000 -> 1000."""
    return f"{n // 1000}k" if n >= 10_000 and n % 1000 == 0 else str(n)


@dataclass(frozen=True)
class Row:
    name: str
    run_side: object  # paired.run_pairs's run_side
    goal_wall_s: float | None
    outputs: bool = False  # each side's first run leaves analysis-<side>-0 to compare
    floor: object = None  # paired.floor_pairs's floor: the row is paired with it, not with the base


def output_lines(row: Row, workdir: Path) -> list[str]:
    """How the two sides' outputs of an analysis row differ (outputs_diff.py): counts as figures,
    each differing file named on stderr."""
    equal, differing = outputs_diff.differences(workdir / f"analysis-{paired.BASE}-0",
                                                workdir / f"analysis-{paired.HEAD}-0")
    for name, how in differing:
        print(f"bench_analysis: {row.name}: {name} differs from the base's: {how}", file=sys.stderr)
    return [f"{row.name}_outputs_equal {len(equal)} files",
            f"{row.name}_outputs_differing {len(differing)} files"]


def rows(args, workdir: Path) -> list[Row]:
    """The rows asked for, their inputs made once by this checkout for both sides."""
    asked = set(args.only or ROWS)
    made = []
    logs_and_goals = []
    if "sweep" in asked:
        logs_and_goals.append((default_sweep_runs(), DEFAULT_SWEEP_GOAL_S))
    if "analyze" in asked:
        logs_and_goals.append((plan_runs(args.runs), ANALYZE_GOAL_S if args.runs == DEFAULT_RUNS else None))
    for runs, goal in logs_and_goals:
        logs = workdir / f"logs-{len(runs)}"
        write_logs(logs, runs)
        made.append(Row(f"analyze_{count_label(len(runs))}_runs",
                        analyze_side(logs, runs, workdir, tables_checked=True), goal, outputs=True))
    if "dryrun" in asked:
        configfile, name = dryrun_configfile(workdir, args.configs), f"dryrun_{count_label(args.configs)}_configs"
        made.append(Row(name, dryrun_side(configfile, args.configs, workdir),
                        DRYRUN_GOAL_S if args.configs == DEFAULT_CONFIGS else None))
        made.append(Row(f"{name}_vs_floor", dryrun_side(configfile, args.configs, workdir), None,
                        floor=dryrun_floor(args.configs, workdir)))
    return made


def measure(args, workdir: Path) -> None:
    with paired.BaseCheckout(args.base, None if args.no_base else args.base_commit) as base:
        checkouts = {paired.HEAD: REPO, paired.BASE: base}
        paired.compile_checkouts([REPO] if args.no_base else [REPO, base])
        for row in rows(args, workdir):
            if row.floor is not None:
                pairs = paired.floor_pairs(lambda index: row.run_side(paired.HEAD, REPO, index), row.floor,
                                           args.rounds)
                paired.print_lines(paired.pair_lines(row.name, pairs, other=paired.FLOOR))
                continue
            if args.no_base:
                timings = [row.run_side(paired.HEAD, REPO, index) for index in range(args.rounds)]
                paired.print_lines(paired.side_lines(row.name, timings))
                continue
            pairs = paired.run_pairs(row.run_side, checkouts, args.rounds)
            paired.print_lines(paired.pair_lines(row.name, pairs, row.goal_wall_s))
            if row.outputs:
                paired.print_lines(output_lines(row, workdir))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="run logs to analyze")
    parser.add_argument("--configs", type=int, default=DEFAULT_CONFIGS,
                        help=f"configurations for snakemake -n (a multiple of {DRYRUN_BLOCK})")
    parser.add_argument("--only", choices=ROWS, action="append",
                        help="time these rows only (sweep: the default sweep's 12 logs; analyze: "
                             "--runs logs; dryrun); may be given more than once")
    paired.add_base_arguments(parser, default_commit=BASE_COMMIT)
    parser.add_argument("--no-base", action="store_true",
                        help="time this checkout only (no ratio): the suite's quick check")
    parser.add_argument("--keep", action="store_true",
                        help="keep the generated logs, outputs and config (path on stderr)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.configs < DRYRUN_BLOCK or args.configs % DRYRUN_BLOCK:
        parser.error(f"--configs must be a positive multiple of {DRYRUN_BLOCK}, got {args.configs}")
    workdir = Path(tempfile.mkdtemp(prefix="scalesweep-bench-"))
    try:
        measure(args, workdir)
    except (BenchmarkFailure, ValueError) as error:
        print(f"bench_analysis: FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"bench_analysis: kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
