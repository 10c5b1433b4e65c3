"""benchmarks/paired.py, the harness every `make bench` row is timed with: the sides alternate,
the printed figures are the medians, minima and maxima of the runs and of each pair's ratio, and
a base given as a commit is unpacked without touching the repository."""

import subprocess
import sys
from pathlib import Path

import pytest

import paired

REPO = Path(__file__).resolve().parents[1]


def test_sides_alternate_and_each_round_starts_with_the_other_side():
    ran = []

    def run_side(side, checkout, index):
        ran.append((side, checkout.name, index))
        return paired.Timing(wall_s=1.0, cpu_s=1.0)

    pairs = paired.run_pairs(run_side, {paired.HEAD: Path("/a/head"), paired.BASE: Path("/b/base")}, 3)
    assert ran == [("head", "head", 0), ("base", "base", 0), ("base", "base", 1), ("head", "head", 1),
                   ("head", "head", 2), ("base", "base", 2)]
    assert len(pairs.head) == len(pairs.base) == 3


def test_lines_are_the_medians_extremes_and_per_pair_ratios():
    timing = paired.Timing
    pairs = paired.Pairs(head=[timing(10.0, 2.0), timing(20.0, 4.0), timing(12.0, 3.0)],
                         base=[timing(20.0, 4.0), timing(10.0, 4.0), timing(24.0, 6.0)])
    figures = {name: (float(value), unit) for name, value, unit in
               (line.split() for line in paired.pair_lines("row", pairs, goal_wall_s=6.0))}
    assert figures["row_cpu_s"] == (3.0, "s") and figures["row_cpu_s_min"] == (2.0, "s")
    assert figures["row_cpu_s_max"] == (4.0, "s") and figures["row_wall_s"] == (12.0, "s")
    assert figures["row_base_cpu_s"] == (4.0, "s") and figures["row_base_wall_s_max"] == (24.0, "s")
    # pairs, not medians: cpu 2/4, 4/4, 3/6; wall 10/20, 20/10, 12/24
    assert figures["row_cpu_ratio_to_base"] == (0.5, "x") and figures["row_cpu_ratio_to_base_max"] == (1.0, "x")
    assert figures["row_wall_ratio_to_base"] == (0.5, "x") and figures["row_wall_ratio_to_base_max"] == (2.0, "x")
    assert figures["row_wall_goal_ratio"] == (2.0, "x")


def test_a_command_and_its_floor_alternate_and_the_floor_is_the_second_side():
    ran = []

    def side(name):
        def run(index):
            ran.append((name, index))
            return paired.Timing(wall_s=2.0 if name == "floor" else 3.0, cpu_s=1.0)
        return run

    pairs = paired.floor_pairs(side("ours"), side("floor"), 3)
    assert ran == [("ours", 0), ("floor", 0), ("floor", 1), ("ours", 1), ("ours", 2), ("floor", 2)]
    assert [t.wall_s for t in pairs.head] == [3.0] * 3 and [t.wall_s for t in pairs.base] == [2.0] * 3


def test_a_floor_side_is_named_as_the_floor_in_every_line():
    timing = paired.Timing
    pairs = paired.Pairs(head=[timing(3.0, 3.0), timing(4.0, 4.0)], base=[timing(2.0, 2.0), timing(2.0, 4.0)])
    figures = {name: float(value) for name, value, _ in
               (line.split() for line in paired.pair_lines("row", pairs, other=paired.FLOOR))}
    assert figures["row_floor_wall_s_max"] == 2.0 and figures["row_floor_cpu_s_max"] == 4.0
    # per pair: wall 3/2, 4/2; cpu 3/2, 4/4
    assert figures["row_wall_ratio_to_floor"] == 1.75 and figures["row_cpu_ratio_to_floor_min"] == 1.0
    assert not any("base" in name for name in figures)


@pytest.mark.slow
def test_command_runs_on_both_checkouts_of_a_commit_without_touching_the_repository(tmp_path):
    status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True).stdout
    # Each side writes its checkout's path; {repo} is that side's, PYTHONPATH too.
    script = ("import os, sys; open(os.path.join(sys.argv[2], str(os.getpid())), 'w')"
              ".write(sys.argv[1] + ' ' + os.environ['PYTHONPATH'])")
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "paired.py"), "--name", "probe", "--base-commit", "HEAD",
         "--rounds", "2", "--", sys.executable, "-c", script, "{repo}", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    printed = [line.split()[0] for line in result.stdout.splitlines()]
    assert "probe_cpu_s" in printed and "probe_base_wall_s_max" in printed and "probe_cpu_ratio_to_base" in printed
    seen = sorted(path.read_text() for path in tmp_path.iterdir())
    assert len(seen) == 4
    head = f"{REPO} {REPO}"
    assert seen.count(head) == 2
    base = [text for text in seen if text != head]
    assert len(base) == 2 and base[0] == base[1] and base[0].split()[0] == base[0].split()[1]
    # the base's checkout is removed afterwards, and the repository's state is unchanged
    assert not Path(base[0].split()[0]).exists()
    assert subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True,
                          text=True).stdout == status


def test_a_failing_command_is_a_failure_with_its_output():
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "paired.py"), "--name", "probe", "--base", str(REPO),
         "--rounds", "1", "--", sys.executable, "-c", "import sys; print('broken input'); sys.exit(3)"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "exited 3" in result.stderr and "broken input" in result.stderr


def test_a_side_reads_its_libraries_bytecode_whatever_the_shell_sets(monkeypatch, tmp_path):
    """A PYTHONPYCACHEPREFIX (or PYTHONDONTWRITEBYTECODE) in the shell that runs `make bench`
    made every side compile pandas, matplotlib and scipy again on every run: the sides import
    from the bytecode beside the sources."""
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "empty-prefix"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = paired.side_env(REPO)
    assert env["PYTHONPATH"] == str(REPO)
    probe = "import sys, yaml, scalesweep; print(sys.pycache_prefix, sys.dont_write_bytecode, yaml.__cached__)"
    shown = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    prefix, dont_write, cached = shown.stdout.split()
    assert (prefix, dont_write) == ("None", "False")
    assert Path(cached).is_file() and not Path(cached).is_relative_to(tmp_path)


def test_a_base_commit_is_a_git_checkout_of_that_commit(tmp_path):
    """The base's own tests ask git what the checkout tracks (the citations, the bundle): a tree
    unpacked without .git failed them, and the suite's benchmark with them."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import paired
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    checkout = paired.unpack_commit(head, tmp_path / "base")
    def git(*words):
        return subprocess.run(["git", "-C", str(checkout), *words], capture_output=True, text=True, check=True).stdout
    assert git("rev-parse", "HEAD").strip() == head
    assert git("status", "--porcelain") == ""
    assert "README.md" in git("ls-files").split()
    with pytest.raises(paired.BenchmarkFailure, match="no-such-commit"):
        paired.unpack_commit("no-such-commit", tmp_path / "missing")
