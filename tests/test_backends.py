"""The trainer contract both framework backends of scalesweep/train/common/harness.py pass: the
same tests, run against scripts/train_tf.py and scripts/train_torch.py, the programs the workflow
runs (scalesweep/train/tf_backend/, torch_backend/; docs/trainers.md: a third framework's backend
is done when it passes them too).

Each test runs the real trainer in a subprocess on tiny data (TensorFlow: cnn_small on 256
synthetic CIFAR images; PyTorch: vit_tiny on a 104-image folder), with "devices" CPU replicas
(TensorFlow) or torchrun processes (PyTorch) standing in for GPUs. TensorFlow and torch never
share a process: this module imports neither. The trainers run with this interpreter, or the one
SCALESWEEP_TRAINER_PYTHON_TENSORFLOW / _PYTORCH names (tests/stacks.py): the same contract then
holds on a container's stack (docs/trainers.md, "Supported stacks").
"""

import json
import math
import os
import signal
import statistics
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
from scalesweep.analysis.predict import steps_per_epoch  # noqa: E402
from scalesweep.contract.records import FIRST_STEADY_EPOCH  # noqa: E402
from scalesweep.logs.read import parse_log  # noqa: E402
from scalesweep.plan import launch  # noqa: E402
from scalesweep.tidy.rows import runs_table  # noqa: E402
from scalesweep.train.common import faults, harness, measure, runlog, stepclock  # noqa: E402
from scalesweep.train.datasets import make_cifar, make_imagefolder  # noqa: E402
from stacks import TRAINER_PYTHON_ENV, container_python, trainer_python  # noqa: E402

FRAMEWORKS = ("tensorflow", "pytorch")
# What the workflow's jobs run for each framework: its program under scripts/, or scripts/train.py <name>.
TRAINERS = {framework: launch.trainer_script(framework, ROOT) for framework in FRAMEWORKS}
MODULES = {"tensorflow": "scalesweep.train.tf_backend.trainer", "pytorch": "scalesweep.train.torch_backend.trainer"}
MODELS = {"tensorflow": "cnn_small", "pytorch": "vit_tiny"}
OPTIONS = {"tensorflow": ("--resolution", "32"), "pytorch": ("--resolution", "32", "--num-workers", "0")}
# What each backend's injected failures (faults.FAIL_INJECT_ENV) say: the framework's own error types.
INJECTED = {
    ("tensorflow", "oom"): "ResourceExhaustedError: {env}={mode}: injected failure at the first training step",
    ("tensorflow", "crash"): "RuntimeError: {env}={mode}: injected failure at the first training step",
    ("pytorch", "oom"): "OutOfMemoryError: injected out-of-memory error ({env}={mode})",
    ("pytorch", "crash"): "RuntimeError: injected crash ({env}={mode})",
}
# Two PyTorch ranks that both run out of memory agree on it (torch_distributed.agree_on_oom).
TWO_RANKS_AGREE = {"tensorflow": "", "pytorch": " (out of memory on ranks 0, 1)"}
CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 4, 26, 3  # the image folder: 104 train images, 12 val


def injected(framework: str, kind: str, mode: str) -> str:
    return INJECTED[framework, kind].format(env=faults.FAIL_INJECT_ENV, mode=mode)


@pytest.fixture(scope="module")
def cifar_256(tmp_path_factory) -> Path:
    return make_cifar.generate(tmp_path_factory.mktemp("cifar"), train_images=256, test_images=10, seed=0).parent


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("folder") / "ds"
    make_imagefolder.make_imagefolder(str(out), CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS, size=32, seed=0)
    return out


# make test's xdist groups (tests/conftest.py): this module's 110 trainer runs, each starting its
# framework in a fresh interpreter, were one group and so one worker's for the whole of it; the
# pinned stack's tests and the container stack's are a group each, the two workers sharing them.
XDIST_GROUP_BY = "stack"


def pytest_generate_tests(metafunc):
    """Every test that runs a trainer runs it twice: on the pinned stack and on its framework's
    container stack (tests/stacks.py; docs/testing.md: Supported stacks)."""
    if metafunc.definition.get_closest_marker("slow"):
        metafunc.parametrize("stack", ["pinned", "container"], indirect=True)


@pytest.fixture(autouse=True)
def stack(request, monkeypatch) -> str:
    name = getattr(request, "param", "pinned")
    if name == "container":
        for framework in FRAMEWORKS:
            monkeypatch.setenv(TRAINER_PYTHON_ENV.format(framework.upper()), container_python(framework))
    return name


@pytest.fixture(params=FRAMEWORKS)
def framework(request) -> str:
    return request.param


