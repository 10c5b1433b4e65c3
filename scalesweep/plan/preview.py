"""The sweep summary printed before any job runs (`snakemake -n` shows it above the job list).

It counts the jobs that will run, not the matrix: after a finished sweep nothing is left to run,
and one added configuration is one job. On a cluster the GPU-hours line is what a user budgets
by, so it sums what the jobs to run are charged (a job holding whole nodes: all their GPUs), with
the whole matrix beside it. A configuration "to run" is one
without a result file; Snakemake may rerun more when told to (--forceall, -R), and its own job
list below says so.

A local run (the local executor, `make sweep`) books no GPU-hours and submits no SLURM job: its
preview counts processes and minutes instead. A dry run executes with Snakemake's own `dryrun`
executor, so which executor the user gave is read back from the command line (intended_executor).
"""

import contextlib
import io
from collections import Counter

from scalesweep.contract import frameworks, layout
from scalesweep.plan.cluster.site import missing_paths_warning
from scalesweep.plan.launch import booked_gpu_hours, held_gpus, holds_whole_nodes, processes_per_node
from scalesweep.plan.matrix import exclusion_counts


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def job_shape(settings):
    """e.g. '2 nodes x 4 GPUs'; a job holding more of its nodes than it uses says so: '1 node x 1
    GPU, whole node (4 GPUs charged)'."""
    if settings["gpus"] == 0:
        shape = "1 node x 0 GPUs (CPU baseline)"
    else:
        shape = f"{plural(settings['nodes'], 'node')} x {plural(settings['gpus_per_node'], 'GPU')}"
    if holds_whole_nodes(settings) and held_gpus(settings) > settings["gpus"]:
        shape += f", whole node ({plural(held_gpus(settings), 'GPU')} charged)"
    return shape


def time_limits(all_settings):
    """e.g. '75 min' or '30-120 min'."""
    limits = sorted({s["time_limit_min"] for s in all_settings})
    return f"{limits[0]} min" if len(limits) == 1 else f"{limits[0]}-{limits[-1]} min"


def left_out(excluded) -> str:
    counts = exclusion_counts(excluded)
    rules = " (" + ", ".join(f"{rule}: {n}" for rule, n in sorted(counts.items())) + ")" if counts else ""
    return f"{plural(len(excluded), 'combination')} left out{rules}"


# The network probe's job (rule probe_network, docs/prediction.md), as its line names it.
PROBE_JOB = "network probe (probe_network)"


def cost_lines(pending, every_job, probe=None) -> list:
    """Shapes and booked GPU-hours of the jobs to run, the whole matrix's beside them; `probe`:
    the network probe's settings (launch.network_probe_settings) when its job runs too, on a line
    of its own and counted in the totals."""
    if not pending and not probe:
        return ["  nothing to run: every job has its result"]
    probes = [probe] if probe else []
    jobs = pending + probes
    used, held = sum(s["gpus"] for s in jobs), sum(held_gpus(s) for s in jobs)
    charged = f" ({held} charged: whole nodes)" if held > used else ""
    lines = []
    if pending:
        shapes = Counter(job_shape(s) for s in pending)
        lines.append("  jobs to run per shape: " + ", ".join(f"{shape}: {n}" for shape, n in sorted(shapes.items())))
    if probe:
        lines.append(f"  {PROBE_JOB}: {job_shape(probe)}, {probe['time_limit_min']} min: "
                     f"{booked_gpu_hours(probe):.1f} GPU-hours")
    return [*lines,
            f"  GPUs of the jobs to run: {used}{charged}; GPU-hours they book at their "
            f"time limits ({time_limits(jobs)}): {sum(booked_gpu_hours(s) for s in jobs):.1f} "
            f"(all {plural(len(every_job) + len(probes), 'job')}: "
            f"{sum(booked_gpu_hours(s) for s in every_job + probes):.1f})"]


def local_shape(settings) -> str:
    """e.g. '2 processes', '1 process x 2 replicas' (MirroredStrategy), '1 process (CPU baseline)'."""
    if settings["gpus"] == 0:
        return "1 process (CPU baseline)"
    processes = processes_per_node(settings)
    shape = f"{processes} process{'' if processes == 1 else 'es'}"
    return shape if processes == settings["gpus"] else f"{shape} x {plural(settings['gpus'], 'replica')}"


def local_cost_lines(pending, every_job, probe=None) -> list:
    """Processes and minutes of the local jobs to run: each takes every core given to Snakemake
    (workflow/rules/resources.smk: job_threads), so they run one after another. `probe`: the
    network probe's settings when its job runs too: two local processes stand in for its nodes."""
    if not pending and not probe:
        return ["  nothing to run: every job has its result"]
    probes = [probe] if probe else []
    jobs = pending + probes
    lines = []
    if pending:
        shapes = Counter(local_shape(s) for s in pending)
        lines.append("  local jobs to run, one after another on the cores given to --cores: "
                     + ", ".join(f"{shape}: {n}" for shape, n in sorted(shapes.items())))
    if probe:
        lines.append(f"  {PROBE_JOB}: {probe['nodes']} processes (gloo) standing in for "
                     f"{plural(probe['nodes'], 'node')}, at most {probe['time_limit_min']} min")
    return [*lines,
            f"  minutes at their time limits ({time_limits(jobs)}): at most "
            f"{sum(s['time_limit_min'] for s in jobs)} "
            f"(all {plural(len(every_job) + len(probes), 'job')}: "
            f"{sum(s['time_limit_min'] for s in every_job + probes)})"]


