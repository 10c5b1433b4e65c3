"""Each benchmark's quick mode runs to its end on today's checks: a benchmark whose generated
config or logs a new check refuses fails here, not on the day someone runs `make bench`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench_bundle import find_python

REPO = Path(__file__).resolve().parents[1]


def bench(script, *args, slurm_conf=os.devnull):
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SLURM_CONF": slurm_conf})


def figures(stdout):
    """{name: value} of the benchmark's `name value unit` lines."""
    return {name: float(value) for name, value, _ in
            (line.split(maxsplit=2) for line in stdout.splitlines() if line and not line.startswith("#"))}


@pytest.mark.slow
def test_bench_analysis_quick_plans_every_configuration_and_analyzes_every_log():
    # 25 configurations of the 1,000-configuration matrix (its datasets and batches), 60 logs, this
    # checkout alone (tests/test_paired.py covers the pairing)
    result = bench("bench_analysis.py", "--runs", "60", "--configs", "25", "--only", "analyze", "--only", "dryrun",
                   "--rounds", "1", "--no-base")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = figures(result.stdout)
    assert {"analyze_60_runs_cpu_s", "analyze_60_runs_wall_s", "dryrun_25_configs_wall_s",
            "dryrun_25_configs_vs_floor_floor_wall_s", "dryrun_25_configs_vs_floor_wall_ratio_to_floor"} <= set(printed)
    assert all(value > 0 for value in printed.values()), printed


@pytest.mark.slow
def test_bench_analysis_quick_analyzes_the_default_sweeps_twelve_logs():
    """The default config's 12 configurations, each a finished run's log: every run ok in runs.csv."""
    result = bench("bench_analysis.py", "--only", "sweep", "--rounds", "1", "--no-base")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = figures(result.stdout)
    assert {"analyze_12_runs_cpu_s", "analyze_12_runs_wall_s_max"} <= set(printed)
    assert all(value > 0 for value in printed.values()), printed


@pytest.mark.slow
def test_bench_analysis_dry_run_of_1000_configurations_passes_todays_checks():
    """The full matrix: its largest global batch (256 x 16) is what a feasibility check refused."""
    result = bench("bench_analysis.py", "--only", "dryrun", "--rounds", "1", "--no-base")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dryrun_1000_configs_wall_s" in figures(result.stdout)