@pytest.fixture
def data(framework, request) -> Path:
    return request.getfixturevalue("cifar_256" if framework == "tensorflow" else "image_folder")


def clean_env(inject=None) -> dict:
    """The test's environment without launch, SLURM or failure-injection variables."""
    launch = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              faults.FAIL_INJECT_ENV}
    env = {key: value for key, value in os.environ.items() if key not in launch and not key.startswith("SLURM_")}
    if inject:
        env[faults.FAIL_INJECT_ENV] = inject
    return env


def command(framework: str, data, devices: int, *options) -> list[str]:
    """The trainer on `devices` stand-in GPUs (0: the CPU baseline): TensorFlow splits the CPU into
    replicas, PyTorch runs one process per device under torchrun."""
    launcher = [trainer_python(framework)]
    if framework == "pytorch" and devices > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(devices)]
    return [*launcher, *TRAINERS[framework], "--data", str(data), "--model", MODELS[framework],
            "--gpus", str(devices), *OPTIONS[framework], *map(str, options)]


def launch(framework: str, data, devices: int, *options, inject=None) -> subprocess.CompletedProcess:
    return subprocess.run(command(framework, data, devices, *options), capture_output=True, text=True,
                          timeout=300, env=clean_env(inject), cwd=ROOT)


def parse_records(output: str) -> list[dict]:
    prefix = runlog.PREFIX
    return [json.loads(line[line.index(prefix) + len(prefix):]) for line in output.splitlines() if prefix in line]


def kinds(records: list[dict]) -> list[str]:
    return [record["record"] for record in records]


def assert_finished_run(records: list[dict], epochs: int):
    """The epochs protocol's records of a run that finished: header, `epochs` epoch records,
    summary, each consistent with the others."""
    assert kinds(records) == ["header", *["epoch"] * epochs, "summary"]
    assert all(record["schema"] == 1 for record in records)
    header, epoch_records, summary = records[0], records[1:-1], records[-1]
    assert [r["epoch"] for r in epoch_records] == list(range(1, epochs + 1))
    warmup_left = header.get("warmup_steps") or 0
    for epoch in epoch_records:
        # the median and p90 leave out the run's warm-up steps (measure.step_statistics)
        timed_steps = epoch["steps"] - min(epoch["steps"], warmup_left)
        warmup_left -= epoch["steps"] - timed_steps
        assert epoch["images"] == header["images_per_epoch"]
        assert epoch["steps"] == epoch["images"] // header["global_batch"]
        assert epoch["phase"] is None
        assert epoch["seconds"] > 0
        assert epoch["throughput_img_s"] == pytest.approx(epoch["images"] / epoch["seconds"])
        assert 0 <= epoch["accuracy"] <= 1 and epoch["loss"] > 0
        if epoch["step_time_median_s"] is not None:
            assert 0 < epoch["step_time_median_s"] <= epoch["step_time_p90_s"]
            # At least half the timed steps last the median or longer, the longest of them at least
            # the p90, and every step lies inside its epoch; the step clock may run a few ms outside
            # the epoch's clock.
            steps_at_least_median = math.ceil(timed_steps / 2)
            least_steps_sum = epoch["step_time_median_s"] * (steps_at_least_median - 1) + epoch["step_time_p90_s"]
            assert least_steps_sum < epoch["seconds"] * 1.1 + 0.01
    steady = epoch_records[1:]
    assert summary["status"] == "ok" and summary["reason"] is None
    assert summary["epochs"] == epochs
    assert summary["steady_epoch_time_s"] == pytest.approx(statistics.median(r["seconds"] for r in steady))
    # One steady estimate (docs/metrics.md): the images of an epoch over the median steady epoch.
    assert summary["throughput_img_s"] == pytest.approx(header["images_per_epoch"] / summary["steady_epoch_time_s"])
    assert summary["train_time_s"] == pytest.approx(sum(r["seconds"] for r in epoch_records))
    assert summary["total_time_s"] >= summary["train_time_s"]
    assert summary["memory_gb"] is None  # CPU: neither framework tracks it
    assert summary["peak_host_rss_gb"] > 0
    return header, summary


# ---------------------------------------------------------------- the harness's own pieces


def feed(clock, durations, gap=0.5):
    """Steps of `durations` seconds on a stepclock.StepClock, `gap` seconds apart, from 10 s on."""
    start = clock.ends[-1] + gap if clock.ends else 10.0
    for duration in durations:
        clock.begins.append(start)
        clock.ends.append(start + duration)
        start += duration + gap


