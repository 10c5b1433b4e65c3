"""`python -m scalesweep analyze PATH... --out DIR`: logs and/or runs.csv -> tidy, tables, figures.

For users who bring logs from earlier runs (ours, the reference TF/Keras scripts, the reference
DDP script) or runs tables from several sweeps.

Broken input does not cost the rest: a log that cannot be read or breaks the record contract is a
failed row, a runs table or manifest that cannot be read is left out, and each is listed on
stderr, naming the file (and line and key where there is one); the exit status is then 1.
Everything readable is still written. Exit status 2: nothing could be analysed at all.
"""

import argparse
import math
import os
import re
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from scalesweep import copies, parse, parsed, records, scaling, tidy
from scalesweep.history import DEFAULT_HISTORY_DIR

LOG_SUFFIXES = {".log", ".out", ".txt", ".err"}
MANIFEST = "manifest.csv"
# Manifest axes that are counts: a manifest is typed by hand, and a `four` there would reach the
# tables as a GPU count.
MANIFEST_COUNTS = {"gpus": 0, "nodes": 1, "repeat": 0, "world_size": 1, "per_gpu_batch": 1, "global_batch": 1}
REFUSED_EXIT = 1
FAILED_EXIT = 2


class Refused(ValueError):
    """An input that cannot be used; the message names the file (and line where there is one)."""


def number(low=None, high=None, low_open=False, high_open=False):
    """An argparse type: a finite float within [low, high] (an end excluded with low_open,
    high_open); NaN and infinities would silently switch a check off."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and (value >= high if high_open else value > high)
        if not math.isfinite(value) or too_low or too_high:
            bounds = f"{'>' if low_open else '>='} {low:g}" if low is not None else ""
            bounds += (" and " if bounds and high is not None else "") + (
                f"{'<' if high_open else '<='} {high:g}" if high is not None else "")
            raise argparse.ArgumentTypeError(f"{text}: must be a finite number {bounds}".rstrip())
        return value

    return parse


def output_folder(path) -> Path:
    """`--out`: a folder that exists or can be made, and can be written; ValueError naming it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"--out {path}: cannot be made: {error.strerror or error}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path}: cannot be written (permission denied)")
    return path


def is_runs_table(path):
    return path.suffix == ".csv" and path.name != MANIFEST


def check_text(path):
    """Refused unless `path` is UTF-8 text: pandas would fail with a bare codec error."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise Refused(f"{path}: cannot read: {error.strerror or error}") from None
    wide = parse.wide_encoding(raw)
    if wide:
        raise Refused(f"{path}: {wide} encoded (re-save as UTF-8, e.g. iconv -f {wide} -t UTF-8)")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        byte = raw[error.start]
        raise Refused(f"{path}:{line}: not a UTF-8 text CSV (byte 0x{byte:02x}: {error.reason})") from None


def read_manifest(folder):
    """folder/manifest.csv: a `file` column plus axes (gpus, model, ...) for the logs beside it.

    The reference DDP logs do not print the world size; the manifest (or the file name) gives it.
    Returns ({log path: axes}, [refused rows]); a manifest that cannot be read at all is Refused.
    """
    path = folder / MANIFEST
    if not path.exists():
        return {}, []
    check_text(path)
    try:
        manifest = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise Refused(f"{path}: cannot read the manifest: {error}") from None
    if "file" not in manifest.columns:
        raise Refused(f"{path}: needs a 'file' column naming each log")
    axes_by_file, refused = {}, []
    for line, row in enumerate(manifest.to_dict("records"), start=2):
        axes = {k: v for k, v in row.items() if pd.notna(v)}
        log = str(folder / str(axes.pop("file", "")))
        problem = manifest_problem(axes)
        if problem:
            refused.append(f"{path}:{line}: {problem}; {log} left out")
        axes_by_file[log] = None if problem else axes
    return axes_by_file, refused


def manifest_problem(axes):
    """Why a manifest row's axes cannot be used, or None."""
    for key, minimum in MANIFEST_COUNTS.items():
        if key in axes:
            value = tidy.whole_number(axes[key])
            if value is None or value < minimum:
                return f"column {key!r} must be a whole number >= {minimum}, got {records.shown(axes[key])}"
    return None


