"""The record writer and measurement helpers both trainers share (scripts/runlog.py).

Standard library only, so everything runs in this process: no framework import. The step
durations below were recorded from a Keras fit on this machine (ResNet50V2, 128 px, batch 16, one
CPU device, 2 cores); the first step holds graph tracing.
"""

import io
import json
import os
import signal
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
import faults  # noqa: E402
import measure  # noqa: E402
import node  # noqa: E402
import runlog  # noqa: E402

PREFIX = ":::SCALESWEEP "

# Step durations in seconds, in run order.
RECORDED_STEPS = [7.134, 1.358, 0.766, 1.238, 1.154, 1.25, 0.88, 1.405, 1.527, 1.228]


def clock_readings(durations, gap=0.004, start=100.0):
    """Begin/end readings of back-to-back steps with `gap` s of host work between them."""
    begins, ends, now = [], [], start
    for duration in durations:
        begins.append(now)
        ends.append(now + duration)
        now += duration + gap
    return begins, ends


# ---------------------------------------------------------------------------------------------
# Record lines
# ---------------------------------------------------------------------------------------------


def test_emit_writes_one_prefixed_json_line_with_schema():
    stream = io.StringIO()
    runlog.emit({"record": "epoch", "loss": float("nan"), "nested": [float("inf"), 1.5]}, stream)
    line = stream.getvalue()
    assert line.startswith(PREFIX) and line.endswith("}\n") and line.count("\n") == 1
    record = json.loads(line[len(PREFIX) :])
    assert record == {"record": "epoch", "schema": 1, "loss": None, "nested": [None, 1.5]}


def test_emit_refuses_a_record_without_kind():
    with pytest.raises(ValueError, match="'record' kind"):
        runlog.format_record({"loss": 1.0})


def test_epoch_record_without_step_timings_has_null_step_keys():
    record = runlog.epoch_record(3, 512, 2.0, np.float32(1.25), 0.5)
    assert record["throughput_img_s"] == 256.0 and record["loss"] == 1.25
    assert (record["steps"], record["step_time_median_s"], record["step_time_p90_s"], record["phase"]) == (
        None, None, None, None)


def test_epoch_record_carries_step_statistics_and_phase():
    stats = measure.step_statistics([0.5, 0.25, 0.75])
    record = runlog.epoch_record(2, 96, 1.5, step_stats=stats, phase="timed")
    assert record["steps"] == 3 and record["step_time_median_s"] == 0.5
    assert record["step_time_p90_s"] == pytest.approx(0.7) and record["phase"] == "timed"


# ---------------------------------------------------------------------------------------------
# Step statistics on recorded timings
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 0.95, 1.0])
def test_percentile_matches_numpy_linear(fraction):
    assert measure.percentile(RECORDED_STEPS, fraction) == pytest.approx(np.percentile(RECORDED_STEPS, fraction * 100))


def test_percentile_rejects_nothing_and_bad_fractions():
    with pytest.raises(ValueError, match="no values"):
        measure.percentile([], 0.5)
    with pytest.raises(ValueError, match="0..1"):
        measure.percentile([1.0], 90)


def test_warmup_steps_are_left_out_of_the_statistics():
    stats = measure.step_statistics(RECORDED_STEPS, first_step=0, warmup_steps=2)
    steady = RECORDED_STEPS[2:]
    assert stats["steps"] == 10  # every step counts as a step of the epoch
    assert stats["step_time_median_s"] == pytest.approx(float(np.median(steady)))
    assert stats["step_time_p90_s"] == pytest.approx(float(np.percentile(steady, 90)))
    # Kept, the tracing step would push the p90 above every steady step.
    with_warmup = measure.step_statistics(RECORDED_STEPS)
    assert with_warmup["step_time_p90_s"] > max(steady) >= stats["step_time_p90_s"]


def test_warmup_counts_run_wide_steps_not_epoch_steps():
    """W = 5 over epochs of 4 steps: epoch 1 has no timed step, epoch 2 loses its first step."""
    first_epoch, second_epoch, third_epoch = RECORDED_STEPS[:4], RECORDED_STEPS[4:8], RECORDED_STEPS[8:]
    assert measure.step_statistics(first_epoch, 0, 5) == {
        "steps": 4, "step_time_median_s": None, "step_time_p90_s": None,
        "step_time_mean_s": None, "step_time_ci_pct": None}
    assert measure.step_statistics(second_epoch, 4, 5)["step_time_median_s"] == pytest.approx(np.median(second_epoch[1:]))
    assert measure.step_statistics(third_epoch, 8, 5)["step_time_median_s"] == pytest.approx(np.median(third_epoch))
    assert [measure.warmup_steps_in(first, 4, 5) for first in (0, 4, 8)] == [4, 1, 0]


