"""What reading the GPU energy counters costs a timed window: energy_read_overhead_pct.

Runs the PyTorch trainer (steps protocol, 2 gloo processes standing in for GPUs) with the fake
NVML of tests/fake_nvml.c (compiled here with gcc: the same ctypes path as libnvidia-ml.so.1),
`--rounds` times, and prints the share of the timed window that rank 0 spent reading its counter
(the timed epoch record's `energy_read_s` / `seconds`): the median and min-max over the rounds.
`--real` reads the node's real NVML instead (on a GPU machine, with `--gpus` GPUs).

    energy_read_overhead_pct <median> % (median of 3; min .., max ..)   <- the issue's figure (goal <= 0.1)
    energy_read_s <median> s (...)                                        two reads: window start and end

    python benchmarks/bench_energy.py                      # 3 rounds, 2 processes, 50 timed steps
"""

from __future__ import annotations

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
from scalesweep.train.common import energy, runlog  # noqa: E402
from scalesweep.train.datasets import make_imagefolder  # noqa: E402


def build_fake_nvml(folder: Path) -> str:
    library = folder / "libfake-nvml.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(ROOT / "tests" / "fake_nvml.c")],
                   check=True)
    return str(library)


def timed_window(args, data: Path, library: str | None) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(args.processes), str(ROOT / "scripts" / "train_torch.py"), "--data", str(data),
               "--model", args.model, "--gpus", str(args.processes), "--resolution", "32",
               "--per-gpu-batch", str(args.batch), "--protocol", "steps", "--warmup-steps", "5",
               "--timed-steps", str(args.timed_steps), "--num-workers", "0"]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "FAKE_NVML_"))}
    if library:
        env[energy.NVML_LIBRARY_ENV] = library
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    records = [json.loads(line.split(runlog.PREFIX, 1)[1]) for line in done.stdout.splitlines()
               if runlog.PREFIX in line]
    timed = [record for record in records if record.get("phase") == "timed"][0]
    if timed.get("energy_j") is None:
        raise RuntimeError(f"no energy in the timed window: {timed.get('energy_note')}")
    return timed


def figure(name: str, values: list, unit: str) -> None:
    print(f"{name} {statistics.median(values):.3g} {unit} (median of {len(values)}; min "
          f"{min(values):.3g}, max {max(values):.3g})", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--timed-steps", type=int, default=50)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--real", action="store_true", help="the node's libnvidia-ml.so.1, not the fake")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-energy-") as folder:
        folder = Path(folder)
        data = folder / "data"
        make_imagefolder.make_imagefolder(str(data), 4, 32, 2, size=32, seed=0)
        library = None if args.real else build_fake_nvml(folder)
        print(f"# {args.model} at 32 px, {args.processes} gloo processes, batch {args.batch}, "
              f"{args.timed_steps} timed steps, {'real NVML' if args.real else 'fake NVML'}", flush=True)
        try:
            windows = [timed_window(args, data, library) for _ in range(args.rounds)]
        except (RuntimeError, subprocess.SubprocessError, OSError) as error:
            print(f"bench_energy: FAILED: {error}", file=sys.stderr)
            return 1
    figure("energy_read_overhead_pct", [100.0 * w["energy_read_s"] / w["seconds"] for w in windows], "%")
    figure("energy_read_s", [w["energy_read_s"] for w in windows], "s")
    figure("energy_window_s", [w["seconds"] for w in windows], "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
