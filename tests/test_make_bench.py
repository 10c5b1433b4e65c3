"""`make bench` runs every benchmark even when one fails (a side past its time limit on a busy
machine), then ends with status 1 naming the ones that failed."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKEFILE = (REPO / "Makefile").read_text()
# The benchmarks the recipe runs, in its order.
BENCHMARKS = re.findall(r"\$\(call run_bench,(bench_\w+)", MAKEFILE.split("\nbench:", 1)[1].split("\n\n", 1)[0])


def checkout_with_benchmarks(folder: Path, failing: set) -> Path:
    """The Makefile in `folder`, its venv already installed (a link to this Python), and a
    stand-in for each benchmark that notes its arguments in ran.txt and fails if in `failing`."""
    shutil.copy(REPO / "Makefile", folder)
    for name in ("envs/requirements.txt", "envs/workflow.txt", "envs/constraints.txt", "pyproject.toml"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("")
    venv = folder / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".installed").touch()
    os.utime(venv / ".installed", (2e9, 2e9))  # newer than the pinned files: nothing to install
    (folder / "benchmarks").mkdir()
    for name in BENCHMARKS:
        status = 1 if name in failing else 0
        (folder / "benchmarks" / f"{name}.py").write_text(
            "import sys\n"
            f"open('ran.txt', 'a').write(' '.join(['{name}', *sys.argv[1:]]) + '\\n')\n"
            f"sys.exit({status})\n")
    return folder


def test_a_failing_benchmark_leaves_the_others_running_and_the_run_failed(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("no make here")
    assert len(BENCHMARKS) >= 9, BENCHMARKS
    folder = checkout_with_benchmarks(tmp_path, failing={"bench_trainer", "bench_energy"})
    base = "817bbc2 '; touch pwned; '"  # a value given to make reaches the shell as one argument
    done = subprocess.run(["make", "bench", "VENV=venv", f"BENCH_BASE={base}"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    ran = (folder / "ran.txt").read_text().splitlines()
    assert [line.split()[0] for line in ran] == BENCHMARKS
    assert ran[BENCHMARKS.index("bench_history")] == f"bench_history --base-commit {base}"
    assert not (folder / "pwned").exists()
    assert "make bench: failed: bench_trainer bench_energy (their errors above)" in done.stderr
    assert not (folder / "venv" / ".bench-failed").exists()  # the next run starts with none


def test_every_benchmark_passing_ends_with_status_0(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("no make here")
    folder = checkout_with_benchmarks(tmp_path, failing=set())
    done = subprocess.run(["make", "bench", "VENV=venv"], cwd=folder, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len((folder / "ran.txt").read_text().splitlines()) == len(BENCHMARKS)
    assert "failed" not in done.stderr
