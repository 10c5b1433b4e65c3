"""Profiler traces (issue 29, point 1): `snakemake trace` reruns chosen configurations with the
framework's profiler into results/traces/<run path>/, never among the measured runs; the
summary beside each trace; the trainers' profilers on the container stacks (torch 2.4, TF 2.11)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scalesweep.train.common import faults
from scalesweep.train.datasets import make_cifar, make_imagefolder
from conftest import TINY, snakemake
from scalesweep.logs import traces
from scalesweep.plan import matrix
from stacks import STACKS, stack_python
from test_report import decode_data_uri, report_variable
from test_workflow import job_counts

ROOT = Path(__file__).resolve().parents[1]


def test_union_counts_each_instant_once():
    assert traces.union_seconds([(0, 2), (1, 3), (5, 6)]) == 4
    assert traces.intersection_seconds([(0, 2)], [(1, 3)]) == 1


def test_summary_splits_communication_from_computation():
    ops = [("aten::linear", 0.0, 2.0), ("gloo:all_reduce", 1.0, 2.0), ("nccl:all_reduce", 5.0, 1.0),
           ("aten::linear", 4.0, 0.5)]
    summary = traces.split_summary(ops)
    assert summary["comm_s"] == 3.0 and summary["compute_s"] == 2.5 and summary["overlap_s"] == 1.0
    assert summary["comm_pct"] == pytest.approx(100 * 3.0 / 4.5)
    assert summary["top_operations"][0] == {"name": "aten::linear", "total_s": 2.5}


def test_trace_selection_and_settings():
    runs = [{"framework": "pytorch", "gpus": 1}, {"framework": "pytorch", "gpus": 2},
            {"framework": "tensorflow", "gpus": 2}]
    assert matrix.traced_runs(runs, {"select": [{"framework": "pytorch", "gpus": [2, 4]}]}) == [1]
    assert matrix.traced_runs(runs, {}) == []
    traced = matrix.trace_settings({"protocol": "epochs", "timed_steps": 50}, {"steps": 3, "ranks": [0, 1]}, "d")
    assert traced["protocol"] == "steps" and traced["timed_steps"] == 3 and traced["trace_ranks"] == "0,1"


def trace_config(tmp_path):
    config = yaml.safe_load(TINY.read_text())
    config["trace"] = {"select": [{"gpus": 2}], "warmup_steps": 3, "steps": 3, "ranks": "all"}
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def event_names(trace_file):
    events = json.loads(Path(trace_file).read_text())["traceEvents"]
    return [event["name"] for event in events if event.get("ph") == "X"]


def assert_torch_step_is_traced(names):
    assert "forward" in names  # the model's forward, marked while tracing
    assert any(name.startswith("autograd::engine::evaluate_function:") and "Backward" in name for name in names)
    assert any(name in ("gloo:all_reduce", "nccl:all_reduce", "c10d::allreduce_") for name in names)


def files_under(folder, *parts):
    """{path: (bytes, mtime)} of every file below folder's `parts`."""
    return {str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
            for part in parts for path in sorted((folder / part).rglob("*")) if path.is_file()}


def reported(workdir, name, configfile):
    """`snakemake --report <name>` of the sweep (target all) in `workdir`: the report's results
    ({path: entry}) and those in its category Traces."""
    made = snakemake(workdir, "--report", name, configfile=configfile)
    assert made.returncode == 0, made.stderr[-3000:]
    page = (workdir / name).read_text()
    results = report_variable(page, "results")
    listed = report_variable(page, "categories").get("Traces", {})
    in_traces = {path for paths in listed.values() for path in paths}
    return results, {path: results[path] for path in in_traces}


@pytest.fixture(scope="module")
def traced_sweep(tiny_sweep, tmp_path_factory):
    """A copy of the finished tiny sweep, its report made, then `snakemake trace` run in it: one
    trace run for the tests of the traces it writes and of the sweep's report showing them.
    (folder, trace config, the report's results before, the measured files before, the trace
    run)."""
    sweep = tmp_path_factory.mktemp("traced") / "sweep"
    shutil.copytree(tiny_sweep, sweep, symlinks=True)
    config = trace_config(sweep.parent)
    before, no_traces = reported(sweep, "before.html", config)
    assert not no_traces  # nothing promised
    measured = files_under(sweep, "results/runs", "results/tidy")
    done = snakemake(sweep, "--cores", "2", "trace", configfile=config)
    assert done.returncode == 0, done.stderr[-4000:]
    return sweep, config, before, measured, done


TORCH_DIR = "results/traces/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16"
TF_DIR = "results/traces/tensorflow/model~cnn_small/dataset~synth-cifar/gpus~2/epochs~2/per_gpu_batch~16"


