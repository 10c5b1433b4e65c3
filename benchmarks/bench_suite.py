"""Benchmark of the test suite (issue 36's last row): `make test-fast` on this checkout and on a base
(817bbc2 unless told), alternating (benchmarks/paired.py), and with `--full` one `make test`.

    .venv/bin/python benchmarks/bench_suite.py [--rounds 3] [--base PATH | --base-commit 817bbc2]
        [--full] [--head PATH]

Each side runs its own tests with its own conftest and marks, as its Makefile's test-fast target
runs them (two workers, the slow, SLURM, workflow and command tests deselected), with this venv's
interpreter and its package first on the path. Prints `test_fast_...` lines (paired.pair_lines:
CPU and wall seconds of each side, each pair's ratio, the median over the 60 s goal) and, with
`--full`, `make_test_wall_s` (this checkout only, once: the whole suite takes most of an hour, and a
base run beside it would double that). A side whose tests fail is a failure of the benchmark: a
time of a suite that did not pass is no figure.
"""

import argparse
import os
import sys
from pathlib import Path

import paired
from paired import BenchmarkFailure

REPO = Path(__file__).resolve().parent.parent
FAST_GOAL_S = 60.0
FULL_GOAL_S = 25 * 60.0
# The Makefile's test-fast selection (its WORKERS and marks).
FAST_ARGS = ["-n", "2", "--max-worker-restart=0", "-q", "-p", "no:cacheprovider",
             "-m", "not slow and not slurm and not workflow and not command"]
FULL_ARGS = ["-n", "2", "--max-worker-restart=0", "--dist", "loadgroup", "-q", "-p", "no:cacheprovider"]


def suite_env(checkout: Path) -> dict:
    """paired.side_env as the Makefile's test targets leave it: SLURM_CONF as the caller has it, not
    the local runs' empty one. Where a SLURM client is installed and no controller answers, what
    pytest imports while collecting may wait for `scontrol`, and `make test-fast` pays that wait."""
    env = paired.side_env(checkout)
    env.pop("SLURM_CONF")
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    return env


def pytest_side(args: list):
    """run_side for paired.run_pairs: the side's own tests, in its own folder."""

    def run_side(side, checkout, index):
        return paired.timed([sys.executable, "-m", "pytest", *args], cwd=checkout, env=suite_env(checkout))[0]

    return run_side


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    paired.add_base_arguments(parser, default_commit="817bbc2")
    parser.add_argument("--full", action="store_true", help="also one run of the whole suite")
    parser.add_argument("--head", type=Path, default=REPO,
                        help="the checkout measured against the base (default: this one)")
    args = parser.parse_args(argv)
    try:
        with paired.BaseCheckout(args.base, args.base_commit) as base:
            checkouts = {paired.HEAD: args.head.resolve(), paired.BASE: base}
            pairs = paired.run_pairs(pytest_side(FAST_ARGS), checkouts, args.rounds)
            paired.print_lines(paired.pair_lines("test_fast", pairs, FAST_GOAL_S))
            if args.full:
                full = pytest_side(FULL_ARGS)(paired.HEAD, checkouts[paired.HEAD], 0)
                paired.print_lines([f"make_test_wall_s {full.wall_s:.1f} s",
                                    f"make_test_cpu_s {full.cpu_s:.1f} s",
                                    f"make_test_wall_goal_ratio {full.wall_s / FULL_GOAL_S:.3f} x"])
    except BenchmarkFailure as error:
        print(f"bench_suite: FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
