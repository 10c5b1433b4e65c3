"""Benchmark of the sweep history (issues 11, 36): one `scalesweep compare` over a history of 1,000
sweeps x 100 runs (goal: 1 s on a 2-core laptop).

    .venv/bin/python benchmarks/bench_history.py [--sweeps 1000] [--repeats 3]
        [--base CHECKOUT | --base-commit 817bbc2]

With a base, the same runs are also archived one file per sweep, as an older checkout without
stores wrote them (compaction off), and that checkout's `compare` runs on them, alternating with
this one's on its compacted history (benchmarks/paired.py): `compare_100k_runs_paired_cpu_s`,
`..._wall_s` (median, min, max) for this checkout, `..._paired_base_...` for the base, and each
pair's ratio `..._paired_cpu_ratio_to_base`, `..._paired_wall_ratio_to_base`.

Prints `name value unit` lines:

    compare_100k_runs_s <median> s        # wall time of `python -m scalesweep compare`, 3 runs
    compare_100k_runs_s_min / _max        # the fastest and slowest of them
    compare_100k_runs_cpu_s               # CPU time of the median run
    compare_100k_runs_goal_ratio          # median / goal (only at the issue's size)
    compare_by_id_s, history_100k_runs_s  # two sweep ids against each other; the listing
    history_where_100k_runs_s, compare_where_100k_runs_s  # the listing and the comparison with --where
    history_build_s, history_build_cpu_s  # archiving the sweeps one by one in this process (not timed by the goal)
    compare_100k_runs_vs_floor_...        # the pooled comparison paired with its floor (below):
                                          # `..._floor_wall_s`, `..._wall_ratio_to_floor`, ...

The comparison is the heavy case: each side a selector (`gpu_driver=...,cluster=mn5`) that
DuckDB answers over every file of the history, pooling about 33 sweeps a side, so every
configuration has about 130 repeats a side and gets the bootstrap. Every run has its run_id, as
tidy writes it, so archiving and each query dedupe the runs by it as they do over a real
history. The whole command runs in a subprocess (interpreter start, imports, the query,
statistics, compare.csv, the figure and the summary), as a user waits for it. The benchmark
exits non-zero only when a step fails or the comparison is wrong (not every configuration
compared, the injected slowdown not found).

The floor is what no implementation of the command avoids, timed alternating with it: an
interpreter importing numpy, DuckDB and matplotlib, DuckDB counting the history's runs, and one
figure of 25 configurations' intervals written as a PNG, drawn as compare.png is (FLOOR_SCRIPT).
No pandas, no statistics.
"""

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import paired  # noqa: E402  (beside this file)
from paired import BenchmarkFailure  # noqa: E402

from scalesweep.history import archive, store  # noqa: E402

PYTHON = sys.executable
GOAL_S = 1.0
DEFAULT_SWEEPS = 1000
MODELS = ("resnet50", "resnet18", "vit_h_14", "vit_b_16", "vit_tiny")
GPUS = (1, 2, 4, 8, 16)
REPEATS = 4  # 5 models x 5 GPU counts x 4 repeats = 100 runs per sweep
DRIVERS = ("535.104.05", "550.54.15", "555.42.02", "560.28.03", "565.57.01",
           "570.86.10", "575.51.03", "580.65.06", "590.44.01", "595.12.05")
CLUSTERS = ("mn5", "leonardo", "jureca")
SLOW_DRIVER, SLOW_MODEL, SLOWDOWN = "550.54.15", "vit_h_14", 0.8  # a regression to find
WHERE = "gpu_model LIKE '%H100%' AND gpus >= 8"
COMPARE_WHERE = "model = 'vit_h_14' AND gpus >= 2"


