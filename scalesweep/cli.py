"""`python -m scalesweep analyze PATH... --out DIR`: logs and/or runs.csv -> tidy, tables, figures.

For users who bring logs from earlier runs (ours, the reference TF/Keras scripts, the reference
DDP script) or runs tables from several sweeps.

Broken input does not cost the rest: a log that cannot be read or breaks the record contract is a
failed row, a runs table or manifest that cannot be read is left out, and each is listed on
stderr, naming the file (and line and key where there is one); the exit status is then 1.
Everything readable is still written. Exit status 2: nothing could be analysed at all.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from scalesweep.contract import hardware, layout
from scalesweep.contract.input_files import not_a_file, not_a_file_refusal
from scalesweep.contract.layout import RESULTS
from scalesweep.plan.history_place import DEFAULT_HISTORY_DIR

if TYPE_CHECKING:
    from scalesweep.plan.analysis_settings import AnalysisSettings

# Each command imports what it runs where it runs it (the analysis's tables, figures and log
# readers for `analyze`, DuckDB and the comparison for `compare`): a command's start is part of
# what its user waits for.

REFUSED_EXIT = 1
FAILED_EXIT = 2


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


def report_refused(refused, stream=None):
    stream = sys.stderr if stream is None else stream
    if refused:
        print(f"scalesweep analyze: refused {len(refused)} input(s):", file=stream)
        for reason in refused:
            print(f"  {reason}", file=stream)


def analyze(paths, out, settings: AnalysisSettings, all_attempts=False, images_per_epoch=None,
            world_sizes=None, network_csv=None, figure_formats=layout.ANALYZE_FIGURE_FORMATS):
    """Write out/tidy, out/tables, out/figures and out/findings.md; return the refused inputs
    (already reported). `world_sizes`: (log file, GPUs) pairs (--world-size)."""
    from scalesweep import pipeline
    from scalesweep.analysis import tables
    from scalesweep.tidy import copies

    out = output_folder(out)
    if network_csv is not None and not_a_file(network_csv):
        raise ValueError(f"--network {not_a_file_refusal(network_csv, 'a network.csv file')}")
    runs_csv, refused, copies_left_out = pipeline.collect_runs(
        [Path(p) for p in paths], Path(layout.in_results(out, layout.TIDY)), all_attempts, images_per_epoch,
        world_sizes, processes=None)
    report_refused(refused)
    if copies_left_out:
        print("scalesweep analyze: " + "\n".join(copies.copies_report(copies_left_out)))
    if runs_csv is None:
        raise ValueError("no runs found in " + ", ".join(map(str, paths)))
    table_outputs = tables.outputs_in(layout.in_results(out, layout.TABLES))
    for line in pipeline.tables_figures_findings(runs_csv, table_outputs, settings,
                                                 Path(layout.in_results(out, layout.FIGURES)),
                                                 Path(layout.in_results(out, layout.FINDINGS)),
                                                 network_csv, figure_processes=None,
                                                 forked=hardware.may_fork_helpers(),
                                                 formats=figure_formats):
        print(line)
    return refused


def register_analyze(commands) -> None:
    analyze_cmd = commands.add_parser("analyze", help="logs and/or runs.csv -> tidy CSVs, tables, figures")
    analyze_cmd.add_argument("paths", nargs="+", help="log files, folders of logs, runs.csv tables")
    analyze_cmd.add_argument("--out", required=True, help="output folder (tidy/, tables/, figures/)")
    # Every setting's default is the schema's (AnalysisSettings.from_options): None = not given.
    analyze_cmd.add_argument("--efficiency-floor", type=number(0, 100), help="in %% (sweet spot)")
    analyze_cmd.add_argument("--gpu-hour-budget", type=number(0, low_open=True), help="GPU-hours (sweet spot)")
    analyze_cmd.add_argument("--epoch-budget", type=number(0, low_open=True),
                             help="training epochs the sweet spot's projected GPU-hours stand for")
    analyze_cmd.add_argument("--svg", action="store_true",
                             help="each figure as SVG too (the workflow's figures stage writes both for its "
                                  "report; without it: PNG only)")
    analyze_cmd.add_argument("--all-attempts", action="store_true",
                             help="every attempt log of a run (default: only its latest, <run>.attempt-K.log)")
    analyze_cmd.add_argument("--greenest-time-bound-s", type=number(0, low_open=True),
                             help="seconds (sweet spot 'greenest': least energy within this time)")
    analyze_cmd.add_argument("--images-per-epoch", type=positive_count, default=None, metavar="N",
                             help="training images of the logs' dataset, for Keras logs, which count "
                             "steps (default: CIFAR-10's 50,000 where the steps agree, else an estimate)")
    analyze_cmd.add_argument("--world-size", type=file_count, action="append", default=[],
                             metavar="FILE=N", help="GPUs of the run logged in FILE, for logs that do "
                             "not print it (the course's DDP script); repeat per file")
    analyze_cmd.add_argument("--predict", type=gpu_counts, default=None, metavar="N,N,...",
                             help=f"GPU counts to predict ({layout.table('predictions')}; docs/prediction.md)")
    analyze_cmd.add_argument("--network", default=None, metavar="CSV",
                             help="the network probe's network.csv: the predictions' inter-node bandwidth")
    analyze_cmd.add_argument("--network-busbw", type=number(0, low_open=True), default=None, metavar="GB/S",
                             help="what if: the all-reduce bus bandwidth across nodes of another cluster, "
                             "used instead of --network's and labelled as given (docs/prediction.md)")
    analyze_cmd.add_argument("--network-latency-us", type=number(0), default=None, metavar="US",
                             help="what if: its all-reduce latency per ring hop (with --network-busbw; default 0)")
    analyze_cmd.add_argument("--gpus-per-node", type=positive_count, default=None, metavar="N",
                             help="GPUs of one node, where the prediction starts to pay for the network")
    analyze_cmd.add_argument("--allow-superlinear", action="store_true", default=None,
                             help="let the sweet spot choose GPU counts flagged superlinear (> 105 %%)")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m scalesweep")
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", required=True)
    register_analyze(commands)
    register_history(commands)
    register_compare(commands)
    register_check_config(commands)
    register_parse(commands)
    register_config_doc(commands)
    register_show(commands)
    args = parser.parse_args(argv)
    if hasattr(args, "handler"):
        return args.handler(args)
    from scalesweep.logs.run import LogFormatError

    try:
        settings = analyze_settings(args)
        refused = analyze(args.paths, args.out, settings, args.all_attempts, args.images_per_epoch,
                          args.world_size, args.network,
                          layout.FIGURE_FORMATS if args.svg else layout.ANALYZE_FIGURE_FORMATS)
    except (ValueError, FileNotFoundError, LogFormatError) as error:
        print(f"scalesweep analyze: {error}", file=sys.stderr)
        return FAILED_EXIT
    except OSError as error:  # a write into --out: a full disk, a quota, a read-only mount
        print(f"scalesweep analyze: {not_written_in_out(error, args.out)}", file=sys.stderr)
        return FAILED_EXIT
    return REFUSED_EXIT if refused else 0


def analyze_settings(args):
    """The analysis settings `analyze`'s options give (the schema's defaults for the rest)."""
    from scalesweep.plan.analysis_settings import AnalysisSettings

    return AnalysisSettings.from_options(
        efficiency_floor=args.efficiency_floor, gpu_hour_budget=args.gpu_hour_budget,
        epoch_budget=args.epoch_budget, greenest_time_bound_s=args.greenest_time_bound_s,
        allow_superlinear=args.allow_superlinear, predict_gpus=args.predict, gpus_per_node=args.gpus_per_node,
        network_busbw_gb_s=args.network_busbw,
        network_latency_s=None if args.network_latency_us is None else args.network_latency_us / 1e6)


def not_written_in_out(error: OSError, out) -> str:
    """What a failed write left: which file, why, and that --out is not whole."""
    from scalesweep.report.outcome import not_written

    return (f"{not_written(error)}; --out {out} holds only what was written before it: "
            "free the space (or fix the folder) and run analyze again")


def file_count(text):
    """argparse type of --world-size: FILE=N, N a whole number >= 1 -> (FILE, N)."""
    path, equals, count = text.rpartition("=")
    if not equals or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected FILE=N, e.g. R-ddp_tiny_2nodes_4gpus.31337.out=8")
    return path, positive_count(count)


def positive_count(text):
    """argparse type: a whole number >= 1."""
    from scalesweep.logs.run import whole_number

    value = whole_number(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def gpu_counts(text):
    """argparse type: comma-separated whole numbers >= 1, e.g. 8,16,32."""
    return tuple(positive_count(part.strip()) for part in text.split(","))


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
    from scalesweep.history import query

    try:
        query.refuse_missing_history(args.history)
        with warnings_on_one_line("scalesweep history"):
            table = query.sweeps_table(args.history, args.where, args.selectors)
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
    cmd.add_argument("--out", default=layout.COMPARE, help="folder for compare.csv, compare.png, summary.txt")
    cmd.add_argument("--confidence", type=number(0, 1, low_open=True, high_open=True), default=0.95,
                     help="family-wise confidence level")
    cmd.add_argument("--fail-above", type=number(0), metavar="PCT",
                     help="exit 1 when a configuration is significantly slower by more than PCT %%")
    cmd.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    cmd.add_argument("--allow-same", action="store_true",
                     help="compare sides that hold the same runs (an A/A check); refused without it")
    cmd.set_defaults(handler=compare_command)


def compare_command(args):
    from scalesweep.history import compare, query, sides

    try:
        with warnings_on_one_line("scalesweep compare"):
            loaded = sides.load_sides({"baseline": args.baseline, "candidate": args.candidate},
                                      args.history, args.where)
            table, text = compare.write_comparison(*loaded, output_folder(args.out), args.confidence, args.seed,
                                                   lambda: query.spread_runs(args.history), args.allow_same)
    except (ValueError, FileNotFoundError) as error:
        print(f"scalesweep compare: {error}", file=sys.stderr)
        return 2
    print(text, end="")
    print(f"written: {', '.join(str(Path(args.out) / name) for name in sides.COMPARE_OUTPUTS)}")
    if args.fail_above is None:
        return 0
    return gate(table, args.fail_above)


def gate(table, fail_above):
    """--fail-above's exit status. It fails closed: a configuration without a verdict (its runs
    failed, or too few repeats to judge) is no pass, and neither is a comparison of nothing."""
    from scalesweep.history import compare

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

    from scalesweep.plan import matrix, preview
    from scalesweep.plan.cluster import site
    from scalesweep.plan.checks import ConfigError
    from scalesweep.plan.config import ConfigFileError, check_sweep, sources, training_defaults

    configs = args.configs
    try:
        profile = site.read_profile(args.profile) if args.profile else site.Profile()
        configs = args.configs or profile.configfiles
        if not configs:
            print("error: no config file given (and no --profile with a configfile)", file=sys.stderr)
            return 1
        config, runs, settings, warnings = check_sweep(configs, profile.site)
    except (ConfigFileError, OSError, yaml.YAMLError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ConfigError as error:
        print(f"error: {error} {sources(configs)}", file=sys.stderr)
        return 1
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    jobs = {matrix.run_path(s, training_defaults()): s for s in settings}
    print(f"{', '.join(map(str, configs))}: {len(runs)} configurations to run")
    print(preview.cost_lines(list(jobs.values()), list(jobs.values()))[-1].strip())
    # The profile's QoS is every job's: one rule, as the preview checks each rule's.
    refusals, qos_warnings = site.job_problems(
        config["site"], profile.resource("slurm_account"), profile.resource_args(), jobs,
        rule_of=lambda settings: "all", qos_of=lambda rule: profile.resource("qos"))
    for warning in qos_warnings:
        print(f"warning: {warning}", file=sys.stderr)
    problems = site.path_problems(config, settings)
    for refusal in refusals:
        print(f"error: {refusal}", file=sys.stderr)
    if problems:
        print(f"error: {site.missing_paths_error(problems)}", file=sys.stderr)
    return 1 if problems or any(refusals) else 0


def register_parse(commands):
    cmd = commands.add_parser("parse", help="training logs (format detected) -> one JSON object per run")
    cmd.add_argument("logs", nargs="+", help="log files")
    cmd.add_argument("--world-size", type=int, default=None, help="for ddp-reference logs whose name lacks it")
    cmd.set_defaults(handler=parse_command)


def parse_command(args):
    import json
    from dataclasses import asdict

    from scalesweep.logs.read import parse_file
    from scalesweep.logs.run import LogFormatError

    status = 0
    for path in args.logs:
        try:
            for run in parse_file(path, world_size=args.world_size):
                contradiction = given_world_size_contradiction(run, args.world_size)
                if contradiction:
                    raise LogFormatError(path, contradiction)
                print(json.dumps(asdict(run)))
        except (LogFormatError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
    return status


def given_world_size_contradiction(run, world_size) -> str | None:
    """Why --world-size N cannot stand for a run whose log names its own world size (a DDP
    reference log takes N over its file name: that is what the option is for)."""
    logged = run.header.get("world_size")
    from scalesweep.logs.formats.ddp import FORMAT as DDP_FORMAT

    if world_size is None or run.format == DDP_FORMAT or logged in (None, world_size):
        return None
    return f"--world-size {world_size}: the log's header says 'world_size' {logged}: leave out --world-size for a log that prints its own"


def version_text():
    """The installed package's version beside the code version a run records: a wheel says its
    release, a checkout or an unpacked bundle the commit it runs."""
    from importlib import metadata

    from scalesweep.plan.code_version import code_version

    try:
        package = metadata.version("scalesweep")
    except metadata.PackageNotFoundError:
        package = "not installed"
    return f"scalesweep {package} (code {code_version()})"


def register_config_doc(commands):
    cmd = commands.add_parser("config-doc", help="every config key from the schema, as config/README.md holds it")
    cmd.set_defaults(handler=config_doc_command)


def config_doc_command(args):
    from scalesweep.plan.config import config_reference

    sys.stdout.write(config_reference())
    return 0


def register_show(commands):
    cmd = commands.add_parser("show", help="the scaling table and sweet spot of a results folder, in the terminal")
    cmd.add_argument("results_dir", nargs="?", default=RESULTS, metavar="RESULTS_DIR",
                     help=f"a sweep's results folder or analyze's --out folder (default: {RESULTS})")
    cmd.add_argument("--format", type=show_format, default="text",
                     help="text (fits 100 columns), csv or markdown")
    cmd.set_defaults(handler=show_command)


def show_format(text):
    """argparse type of show's --format: one of terminal_table.FORMATS (read here, where show
    runs, not by every command's parser)."""
    from scalesweep.report import terminal_table

    if text not in terminal_table.FORMATS:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(terminal_table.FORMATS)})")
    return text


def show_command(args):
    from scalesweep.report import terminal_table

    try:
        scaling, sweet_spot = terminal_table.results_tables(args.results_dir)
    except (terminal_table.ResultsMissing, ValueError, OSError) as error:
        print(f"scalesweep show: {error}", file=sys.stderr)
        return FAILED_EXIT
    table, keys = terminal_table.show_table(scaling, sweet_spot)
    sys.stdout.write(terminal_table.render(table, keys, args.format, sweet_spot))
    return 0