def test_window_meter_records_a_window_from_its_steps():
    """The run's warm-up is 2 steps; the window is steps 1-3 (1, 2 and 3 s) after step 0 (10-11 s):
    from 11.5 s, the begin of its first step, to 11.5 + 1 + 0.5 + 2 + 0.5 + 3 = 18.5 s, the end
    of its last: 7 s. Its step statistics keep steps 2 and 3 only."""
    written, lines = [], []
    clock = stepclock.StepClock()
    meter = harness.WindowMeter(runlog.RunLog(written.append), clock, 16, 2, lines.append)
    feed(clock, [1.0])
    meter.start()
    feed(clock, [1.0, 2.0, 3.0])
    window = measure.TimedWindow(3)
    assert meter.durations() == [1.0, 2.0, 3.0] and window.done(meter.durations())
    record = meter.finish(2, 0.5, 0.25, phase="timed", window=window)
    assert (record["epoch"], record["steps"], record["images"], record["seconds"]) == (2, 3, 48, 7.0)
    assert (record["step_time_median_s"], record["step_time_mean_s"]) == (2.5, 2.5)
    assert (record["loss"], record["accuracy"], record["phase"]) == (0.5, 0.25, "timed")
    assert (record["timed_steps_rule"], record["stop_reason"]) == ("fixed", "fixed")
    assert written == [record] and meter.log.steady_durations == [2.0, 3.0]
    assert lines == [harness.window_line(record)] and lines[0].startswith("timed window: 3 steps, 7.00 s, 6.9 img/s")


def test_window_meter_takes_the_given_bounds_and_prints_an_epoch_line():
    """Steps at 10-11 s and 11.5-12.5 s; the window is read from 9 s to 14 s: 5 s, 16 images."""
    written, lines = [], []
    clock = stepclock.StepClock()
    meter = harness.WindowMeter(runlog.RunLog(written.append), clock, 8, 0, lines.append)
    meter.start(at=9.0)
    feed(clock, [1.0, 1.0])
    record = meter.finish(1, ended=14.0)
    assert (record["seconds"], record["images"], record["throughput_img_s"]) == (5.0, 16, 3.2)
    assert (record["phase"], record["loss"], record["step_time_median_s"]) == (None, None, 1.0)
    assert "stop_reason" not in record
    assert lines == ["[EPOCH: 1] Training throughput: 3.200 imgs/s"]


def test_step_clock_waits_for_the_devices_where_asked():
    waits = []
    at_end, at_both = stepclock.StepClock(lambda: waits.append("end")), stepclock.StepClock(lambda: waits.append("both"), True)
    for clock in (at_end, at_both):
        clock.begin()
        clock.end()
    assert waits == ["end", "both", "both"]
    assert at_end.finished == 1 and at_end.durations[0] >= 0


def test_oom_reason_names_the_batch_and_the_halvings():
    class Args:
        per_gpu_batch, resolution, precision = 64, 224, "bf16"

    log = runlog.RunLog(lambda record: None)
    assert harness.oom_reason(Args, log, "E: x") == "out of memory at per-GPU batch 64 (224 px, bf16): E: x"
    log.expect({"record": "header", "per_gpu_batch": 16})
    log.oom_retries = 2
    assert harness.oom_reason(Args, log, "E: x") == (
        "out of memory at per-GPU batch 16 after 2 halving(s) from 64 (224 px, bf16): E: x")


# ---------------------------------------------------------------- command line


# Lines every trainer refuses with exit status 2, and what it says (the shared options' checks).
BAD_COMMAND_LINES = [
    (["--data", "x"], "--model is required"),
    (["--model", "{model}"], "--data is required"),
    (["--per-gpu-batch", "0"], "--per-gpu-batch must be >= 1"),
    (["--gpus", "-1"], "--gpus must be 0"),
    (["--base-lr", "0"], "--base-lr"),
    (["--per-gpu"], "unrecognized arguments"),  # no abbreviations: torchrun claims them
    (["--warmup-steps", "-1"], "--warmup-steps must be 0 or more"),
    (["--protocol", "steps", "--warmup-steps", "0"], "--protocol steps needs --warmup-steps of at least 1"),
    (["--timed-steps", "0"], "--timed-steps must be >= 1"),
    (["--protocol", "minutes"], "invalid choice: 'minutes'"),
    (["--oom-policy", "retry"], "invalid choice: 'retry'"),
    (["--find-max-batch", "--per-gpu-batch", "64", "--max-batch-limit", "32"],
     "--max-batch-limit 32 is below the starting --per-gpu-batch 64"),
]
# The measurement options with every value set, and what they parse to in both trainers.
MEASUREMENT_ARGV = ["--protocol", "steps", "--warmup-steps", "3", "--timed-steps", "auto", "--target-ci-pct", "2.5",
                    "--max-timed-steps", "99", "--oom-policy", "halve", "--max-batch-limit", "128"]