def sweep_runs(number: int, rng: np.random.Generator) -> pd.DataFrame:
    """One sweep's runs.csv: 100 runs, Amdahl-like throughputs with 3 % noise, provenance, and
    each run's own run_id, as tidy writes it: archiving and every query dedupe the runs by it."""
    driver, cluster = DRIVERS[number % len(DRIVERS)], CLUSTERS[number % len(CLUSTERS)]
    rows = []
    for m, model in enumerate(MODELS):
        for gpus in GPUS:
            for repeat in range(REPEATS):
                speedup = 1 / (0.05 + 0.95 / gpus)
                slow = SLOWDOWN if (driver == SLOW_DRIVER and model == SLOW_MODEL) else 1.0
                throughput = 100.0 * (m + 1) * speedup * slow * np.exp(rng.normal(0, 0.03))
                rows.append({
                    "run_id": hashlib.sha256(f"{number}-{model}-{gpus}-{repeat}".encode()).hexdigest()[:16],
                    "framework": "pytorch", "model": model, "dataset": "tiny-224", "gpus": gpus,
                    "nodes": max(1, gpus // 4), "repeat": repeat, "per_gpu_batch": 64,
                    "precision": "bf16", "status": "ok", "reason": None, "epochs": 5,
                    "steady_epoch_time_s": 1e5 / throughput, "throughput_img_s": throughput,
                    "throughput_per_gpu_img_s": throughput / gpus, "total_time_s": 5.2e5 / throughput,
                    "gpu_model": "NVIDIA H100", "gpu_driver": driver, "framework_version": "2.4.0",
                    "cuda_version": "12.5", "nccl_version": "2.21.5", "cluster": cluster,
                    "container_image": "/images/pytorch_24.07.sif", "slurm_nodelist": f"gpu[{number}]",
                    "start_time": pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(hours=number),
                    "settings_hash": f"{m:04d}{gpus:04d}",
                })
    frame = pd.DataFrame(rows)
    frame["start_time"] = frame["start_time"].map(lambda t: t.isoformat())
    return frame


def build_history(folder: Path, sweeps: int, compact_at: int = store.COMPACT_AT) -> list[str]:
    """The history of `sweeps` sweeps, compacted every `compact_at` sweeps as archiving does."""
    rng = np.random.default_rng(0)
    compacting, store.COMPACT_AT = store.COMPACT_AT, compact_at
    try:
        return [archive.archive(sweep_runs(number, rng), folder).sweep_id for number in range(sweeps)]
    finally:
        store.COMPACT_AT = compacting


def timed(command: list[str], checkout: Path = REPO) -> tuple[float, float]:
    """(wall s, CPU s) of a command run to its end with `checkout`'s package; BenchmarkFailure
    if it fails."""
    timing, _ = paired.timed(command, cwd=checkout, env=paired.side_env(checkout))
    return timing.wall_s, timing.cpu_s


def compare_command(folder: Path, out: Path, baseline: str, candidate: str) -> list[str]:
    return [PYTHON, "-m", "scalesweep", "compare", baseline, candidate,
            "--history", str(folder), "--out", str(out)]


FLOOR_SCRIPT = """\
import sys

import duckdb
import numpy as np
from matplotlib.figure import Figure

folder, out = sys.argv[1:]
runs = duckdb.execute("SELECT count(*) FROM read_parquet(?, union_by_name = true)",
                      [folder + "/*.parquet"]).fetchone()[0]
rows = 25
ratios = np.exp(np.random.default_rng(0).normal(0, 0.05, rows))
figure = Figure(figsize=(8.0, 2.0 + 0.3 * rows))
axis = figure.subplots()
for y, ratio in enumerate(ratios):
    axis.plot([ratio * 0.97, ratio * 1.03], [y, y], color="#555555", lw=1)
    axis.plot([ratio * 0.98, ratio * 1.02], [y, y], color="#555555", lw=4, alpha=0.6)
    axis.plot(ratio, y, "o", color="#555555", ms=6)
axis.axvline(1.0, color="black", ls="--", lw=1)
axis.set_xscale("log")
axis.set_yticks(range(rows), [f"pytorch model-{y} tiny-224 bf16 64 gpus={y}" for y in range(rows)],
                fontsize=8)
axis.set_xlabel("Throughput ratio, candidate / baseline (log; 1 = no change)")
axis.set_title(f"{rows} configurations of {runs} runs", fontsize=9)
figure.set_dpi(110)
figure.set_layout_engine(None)
figure.savefig(out, dpi=110, bbox_inches=figure.get_tightbbox().padded(0.1))
"""


def against_floor(pooled: list[str], folder: Path, workdir: Path, repeats: int, label: str) -> None:
    """The pooled comparison alternated with FLOOR_SCRIPT on the same history (paired.py)."""
    floor = [PYTHON, "-c", FLOOR_SCRIPT, str(folder), str(workdir / "floor.png")]

    def run(command):
        return lambda index: paired.timed(command, cwd=workdir, env=paired.side_env(REPO))[0]

    pairs = paired.floor_pairs(run(pooled), run(floor), repeats)
    check_comparison(workdir / "compare")
    paired.print_lines(paired.pair_lines(f"compare_{label}_runs_vs_floor", pairs, other=paired.FLOOR))


def check_comparison(out: Path) -> None:
    """Every configuration compared; the injected slowdown (and only it) called slower."""
    table = pd.read_csv(out / "compare.csv")
    if len(table) != len(MODELS) * len(GPUS):
        raise BenchmarkFailure(f"compare.csv has {len(table)} configurations, not {len(MODELS) * len(GPUS)}")
    slower = set(table.loc[table["verdict"] == "slower", "model"])
    if slower != {SLOW_MODEL}:
        raise BenchmarkFailure(f"slower models: {sorted(slower)}, expected only {SLOW_MODEL}")


def report(name: str, walls: list[float], cpus: list[float], goal_s: float | None) -> None:
    median = statistics.median(walls)
    print(f"{name}_s {median:.2f} s", flush=True)
    if len(walls) > 1:
        print(f"{name}_s_min {min(walls):.2f} s", flush=True)
        print(f"{name}_s_max {max(walls):.2f} s", flush=True)
    print(f"{name}_cpu_s {cpus[walls.index(sorted(walls)[len(walls) // 2])]:.2f} s", flush=True)
    if goal_s is not None:
        print(f"{name}_goal_ratio {median / goal_s:.2f} x", flush=True)


def alternate_with_base(base: Path, workdir: Path, sweeps: int, repeats: int, label: str) -> None:
    """The pooled comparison by `base` on one file per sweep (as a checkout without stores wrote
    the history) and by this checkout on its store, alternated run by run on the same runs
    (paired.py): both sides' medians and each pair's ratio; both must find the same
    configurations slower."""
    loose = workdir / "history-one-file-per-sweep"
    build_history(loose, sweeps, compact_at=sweeps + 1)
    sides = (f"gpu_driver={DRIVERS[0]},cluster=mn5", f"gpu_driver={SLOW_DRIVER},cluster=mn5")
    commands = {paired.HEAD: compare_command(workdir / "history", workdir / "compare", *sides),
                paired.BASE: compare_command(loose, workdir / "compare-base", *sides)}

    def run_side(side, checkout, index):
        return paired.timed(commands[side], cwd=workdir, env=paired.side_env(checkout))[0]

    paired.compile_checkouts([REPO, base])
    pairs = paired.run_pairs(run_side, {paired.HEAD: REPO, paired.BASE: base}, repeats)
    check_comparison(workdir / "compare-base")
    check_comparison(workdir / "compare")
    goal = GOAL_S if sweeps == DEFAULT_SWEEPS else None
    paired.print_lines(paired.pair_lines(f"compare_{label}_runs_paired", pairs, goal))


def run(workdir: Path, sweeps: int, repeats: int, base: Path | None = None) -> None:
    folder, out = workdir / "history", workdir / "compare"
    started, started_cpu = time.perf_counter(), time.process_time()
    ids = build_history(folder, sweeps)
    print(f"history_build_s {time.perf_counter() - started:.1f} s", flush=True)
    print(f"history_build_cpu_s {time.process_time() - started_cpu:.1f} s", flush=True)
    runs = sweeps * len(MODELS) * len(GPUS) * REPEATS
    label = f"{runs // 1000}k" if runs % 1000 == 0 else str(runs)
    pooled = compare_command(folder, out, f"gpu_driver={DRIVERS[0]},cluster=mn5",
                             f"gpu_driver={SLOW_DRIVER},cluster=mn5")
    timings = [timed(pooled) for _ in range(repeats)]
    check_comparison(out)
    report(f"compare_{label}_runs", [w for w, _ in timings], [c for _, c in timings],
           GOAL_S if sweeps == DEFAULT_SWEEPS else None)
    by_id = compare_command(folder, out, ids[0], ids[1])
    report("compare_by_id", *map(list, zip(timed(by_id))), None)
    listing = [PYTHON, "-m", "scalesweep", "history", "--history", str(folder)]
    report(f"history_{label}_runs", *map(list, zip(timed(listing))), None)
    # A --where filter is checked (scalesweep/history/sqlfilter.py) and runs on a confined connection:
    # the same listing and the pooled comparison, filtered.
    filtered = [timed([*listing, "--where", WHERE]) for _ in range(repeats)]
    report(f"history_where_{label}_runs", [w for w, _ in filtered], [c for _, c in filtered], None)
    compared = [timed([*pooled, "--where", COMPARE_WHERE]) for _ in range(repeats)]
    report(f"compare_where_{label}_runs", [w for w, _ in compared], [c for _, c in compared], None)
    against_floor(pooled, folder, workdir, repeats, label)
    if base is not None:
        alternate_with_base(base, workdir, sweeps, repeats, label)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=DEFAULT_SWEEPS, help="sweeps in the history (100 runs each)")
    parser.add_argument("--repeats", type=int, default=3, help="timed comparisons (median, min, max)")
    parser.add_argument("--keep", action="store_true", help="keep the history (path on stderr)")
    parser.add_argument("--base", type=Path, help="an older checkout to alternate with (its own history format)")
    parser.add_argument("--base-commit", help="a commit to alternate with, checked out for the run "
                        "(ignored with --base)")
    args = parser.parse_args(argv)
    if args.sweeps < 2 * len(DRIVERS) * len(CLUSTERS):
        parser.error(f"--sweeps must be at least {2 * len(DRIVERS) * len(CLUSTERS)}")
    workdir = Path(tempfile.mkdtemp(prefix="scalesweep-bench-history-"))
    try:
        with paired.BaseCheckout(args.base and str(args.base), args.base_commit) as base:
            run(workdir, args.sweeps, args.repeats, base)
    except BenchmarkFailure as error:
        print(f"bench_history: FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"bench_history: kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
