"""What one throughput point costs: the book's protocol against the adaptive steps protocol.

The book's protocol trains 5 whole epochs and takes the steady state from epoch 2 on; the
adaptive steps protocol (`--protocol steps --timed-steps auto --target-ci-pct 1`) trains a few
warm-up steps, then times steps until the mean step time is known to +/- 1 % (95 %, batch
means). Both run the same trainer, model, data and machine, one after the other in each round
(the two sides of the ratio are paired), each in its own process; a round's cost is the CPU
seconds of that process and its children (start-up, data, warm-up, measurement: what a job pays).

Prints `name value unit` lines; per round:

    measurement_cost_ratio_round <epochs CPU-s / steps CPU-s> x
    ...
then over the rounds the median and min-max of the ratio, both throughputs, and whether the steps
value lies inside the epochs run's 95 % interval (else the difference in %).

    .venv/bin/python benchmarks/bench_protocols.py                  # 3 rounds, CIFAR-10 size
    .venv/bin/python benchmarks/bench_protocols.py --rounds 1 --train-images 5000   # quick look
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scalesweep.train.common import measure  # noqa: E402
from scalesweep.train.datasets import make_cifar  # noqa: E402

from scalesweep.tidy import rows  # noqa: E402


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_trainer(args, data: Path, protocol_options: list, log: Path) -> dict:
    """One trainer process; its CPU seconds, wall seconds and the parsed run."""
    command = [sys.executable, str(ROOT / "scripts" / "train_tf.py"), "--data", str(data),
               "--model", args.model, "--gpus", "1", "--resolution", str(args.resolution),
               "--per-gpu-batch", str(args.batch), "--warmup-steps", "5", *protocol_options]
    before, started = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    cpu, wall = children_cpu_s() - before, time.perf_counter() - started
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    _, runs = rows.runs_table([(log, {})])
    row = runs.iloc[0]
    if row["status"] != "ok":
        raise RuntimeError(f"{log}: status {row['status']}: {row['reason']}")
    return {"cpu_s": cpu, "wall_s": wall, "throughput": float(row["throughput_img_s"]),
            "low": float(row["throughput_ci_low_img_s"]), "high": float(row["throughput_ci_high_img_s"]),
            "timed_steps": int(row["timed_steps"]), "ci_pct": float(row["step_time_ci_pct"])}


def figure(name: str, value, unit: str) -> None:
    print(f"{name} {value:.4g} {unit}" if isinstance(value, float) else f"{name} {value} {unit}",
          flush=True)


def one_round(args, data: Path, workdir: Path, index: int) -> dict:
    epochs = run_trainer(args, data, ["--protocol", "epochs", "--epochs", "5"],
                         workdir / f"epochs_{index}.log")
    steps = run_trainer(args, data, ["--protocol", "steps", "--timed-steps", "auto",
                                     "--target-ci-pct", str(args.target_ci_pct),
                                     "--max-timed-steps", str(args.max_timed_steps)],
                        workdir / f"steps_{index}.log")
    ratio = epochs["cpu_s"] / steps["cpu_s"]
    inside = epochs["low"] <= steps["throughput"] <= epochs["high"]
    difference = 100.0 * (steps["throughput"] / epochs["throughput"] - 1.0)
    figure("measurement_cost_ratio_round", ratio, "x")
    figure("epochs_protocol_cpu_s_round", epochs["cpu_s"], "s")
    figure("steps_protocol_cpu_s_round", steps["cpu_s"], "s")
    figure("epochs_protocol_throughput_round", epochs["throughput"],
           f"img/s (95 % {epochs['low']:.1f}-{epochs['high']:.1f}, {epochs['timed_steps']} steps)")
    figure("steps_protocol_throughput_round", steps["throughput"],
           f"img/s (95 % {steps['low']:.1f}-{steps['high']:.1f}, {steps['timed_steps']} steps, "
           f"+/-{steps['ci_pct']:.2f} %)")
    figure("steps_inside_epochs_interval_round", "yes" if inside else "no",
           f"(difference {difference:+.2f} %)")
    return {"ratio": ratio, "inside": inside, "difference": difference, "epochs": epochs, "steps": steps}


def summary(rounds: list[dict]) -> None:
    ratios = [r["ratio"] for r in rounds]
    figure("measurement_cost_ratio", statistics.median(ratios),
           f"x (median of {len(ratios)}; min {min(ratios):.3g}, max {max(ratios):.3g}; epochs/steps)")
    for side in ("epochs", "steps"):
        values = [r[side]["throughput"] for r in rounds]
        figure(f"{side}_protocol_throughput", statistics.median(values),
               f"img/s (median; min {min(values):.1f}, max {max(values):.1f})")
        cpu = [r[side]["cpu_s"] for r in rounds]
        figure(f"{side}_protocol_cpu_s", statistics.median(cpu), f"s (min {min(cpu):.1f}, max {max(cpu):.1f})")
    inside = sum(r["inside"] for r in rounds)
    differences = [r["difference"] for r in rounds]
    figure("steps_inside_epochs_interval", f"{inside}/{len(rounds)}",
           f"rounds (differences {', '.join(f'{d:+.2f} %' for d in differences)})")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="cnn_small")
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--train-images", type=int, default=50_000, help="CIFAR-10's own size")
    parser.add_argument("--target-ci-pct", type=float, default=1.0)
    parser.add_argument("--max-timed-steps", type=int, default=measure.DEFAULT_MAX_TIMED_STEPS)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--keep", action="store_true", help="keep the data and logs")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench_protocols_"))
    try:
        data = make_cifar.generate(workdir / "cifar", train_images=args.train_images,
                                   test_images=100, seed=0).parent
        print(f"# {args.model} at {args.resolution} px, batch {args.batch}, {args.train_images} "
              f"images, 1 CPU device, {os.cpu_count()} cores; target +/-{args.target_ci_pct:g} %",
              flush=True)
        summary([one_round(args, data, workdir, index) for index in range(args.rounds)])
    except Exception as error:  # noqa: BLE001 - a benchmark reports and exits non-zero
        print(f"bench_protocols: FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"# kept {workdir}", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