# The workflow's attempt logs: logs/train/<framework>/<axes>/gpus~N.attempt-K.log.
ATTEMPT_LOG = re.compile(r"^(?P<run>.+)\.attempt-(?P<attempt>\d+)$")


def log_files(folder):
    """The log files below `folder`, in every subfolder (links to folders are not followed)."""
    for root, subfolders, files in os.walk(folder):
        subfolders.sort()
        yield from (Path(root) / name for name in sorted(files) if Path(name).suffix in LOG_SUFFIXES)


def latest_attempts(logs):
    """Of each run's numbered attempt logs (`<run>.attempt-K.log`), only the highest K: the
    earlier ones are attempts that failed before it. Other logs pass as they are."""
    latest = {}
    for log in logs:
        match = ATTEMPT_LOG.match(log.stem)
        key = (log.parent, match["run"]) if match else (log.parent, log.name)
        attempt = int(match["attempt"]) if match else 0
        if key not in latest or attempt > latest[key][0]:
            latest[key] = (attempt, log)
    chosen = {log for _, log in latest.values()}
    return [log for log in logs if log in chosen]


def distinct_files(logs):
    """Each file once: a link to a file already listed (the workflow's `<run>.log` points at
    its latest attempt) is the same run."""
    seen, distinct = set(), []
    for log in logs:
        real = os.path.realpath(log)
        if real not in seen:
            seen.add(real)
            distinct.append(log)
    return distinct


def dangling_link(path) -> bool:
    return Path(path).is_symlink() and not Path(path).exists()


def without_dangling_links(paths, stream=None):
    """`paths` without the links to nothing (a deleted attempt log's `<run>.log`), each named in a
    one-line warning: they hold no run, and the logs beside them are still analysed."""
    kept = []
    for path in paths:
        if dangling_link(path):
            print(f"scalesweep analyze: warning: {path}: dangling link (to {os.readlink(path)}), skipped",
                  file=sys.stderr if stream is None else stream)
        else:
            kept.append(path)
    return kept


def folder_items(folder, all_attempts=False):
    """((log, axes) pairs, [refused]) below `folder`: axes from the manifest of each log's folder."""
    items, refused, manifests = [], [], {}
    logs = distinct_files(without_dangling_links(log_files(folder)))
    for log in logs if all_attempts else latest_attempts(logs):
        if log.parent not in manifests:
            try:
                manifests[log.parent], bad_rows = read_manifest(log.parent)
            except Refused as error:
                refused.append(f"{error}; the logs of {log.parent} left out")
                manifests[log.parent], bad_rows = None, []
            refused += bad_rows
        if manifests[log.parent] is None:
            continue
        axes = manifests[log.parent].get(str(log), {})
        if axes is not None:
            items.append((str(log), axes))
    return items, refused


def log_items(paths, all_attempts=False):
    """((log path, axes) pairs, [refused]): folders are read with every subfolder, each file
    once, and of a run's attempt logs only the latest unless `all_attempts`. Axes come from a
    folder's manifest where it has one; without, the log says what it can, and a DDP log's
    world size comes from its file name (parsed.gpus_from_filename)."""
    items, refused = [], []
    for path in paths:
        if path.is_dir():
            found, problems = folder_items(path, all_attempts)
            items += found
            refused += problems
        elif not is_runs_table(path):
            items.append((str(path), {}))
    return items, refused


def read_runs_table(path):
    """A runs table given on the command line, checked (scaling.read_runs); Refused naming it."""
    check_text(path)
    try:
        return scaling.read_runs(path)
    except ValueError as error:
        raise Refused(str(error)) from None