def executor_named(plugin: str | None, argv) -> str | None:
    """The executor the user gave: Snakemake's `plugin`, but for a dry run, which executes with its
    own 'dryrun' (or 'touch') and says nothing of it; then the command line's. None: unknown."""
    if plugin is not None and plugin not in ("dryrun", "touch"):
        return plugin
    return intended_executor(argv)


def intended_executor(argv) -> str | None:
    """The executor named on Snakemake's command line `argv` (--executor, or a profile's
    `executor:`), 'local' where none is; None where `argv` is no Snakemake command line (the API)."""
    from snakemake.cli import parse_args

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # it names the profile a second time
            _, args = parse_args(list(argv))
    except (SystemExit, Exception):  # argparse exits on a command line that is not its own
        return None
    return args.executor or "local"


def warning_lines(warnings) -> str:
    return "\n".join(f"scalesweep: warning: {warning}" for warning in warnings)


def prediction_savings(every_job, analysis) -> tuple:
    """(the GPU counts the tables will predict, the GPU-hours running them would book): per
    configuration at the sweep's largest count, each predicted count at the same time limit, its
    GPUs in proportion (docs/prediction.md). A framework on one node predicts no count beyond it.
    `analysis`: the analysis settings (plan/analysis_settings.py), which say the counts and a
    node's GPUs."""
    if not every_job:
        return (), 0.0
    largest = max(s["gpus"] for s in every_job)
    counts = analysis.predicted_counts(largest)
    node = analysis.node_gpus(largest)
    hours = sum(count * s["time_limit_min"] / 60 for s in every_job if s["gpus"] == largest
                for count in counts if count > largest and (count <= node or frameworks.get(s["framework"]).multinode))
    return counts, hours


def savings_line(counts, hours: float) -> str:
    if not hours:
        return ""
    listed = ", ".join(str(count) for count in counts)
    return (f"  predicted, not run: {listed} GPUs per configuration ({layout.table('predictions')}); running "
            f"them would book about {hours:.1f} GPU-hours at these time limits")


def plan_summary(runs, excluded, jobs: dict, done: set, max_batch=False, local=False, savings="", probe=None):
    """The preview: `jobs` maps each job's result path to its settings, `done` holds the result
    paths that exist; `max_batch`: the jobs are maximum-batch searches, not the sweep's runs;
    `local`: they run on this machine (local_cost_lines), not as SLURM jobs; `savings`: the line
    on the GPU-hours the prediction saves (savings_line), shown for cluster runs only; `probe`:
    the network probe's settings when the sweep runs its job too."""
    pending = [settings for path, settings in jobs.items() if path not in done]
    measured = len(jobs) - len(pending)
    if max_batch:
        head = (f"scalesweep: find_max_batch: {plural(len(pending), 'search job')} to run ({measured} done) "
                f"for {plural(len(runs), 'configuration')}; {left_out(excluded)}")
    else:
        head = (f"scalesweep: {plural(len(pending), 'configuration')} to run ({measured} already measured) "
                f"of {len(runs)}; {left_out(excluded)}")
    costs = local_cost_lines if local else cost_lines
    extra = [savings] if savings and not local else []
    return "\n".join([head, *costs(pending, list(jobs.values()), probe), *extra])


def pending_runs(run_paths, jobs: dict, done) -> dict:
    """{run path: settings} of the jobs still to run, for the site's checks: `jobs` maps each
    job's result path to its settings in the order of `run_paths` (the run each job measures),
    `done` holds the result paths that exist."""
    return {run: settings for run, (result, settings) in zip(run_paths, jobs.items()) if result not in done}


def preview_text(runs, excluded, jobs: dict, done: set, analysis, *, max_batch=False, local=False, probe=None,
                 config_files=(), cli_files=(), path_problems=()) -> str:
    """Everything the preview prints: the paths the jobs read that are missing or empty
    (`path_problems`, site.path_problems), which files made the config (config_files_line) and the
    plan (plan_summary; its arguments), with, for the sweep's runs, the GPU-hours the prediction
    saves (`analysis`: the analysis settings) and the network probe's job (`probe`)."""
    savings = "" if max_batch else savings_line(*prediction_savings(list(jobs.values()), analysis))
    summary = plan_summary(runs, excluded, jobs, done, max_batch=max_batch, local=local, savings=savings,
                           probe=None if max_batch else probe)
    warning = [missing_paths_warning(path_problems)] if path_problems else []
    return "\n".join([*warning, config_files_line(config_files, cli_files), summary])


def config_files_line(files_used, cli_files) -> str:
    """Which files made the config, in the order they apply. Snakemake merges --configfile into
    the Snakefile's default config key by key, so a one-combination file still plans the default's
    other values (its repeats, say): where the default took part, the line says so and how to
    leave it out."""
    files_used, cli_files = [str(f) for f in files_used], [str(f) for f in cli_files]
    line = f"scalesweep: config from {', then '.join(files_used) or 'no file'}"
    default = [f for f in files_used if f not in cli_files]
    if default and cli_files:
        line += (f" (merged: {', '.join(cli_files)} replaces only the keys it sets; the rest is "
                 f"{default[0]}'s. To use {' '.join(cli_files)} alone: --configfile "
                 f"{' '.join(cli_files)} --replace-workflow-config)")
    return line