MEASUREMENT_PARSED = {"protocol": "steps", "warmup_steps": 3, "timed_steps": "auto", "target_ci_pct": 2.5,
                      "max_timed_steps": 99, "oom_policy": "halve", "max_batch_limit": 128, "find_max_batch": False}
# Each trainer keeps its own defaults where the references differ.
OWN_DEFAULTS = {"tensorflow": {"resolution": 128, "gpus": 1, "per_gpu_batch": 256, "dataset_name": "cifar10"},
                "pytorch": {"resolution": 224, "gpus": 0, "per_gpu_batch": 64, "dataset_name": None}}

PARSE_PROBE = """
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import {module} as trainer

def attempt(argv):
    error = io.StringIO()
    try:
        with contextlib.redirect_stderr(error):
            return {{"args": vars(trainer.parse_args(argv))}}
    except SystemExit as exit:
        return {{"code": exit.code, "error": error.getvalue()}}

print(json.dumps([attempt(argv) for argv in json.loads(sys.argv[2])]))
"""


def parsed(framework: str) -> tuple:
    """What the trainer's parse_args makes of: the minimal line, MEASUREMENT_ARGV, then each of
    BAD_COMMAND_LINES; one interpreter per framework and stack (the stack fixture picks it)."""
    return parsed_by(framework, trainer_python(framework))