def test_steps_protocol_windows_from_recorded_clock_readings():
    begins, ends = clock_readings(RECORDED_STEPS)
    warmup, timed_steps = 3, 7
    timed_started = ends[warmup - 1] + 0.001  # after the metric reset between the windows
    first = measure.window_timing(begins, ends, 0, warmup, warmup)
    second = measure.window_timing(begins, ends, warmup, timed_steps, warmup, started=timed_started)
    # Warm-up: begin of step 1 to the end of step W, gaps included; no step statistics.
    assert first["seconds"] == pytest.approx(sum(RECORDED_STEPS[:3]) + 2 * 0.004)
    assert (first["steps"], first["step_time_median_s"], first["step_time_p90_s"]) == (3, None, None)
    # Timed: from the reset to the end of step W + T: the T steps and the gaps between them.
    assert second["seconds"] == pytest.approx(sum(RECORDED_STEPS[3:]) + 7 * 0.004 - 0.001)
    assert second["steps"] == 7
    assert second["step_time_median_s"] == pytest.approx(np.median(RECORDED_STEPS[3:]))
    # The two windows cover the run without overlap.
    assert first["seconds"] + second["seconds"] < ends[-1] - begins[0]


def test_window_timing_refuses_steps_not_recorded():
    begins, ends = clock_readings([1.0, 1.0])
    with pytest.raises(ValueError, match="steps 1..2 asked, 2 steps recorded"):
        measure.window_timing(begins, ends, 1, 2)


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------


def test_summarize_takes_medians_from_epoch_two_on():
    epochs = [runlog.epoch_record(i, 100, seconds) for i, seconds in [(1, 30.0), (2, 2.0), (3, 4.0), (4, 3.0)]]
    summary = runlog.summarize(epochs)
    assert summary["epochs"] == 4
    assert summary["train_time_s"] == pytest.approx(39.0)
    assert summary["steady_epoch_time_s"] == pytest.approx(3.0)
    assert summary["throughput_img_s"] == pytest.approx(100 / 3.0)


def test_summarize_has_no_steady_state_with_one_epoch():
    summary = runlog.summarize([runlog.epoch_record(1, 100, 5.0)])
    assert summary["steady_epoch_time_s"] is None and summary["throughput_img_s"] is None
    assert runlog.summarize([])["train_time_s"] == 0


def test_summary_of_the_steps_protocol_reads_the_timed_window():
    windows = [runlog.epoch_record(1, 48, 25.0, phase="warmup"), runlog.epoch_record(2, 112, 8.0, phase="timed")]
    summary = runlog.summary_record("ok", windows, None, oom_retries=2)
    assert summary["throughput_img_s"] == 14.0 and summary["steady_epoch_time_s"] == 8.0
    assert summary["total_time_s"] is None and summary["oom_retries"] == 2


def test_summary_record_needs_a_reason_unless_ok():
    with pytest.raises(ValueError, match="needs a reason"):
        runlog.summary_record("failed", [], 1.0)
    with pytest.raises(ValueError, match="ok, oom or failed"):
        runlog.summary_record("crashed", [], 1.0, reason="x")
    record = runlog.summary_record("oom", [], 1.0, reason="first line\nsecond line")
    assert record["reason"] == "first line" and record["peak_host_rss_gb"] > 0
    assert record["oom_retries"] == 0


# ---------------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------------


def test_provenance_reads_slurm_and_container_variables():
    found = node.provenance(0.0, {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[1-2]",
                                    "APPTAINER_CONTAINER": "/gpfs/images/tf-23.03.sif"})
    assert (found["slurm_job_id"], found["slurm_nodelist"]) == ("42", "gpu[1-2]")
    assert found["container_image"] == "/gpfs/images/tf-23.03.sif"
    assert found["start_time"] == "1970-01-01T00:00:00+00:00"
    bare = node.provenance(environ={})
    assert bare["slurm_job_id"] is None and bare["container_image"] is None
    assert node.container_image({"SINGULARITY_CONTAINER": "/x.sif"}) == "/x.sif"
    assert node.nccl_version_from_env({"NCCL_VERSION": "2.17.1"}) == "2.17.1"



def test_thread_fields_record_the_pool_and_the_variable():
    assert node.thread_fields(12, {"OMP_NUM_THREADS": "3"}) == {"omp_num_threads": 12, "omp_num_threads_env": "3"}
    assert node.thread_fields(None, {}) == {"omp_num_threads": None, "omp_num_threads_env": None}