@pytest.mark.slow
def test_snakemake_trace_writes_per_rank_traces_beside_the_measured_runs(traced_sweep, tmp_path):
    sweep, config, _, measured, done = traced_sweep
    torch_dir, tf_dir = sweep / TORCH_DIR, sweep / TF_DIR
    for rank in (0, 1):
        assert_torch_step_is_traced(event_names(torch_dir / f"rank{rank}.pt.trace.json"))
    (xplane,) = tf_dir.glob("plugins/profile/*/*.xplane.pb")  # TensorBoard's profile plugin layout
    assert traces.xplane_ops(xplane)
    summary = json.loads((torch_dir / "summary.json").read_text())
    assert set(summary) == {"rank0.pt.trace.json", "rank1.pt.trace.json"}
    assert all(s["comm_s"] > 0 and s["compute_s"] > 0 for s in summary.values())
    assert "## rank0.pt.trace.json" in (torch_dir / "summary.md").read_text()
    assert json.loads((tf_dir / "summary.json").read_text())
    # A trace is no measured run: it left the measured runs and the tidy tables as they were, and
    # where nothing was measured it plans the data and the traces alone.
    assert files_under(sweep, "results/runs", "results/tidy") == measured
    planned = snakemake(tmp_path, "-n", "trace", configfile=config)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert set(job_counts(planned.stdout)) == {"make_synthetic_cifar", "make_synthetic_imagefolder",
                                               "trace_pytorch", "trace_tensorflow", "trace", "total"}
    assert "scalesweep: traces and their summaries under results/traces/" in done.stderr
    made = snakemake(sweep, "trace", "--report", "traces.html", configfile=config)
    assert made.returncode == 0, made.stderr[-3000:]
    page = (sweep / "traces.html").read_text()
    assert '"Traces"' in page and f"{TORCH_DIR}/summary.md" in page


@pytest.mark.slow
def test_the_sweep_report_shows_the_traces_made_and_only_then(traced_sweep):
    sweep, config, before, _, _ = traced_sweep
    results, traces = reported(sweep, "report.html", config)
    (xplane,) = (sweep / TF_DIR).glob("plugins/profile/*/*.xplane.pb")
    xplane = str(xplane.relative_to(sweep))
    assert set(traces) == {f"{TORCH_DIR}/summary.md", f"{TORCH_DIR}/rank0.pt.trace.json",
                           f"{TORCH_DIR}/rank1.pt.trace.json", f"{TF_DIR}/summary.md", xplane}
    for path, entry in traces.items():  # each file itself, to download from the report
        assert decode_data_uri(entry["data_uri"]) == (sweep / path).read_bytes(), path
    rank1 = traces[f"{TORCH_DIR}/rank1.pt.trace.json"]
    assert rank1["labels"] == {"framework": "pytorch", "model": "vit_tiny", "dataset": "synth-folder",
                               "gpus": "2", "settings": "/epochs~2/per_gpu_batch~16",
                               "file": "rank1.pt.trace.json"}
    assert "Perfetto" in rank1["caption"] and "top operations" in traces[f"{TF_DIR}/summary.md"]["caption"]
    assert "TensorBoard" in traces[xplane]["caption"]
    # The sweep's own results are all still there, and the sweep reruns no trace.
    assert set(before) <= set(results)
    again = snakemake(sweep, "--cores", "2", "-n", configfile=config)
    assert again.returncode == 0 and "trace_" not in again.stdout + again.stderr, again.stdout[-3000:]


def test_a_failed_trace_leaves_no_trace_and_no_failed_sweep_rows(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.FAIL_INJECT_ENV, "crash")
    done = snakemake(tmp_path, "--cores", "2", "trace", configfile=trace_config(tmp_path))
    assert done.returncode != 0
    assert not list((tmp_path / "results").glob("traces/*/*/*/gpus~2/*/*/summary.json"))
    # The sweep's failure path (failed rows for every unmeasured run) is not a trace's.
    assert not (tmp_path / "results/tidy").exists()
    assert "scalesweep: traces and their summaries under results/traces/" in done.stderr


def test_trace_without_a_selection_says_which_key(tmp_path):
    config = yaml.safe_load(TINY.read_text())
    config["trace"] = {"select": [{"gpus": 8}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = snakemake(tmp_path, "-n", "trace", configfile=path)
    assert done.returncode != 0 and "config key 'trace.select': picks no planned configuration" in done.stdout + done.stderr


def trainer_with_trace(python, script, data, out, *options):
    command = [str(python), str(ROOT / "scripts" / script), "--data", str(data), "--resolution", "32",
               "--per-gpu-batch", "8", "--protocol", "steps", "--warmup-steps", "2", "--timed-steps", "2",
               "--trace-dir", str(out), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=out.parent)


@pytest.mark.slow
@pytest.mark.stacks
def test_the_torch_2_4_stack_writes_a_chrome_trace(tmp_path):
    python = stack_python(STACKS["pytorch"])
    data = tmp_path / "ds"
    make_imagefolder.make_imagefolder(str(data), 2, 16, 2, size=32, seed=0)
    command = [str(python), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run([*command, str(ROOT / "scripts/train_torch.py"), "--model", "vit_tiny", "--data", str(data),
                           "--resolution", "32", "--gpus", "2", "--per-gpu-batch", "8", "--protocol", "steps",
                           "--warmup-steps", "2", "--timed-steps", "2", "--trace-dir", str(tmp_path / "t"),
                           "--trace-ranks", "1"], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["rank1.pt.trace.json"]
    assert_torch_step_is_traced(event_names(tmp_path / "t" / "rank1.pt.trace.json"))


@pytest.mark.slow
@pytest.mark.stacks
def test_the_tensorflow_2_11_stack_writes_a_tensorboard_profile(tmp_path):
    python = stack_python(STACKS["tensorflow"])
    data = make_cifar.generate(tmp_path / "data", train_images=64, test_images=8, seed=0).parent
    done = trainer_with_trace(python, "train_tf.py", data, tmp_path / "t", "--model", "cnn_small", "--gpus", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    (xplane,) = (tmp_path / "t").glob("plugins/profile/*/*.xplane.pb")
    assert traces.xplane_ops(xplane)  # read with the pinned TensorFlow's XPlane protocol buffer
