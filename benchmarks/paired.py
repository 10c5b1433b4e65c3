"""One command timed on this checkout and on a base checkout, the sides alternating (A B A B ...),
so that a ratio compares runs made moments apart on a machine whose load changes by the minute.

    .venv/bin/python benchmarks/paired.py --name NAME [--base PATH | --base-commit 817bbc2]
        [--rounds 3] [--cwd DIR] -- COMMAND ...

`{repo}` in COMMAND is each side's checkout; each side runs with PYTHONPATH set to its checkout
(run it from a folder outside both, --cwd, so that neither side's package is found by accident).
Prints `name value unit` lines: per side (`NAME_...` this checkout, `NAME_base_...` the base) the
median, min and max of CPU seconds (the command and its children: steadier on a shared machine)
and wall seconds, then each pair's ratio this / base, median, min and max. The benchmarks of
`make bench` import it to time their rows the same way (bench_analysis.py).

A base given by --base-commit is checked out into a temporary folder, a git clone sharing this
repository's objects: the repository itself is not touched (no worktree, no checkout).
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
HEAD, BASE = "head", "base"
FLOOR = "floor"  # the second side of a row paired with its floor (floor_pairs)


class BenchmarkFailure(RuntimeError):
    pass


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float  # user + system time of the command and its children


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: List[str], cwd=None, env=None):
    """Run a command to its end: (its Timing, the completed process); a failure raises."""
    cpu, start = children_cpu_s(), time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    timing = Timing(time.perf_counter() - start, children_cpu_s() - cpu)
    if result.returncode != 0:
        raise BenchmarkFailure(f"{' '.join(map(str, command))} exited {result.returncode}:\n"
                               f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return timing, result


def side_env(checkout: Path) -> dict:
    """The environment of a side: its own package first on the path, its bytecode written beside
    its sources (each checkout has its own __pycache__, so neither side finds the other's).

    No PYTHONPYCACHEPREFIX: with one, Python looks for every module's bytecode under the prefix
    only, pandas', matplotlib's and scipy's too, and where none is written there (a shell's
    PYTHONDONTWRITEBYTECODE) each run compiles them all again: twice the import time, in both
    sides' figures. No PYTHONDONTWRITEBYTECODE either, so that a side compiles its own package
    once."""
    inherited = {key: value for key, value in os.environ.items()
                 if key not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    return {**inherited, "PYTHONPATH": str(checkout), "SLURM_CONF": os.devnull}


def compile_checkouts(checkouts) -> None:
    """Each side's package compiled before the first timed run: the first run of a side would
    otherwise also pay for compiling it. A checkout that cannot be written (a read-only --base)
    compiles its package in memory on each run, both sides' libraries still read from their
    bytecode: said on stderr."""
    for checkout in checkouts:
        done = subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "scalesweep")],
                              env=side_env(checkout), capture_output=True)
        if done.returncode != 0:
            print(f"paired: {checkout}/scalesweep could not be compiled in place (read-only?): that side "
                  "compiles its package on each run", file=sys.stderr)


def unpack_commit(commit: str, into: Path, repo: Path = REPO) -> Path:
    """A checkout of `commit` of `repo` at `into`: a git checkout sharing the repository's objects
    (nothing copied but the files), since the base's own tests ask git what the checkout tracks
    (the citations, the bundle): a tree unpacked without .git failed three of them."""
    into.parent.mkdir(parents=True, exist_ok=True)
    for command in (["git", "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(into)],
                    ["git", "-C", str(into), "checkout", "--quiet", "--detach", commit]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchmarkFailure(f"{' '.join(command[:3])} of {commit} failed: {done.stderr[-1000:]}")
    return into


@dataclass
class Pairs:
    """The timings of both sides, in the order they ran."""
    head: List[Timing]
    base: List[Timing]


def run_pairs(run_side: Callable[[str, Path, int], Timing], checkouts: Dict[str, Path],
              runs: int) -> Pairs:
    """`run_side(side, checkout, round)` `runs` times per side, alternating; each round starts
    with the other side than the last, so neither always runs first (a warm file cache)."""
    pairs = Pairs([], [])
    for index in range(runs):
        order = (HEAD, BASE) if index % 2 == 0 else (BASE, HEAD)
        for side in order:
            getattr(pairs, side).append(run_side(side, checkouts[side], index))
    return pairs


def floor_pairs(ours: Callable[[int], Timing], floor: Callable[[int], Timing], runs: int) -> Pairs:
    """`ours(round)` and `floor(round)` `runs` times each, alternating as run_pairs does; the floor
    (the least any implementation of the command pays) is the second side, Pairs.base."""
    sides = {HEAD: ours, BASE: floor}
    return run_pairs(lambda side, _checkout, index: sides[side](index), {HEAD: None, BASE: None}, runs)


def spread(name: str, values: List[float], unit: str) -> List[str]:
    return [f"{name} {statistics.median(values):.3f} {unit}",
            f"{name}_min {min(values):.3f} {unit}",
            f"{name}_max {max(values):.3f} {unit}"]


def side_lines(name: str, timings: List[Timing]) -> List[str]:
    """Median, min and max of one side's CPU and wall seconds."""
    return (spread(f"{name}_cpu_s", [t.cpu_s for t in timings], "s")
            + spread(f"{name}_wall_s", [t.wall_s for t in timings], "s"))


