"""`python -m scalesweep analyze PATH... --out DIR`: logs and/or runs.csv -> tidy, tables, figures.

For users who bring logs from earlier runs (ours, the reference TF/Keras scripts, the reference
DDP script) or runs tables from several sweeps.
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

from scalesweep import parse, scaling, stages, tidy

LOG_SUFFIXES = {".log", ".out", ".txt", ".err"}
MANIFEST = "manifest.csv"


def is_runs_table(path):
    return path.suffix == ".csv" and path.name != MANIFEST


def read_manifest(folder):
    """folder/manifest.csv: a `file` column plus axes (gpus, model, ...) for the logs beside it.

    The reference DDP logs do not print the world size; the manifest (or the file name) gives it.
    """
    path = folder / MANIFEST
    if not path.exists():
        return {}
    manifest = pd.read_csv(path)
    if "file" not in manifest.columns:
        raise ValueError(f"{path}: needs a 'file' column naming each log")
    return {
        str(folder / row.pop("file")): {k: v for k, v in row.items() if pd.notna(v)}
        for row in manifest.to_dict("records")
    }


def log_items(paths):
    """(log path, axes) pairs: axes from a folder's manifest where it has one. Without, the log
    says what it can, and a DDP log's world size comes from its file name (parse.gpus_from_filename)."""
    items = []
    for path in paths:
        if path.is_dir():
            axes_by_file = read_manifest(path)
            for log in sorted(p for p in path.iterdir() if p.suffix in LOG_SUFFIXES):
                items.append((str(log), axes_by_file.get(str(log), {})))
        elif not is_runs_table(path):
            items.append((str(path), {}))
    return items


def collect_runs(paths, tidy_dir):
    """Parse the logs, join the runs tables, write tidy_dir/{epochs,runs}.csv; return runs.csv's path."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"no such file or folder: {', '.join(missing)}")
    epochs, runs = tidy.runs_table(log_items(paths))
    tables = [scaling.read_runs(p) for p in paths if p.is_file() and is_runs_table(p)]
    frames = [frame for frame in [runs, *tables] if not frame.empty]
    if not frames:
        raise ValueError("no runs found in " + ", ".join(map(str, paths)))
    runs = pd.concat(frames, ignore_index=True)
    tidy.write_tidy(epochs, runs, tidy_dir)
    return Path(tidy_dir) / "runs.csv"


def analyze(paths, out, efficiency_floor=80.0, gpu_hour_budget=None, epoch_budget=1.0):
    out = Path(out)
    runs_csv = collect_runs([Path(p) for p in paths], out / "tidy")
    print(stages.write_tables(runs_csv, out / "tables", efficiency_floor, gpu_hour_budget, epoch_budget))
    print(stages.figures(out / "tables", out / "figures"))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m scalesweep")
    commands = parser.add_subparsers(dest="command", required=True)
    analyze_cmd = commands.add_parser("analyze", help="logs and/or runs.csv -> tidy CSVs, tables, figures")
    analyze_cmd.add_argument("paths", nargs="+", help="log files, folders of logs, runs.csv tables")
    analyze_cmd.add_argument("--out", required=True, help="output folder (tidy/, tables/, figures/)")
    analyze_cmd.add_argument("--efficiency-floor", type=float, default=80.0, help="in %% (sweet spot)")
    analyze_cmd.add_argument("--gpu-hour-budget", type=float, default=None, help="GPU-hours (sweet spot)")
    analyze_cmd.add_argument("--epoch-budget", type=float, default=1.0,
                             help="training epochs the sweet spot's projected GPU-hours stand for")
    args = parser.parse_args(argv)
    try:
        analyze(args.paths, args.out, args.efficiency_floor, args.gpu_hour_budget, args.epoch_budget)
    except (ValueError, FileNotFoundError, parse.LogFormatError) as error:
        print(f"scalesweep analyze: {error}", file=sys.stderr)
        return 2
    return 0
