"""The energy counter against nvidia-smi on one GPU: energy per image both ways, and how far apart.

Trains ResNet-50 on one GPU with scripts/train_torch.py (steps protocol, bf16, per-GPU batch 128,
a synthetic 224 px image folder from scripts/make_imagefolder.py) while `nvidia-smi
--query-gpu=timestamp,power.draw --format=csv,noheader,nounits -lms 100` samples the same GPU.
The timed window's energy from NVML's counter (its epoch record) is compared with the integral of
the sampled power over the same window (trapezoids, the window found from the moment its record
arrived and its seconds). Prints:

    energy_counter_j_per_image <J> J      the trainer's record: energy_j / images
    energy_smi_j_per_image <J> J          nvidia-smi's power.draw integrated over the window / images
    energy_counter_vs_smi_pct <pct> %     100 x (counter - smi) / smi (goal: within +/- 5)
    energy_window_s <s> s                 the timed window (>= 30 s, or the check fails)
    energy_avg_power_w <W> W              the counter's energy / window seconds
    energy_read_overhead_pct <pct> %      the two counter reads (energy_read_s) / window seconds

    python3 benchmarks/gpu_energy_check.py              # from the repository root; ~2-4 minutes on an H100

Standard library only (torch and torchvision for the trainer). Writes only to a temporary
folder, or to $OUT when it is set (the trainer's log and the samples are kept there).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scalesweep.train.common import energy, runlog  # noqa: E402

SMI_TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"
MIN_WINDOW_S = 30.0


# ---------------------------------------------------------------- pure parts (tests/test_energy.py)


def parse_smi_line(line: str):
    """(epoch seconds, watts) of one `timestamp, power.draw` line; None for anything else
    ("[N/A]", a blank line, a warning)."""
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != 2:
        return None
    try:
        stamp = datetime.datetime.strptime(parts[0], SMI_TIME_FORMAT)  # the node's local time
        return stamp.timestamp(), float(parts[1])
    except ValueError:
        return None


def power_at(samples: list, when: float) -> float:
    """Power at `when`, linear between the samples around it (the nearest one outside them)."""
    if when <= samples[0][0]:
        return samples[0][1]
    for (t0, p0), (t1, p1) in zip(samples, samples[1:]):
        if t0 <= when <= t1:
            return p0 if t1 == t0 else p0 + (p1 - p0) * (when - t0) / (t1 - t0)
    return samples[-1][1]


def integrate_power(samples: list, start: float, end: float) -> float:
    """Joules between `start` and `end` (epoch seconds): trapezoids through the samples, the
    window's edges interpolated. Samples must be sorted by time."""
    if not samples or end <= start:
        raise ValueError(f"no power samples to integrate over [{start}, {end}]")
    points = [(start, power_at(samples, start))]
    points += [sample for sample in samples if start < sample[0] < end]
    points.append((end, power_at(samples, end)))
    return sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def counter_vs_smi_pct(counter_j: float, smi_j: float) -> float:
    return 100.0 * (counter_j - smi_j) / smi_j


# ---------------------------------------------------------------- the run


def make_data(folder: Path) -> Path:
    data = folder / "imagefolder"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_imagefolder.py"), "--out", str(data),
                    "--classes", "8", "--train-per-class", "128", "--val-per-class", "2", "--size", "224"],
                   check=True)
    return data


def trainer_command(args, data: Path) -> list:
    return [sys.executable, str(ROOT / "scripts" / "train_torch.py"), "--data", str(data), "--model", "resnet50",
            "--gpus", "1", "--resolution", "224", "--per-gpu-batch", "128", "--precision", "bf16",
            "--protocol", "steps", "--warmup-steps", "30", "--timed-steps", str(args.timed_steps),
            "--num-workers", str(args.num_workers), "--channels-last"]


def run_with_sampling(args, data: Path, folder: Path) -> tuple:
    """(timed epoch record, arrival time of its line, power samples) of one training run."""
    index = energy.nvml_indices([0], os.environ.get("CUDA_VISIBLE_DEVICES"))[0]
    samples_path = folder / "smi_power.csv"
    with open(samples_path, "w") as samples_file:
        smi = subprocess.Popen(["nvidia-smi", "-i", str(index), "--query-gpu=timestamp,power.draw",
                                "--format=csv,noheader,nounits", "-lms", "100"], stdout=samples_file)
        try:
            timed, arrived = train(args, data, folder)
            time.sleep(0.5)  # a few samples past the window's end
        finally:
            smi.terminate()
            smi.wait(timeout=10)
    samples = sorted(filter(None, map(parse_smi_line, samples_path.read_text().splitlines())))
    return timed, arrived, samples


def train(args, data: Path, folder: Path) -> tuple:
    """Runs the trainer, stamping each record line as it arrives; (timed record, its arrival)."""
    timed, arrived = None, None
    with open(folder / "train.log", "w") as log:
        trainer = subprocess.Popen(trainer_command(args, data), stdout=subprocess.PIPE, stderr=log, text=True,
                                   cwd=ROOT)
        for line in trainer.stdout:
            now = time.time()
            log.write(line)
            if runlog.PREFIX in line:
                record = json.loads(line.split(runlog.PREFIX, 1)[1])
                if record.get("phase") == "timed":
                    timed, arrived = record, now
        if trainer.wait() != 0 or timed is None:
            raise RuntimeError(f"the trainer failed (exit {trainer.returncode}); see {folder / 'train.log'}")
    return timed, arrived


def report(timed: dict, arrived: float, samples: list) -> int:
    if timed.get("energy_j") is None:
        print(f"gpu_energy_check: no counter energy: {timed.get('energy_note')}", file=sys.stderr)
        return 1
    # The record is printed right after the window's end: the window is [arrival - seconds, arrival].
    smi_j = integrate_power(samples, arrived - timed["seconds"], arrived)
    counter_per_image = timed["energy_j"] / timed["images"]
    smi_per_image = smi_j / timed["images"]
    print(f"energy_counter_j_per_image {counter_per_image:.4g} J")
    print(f"energy_smi_j_per_image {smi_per_image:.4g} J")
    print(f"energy_counter_vs_smi_pct {counter_vs_smi_pct(counter_per_image, smi_per_image):+.2f} %")
    print(f"energy_window_s {timed['seconds']:.1f} s")
    print(f"energy_avg_power_w {timed['energy_j'] / timed['seconds']:.1f} W")
    print(f"energy_read_overhead_pct {100.0 * timed['energy_read_s'] / timed['seconds']:.3g} %")
    print(f"energy_smi_samples {sum(1 for t, _ in samples if arrived - timed['seconds'] <= t <= arrived)} samples")
    if timed["seconds"] < MIN_WINDOW_S:
        print(f"gpu_energy_check: the window took {timed['seconds']:.1f} s < {MIN_WINDOW_S:g} s: "
              "raise --timed-steps", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timed-steps", type=int, default=1200, help="timed steps (default %(default)s: ~40 s)")
    parser.add_argument("--num-workers", type=int, default=12, help="loader workers (default %(default)s)")
    args = parser.parse_args(argv)
    out = os.environ.get("OUT")
    with tempfile.TemporaryDirectory(prefix="gpu-energy-") as scratch:
        folder = Path(out) if out else Path(scratch)
        data = make_data(Path(scratch))
        timed, arrived, samples = run_with_sampling(args, data, folder)
        return report(timed, arrived, samples)


if __name__ == "__main__":
    sys.exit(main())