@lru_cache(maxsize=None)
def parsed_by(framework: str, python: str) -> tuple:
    model = ["--model", MODELS[framework], "--data", "x"]
    lines = [model, model + MEASUREMENT_ARGV]
    lines += [argv if argv[0] in ("--data", "--model") and len(argv) == 2 else model + argv
              for argv, _ in BAD_COMMAND_LINES]
    lines = [[part.format(model=MODELS[framework]) for part in argv] for argv in lines]
    probe = PARSE_PROBE.format(module=MODULES[framework])
    done = subprocess.run([python, "-c", probe, str(ROOT), json.dumps(lines)],
                          capture_output=True, text=True, timeout=300, env=clean_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_measurement_options_parse_alike_with_the_shared_defaults(framework):
    # One command builder (scalesweep/plan/launch.py) drives both trainers: same names, same defaults,
    # the defaults defined once (scalesweep/train/common/measure.py).
    defaults, measurement = parsed(framework)[0]["args"], parsed(framework)[1]["args"]
    assert {key: defaults[key] for key in MEASUREMENT_PARSED} == {
        "protocol": "epochs", "warmup_steps": measure.DEFAULT_WARMUP_STEPS, "timed_steps": measure.DEFAULT_TIMED_STEPS,
        "target_ci_pct": measure.DEFAULT_TARGET_CI_PCT, "max_timed_steps": measure.DEFAULT_MAX_TIMED_STEPS,
        "oom_policy": "fail", "max_batch_limit": measure.DEFAULT_MAX_BATCH_LIMIT, "find_max_batch": False}
    assert {key: measurement[key] for key in MEASUREMENT_PARSED} == MEASUREMENT_PARSED
    assert {key: defaults[key] for key in OWN_DEFAULTS[framework]} == OWN_DEFAULTS[framework]


@pytest.mark.slow  # each trainer's interpreter imports its framework (TensorFlow: tens of seconds)
def test_shared_options_are_the_same_in_both_trainers():
    tf_args, torch_args = (parsed(framework)[0]["args"] for framework in FRAMEWORKS)
    own = {"model", *OWN_DEFAULTS["tensorflow"]}
    shared = {key: value for key, value in tf_args.items() if key not in own}
    assert shared == {key: torch_args[key] for key in shared}
    assert {"precision", "compile", "seed", "epochs", "base_lr", "max_train_images", "list_models"} <= set(shared)


@pytest.mark.slow
@pytest.mark.parametrize(("index", "message"), [(index, message) for index, (_, message) in enumerate(BAD_COMMAND_LINES)])
def test_bad_command_lines_are_refused(framework, index, message):
    refused = parsed(framework)[2 + index]
    assert refused.get("code") == 2, refused
    assert message in refused["error"]


@pytest.mark.slow
def test_a_bad_command_line_exits_before_any_record(framework, data):
    done = launch(framework, data, 1, "--oom-policy", "retry")
    assert done.returncode == 2 and "invalid choice: 'retry'" in done.stderr
    assert parse_records(done.stdout) == []


# ---------------------------------------------------------------- the life cycle

# The CPU baseline on a seeded subset of 50 images: 3 whole batches of 16 per epoch.
# TensorFlow's in fp32: bf16 on a CPU depends on the CPU (test_tensorflow_bf16_on_a_cpu_...).
BASELINE = {"tensorflow": (["--resolution", "40", "--precision", "fp32"], ["CPU:0"], " Model CNNSmall CPU only\n"),
            "pytorch": (["--model", "resnet18", "--precision", "bf16"], ["cpu"], "INFO - ### world_size: 1\n")}


@pytest.mark.slow
def test_cpu_baseline_trains_a_subset_on_one_device(framework, data):
    options, devices, human_line = BASELINE[framework]
    done = launch(framework, data, 0, "--epochs", 2, "--per-gpu-batch", 16, "--max-train-images", 50, *options)
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    header, summary = assert_finished_run(records, epochs=2)
    assert (header["gpus"], header["world_size"], header["global_batch"]) == (0, 1, 16)
    assert header["devices"] == devices and header["device_kind"] == "cpu"
    assert header["precision"] == options[options.index("--precision") + 1]
    assert header["images_per_epoch"] == 48 and header["train_images"] == 50
    # One process: its intra-op pool has a thread per CPU it may run on (TensorFlow's default,
    # PyTorch's share of the node for its one rank); OMP_NUM_THREADS as the test left it.
    assert header["omp_num_threads"] == len(os.sched_getaffinity(0))
    assert header["omp_num_threads_env"] == os.environ.get("OMP_NUM_THREADS")
    assert [record["images"] for record in records[1:3]] == [48, 48]
    assert summary["steady_epoch_time_s"] == records[2]["seconds"]
    assert human_line in done.stdout
    assert done.stdout.count("Training finished!") == 1


@pytest.mark.slow
def test_tensorflow_bf16_on_a_cpu_trains_or_is_refused_by_name(cifar_256):
    """Keras' mixed_bfloat16 sends bfloat16 into batch normalization, whose CPU kernel TF 2.11 has
    only with oneDNN on (AVX512/AMX CPUs): there the run must end at once with the option named,
    not in a Keras traceback; where the kernel exists, it trains in bf16."""
    ask = [trainer_python("tensorflow"), "-c",
           "from scalesweep.train.tf_backend import compat; print(compat.cpu_runs_bfloat16_batch_norm())"]
    kernel = subprocess.run(ask, capture_output=True, text=True, cwd=ROOT, env={**clean_env(), "PYTHONPATH": str(ROOT)})
    assert kernel.returncode == 0, kernel.stderr[-2000:]
    done = launch("tensorflow", cifar_256, 0, "--epochs", 1, "--per-gpu-batch", 16, "--max-train-images", 32,
                  "--resolution", "32", "--precision", "bf16")
    if kernel.stdout.split()[-1] == "True":
        assert done.returncode == 0, done.stderr[-3000:]
        assert parse_records(done.stdout)[0]["precision"] == "bf16"
    else:
        assert done.returncode != 0
        assert "--precision bf16 on CPU" in done.stderr and "use --precision fp32 on CPUs" in done.stderr
        assert "FusedBatchNormV3" not in done.stderr  # refused before Keras ran the layer


@pytest.mark.slow
def test_injected_oom_is_a_measured_outcome(framework, data):
    done = launch(framework, data, 2, "--epochs", 2, "--per-gpu-batch", 16, inject="oom")
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    assert kinds(records) == ["header", "summary"]
    summary = records[-1]
    assert summary["status"] == "oom" and summary["epochs"] == 0 and summary["oom_retries"] == 0
    assert summary["reason"] == ("out of memory at per-GPU batch 16 (32 px, fp32): "
                                 + injected(framework, "oom", "oom") + TWO_RANKS_AGREE[framework])
    assert done.stdout.count("Training ran out of memory: out of memory at per-GPU batch 16") == 1


@pytest.mark.slow
def test_injected_crash_fails_the_run(framework, data):
    done = launch(framework, data, 2, "--epochs", 2, "--per-gpu-batch", 16, inject="crash")
    assert done.returncode != 0
    records = parse_records(done.stdout)
    assert kinds(records) == ["header", "summary"]
    assert records[-1]["status"] == "failed" and records[-1]["reason"] == injected(framework, "crash", "crash")
    assert injected(framework, "crash", "crash") in done.stderr  # the traceback, for the log reader


@pytest.mark.slow
def test_missing_data_fails_with_a_summary_naming_the_folder(framework, tmp_path):
    missing = tmp_path / "absent"
    done = launch(framework, missing, 0, "--epochs", 1)
    assert done.returncode != 0
    records = parse_records(done.stdout)
    assert kinds(records) == ["summary"]
    # The folder the trainer looked for: the CIFAR batches' folder, or the image folder's train/.
    looked_for = missing / "train" if framework == "pytorch" else missing
    assert records[0]["status"] == "failed" and str(looked_for) in records[0]["reason"]
    assert records[0]["reason"].startswith("FileNotFoundError: ")


@pytest.mark.slow
def test_sigterm_ends_the_log_with_a_failed_summary(framework, data):
    # What SLURM's time limit and scancel do: SIGTERM, then SIGKILL after KillWait.
    trainer = command(framework, data, 1, "--per-gpu-batch", 16, "--epochs", 100000)
    with subprocess.Popen(trainer, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          env=clean_env(), cwd=ROOT) as process:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if '"record": "epoch"' in line:
                break
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=120)
    records = parse_records("".join(lines) + rest)
    assert process.returncode != 0
    summary = records[-1]
    assert summary["record"] == "summary" and summary["status"] == "failed"
    assert summary["reason"].startswith("Terminated: terminated by SIGTERM")
    assert summary["epochs"] == kinds(records).count("epoch") >= 1