@pytest.mark.slow
def test_bench_history_quick():
    result = bench("bench_history.py", "--sweeps", "60", "--repeats", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = figures(result.stdout)
    assert {"compare_where_6k_runs_s", "compare_6k_runs_vs_floor_floor_wall_s",
            "compare_6k_runs_vs_floor_wall_ratio_to_floor"} <= set(printed)


# The training benchmarks at their smallest: one round of a few steps on the CPU stand-ins.
QUICK_TRAINING = [
    ("bench_breakdown.py", ["--rounds", "1", "--epochs", "2", "--classes", "4", "--per-class", "32", "--batch", "16"],
     "probe_overhead_pct_2_epochs"),
    ("bench_protocols.py", ["--rounds", "1", "--train-images", "1024", "--batch", "64", "--max-timed-steps", "40",
                            "--target-ci-pct", "5"], "steps_protocol_throughput"),
    ("bench_timing.py", ["--steps", "10", "--warmup-steps", "2", "--rounds", "1"], "timing_overhead_pct"),
    ("bench_energy.py", ["--rounds", "1", "--timed-steps", "10"], "energy_read_overhead_pct"),
    ("bench_prediction.py", ["--rounds", "1", "--epochs", "2", "--train-per-class", "16"], "prediction_error_median"),
]


@pytest.mark.slow
@pytest.mark.parametrize("script, args, figure", QUICK_TRAINING, ids=[case[0] for case in QUICK_TRAINING])
def test_training_benchmark_quick(script, args, figure):
    result = bench(script, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert figure in {line.split()[0] for line in result.stdout.splitlines() if line and not line.startswith("#")}


# The trainer benchmark at its smallest: both sides' input paths on 512 images and one fp32 training
# round of each side, 2 epochs of 64 images at 32 px (ResNet50V2's smallest input). Not the bf16
# round: the same function run with another --precision (tests/test_backends.py trains TensorFlow in
# bf16), and a third TensorFlow start-up, a third of this test's 4-5 minutes.
QUICK_TRAINER = ["--rss-images", "512", "--rss-batch", "64", "--train-images", "64", "--per-gpu-batch", "16",
                 "--epochs", "2", "--resolution", "32", "--repeats", "1", "--timeout", "300", "--no-bf16"]
TRAINER_FIGURES = {"host_rss_ratio", "throughput_ratio", "step_throughput_ratio", "bench_wall_s"}


@pytest.mark.slow
def test_bench_trainer_quick_prints_every_fp32_figure():
    result = bench("bench_trainer.py", *QUICK_TRAINER)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = figures(result.stdout)
    assert TRAINER_FIGURES <= set(printed), sorted(TRAINER_FIGURES - set(printed))
    assert all(printed[name] > 0 for name in TRAINER_FIGURES), printed
    assert not [name for name in printed if "bf16" in name], printed  # --no-bf16: no bf16 round ran


BUNDLE_FIGURES = {"bundle_build_s", "bundle_py312_mb", "bundle_py312_wheels", "install_py312_s_round1",
                  "install_py312_s", "unpack_py312_s", "installed_py312_mb"}


@pytest.mark.slow
def test_bench_bundle_quick_builds_installs_once_and_prints_every_figure():
    """One round: the bundle built from the package index, unpacked and installed offline once."""
    if find_python("3.12") is None:
        pytest.skip("no Python 3.12 here: pyenv install 3.12")
    result = bench("bench_bundle.py", "--rounds", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = figures(result.stdout)
    assert BUNDLE_FIGURES <= set(printed), sorted(BUNDLE_FIGURES - set(printed))
    assert printed["bundle_py312_wheels"] > 0 and printed["installed_py312_mb"] > printed["bundle_py312_mb"]


def tiny_checkout(folder: Path, body: str) -> Path:
    """A checkout whose whole suite is one test with `body`."""
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_one.py").write_text(f"def test_one():\n    {body}\n")
    return folder


@pytest.mark.slow
def test_bench_suite_pairs_two_checkouts_and_refuses_a_failing_side(tmp_path):
    head = tiny_checkout(tmp_path / "head", "assert True")
    base = tiny_checkout(tmp_path / "base", "assert True")
    result = bench("bench_suite.py", "--head", str(head), "--base", str(base), "--rounds", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = figures(result.stdout)
    for name in ("test_fast_cpu_s", "test_fast_base_wall_s", "test_fast_wall_ratio_to_base",
                 "test_fast_wall_goal_ratio"):
        assert name in printed
    assert 0 < printed["test_fast_wall_s"] and 0 < printed["test_fast_base_cpu_s"]
    failing = tiny_checkout(tmp_path / "failing", "assert False")
    result = bench("bench_suite.py", "--head", str(failing), "--base", str(base), "--rounds", "1")
    assert result.returncode == 1 and "bench_suite: FAILED" in result.stderr


@pytest.mark.slow
def test_bench_suite_runs_the_tests_with_the_callers_slurm_conf(tmp_path):
    """As `make test-fast` runs them: a SLURM client that cannot reach its controller costs the
    tests what it costs them there, not nothing."""
    conf = str(tmp_path / "caller's slurm.conf")
    body = f"import os; assert os.environ.get('SLURM_CONF') == {conf!r}"
    head, base = tiny_checkout(tmp_path / "head", body), tiny_checkout(tmp_path / "base", body)
    result = bench("bench_suite.py", "--head", str(head), "--base", str(base), "--rounds", "1", slurm_conf=conf)
    assert result.returncode == 0, result.stderr[-3000:]