def collect_runs(paths, tidy_dir, all_attempts=False, images_per_epoch=None):
    """Parse the logs, join the runs tables, write tidy_dir/{epochs,runs}.csv, each run once
    (scalesweep/copies.py: a run read twice, from two logs or a log and a table, is one run).
    `images_per_epoch`: the training set's size, for logs that count steps instead of images (Keras).

    Returns (runs.csv's path or None when there is no run at all, [refused inputs], [copies
    left out]).
    """
    missing = [str(p) for p in paths if not p.exists() and not dangling_link(p)]
    if missing:
        raise FileNotFoundError(f"no such file or folder: {', '.join(missing)}")
    paths = without_dangling_links(paths)
    items, refused = log_items(paths, all_attempts)
    tidied = tidy.tidy_tables(items, images_per_epoch)
    refused += tidied.refused
    frames, sources = [tidied.runs], [tidied.runs["log"].tolist()]
    for path in (p for p in paths if p.is_file() and is_runs_table(p)):
        try:
            frames.append(read_runs_table(path))
        except Refused as error:
            refused.append(str(error))
            continue
        sources.append([f"{path}:{line}" for line in range(2, len(frames[-1]) + 2)])
    kept = [(frame, rows) for frame, rows in zip(frames, sources) if not frame.empty]
    if not kept:
        return None, refused, tidied.copies_left_out
    runs, copied = copies.without_copies(pd.concat([frame for frame, _ in kept], ignore_index=True),
                                         [source for _, rows in kept for source in rows])
    tidy.write_tidy(tidied.epochs, runs, tidy_dir)
    return Path(tidy_dir) / "runs.csv", refused, tidied.copies_left_out + copied


def report_refused(refused, stream=None):
    stream = sys.stderr if stream is None else stream
    if refused:
        print(f"scalesweep analyze: refused {len(refused)} input(s):", file=stream)
        for reason in refused:
            print(f"  {reason}", file=stream)


def analyze(paths, out, efficiency_floor=80.0, gpu_hour_budget=None, epoch_budget=1.0,
            all_attempts=False, greenest_time_bound_s=None, images_per_epoch=None,
            allow_superlinear=False):
    """Write out/tidy, out/tables, out/figures and out/findings.md; return the refused inputs
    (already reported)."""
    # seaborn and scipy.stats (about 0.7 s of imports) only for the commands that draw tables and figures.
    from scalesweep import figures, findings, tables

    out = output_folder(out)
    runs_csv, refused, copies_left_out = collect_runs([Path(p) for p in paths], out / "tidy", all_attempts,
                                                      images_per_epoch)
    report_refused(refused)
    if copies_left_out:
        print("scalesweep analyze: " + "\n".join(copies.copies_report(copies_left_out)))
    if runs_csv is None:
        raise ValueError("no runs found in " + ", ".join(map(str, paths)))
    print(tables.write_tables(runs_csv, tables.outputs_in(out / "tables"), efficiency_floor,
                              gpu_hour_budget, epoch_budget, greenest_time_bound_s, allow_superlinear))
    print(figures.write_figures(out / "tables" / "scaling.csv", out / "tables" / "fits.csv",
                                out / "figures"))
    print(findings.write_findings(out / "tables" / "scaling.csv", out / "tables" / "fits.csv",
                                  out / "tables" / "sweet_spot.csv", out / "findings.md"))
    return refused


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m scalesweep")
    commands = parser.add_subparsers(dest="command", required=True)
    analyze_cmd = commands.add_parser("analyze", help="logs and/or runs.csv -> tidy CSVs, tables, figures")
    analyze_cmd.add_argument("paths", nargs="+", help="log files, folders of logs, runs.csv tables")
    analyze_cmd.add_argument("--out", required=True, help="output folder (tidy/, tables/, figures/)")
    analyze_cmd.add_argument("--efficiency-floor", type=number(0, 100), default=80.0, help="in %% (sweet spot)")
    analyze_cmd.add_argument("--gpu-hour-budget", type=number(0, low_open=True), default=None,
                             help="GPU-hours (sweet spot)")
    analyze_cmd.add_argument("--epoch-budget", type=number(0, low_open=True), default=1.0,
                             help="training epochs the sweet spot's projected GPU-hours stand for")
    analyze_cmd.add_argument("--all-attempts", action="store_true",
                             help="every attempt log of a run (default: only its latest, <run>.attempt-K.log)")
    analyze_cmd.add_argument("--greenest-time-bound-s", type=number(0, low_open=True), default=None,
                             help="seconds (sweet spot 'greenest': least energy within this time)")
    analyze_cmd.add_argument("--images-per-epoch", type=positive_count, default=None, metavar="N",
                             help="training images of the logs' dataset, for Keras logs, which count "
                             "steps (default: CIFAR-10's 50,000 where the steps agree, else an estimate)")
    analyze_cmd.add_argument("--allow-superlinear", action="store_true",
                             help="let the sweet spot choose GPU counts flagged superlinear (> 105 %%)")
    register_history(commands)
    register_compare(commands)
    register_check_config(commands)
    register_parse(commands)
    args = parser.parse_args(argv)
    if hasattr(args, "handler"):
        return args.handler(args)
    try:
        refused = analyze(args.paths, args.out, args.efficiency_floor, args.gpu_hour_budget,
                          args.epoch_budget, args.all_attempts, args.greenest_time_bound_s,
                          args.images_per_epoch, args.allow_superlinear)
    except (ValueError, FileNotFoundError, parsed.LogFormatError) as error:
        print(f"scalesweep analyze: {error}", file=sys.stderr)
        return FAILED_EXIT
    return REFUSED_EXIT if refused else 0