# ---------------------------------------------------------------- the out-of-memory policy

# Per-GPU batch 16 -> 8 on two devices: TensorFlow 256 images / 16 = 16 steps of 16 images;
# PyTorch 52 images per rank / 8 = 6 steps of 16 images.
HALVED_STEPS = {"tensorflow": 16, "pytorch": 6}


@pytest.mark.slow
def test_halve_policy_retries_at_half_the_batch(framework, data):
    done = launch(framework, data, 2, "--epochs", 2, "--per-gpu-batch", 16, "--oom-policy", "halve",
                  inject="oom-once")
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    assert kinds(records) == ["oom_retry", "header", "epoch", "epoch", "summary"]
    retry, header = records[:2]
    assert (retry["per_gpu_batch"], retry["next_per_gpu_batch"]) == (16, 8)
    assert retry["reason"].startswith(injected(framework, "oom", "oom-once"))
    assert (header["per_gpu_batch"], header["global_batch"], header["requested_per_gpu_batch"]) == (8, 16, 16)
    steps = HALVED_STEPS[framework]
    assert header["oom_policy"] == "halve" and header["images_per_epoch"] == steps * 16
    assert [(r["steps"], r["images"]) for r in records[2:4]] == [(steps, steps * 16)] * 2
    assert records[-1]["status"] == "ok" and records[-1]["oom_retries"] == 1
    assert done.stdout.count("retrying with 8 (--oom-policy halve)") == 1
    # The records' reader sees one run, at the batch actually used.
    (run,) = parse_log(done.stdout)
    assert run.header["per_gpu_batch"] == 8 and run.summary["status"] == "ok" and len(run.epochs) == 2


@pytest.mark.slow
def test_halve_policy_gives_up_at_batch_one(framework, data):
    done = launch(framework, data, 1, "--per-gpu-batch", 4, "--oom-policy", "halve", inject="oom")
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    assert kinds(records) == ["oom_retry", "oom_retry", "header", "summary"]
    assert [record["per_gpu_batch"] for record in records[:3]] == [4, 2, 1]
    assert [record["next_per_gpu_batch"] for record in records[:2]] == [2, 1]
    assert records[2]["requested_per_gpu_batch"] == 4 and records[2]["oom_policy"] == "halve"
    summary = records[-1]
    assert summary["status"] == "oom" and summary["oom_retries"] == 2 and summary["epochs"] == 0
    assert summary["reason"] == ("out of memory at per-GPU batch 1 after 2 halving(s) from 4 (32 px, fp32): "
                                 + injected(framework, "oom", "oom"))


# ---------------------------------------------------------------- the maximum-batch search


@pytest.mark.slow
def test_max_batch_search_bisects_to_the_injected_capacity(framework, data):
    done = launch(framework, data, 2, "--per-gpu-batch", 8, "--find-max-batch", "--max-batch-limit", 1024,
                  inject="oom-above:64")
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    assert kinds(records) == ["header", "max_batch", "summary"]
    header, found, summary = records
    assert (header["protocol"], header["epochs"], header["max_batch_limit"]) == ("max_batch", 0, 1024)
    assert header["timed_steps"] == measure.PROBE_STEPS == 2 and header["images_per_epoch"] is None
    assert found["per_gpu_batch"] == 64 and found["limit_reached"] is False
    # Doubling to the first failure (per-GPU 128 x 2 is more than the data set: probes draw
    # endless batches), then bisection.
    assert found["tried"] == [[8, "ok"], [16, "ok"], [32, "ok"], [64, "ok"], [128, "oom"], [96, "oom"],
                              [80, "oom"], [72, "oom"], [68, "oom"], [66, "oom"], [65, "oom"]]
    assert (found["probe_steps"], found["resolution"], found["precision"]) == (2, 32, "fp32")
    assert found["compile"] is False and found["max_batch_limit"] == 1024
    assert summary["status"] == "ok" and summary["epochs"] == 0
    assert "largest per-GPU batch that trains: 64" in done.stdout
    assert done.stdout.count("max batch: per-GPU batch 65 runs out of memory") == 1