def test_usable_cpus_are_the_affinity_mask_or_else_the_host_count(monkeypatch):
    monkeypatch.setattr(node.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert node.usable_cpu_count() == 3
    monkeypatch.delattr(node.os, "sched_getaffinity")
    monkeypatch.setattr(node.os, "cpu_count", lambda: 8)
    assert node.usable_cpu_count() == 8


NVIDIA_SMI_OUTPUT = "NVIDIA H100, 535.104.05, 65247\nNVIDIA H100, 535.104.05, 65247\n\n"


def test_parse_nvidia_smi_rows():
    assert node.parse_nvidia_smi(NVIDIA_SMI_OUTPUT) == [
        {"name": "NVIDIA H100", "driver": "535.104.05", "memory_mib": 65247}] * 2
    assert node.parse_nvidia_smi("No devices were found\n") == []


def fake_nvidia_smi(folder: Path, body: str) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_device_provenance_runs_nvidia_smi_from_the_path(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, f"printf '{NVIDIA_SMI_OUTPUT}'")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = node.device_provenance()
    assert found["gpu_models"] == ["NVIDIA H100", "NVIDIA H100"] and found["gpu_driver"] == "535.104.05"


def test_device_provenance_without_a_working_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert node.nvidia_gpus() == []
    fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert node.device_provenance()["gpu_models"] == [] and node.device_provenance()["gpu_driver"] is None


def test_cpu_model_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert node.cpu_model(str(cpuinfo)) == "Intel(R) Xeon(R) Platinum 8480+"
    assert node.cpu_model(str(tmp_path / "absent")) is None


# ---------------------------------------------------------------------------------------------
# Failure injection and the maximum-batch search
# ---------------------------------------------------------------------------------------------


def test_fail_inject_mode_rejects_unknown_values():
    assert faults.fail_inject_mode({}) is None
    assert faults.fail_inject_mode({faults.FAIL_INJECT_ENV: "OOM"}) == "oom"
    assert faults.fail_inject_mode({faults.FAIL_INJECT_ENV: "oom-above:64"}) == "oom-above:64"
    for bad in ("segfault", "oom-above:", "oom-above:x", "oom-above:-1"):
        with pytest.raises(ValueError, match=f"SCALESWEEP_FAIL_INJECT='{bad}'"):
            faults.fail_inject_mode({faults.FAIL_INJECT_ENV: bad})


def test_injected_failure_per_attempt_and_batch():
    assert faults.injected_failure(None, 64) is None
    assert [faults.injected_failure("oom", 1, attempt) for attempt in (1, 5)] == ["oom", "oom"]
    assert faults.injected_failure("crash", 8) == "crash"
    assert [faults.injected_failure("oom-once", 64, attempt) for attempt in (1, 2)] == ["oom", None]
    assert [faults.injected_failure("oom-above:64", batch) for batch in (64, 65)] == [None, "oom"]


def capacity(limit):
    """A device on which batches up to `limit` fit, recording what was asked."""
    asked = []

    def fits(batch):
        asked.append(batch)
        return batch <= limit

    return fits, asked


def test_search_doubles_then_bisects_to_the_exact_limit():
    fits, asked = capacity(100)
    found = measure.search_max_batch(fits, start=16, limit=65536)
    assert found["per_gpu_batch"] == 100 and not found["limit_reached"]
    assert asked == [16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
    assert found["tried"] == [[batch, "ok" if batch <= 100 else "oom"] for batch in asked]


def test_search_from_a_start_that_does_not_fit_bisects_down():
    fits, asked = capacity(5)
    found = measure.search_max_batch(fits, start=16, limit=1024)
    assert found["per_gpu_batch"] == 5 and asked == [16, 8, 4, 6, 5]


def test_search_where_nothing_fits():
    fits, asked = capacity(0)
    found = measure.search_max_batch(fits, start=4, limit=1024)
    assert found["per_gpu_batch"] is None and asked == [4, 2, 1] and not found["limit_reached"]


def test_search_stops_at_the_limit_when_nothing_fails():
    fits, asked = capacity(10**9)
    found = measure.search_max_batch(fits, start=16, limit=100)
    assert found == {"per_gpu_batch": 100, "tried": [[16, "ok"], [32, "ok"], [64, "ok"], [100, "ok"]],
                     "limit_reached": True}


@pytest.mark.parametrize("limit", [1, 2, 3, 255, 256, 257, 4095, 5000])
def test_search_finds_every_limit_in_logarithmic_tries(limit):
    fits, asked = capacity(limit)
    assert measure.search_max_batch(fits, start=1, limit=8192)["per_gpu_batch"] == limit
    assert len(asked) <= 2 * limit.bit_length() + 2 and len(set(asked)) == len(asked)


def test_search_refuses_a_start_beyond_the_limit():
    with pytest.raises(ValueError, match="start \\(512\\) <= limit \\(256\\)"):
        measure.search_max_batch(lambda batch: True, start=512, limit=256)


# ---------------------------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------------------------


def test_sigterm_becomes_an_exception():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        runlog.raise_on_sigterm()
        with pytest.raises(runlog.Terminated, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_node_load_says_what_else_ran_and_whether_slurm_shared_the_node():
    load = node.node_load({"SLURM_CPUS_ON_NODE": "20"}, loadavg=lambda: (3.456, 0, 0), cpu_count=lambda: 80)
    assert load == {"load_avg_1m": 3.46, "node_cpus": 80, "node_shared": True}  # 20 of 80 CPUs
    whole = node.node_load({"SLURM_CPUS_ON_NODE": "80"}, loadavg=lambda: (0.1, 0, 0), cpu_count=lambda: 80)
    assert whole["node_shared"] is False
    assert node.node_load({}, loadavg=lambda: (0.1, 0, 0), cpu_count=lambda: 2)["node_shared"] is None


def test_the_header_carries_the_code_version_the_workflow_passed():
    assert node.provenance(environ={"SCALESWEEP_VERSION": "3ec7d5d1a2b3-dirty"})["scalesweep_version"] == \
        "3ec7d5d1a2b3-dirty"
    assert node.provenance(environ={})["scalesweep_version"] is None
