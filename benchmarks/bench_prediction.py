"""How far the scaling prediction misses on this machine: predict 4 stand-in GPUs from 1 and 2,
then measure 4 (docs/prediction.md).

Each round is a small sweep of its own: the PyTorch trainer (`vit_tiny`, a generated image
folder, gloo processes standing in for GPUs) at 1, 2 and 4 processes, tidied into runs.csv; the
predictor (scalesweep/analysis/predict.py) then predicts 4 from the runs at 1 and 2 only, as a
sweep would have before paying for 4, and the 4-process run says what happened. On a 2-core
machine 4 processes share 2 cores, which no growth rule measured at 1-2 foresees: the figure says
how the method fares when the machine changes character past the measured counts, not how it
fares on a GPU node.

Prints `name value unit` lines: per round the predicted and measured efficiency at 4, the error
(predicted - measured, points) and whether the measurement fell inside the band; then the median
and min-max of the error over the rounds.

    .venv/bin/python benchmarks/bench_prediction.py              # 3 rounds, a few minutes
    .venv/bin/python benchmarks/bench_prediction.py --rounds 1   # quick look
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scalesweep.train.datasets import make_imagefolder  # noqa: E402

from scalesweep.analysis import predict  # noqa: E402
from scalesweep.plan.analysis_settings import AnalysisSettings  # noqa: E402
from scalesweep.tidy import rows  # noqa: E402

COUNTS = (1, 2, 4)
PREDICTED = 4


def train(data: Path, processes: int, args, log: Path) -> None:
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    command = [*launcher, str(ROOT / "scripts" / "train_torch.py"), "--data", str(data), "--model", "vit_tiny",
               "--gpus", str(processes), "--resolution", "32", "--num-workers", "0", "--epochs", str(args.epochs),
               "--per-gpu-batch", str(args.batch), "--dataset-name", "synthetic"]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "MASTER_", "RANK"))}
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")


def one_round(data: Path, folder: Path, args) -> dict:
    logs = []
    for processes in COUNTS:
        log = folder / f"gpus{processes}.log"
        train(data, processes, args, log)
        logs.append((log, {"gpus": processes}))
    _, runs = rows.runs_table(logs)
    if (runs["status"] != "ok").any():
        raise RuntimeError(runs[["gpus", "status", "reason"]].to_string())
    settings = AnalysisSettings.from_config({"predict_gpus": [PREDICTED], "gpus_per_node": PREDICTED})
    table = predict.prediction_table(runs, settings)
    row = table[table["gpus"] == PREDICTED].iloc[0]
    if row["method"] not in predict.STEP_METHODS:
        raise RuntimeError(f"no step-model prediction at {PREDICTED}: {row['method']}: {row['inputs']}")
    return row.to_dict()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--train-per-class", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args(argv)
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "folder"
        make_imagefolder.make_imagefolder(str(data), 8, args.train_per_class, 4, size=32, seed=0)
        for number in range(1, args.rounds + 1):
            folder = Path(tmp) / f"round{number}"
            folder.mkdir()
            row = one_round(data, folder, args)
            inside = row["efficiency_low_pct"] <= row["measured_efficiency_pct"] <= row["efficiency_high_pct"]
            errors.append(row["error_pts"])
            print(f"predicted_efficiency_4_round{number} {row['efficiency_pct']:.2f} %")
            print(f"band_4_round{number} {row['efficiency_low_pct']:.2f}-{row['efficiency_high_pct']:.2f} %")
            print(f"measured_efficiency_4_round{number} {row['measured_efficiency_pct']:.2f} %")
            print(f"prediction_error_round{number} {row['error_pts']:+.2f} points")
            print(f"measured_inside_band_round{number} {int(inside)} bool", flush=True)
    print(f"prediction_error_median {statistics.median(errors):+.2f} points")
    print(f"prediction_error_min {min(errors):+.2f} points")
    print(f"prediction_error_max {max(errors):+.2f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
