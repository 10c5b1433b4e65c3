"""What the step breakdown's probes cost: their share of a run's wall time.

Runs the PyTorch trainer (2 gloo processes standing in for GPUs) under the epochs protocol for
several run lengths, `--rounds` times each, and prints per length the probes' share of the run's
wall time (the summary's `probe_overhead_pct`, 100 x probe_s / wall_time_s): the median and
min-max over the rounds. The probe steps between the timed steps grow with the run (one after
every stepparts.probe_every()-th steady step, at most 1/20 of its steps, or 8 in a short run);
the 7 all-reduces after training are a fixed cost.

    probe_overhead_pct <median> % (5 epochs; min .., max ..)        <- the issue's figure
    probe_overhead_pct_<E>_epochs <median> % (...)
    probe_overhead_pct_projected_<E>_epochs ...   <- from the measured probe time, start-up and
                                                     epoch time, for longer runs (not measured)

    .venv/bin/python benchmarks/bench_breakdown.py                   # 2, 5 and 10 epochs, 3 rounds
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scalesweep.train.common import runlog  # noqa: E402
from scalesweep.train.datasets import make_imagefolder  # noqa: E402


def summary_of(args, data: Path, epochs: int) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(args.processes), str(ROOT / "scripts" / "train_torch.py"), "--data", str(data),
               "--model", args.model, "--gpus", str(args.processes), "--resolution", "32",
               "--per-gpu-batch", str(args.batch), "--epochs", str(epochs), "--num-workers", "0"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if runlog.PREFIX in line]
    summary = json.loads(lines[-1].split(runlog.PREFIX, 1)[1])
    if summary.get("status") != "ok" or summary.get("probe_overhead_pct") is None:
        raise RuntimeError(f"no probe time in the summary: {summary}")
    return summary


def figure(name: str, values: list, unit: str, detail: str = "") -> None:
    print(f"{name} {statistics.median(values):.3g} {unit} (median of {len(values)}; min "
          f"{min(values):.3g}, max {max(values):.3g}{detail})", flush=True)


def project(measured: dict) -> None:
    """The share for longer runs, from two measured lengths: wall = fixed + epochs x per epoch."""
    if len(measured) < 2:
        return
    (short, (probe, wall_short)), (long, (_, wall_long)) = sorted(measured.items())[:1] + sorted(measured.items())[-1:]
    per_epoch = (wall_long - wall_short) / (long - short)
    fixed = wall_short - short * per_epoch
    for epochs in (20, 90):
        share = 100.0 * probe / (fixed + epochs * per_epoch)
        print(f"probe_overhead_pct_projected_{epochs}_epochs {share:.3g} % (projected: probes {probe:.2f} s, "
              f"start-up {fixed:.1f} s, {per_epoch:.1f} s per epoch)", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 5])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--per-class", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=900)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_breakdown_") as workdir:
        data = Path(workdir) / "folder"
        make_imagefolder.make_imagefolder(str(data), args.classes, args.per_class, 2, size=32, seed=0)
        print(f"# {args.model} at 32 px, {args.processes} gloo processes, batch {args.batch}, "
              f"{args.classes * args.per_class} images, {os.cpu_count()} cores", flush=True)
        measured = {}
        try:
            for epochs in args.epochs:
                summaries = [summary_of(args, data, epochs) for _ in range(args.rounds)]
                shares = [s["probe_overhead_pct"] for s in summaries]
                wall = statistics.median(s["wall_time_s"] for s in summaries)
                probe = statistics.median(s["probe_s"] for s in summaries)
                detail = f"; probes {probe:.2f} s of {wall:.1f} s"
                if epochs == 5:
                    figure("probe_overhead_pct", shares, "%", detail + "; 5 epochs")
                figure(f"probe_overhead_pct_{epochs}_epochs", shares, "%", detail)
                measured[epochs] = (probe, wall)
            project(measured)
        except Exception as error:  # noqa: BLE001 - a benchmark reports and exits non-zero
            print(f"bench_breakdown: FAILED: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