def positive_count(text):
    """argparse type: a whole number >= 1."""
    value = tidy.whole_number(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def register_history(commands):
    cmd = commands.add_parser("history", help="list the archived sweeps, filtered by provenance")
    cmd.add_argument("selectors", nargs="*", help="column=value filters, e.g. gpu_model='NVIDIA H100'")
    cmd.add_argument("--history", default=DEFAULT_HISTORY_DIR, help="history folder (%(default)s)")
    cmd.add_argument("--where", help="SQL condition on the runs, e.g. \"gpu_model LIKE '%%H100%%'\"")
    cmd.add_argument("--csv", action="store_true", help="print CSV instead of a text table")
    cmd.set_defaults(handler=history_command)


@contextmanager
def warnings_on_one_line(command):
    """Warnings (a damaged or foreign history file left out) as one line each on stderr, named
    by the command: Python's format adds the source line of the warning's call."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{command}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def history_command(args):
    from scalesweep import history

    try:
        with warnings_on_one_line("scalesweep history"):
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
    cmd.add_argument("--confidence", type=number(0, 1, low_open=True, high_open=True), default=0.95,
                     help="family-wise confidence level")
    cmd.add_argument("--fail-above", type=number(0), metavar="PCT",
                     help="exit 1 when a configuration is significantly slower by more than PCT %%")
    cmd.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    cmd.add_argument("--allow-same", action="store_true",
                     help="compare sides that hold the same runs (an A/A check); refused without it")
    cmd.set_defaults(handler=compare_command)


def compare_command(args):
    from scalesweep import compare, history

    try:
        with warnings_on_one_line("scalesweep compare"):
            sides = [history.load_side(spec, args.history, args.where, role)
                     for role, spec in (("baseline", args.baseline), ("candidate", args.candidate))]
            table, text = compare.write_comparison(*sides, output_folder(args.out), args.confidence, args.seed,
                                                   lambda: history.spread_runs(args.history), args.allow_same)
    except (ValueError, FileNotFoundError) as error:
        print(f"scalesweep compare: {error}", file=sys.stderr)
        return 2
    print(text, end="")
    print(f"written: {', '.join(str(Path(args.out) / name) for name in compare.OUTPUTS)}")
    if args.fail_above is None:
        return 0
    return gate(table, args.fail_above)


def gate(table, fail_above):
    """--fail-above's exit status. It fails closed: a configuration without a verdict (its runs
    failed, or too few repeats to judge) is no pass, and neither is a comparison of nothing."""
    from scalesweep import compare

    undecided = table[table["verdict"].astype(str).str.startswith(compare.UNKNOWN)] if len(table) else table
    if table.empty or len(undecided):
        print(f"scalesweep compare: --fail-above cannot pass: {len(undecided)} of {len(table)} "
              "configuration(s) have no verdict (see the summary)", file=sys.stderr)
        return 1
    failing = compare.regressions(table, fail_above)
    if len(failing):
        print(f"scalesweep compare: {len(failing)} configuration(s) significantly slower by more "
              f"than {fail_above:g} %", file=sys.stderr)
        return 1
    return 0


def register_check_config(commands):
    cmd = commands.add_parser("check-config", help="check config files as the workflow does, naming "
                              "file, line and column (Snakemake names none for a --configfile), and "
                              "list every dataset or image path that is missing or empty")
    cmd.add_argument("configs", nargs="*", help="config files, merged in order as --configfile does "
                     "(default: the profile's configfile)")
    cmd.add_argument("--profile", help="a Snakemake profile folder (e.g. mn5): its site's needs "
                     "(account, QoS limits, network) and default-resources are checked as the preview does")
    cmd.set_defaults(handler=check_config_command)


def check_config_command(args):
    import yaml

    from scalesweep import configcheck, matrix, preview, sitecheck

    configs = args.configs
    try:
        profile = sitecheck.read_profile(args.profile) if args.profile else sitecheck.Profile()
        configs = args.configs or profile.configfiles
        if not configs:
            print("error: no config file given (and no --profile with a configfile)", file=sys.stderr)
            return 1
        config, runs, settings, warnings = configcheck.check_sweep(configs, profile.site)
    except (configcheck.ConfigFileError, OSError, yaml.YAMLError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except matrix.ConfigError as error:
        print(f"error: {error} {configcheck.sources(configs)}", file=sys.stderr)
        return 1
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    jobs = {matrix.run_path(s, configcheck.training_defaults()): s for s in settings}
    print(f"{', '.join(map(str, configs))}: {len(runs)} configurations to run")
    print(preview.cost_lines(list(jobs.values()), list(jobs.values()))[-1].strip())
    site, qos = config["site"], profile.resource("qos")
    refusals = [sitecheck.account_problem(site, profile.resource("slurm_account"), profile.resource_args()),
                *sitecheck.qos_problems(site, qos, jobs)]
    if sitecheck.qos_warning(site, qos):
        print(f"warning: {sitecheck.qos_warning(site, qos)}", file=sys.stderr)
    problems = sitecheck.path_problems(config, settings)
    for refusal in filter(None, refusals):
        print(f"error: {refusal}", file=sys.stderr)
    if problems:
        print(f"error: {sitecheck.missing_paths_error(problems)}", file=sys.stderr)
    return 1 if problems or any(refusals) else 0


def register_parse(commands):
    cmd = commands.add_parser("parse", help="training logs (format detected) -> one JSON object per run")
    cmd.add_argument("logs", nargs="+", help="log files")
    cmd.add_argument("--world-size", type=int, default=None, help="for ddp-reference logs whose name lacks it")
    cmd.set_defaults(handler=parse_command)


def parse_command(args):
    import json
    from dataclasses import asdict

    status = 0
    for path in args.logs:
        try:
            for run in parse.parse_file(path, world_size=args.world_size):
                print(json.dumps(asdict(run)))
        except (parsed.LogFormatError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
    return status