def pair_lines(name: str, pairs: Pairs, goal_wall_s: Optional[float] = None,
               other: str = BASE) -> List[str]:
    """The `name value unit` lines of a paired measurement (module docstring); `other` names the
    second side in them (FLOOR for floor_pairs)."""
    lines = side_lines(name, pairs.head) + side_lines(f"{name}_{other}", pairs.base)
    for kind in ("cpu", "wall"):
        ratios = [getattr(h, f"{kind}_s") / getattr(b, f"{kind}_s")
                  for h, b in zip(pairs.head, pairs.base)]
        lines += spread(f"{name}_{kind}_ratio_to_{other}", ratios, "x")
    if goal_wall_s is not None:
        median_wall = statistics.median(t.wall_s for t in pairs.head)
        lines.append(f"{name}_wall_goal_ratio {median_wall / goal_wall_s:.3f} x")
    return lines


def print_lines(lines: List[str]) -> None:
    for line in lines:
        print(line, flush=True)


class BaseCheckout:
    """The base side's checkout: a folder given (--base), or a commit unpacked for the run and
    removed after it (--base-commit), or None without either."""

    def __init__(self, path: Optional[str], commit: Optional[str]):
        self.path, self.commit, self.scratch = path, commit, None

    def __enter__(self) -> Optional[Path]:
        if self.path:
            return Path(self.path).resolve()
        if not self.commit:
            return None  # no base: this checkout alone
        self.scratch = Path(tempfile.mkdtemp(prefix="scalesweep-base-"))
        return unpack_commit(self.commit, self.scratch / "checkout")

    def __exit__(self, *exc_info):
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def add_base_arguments(parser: argparse.ArgumentParser, default_commit: Optional[str]) -> None:
    parser.add_argument("--base", help="a checkout to compare with (e.g. of 817bbc2)")
    parser.add_argument("--base-commit", default=default_commit,
                        help="a commit to compare with, checked out for the run "
                             f"(default {default_commit}; ignored with --base)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per side (default 3)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the figure's name in the printed lines")
    parser.add_argument("--cwd", help="where the command runs (default: a temporary folder)")
    parser.add_argument("--goal-wall-s", type=float, help="print the median wall time / goal")
    add_base_arguments(parser, default_commit="817bbc2")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- then the command; {repo} is each side's checkout")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    cwd = args.cwd or tempfile.mkdtemp(prefix="scalesweep-paired-")

    def run_side(side, checkout, index):
        words = [word.replace("{repo}", str(checkout)) for word in command]
        return timed(words, cwd=cwd, env=side_env(checkout))[0]

    try:
        with BaseCheckout(args.base, args.base_commit) as base:
            compile_checkouts([REPO, base])
            pairs = run_pairs(run_side, {HEAD: REPO, BASE: base}, args.rounds)
    except BenchmarkFailure as error:
        print(f"paired: FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        if not args.cwd:
            shutil.rmtree(cwd, ignore_errors=True)
    print_lines(pair_lines(args.name, pairs, args.goal_wall_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