# ---------------------------------------------------------------- the steps protocol


# The steps protocol on two devices, 8 timed steps (--epochs is left to the protocol): the records
# the protocol's test and the step breakdown's read, of one run per framework and stack.
STEPS_RUN = (2, "--per-gpu-batch", 16, "--protocol", "steps", "--warmup-steps", 2, "--timed-steps", 8, "--epochs", 7)


def steps_run(framework: str, data) -> subprocess.CompletedProcess:
    return steps_run_by(framework, trainer_python(framework), data)


@lru_cache(maxsize=None)
def steps_run_by(framework: str, python: str, data) -> subprocess.CompletedProcess:
    """`python` keys the run to its stack: launch takes the interpreter the stack fixture set."""
    return launch(framework, data, *STEPS_RUN)


@pytest.mark.slow
def test_steps_protocol_records_a_warmup_and_a_timed_window(framework, data):
    done = steps_run(framework, data)
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    assert kinds(records) == ["header", "epoch", "epoch", "summary"]
    header, warmup, timed, summary = records
    assert (header["protocol"], header["warmup_steps"], header["timed_steps"]) == ("steps", 2, 8)
    assert header["epochs"] == 2 and header["images_per_epoch"] == 8 * 32
    assert (warmup["epoch"], warmup["phase"], warmup["steps"], warmup["images"]) == (1, "warmup", 2, 2 * 32)
    assert warmup["step_time_median_s"] is None and warmup["step_time_p90_s"] is None
    assert (timed["epoch"], timed["phase"], timed["steps"], timed["images"]) == (2, "timed", 8, 8 * 32)
    assert (timed["timed_steps_rule"], timed["stop_reason"]) == ("fixed", "fixed")
    assert 0 < timed["step_time_median_s"] <= timed["step_time_p90_s"]
    assert timed["throughput_img_s"] == pytest.approx(timed["images"] / timed["seconds"])
    # The window's wall time holds its 8 synchronized steps (and the host work between them).
    assert timed["seconds"] >= 8 * timed["step_time_median_s"] * 0.5
    assert summary["status"] == "ok" and summary["epochs"] == 2 and summary["total_time_s"] is None
    assert summary["throughput_img_s"] == timed["throughput_img_s"] == pytest.approx(256 / timed["seconds"])
    assert summary["train_time_s"] == pytest.approx(warmup["seconds"] + timed["seconds"])
    assert done.stdout.count("timed window: 8 steps") == 1
    # The records' reader takes the timed window as the steady state, without knowing the protocol.
    (run,) = parse_log(done.stdout)
    assert run.summary["status"] == "ok"
    assert [e for e in run.epochs if e["epoch"] >= FIRST_STEADY_EPOCH] == [
        {key: value for key, value in timed.items() if key not in ("record", "schema")}]


# The step breakdown's contract; PyTorch joins the list once its case has been run here.
BREAKDOWN_FRAMEWORKS = ("tensorflow",)


@pytest.mark.slow
@pytest.mark.parametrize("framework", BREAKDOWN_FRAMEWORKS)
def test_step_breakdown_adds_up_to_the_timed_windows_wall_time_per_step(framework, data):
    done = steps_run(framework, data)
    assert done.returncode == 0, done.stderr[-3000:]
    header, _, timed, summary = parse_records(done.stdout)
    assert header["flops_per_image"] > 0
    parts = [summary[key] for key in ("data_wait_s", "compute_s", "sync_wait_s", "sync_comm_s", "other_s")]
    assert summary["breakdown_step_s"] == pytest.approx(timed["seconds"] / 8)
    assert sum(parts) == pytest.approx(summary["breakdown_step_s"], abs=1e-12)
    assert summary["breakdown_steps"] == 8 and min(parts[:4]) >= 0 and parts[1] > 0
    # The all-reduce probe over the two devices: nccl-tests' bus bandwidth, 2 (n - 1) / n = 1 x algbw.
    assert summary["allreduce_s"] > 0 and summary["allreduce_bytes"] > 0
    assert summary["busbw_gb_s"] == pytest.approx(summary["algbw_gb_s"])
    assert summary["algbw_gb_s"] == pytest.approx(summary["allreduce_bytes"] / summary["allreduce_s"] / 1e9)
    ms = {key: f"{1000 * summary[key]:.2f}" for key in ("breakdown_step_s", "data_wait_s", "compute_s",
                                                        "sync_wait_s", "sync_comm_s", "other_s")}
    assert done.stdout.count(
        f"step breakdown: {ms['breakdown_step_s']} ms per step = data {ms['data_wait_s']} + compute "
        f"{ms['compute_s']} + sync wait {ms['sync_wait_s']} + sync comm {ms['sync_comm_s']} + other "
        f"{ms['other_s']} ms; all-reduce ") == 1


