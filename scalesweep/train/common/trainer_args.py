"""The trainers' shared command line: the options both take, with one name and meaning each
(scalesweep/plan/launch.py builds one command for both), and their checks before anything runs.

Standard library only: it runs inside the TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import argparse
import math

from scalesweep.train.common import heartbeat, measure
from scalesweep.train.common.measure import (
    DEFAULT_MAX_BATCH_LIMIT,
    DEFAULT_MAX_TIMED_STEPS,
    DEFAULT_TARGET_CI_PCT,
    DEFAULT_TIMED_STEPS,
    DEFAULT_WARMUP_STEPS,
)
from scalesweep.contract.records import OOM_POLICIES, PRECISIONS, PROTOCOLS


def common_parser(models, data_help: str) -> argparse.ArgumentParser:
    """The options both trainers share, as an argparse parent: one command builder
    (scalesweep/plan/launch.py) drives both trainers, with the same names and meanings. A trainer
    sets its own defaults where they differ (parser.set_defaults)."""
    parser = argparse.ArgumentParser(add_help=False)
    add = parser.add_argument
    add("--model", choices=models, help="model to train (see --list-models)")
    add("--data", help=data_help)
    add("--dataset-name", help="the dataset's name in the records")
    add("--resolution", type=int, default=224, help="training resolution in px (default %(default)s)")
    add("--gpus", type=int, default=0, help="GPUs asked for, all nodes together; 0 = the CPU baseline "
                                            "(default %(default)s)")
    add("--per-gpu-batch", type=int, default=64, help="images per GPU per step (default %(default)s)")
    add("--base-lr", type=float, default=0.01, help="learning rate of one GPU, scaled by the world size")
    add("--epochs", type=int, default=5, help="epochs of the epochs protocol (default %(default)s)")
    add("--max-train-images", type=int, default=0, help="train on a seeded subset of this many images; 0 = all")
    add("--precision", choices=PRECISIONS, default="fp32", help="fp32, or bf16/fp16 mixed precision")
    add("--compile", action="store_true", help="run the model compiled (TF: XLA, PyTorch: torch.compile)")
    add("--seed", type=int, default=0, help="random seed (default %(default)s)")
    add("--list-models", action="store_true", help="print the model names and exit")
    add("--heartbeat-s", type=float, default=heartbeat.DEFAULT_INTERVAL_S,
        help="seconds between progress lines in the log (also every 10 %% of an epoch); 0 = none")
    add("--trace-dir", help="trace the timed window of --protocol steps with the framework's profiler "
                            "into this folder (a trace run, never a measured one)")
    add("--trace-ranks", default="0", help="ranks traced with --trace-dir: 'all' or a comma list (default 0)")
    add("--env-names", default="", help="comma-separated names of the run's own environment variables "
                                        "(matrix.env), recorded in the header as this process sees them")
    add_measurement_options(parser)
    return parser


def add_measurement_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--protocol", choices=PROTOCOLS, default="epochs",
        help="epochs: time whole epochs; steps: --warmup-steps then --timed-steps steps")
    add("--warmup-steps", type=int, default=DEFAULT_WARMUP_STEPS,
        help=f"first steps of the run, left out of the step statistics (default {DEFAULT_WARMUP_STEPS})")
    add("--oom-policy", choices=OOM_POLICIES, default="fail",
        help="out of memory: fail (status oom) or halve the per-GPU batch and retry, down to 1")
    add("--find-max-batch", action="store_true",
        help="search the largest per-GPU batch that trains, from --per-gpu-batch up")
    add("--max-batch-limit", type=int, default=DEFAULT_MAX_BATCH_LIMIT,
        help=f"largest per-GPU batch the search tries (default {DEFAULT_MAX_BATCH_LIMIT})")
    add_timed_window_options(parser)


def add_timed_window_options(parser: argparse.ArgumentParser) -> None:
    """--timed-steps (a number or auto), --target-ci-pct and --max-timed-steps."""

    def timed_steps(text):
        try:
            return measure.timed_steps_setting(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    def positive(kind):
        def parse(text):
            value = kind(text)
            if not (value > 0 and math.isfinite(value)):
                raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
            return value
        return parse

    parser.add_argument("--timed-steps", type=timed_steps, default=DEFAULT_TIMED_STEPS,
                        help="timed steps of the steps protocol, or 'auto': until the mean step "
                             f"time is known to --target-ci-pct (default {DEFAULT_TIMED_STEPS})")
    parser.add_argument("--target-ci-pct", type=positive(float), default=DEFAULT_TARGET_CI_PCT,
                        help="auto window: 95 %% half-width of the mean step time to reach, in %% "
                             f"of the mean (default {DEFAULT_TARGET_CI_PCT:g})")
    parser.add_argument("--max-timed-steps", type=positive(int), default=DEFAULT_MAX_TIMED_STEPS,
                        help=f"auto window: the most steps it times (default {DEFAULT_MAX_TIMED_STEPS})")


def trainer_parser(description: str, models, data_help: str, **defaults) -> argparse.ArgumentParser:
    """A trainer's parser: the shared options with the trainer's `defaults`, to which it adds
    its own. allow_abbrev=False: a prefix of one option must never silently mean another (and
    torchrun claims abbreviations of its own options)."""
    parser = argparse.ArgumentParser(description=description, parents=[common_parser(models, data_help)],
                                     allow_abbrev=False)
    parser.set_defaults(**defaults)
    return parser


# (flag, smallest value) of the shared whole-number options.
_LEAST = (("--resolution", 1), ("--gpus", 0), ("--per-gpu-batch", 1), ("--epochs", 1),
          ("--max-train-images", 0), ("--warmup-steps", 0), ("--max-batch-limit", 1))


def parse_args(parser: argparse.ArgumentParser, argv=None, check=None) -> argparse.Namespace:
    """Parse and check the shared options, then the trainer's own (`check(parser, args)`);
    a bad command line exits with status 2 before anything runs."""
    args = parser.parse_args(argv)
    if args.list_models:
        return args
    for flag in ("--model", "--data"):
        if getattr(args, flag[2:]) is None:
            parser.error(f"{flag} is required")
    for flag, least in _LEAST:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value < least:
            parser.error(f"{flag} must be {'0 or more' if least == 0 else f'>= {least}'}, got {value}")
    if not (math.isfinite(args.heartbeat_s) and args.heartbeat_s >= 0):
        parser.error(f"--heartbeat-s must be 0 or more seconds, got {args.heartbeat_s}")
    if not math.isfinite(args.base_lr) or args.base_lr <= 0:
        parser.error(f"--base-lr must be a positive number, got {args.base_lr}")
    if args.protocol == "steps" and args.warmup_steps < 1:
        parser.error("--protocol steps needs --warmup-steps of at least 1: the first step holds tracing or "
                     "compilation, the first allocations and the input pipeline's first fill")
    if args.find_max_batch and args.max_batch_limit < args.per_gpu_batch:
        parser.error(f"--max-batch-limit {args.max_batch_limit} is below the starting "
                     f"--per-gpu-batch {args.per_gpu_batch}")
    if args.trace_dir and (args.protocol != "steps" or args.timed_steps == measure.AUTO_TIMED_STEPS):
        parser.error("--trace-dir traces the timed window of --protocol steps with a number of --timed-steps")
    if check is not None:
        check(parser, args)
    return args
