"""The sweep summary printed before any job runs (`snakemake -n` shows it above the job list)."""

from collections import Counter

from scalesweep.launch import gpu_hours
from scalesweep.matrix import exclusion_counts


def job_shape(settings):
    if settings["gpus"] == 0:
        return "1 node x 0 GPUs (CPU baseline)"
    gpus = settings["gpus_per_node"]
    return f"{settings['nodes']} node{'s' if settings['nodes'] > 1 else ''} x {gpus} GPU{'s' if gpus > 1 else ''}"


def time_limits(all_settings):
    """e.g. '75 min' or '30-120 min'."""
    limits = sorted({s["time_limit_min"] for s in all_settings})
    return f"{limits[0]} min" if len(limits) == 1 else f"{limits[0]}-{limits[-1]} min"


def summary(runs, excluded, all_settings, warnings=()):
    all_settings = list(all_settings)
    left_out = exclusion_counts(excluded)
    shapes = Counter(job_shape(s) for s in all_settings)
    total_gpus = sum(s["gpus"] for s in all_settings)
    lines = [
        f"scalesweep: {len(runs)} configurations to run, {len(excluded)} combinations left out"
        + (" (" + ", ".join(f"{rule}: {n}" for rule, n in sorted(left_out.items())) + ")" if left_out else ""),
        "  jobs per shape: " + ", ".join(f"{shape}: {n}" for shape, n in sorted(shapes.items())),
        f"  GPUs in all: {total_gpus}; GPU-hours booked at the jobs' time limits "
        f"({time_limits(all_settings)}): {sum(gpu_hours(s) for s in all_settings):.1f}",
    ]
    lines += [f"scalesweep: warning: {warning}" for warning in warnings]
    return "\n".join(lines)
