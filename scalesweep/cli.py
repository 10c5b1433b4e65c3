"""`python -m scalesweep analyze PATH... --out DIR`: logs and/or runs.csv -> tidy, tables, figures.

For users who bring logs from earlier runs (ours, the reference TF/Keras scripts, the reference
DDP script) or runs tables from several sweeps.
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

from scalesweep import parse, scaling, stages, tidy
from scalesweep.history import DEFAULT_HISTORY_DIR

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


def analyze(paths, out, efficiency_floor=80.0, gpu_hour_budget=None):
    out = Path(out)
    runs_csv = collect_runs([Path(p) for p in paths], out / "tidy")
    print(stages.write_tables(runs_csv, out / "tables", efficiency_floor, gpu_hour_budget))
    print(stages.figures(out / "tables", out / "figures"))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m scalesweep")
    commands = parser.add_subparsers(dest="command", required=True)
    analyze_cmd = commands.add_parser("analyze", help="logs and/or runs.csv -> tidy CSVs, tables, figures")
    analyze_cmd.add_argument("paths", nargs="+", help="log files, folders of logs, runs.csv tables")
    analyze_cmd.add_argument("--out", required=True, help="output folder (tidy/, tables/, figures/)")
    analyze_cmd.add_argument("--efficiency-floor", type=float, default=80.0, help="in %% (sweet spot)")
    analyze_cmd.add_argument("--gpu-hour-budget", type=float, default=None, help="GPU-hours (sweet spot)")
    register_history(commands)
    register_compare(commands)
    args = parser.parse_args(argv)
    if hasattr(args, "handler"):
        return args.handler(args)
    try:
        analyze(args.paths, args.out, args.efficiency_floor, args.gpu_hour_budget)
    except (ValueError, FileNotFoundError, parse.LogFormatError) as error:
        print(f"scalesweep analyze: {error}", file=sys.stderr)
        return 2
    return 0


def register_history(commands):
    cmd = commands.add_parser("history", help="list the archived sweeps, filtered by provenance")
    cmd.add_argument("selectors", nargs="*", help="column=value filters, e.g. gpu_model='NVIDIA H100'")
    cmd.add_argument("--history", default=DEFAULT_HISTORY_DIR, help="history folder (%(default)s)")
    cmd.add_argument("--where", help="SQL condition on the runs, e.g. \"gpu_model LIKE '%%H100%%'\"")
    cmd.add_argument("--csv", action="store_true", help="print CSV instead of a text table")
    cmd.set_defaults(handler=history_command)


def history_command(args):
    from scalesweep import history

    try:
        table = history.sweeps_table(args.history, args.where, args.selectors)
    except ValueError as error:
        print(f"scalesweep history: {error}", file=sys.stderr)
        return 2
    if args.csv:
        print(table.to_csv(index=False), end="")
    elif table.empty:
        print(f"no archived sweep in {args.history} matches")
    else:
        print(table.to_string(index=False))
    return 0


def register_compare(commands):
    cmd = commands.add_parser("compare", help="what changed between two sweeps, with confidence intervals")
    for side in ("baseline", "candidate"):
        cmd.add_argument(side, help="sweep id (or prefix), results folder, runs.csv, or column=value selectors")
    cmd.add_argument("--history", default=DEFAULT_HISTORY_DIR, help="history folder (%(default)s)")
    cmd.add_argument("--where", help="SQL condition that both sides' runs must meet")
    cmd.add_argument("--out", default="results/compare", help="folder for compare.csv, compare.png, summary.txt")
    cmd.add_argument("--confidence", type=float, default=0.95, help="family-wise confidence level")
    cmd.add_argument("--fail-above", type=float, metavar="PCT",
                     help="exit 1 when a configuration is significantly slower by more than PCT %%")
    cmd.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    cmd.set_defaults(handler=compare_command)


def compare_command(args):
    from scalesweep import compare, history

    try:
        if not 0 < args.confidence < 1:
            raise ValueError(f"--confidence {args.confidence}: must lie between 0 and 1")
        sides = [history.load_side(spec, args.history, args.where) for spec in (args.baseline, args.candidate)]
        table, text = compare.write_comparison(*sides, args.out, args.confidence, args.seed)
    except (ValueError, FileNotFoundError) as error:
        print(f"scalesweep compare: {error}", file=sys.stderr)
        return 2
    print(text, end="")
    print(f"written: {', '.join(str(Path(args.out) / name) for name in compare.OUTPUTS)}")
    if args.fail_above is None:
        return 0
    failing = compare.regressions(table, args.fail_above)
    if len(failing):
        print(f"scalesweep compare: {len(failing)} configuration(s) significantly slower by more "
              f"than {args.fail_above:g} %", file=sys.stderr)
        return 1
    return 0