# The adaptive window on the layouts it must agree on: PyTorch's two ranks all-reduce the stop;
# TensorFlow's one process decides for its replicas (one replica: its steps' noise stays small).
ADAPTIVE_DEVICES = {"tensorflow": 1, "pytorch": 2}


@pytest.mark.slow
def test_adaptive_window_stops_on_its_target_or_at_its_cap(framework, data):
    """--timed-steps auto, 16 images per step: a target no spread can miss is met at the first
    checkpoint (10 batches of 3 steps = 30); an impossible one (0.0001 %) runs to the cap (40).
    The half-width of 10 batch means is at most t(9) x sqrt(10) / sqrt(10) = 226 % of their mean
    (one batch holding all the time), so 250 % stops at 30 steps however loaded the machine: a
    50 % target was missed there once in `make test` (met only at 40 steps). 10 epochs of at
    least 6 steps (104 images / 16) keep the epochs' bound on the cap above 40."""
    devices = ADAPTIVE_DEVICES[framework]
    common = ("--per-gpu-batch", 16 // devices, "--protocol", "steps", "--warmup-steps", 2, "--timed-steps", "auto",
              "--max-timed-steps", 40, "--epochs", 10)
    for target, steps, reason in (("250", 30, "target"), ("0.0001", 40, "cap")):
        done = launch(framework, data, devices, *common, "--target-ci-pct", target)
        assert done.returncode == 0, done.stderr[-3000:]
        header, _, timed, summary = parse_records(done.stdout)
        assert header["timed_steps"] == "auto" and header["images_per_epoch"] is None
        assert header["target_ci_pct"] == float(target) and header["max_timed_steps"] == 40
        assert (timed["steps"], timed["stop_reason"], timed["images"]) == (steps, reason, steps * 16)
        assert timed["timed_steps_rule"] == "auto" and timed["step_time_ci_pct"] > 0
        assert (summary["timed_steps"], summary["step_time_ci_pct"]) == (steps, timed["step_time_ci_pct"])
        assert summary["wall_time_s"] > timed["seconds"]
        line = f"target {target} % reached" if reason == "target" else "NOT reached, stopped at the step cap"
        assert line in done.stdout


# ---------------------------------------------------------------- the epoch cut for the prediction


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2])
def test_epoch_parts_add_up_in_the_records_and_runs_csv(framework, data, devices, tmp_path):
    """Every whole epoch is its steps plus its overhead (docs/prediction.md), and runs.csv carries
    S, tau, t0 and D from them: 1 and 2 stand-in GPUs, on the pinned and the container stacks."""
    done = launch(framework, data, devices, "--epochs", 3, "--per-gpu-batch", 16, "--warmup-steps", 0)
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    header, _ = assert_finished_run(records, epochs=3)
    epochs = records[1:-1]
    for epoch in epochs:
        # No warm-up step: the mean is over every step the overhead leaves out.
        steps_seconds = epoch["steps"] * epoch["step_time_mean_s"]
        assert epoch["epoch_overhead_s"] == pytest.approx(epoch["seconds"] - steps_seconds, abs=1e-9)
        assert 0 <= epoch["epoch_overhead_s"] < epoch["seconds"]
    log = tmp_path / "run.log"
    log.write_text(done.stdout)
    _, runs = runs_table([(log, {})])
    row = runs.iloc[0]
    steady = epochs[1:]
    assert row["steps_per_epoch"] == steps_per_epoch(header["train_images"], devices, 16) == steady[0]["steps"]
    assert row["dataset_train_images"] == header["train_images"]
    assert row["epoch_overhead_s"] == pytest.approx(statistics.median(e["epoch_overhead_s"] for e in steady))
    assert row["step_time_s"] == pytest.approx(statistics.mean(e["step_time_mean_s"] for e in steady))
    assert pd.isna(row["epoch_parts_note"])
