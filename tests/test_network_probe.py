"""The inter-node network probe (scripts/probe_network.py, the module
scalesweep/train/torch_backend/network_probe.py; docs/prediction.md): its row from
hand-computed timings, its job command quoted, and the real job across the test SLURM cluster's
two nodes with gloo."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scalesweep.analysis import predict
from scalesweep.contract import layout
from scalesweep.plan import launch

from scalesweep.train.common import stepparts
from scalesweep.train import nccl_tests
from scalesweep.train.torch_backend import network_probe as probe_network
from stacks import container_python

REPO = Path(__file__).resolve().parents[1]


STANDIN_ALL_REDUCE_PERF = Path(__file__).resolve().parent / "standins" / "all_reduce_perf"
PROBED = {"model": "vit_h_14@224", "gradient_bytes": 2_528_183_200, "bytes": 100_000_000,
          "bucket_bytes": stepparts.BUCKET_BYTES, "note": ""}


def test_probe_row_is_nccl_tests_bandwidth_of_a_round_of_buckets():
    # 100 MB a round in 4 buckets (3 of 25 MiB and one of 21.4 MB), rounds of 39/40/41 ms: the
    # median 40 ms; algbw = 1e8 / 0.04 = 2.5 GB/s, busbw over 4 ranks x 2 x 3/4 = 3.75 GB/s;
    # latency 60 us over 2 x 3 = 6 hops = 10 us.
    row = probe_network.probe_row([0.041, 0.040, 0.039], [60e-6] * 3, PROBED,
                                  [(0, "node1"), (0, "node1"), (1, "node2"), (1, "node2")], "gloo", 1.5)
    assert row["allreduce_s"] == pytest.approx(0.040)
    assert row["algbw_gb_s"] == pytest.approx(2.5) and row["busbw_gb_s"] == pytest.approx(3.75)
    assert row["latency_s"] == pytest.approx(10e-6)
    assert (row["nodes"], row["ranks"], row["node_names"]) == (2, 4, "node1 node2")
    assert (row["model"], row["gradient_bytes"], row["buckets"]) == ("vit_h_14@224", 2_528_183_200, 4)
    assert row["bucket_bytes"] == 25 * 2**20 and list(row) == list(probe_network.COLUMNS)


def test_gradient_bytes_are_the_trainable_parameters_in_fp32_counted_without_memory():
    # torchvision's documented parameter counts (1000 classes): ResNet-18 11,689,512, ResNet-50
    # 25,557,032, ViT-H/14 at 224 px 632,045,800 (IMAGENET1K_SWAG_LINEAR_V1).
    assert probe_network.gradient_bytes("resnet18", 224) == 4 * 11_689_512
    assert probe_network.gradient_bytes("resnet50", 224) == 4 * 25_557_032
    assert probe_network.gradient_bytes("vit_h_14", 224) == 4 * 632_045_800
    # vit_tiny at 32 px by hand: patch conv 3*8*8*64+64 = 12,352; class token 64; positions
    # (4*4+1)*64 = 1,088; per layer 2 norms 256 + qkv 64*192+192 + out 64*64+64 + MLP 64*128+128
    # + 128*64+64 = 33,472, 2 layers; final norm 128; head 64*1000+1000 = 65,000.
    assert probe_network.gradient_bytes("vit_tiny", 32) == 4 * (12_352 + 64 + 1_088 + 2 * 33_472 + 128 + 65_000)


def test_the_largest_model_is_probed_in_its_smallest_buckets():
    specs = [(("vit_tiny", 32, 25.0), 582_304), (("vit_h_14", 224, 25.0), 2_528_183_200),
             (("vit_h_14", 224, 100.0), 2_528_183_200)]
    assert probe_network.largest(specs) == (("vit_h_14", 224, 25.0), 2_528_183_200)


# DDP wrapped as the trainer wraps it (its keyword arguments from the trainer's own default
# options) and as DDP's own default, in a one-process gloo group: whether DDP gives it a 1 MiB first
# bucket (`bucket_bytes_cap_default`, the attribute both torch 2.4 and the pinned torch set).
FIRST_BUCKET_CHECK = """
import argparse, json, sys
sys.path.insert(0, sys.argv[1])
import torch, torch.distributed as dist
from scalesweep.train.torch_backend import ddp_options
parser = argparse.ArgumentParser()
ddp_options.add_ddp_options(parser)
asked = ddp_options.asked(parser.parse_args([]))
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
ours = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4), **asked)
theirs = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
print(json.dumps({"ours": ours.bucket_bytes_cap_default, "theirs": theirs.bucket_bytes_cap_default,
                  "cap": ours.bucket_bytes_cap}))
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("interpreter", ["pinned", "container-pytorch"])
def test_the_trainer_builds_ddp_without_the_1_mib_first_bucket(interpreter, tmp_path):
    """The probe splits the gradients into equal buckets of the cap. DDP makes its first bucket
    1 MiB only when bucket_cap_mb is left unset; the trainer always passes it (25 by default), so
    its buckets are the probe's, in the container's torch 2.4 as in the pinned torch."""
    python = sys.executable if interpreter == "pinned" else container_python("pytorch")
    run = subprocess.run([str(python), "-c", FIRST_BUCKET_CHECK, str(REPO), str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    built = json.loads(run.stdout.strip().splitlines()[-1])
    assert built == {"ours": False, "theirs": True, "cap": stepparts.BUCKET_BYTES}


def test_buckets_and_the_cpu_cap():
    mib = 2**20
    # ViT-H/14's 2,528,183,200 bytes fill 96 buckets of 25 MiB (2,516,582,400) and an 11,600,800 tail.
    sizes = probe_network.bucket_sizes(2_528_183_200, 25 * mib)
    assert len(sizes) == 97 and sizes[-1] == 11_600_800 and sum(sizes) == 2_528_183_200
    assert probe_network.timed_bytes(2_528_183_200, 25 * mib, on_gpu=True) == (2_528_183_200, "")
    capped, note = probe_network.timed_bytes(2_528_183_200, 25 * mib, on_gpu=False)
    assert capped == 100 * mib and "timed 4 of 97 buckets" in note
    # Buckets larger than the cap: one whole bucket is timed; a small model is timed whole.
    assert probe_network.timed_bytes(2_528_183_200, 400 * mib, on_gpu=False)[0] == 400 * mib
    assert probe_network.timed_bytes(582_304, 25 * mib, on_gpu=False) == (582_304, "")


def test_a_model_spec_is_checked_before_any_process_starts():
    assert probe_network.parse(["--model=vit_h_14:224:25", "--out=x"]).model == [("vit_h_14", 224, 25.0)]
    for bad in ("vit_h_14:224", "nosuch:224:25", "vit_h_14:big:25", "vit_h_14:224:0"):
        with pytest.raises(SystemExit):
            probe_network.parse([f"--model={bad}", "--out=x"])


def test_the_probe_models_are_the_pytorch_runs_with_their_bucket_caps():
    runs = [{"framework": "pytorch", "model": "vit_h_14", "resolution": 224},
            {"framework": "pytorch", "model": "vit_h_14", "resolution": 224, "bucket_cap_mb": 100},
            {"framework": "pytorch", "model": "resnet50", "resolution": 224, "bucket_cap_mb": None},
            {"framework": "tensorflow", "model": "resnet50v2", "resolution": 128}]
    assert launch.network_probe_models(runs) == ["resnet50:224:25", "vit_h_14:224:100", "vit_h_14:224:25"]


def probe_command(container, out, repo="/repo with space", workdir="/work dir"):
    return launch.network_probe_command({"gpus_per_node": 4, "cpus_per_gpu": 2}, container, repo, workdir,
                                        "/usr/bin/python3", out, ["vit_h_14:224:25"])


def per_node_words(command):
    command = command.split(" && if NCCL_TESTS=")[0]  # the torch step; nccl-tests' follows it
    srun = shlex.split(command.split(" && ")[-1])
    per_node = shlex.split(srun[-1].replace("$SLURM_NODEID", "0").replace("$SLURM_JOB_ID", "1")
                           .replace("$MASTER_ADDR:$MASTER_PORT", "h:1"))
    return srun, per_node


def test_the_probe_command_quotes_every_path(tmp_path):
    hostile = tmp_path / "it's $(touch pwned) dir" / "network.csv"
    srun, per_node = per_node_words(probe_command({"runtime": "none"}, hostile))
    assert srun[:3] == ["srun", "--nodes=2", "--ntasks=2"] and "--cpus-per-task=8" in srun
    assert f"--out={hostile}" in per_node and "/repo with space/scripts/probe_network.py" in per_node
    assert "--nnodes=2" in per_node and "--nproc-per-node=4" in per_node and "--model=vit_h_14:224:25" in per_node


def test_on_a_cluster_the_probe_runs_in_the_pytorch_image_as_a_two_node_training_job():
    container = {"runtime": "apptainer", "module": ["apptainer/1.3"], "args": ["--nv"], "binds": ["/scratch"],
                 "images": {"pytorch": "/images/pytorch 24.07.sif", "tensorflow": "/images/tf.sif"}}
    command = probe_command(container, "results/tables/network.csv")
    steps = command.split(" && ")
    assert steps[0] == "module load apptainer/1.3" and steps[1].startswith("MASTER_ADDR=$(scontrol")
    srun, per_node = per_node_words(command)
    assert srun[:-3] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gres=gpu:4",
                         "--cpus-per-task=8", "--kill-on-bad-exit=1"] and srun[-3:-1] == ["bash", "-c"]
    assert per_node == [
        *launch.python_env_hygiene(),
        "apptainer", "exec", "--nv", "--bind", "/repo with space,/work dir,/scratch", "--pwd", "/work dir",
        "/images/pytorch 24.07.sif",
        "env", "OMP_NUM_THREADS=$((${OMP_NUM_THREADS:-1}/4>0?${OMP_NUM_THREADS:-1}/4:1))",
        "python", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=4", "--node-rank=0",
        "--rdzv-id=1", "--rdzv-backend=c10d", "--rdzv-endpoint=h:1",
        "/repo with space/scripts/probe_network.py", "--model=vit_h_14:224:25", "--out=results/tables/network.csv"]


def test_the_probe_is_booked_as_two_whole_nodes_for_its_time_limit():
    cluster = {"gpus_per_node": 4, "cpus_per_gpu": 20, "exclusive": "multinode"}
    settings = launch.network_probe_settings(cluster)
    resources = launch.slurm_resources(settings, cluster)
    assert resources == {"nodes": 2, "tasks": 2, "cpus_per_task": 80, "gres": "gpu:4", "tasks_per_gpu": 0,
                         "runtime": launch.PROBE_TIME_LIMIT_MIN, "slurm_extra": "--exclusive"}
    # 8 GPUs for 10 minutes.
    assert launch.booked_gpu_hours(settings) == pytest.approx(8 * 10 / 60)


def container_for(runtime, tmp_path):
    """The container config of the SLURM test: the sweep's own Python (`none`), or a stub
    `singularity` that does with the environment, binds and --pwd what the real runtime does
    (tests/test_container_env.py) around a folder image whose `python` is the PyTorch 24.07 stack
    stand-in; returns (config, the folder to put first on PATH or None)."""
    if runtime == "none":
        return {"runtime": "none"}, None
    from stacks import STACKS, stack_python
    from test_container_env import RUNTIME, write_executable

    bin_dir = tmp_path / "bin"
    write_executable(bin_dir / "singularity", RUNTIME)
    image = tmp_path / "images" / "pytorch 24.07"
    write_executable(image / "bin" / "python", f'#!/bin/bash\necho "$SINGULARITY_CONTAINER" >> "{tmp_path}/started"\n'
                                               f'exec "{stack_python(STACKS["pytorch"])}" "$@"\n')
    # The image holds nccl-tests, as NVIDIA's do: the stand-in in its bin/, found by `command -v` inside.
    shutil.copy(STANDIN_ALL_REDUCE_PERF, image / "bin" / "all_reduce_perf")
    return {"runtime": "singularity", "args": ["--nv"], "binds": [], "images": {"pytorch": str(image)}}, bin_dir


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.parametrize("runtime", ["none", pytest.param("singularity", marks=pytest.mark.stacks)])
def test_the_probe_runs_across_the_test_clusters_two_nodes(tmp_path, runtime):
    if subprocess.run(["sinfo"], capture_output=True).returncode != 0:
        pytest.skip("the test SLURM cluster is down: sudo bash tests/cluster/slurm-up.sh")
    container, bin_dir = container_for(runtime, tmp_path)
    out = tmp_path / "net work" / "network.csv"
    command = launch.network_probe_command({"gpus_per_node": 2, "cpus_per_gpu": 1}, container, REPO, tmp_path,
                                           sys.executable, out, ["vit_tiny:32:25", "resnet18:224:25"])
    job = tmp_path / "probe.sh"
    job.write_text("#!/bin/bash\nset -e\n" + command + "\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    if bin_dir:
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run(["sbatch", "--wait", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=2",
                           "--account=scalesweep", "--qos=acc_debug", "--time=5", f"--output={tmp_path / 'job.out'}",
                           str(job)], capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert done.returncode == 0, done.stderr + log[-3000:]
    row = pd.read_csv(out, keep_default_na=False).iloc[0]
    assert (row["nodes"], row["ranks"], row["backend"], row["node_names"]) == (2, 4, "gloo", "node1 node2")
    # ResNet-18 (11,689,512 parameters) is the larger: 44.6 MB of fp32 gradients, 2 buckets of 25 MiB.
    assert (row["model"], row["gradient_bytes"], row["bytes"]) == ("resnet18@224", 4 * 11_689_512, 4 * 11_689_512)
    assert (row["bucket_bytes"], row["buckets"], row["note"]) == (25 * 2**20, 2, "")
    assert row["busbw_gb_s"] > 0 and row["latency_s"] > 0
    assert "network probe: 2 node(s), 4 ranks, gloo" in log
    table = Path(layout.nccl_tests_output(str(out)))
    if runtime == "singularity":  # the image's python started torchrun once on each node, then asked and merged
        assert (tmp_path / "started").read_text().splitlines()[:2] == [container["images"]["pytorch"]] * 2
        # all_reduce_perf ran across both nodes, from one bucket (25 MiB) to the gradient (46,758,048
        # bytes): one size; its table is kept and its bus bandwidth sits beside torch's.
        assert table.read_text().startswith("# nThread 1 nGpus 2 minBytes 26214400 maxBytes 46758048 step: 2(factor) ")
        parsed = nccl_tests.parse_table(table.read_text())
        assert [size for size, _, _ in parsed["rows"]] == [26214400]
        assert (row["nccl_busbw_gb_s"], row["nccl_avg_busbw_gb_s"], row["source"]) == (1.5, 1.5, nccl_tests.SOURCE)
        assert "network probe: nccl-tests all_reduce_perf busbw 1.5 GB/s" in log
        network = predict.read_network_csv(out)
        assert network.nccl_busbw_gb_s == 1.5  # torch's gloo differs by far more than 10 %: said
        assert "nccl-tests' all_reduce_perf measured 1.5 GB/s" in predict.bandwidth_note(network)
    else:  # the host has no all_reduce_perf: nothing changes
        assert not table.exists() and "nccl_busbw_gb_s" not in row.index


def test_nccl_tests_table_is_read_in_both_layouts_and_merged_beside_torchs(tmp_path):
    """The parser reads nccl-tests' table as the tool prints it: rows of size, count, type, redop
    (and root, since 2.13) with out-of-place and in-place time, algbw, busbw and #wrong (error
    before), the '# Avg bus bandwidth' line; NCCL's INFO lines and the headers pass by."""
    current = "\n".join([
        "# nThread 1 nGpus 4 minBytes 26214400 maxBytes 104857600 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "node1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "    26214400       6553600     float     sum      -1   2912.1    9.00   15.75      0   2905.0    9.02   15.79      0",
        "   104857600      26214400     float     sum      -1    10486   10.00   17.50      0    10401   10.08   17.64      0",
        "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 16.67 ", "#"])
    older = "\n".join([
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
        "    26214400       6553600   float     sum   2912.1    9.00   15.75  0e+00   2905.0    9.02   15.79  0e+00",
        " Avg bus bandwidth    : 15.77 "])
    assert nccl_tests.parse_table(current) == {"rows": [(26214400, 15.75, 15.79), (104857600, 17.5, 17.64)],
                                               "avg_busbw_gb_s": 16.67}
    assert nccl_tests.parse_table(older.replace(" Avg", "# Avg"))["rows"] == [(26214400, 15.75, 15.79)]
    with pytest.raises(ValueError, match="no all_reduce_perf table"):
        nccl_tests.parse_table("NCCL WARN connection refused\n")
    row = probe_network.probe_row([0.5] * 3, [140e-6] * 3, {**PROBED, "bytes": 104857600, "gradient_bytes": 104857600},
                                  [(0, "node1")] * 4 + [(1, "node2")] * 4, "nccl", 3.0)
    csv = tmp_path / "network.csv"
    probe_network.write_row(row, str(csv))
    assert nccl_tests.command(nccl_tests.read_row(str(csv)), 4) == [
        "all_reduce_perf", "-b", "26214400", "-e", "104857600", "-f", "2", "-g", "4"]
    (tmp_path / "t.txt").write_text(current)
    assert nccl_tests.main(["merge", f"--out={csv}", f"--table={tmp_path / 't.txt'}"]) == 0
    merged = pd.read_csv(csv).iloc[0]
    assert (merged["nccl_busbw_gb_s"], merged["nccl_gradient_busbw_gb_s"], merged["nccl_avg_busbw_gb_s"]) == (15.75, 17.5, 16.67)
    assert merged["busbw_gb_s"] == pytest.approx(row["busbw_gb_s"])  # torch's kept, the one the prediction uses


def test_the_sweep_probes_when_it_predicts_beyond_a_node():
    from scalesweep.plan.analysis_settings import AnalysisSettings

    def wanted(analysis, cluster=None, frameworks=("pytorch",)):
        settings = AnalysisSettings.from_config(analysis, cluster or {"gpus_per_node": 4})
        return launch.network_probe_wanted(settings, frameworks)

    assert wanted({"predict_gpus": [8, 16]})  # 8 and 16 lie beyond a node of 4
    # The default counts (next two doublings) book no 2-node job the user did not ask for.
    assert not wanted({"predict_gpus": None})
    assert not wanted({"predict_gpus": [4]})
    assert not wanted({"predict_gpus": [8, 16]}, {"gpus_per_node": 16})
    # The analysis section's node comes before the cluster section's.
    assert not wanted({"predict_gpus": [8, 16], "gpus_per_node": 16})
    assert wanted({"predict_gpus": [8]}, {"gpus_per_node": 16}) is False
    assert wanted({"predict_gpus": [8], "gpus_per_node": 2}, {"gpus_per_node": 16})
    assert not wanted({"predict_gpus": [8, 16]}, frameworks=("tensorflow",))


def test_a_probed_network_drives_the_communication_rule(tmp_path):
    from scalesweep.analysis import predict

    csv = tmp_path / "network.csv"
    csv.write_text("busbw_gb_s,latency_s,nodes\n92.0,5e-06,2\n")
    network = predict.read_network_csv(csv)
    assert (network.busbw_gb_s, network.latency_s, network.source) == (92.0, 5e-06, "the network probe, network.csv")
    broken = tmp_path / "broken.csv"
    broken.write_text("busbw_gb_s,latency_s\n0,0\n")
    with pytest.raises(ValueError, match=r"broken.csv: busbw_gb_s must be a bus bandwidth in \(0, 1800\] GB/s, got 0.0"):
        predict.read_network_csv(broken)


@pytest.mark.slow
@pytest.mark.workflow
def test_snakemake_probe_network_writes_network_csv_locally(tmp_path):
    from conftest import snakemake

    done = snakemake(tmp_path, "probe_network", "--cores", "2", configfile=REPO / "config" / "config.yaml")
    assert done.returncode == 0, done.stderr[-4000:]
    row = pd.read_csv(tmp_path / "results" / "tables" / "network.csv").iloc[0]
    # The laptop sweep's PyTorch models are vit_tiny and resnet18 at 32 px: ResNet-18 is the larger.
    assert (row["ranks"], row["backend"], row["model"]) == (2, "gloo", "resnet18@32")
    assert row["bytes"] == row["gradient_bytes"] == probe_network.gradient_bytes("resnet18", 32)
    assert row["busbw_gb_s"] > 0


def test_mn5_dry_run_shows_the_probe_in_the_pytorch_image_across_two_whole_nodes(tmp_path):
    """`snakemake -n -p probe_network --profile mn5` as typed from the repository root: the job
    MareNostrum 5 would run, inside the site's PyTorch image, since its login node's Python has
    no torch."""
    from mn5site import mn5_profile, run_with_profile
    from test_cluster_commands import TORCH_IMAGE, mn5_config, resources_of

    config = mn5_config(tmp_path)
    override = tmp_path / "datasets.yaml"
    override.write_text(yaml.safe_dump({"datasets": config["datasets"]}))
    workdir = tmp_path / "workdir"
    mn5_profile(workdir / "mn5")
    done = run_with_profile(workdir, "-n", "-p", "probe_network", "--configfile", "config/mn5.yaml", str(override))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    block = next(block for block in done.stdout.split("rule ")[1:] if block.startswith("probe_network:"))
    resources = resources_of(block)
    assert {key: resources[key] for key in ("nodes", "tasks", "gres", "cpus_per_task", "runtime", "mpi",
                                            "slurm_extra", "qos")} == {
        "nodes": "2", "tasks": "2", "gres": "gpu:4", "cpus_per_task": "80", "runtime": "10", "mpi": "srun",
        "slurm_extra": "--exclusive", "qos": "acc_debug"}
    shell = next(line for line in block.splitlines() if line.startswith("Shell command: "))
    cluster_branch = shell.split("; then ", 1)[1].split("; else ", 1)[0]
    srun, per_node = per_node_words(cluster_branch)
    assert cluster_branch.startswith("module load singularity && MASTER_ADDR=") and srun[:2] == ["srun", "--nodes=2"]
    image = per_node.index(TORCH_IMAGE)
    assert per_node[image - 7:image] == ["singularity", "exec", "--nv", "--bind", f"{REPO},{workdir}",
                                         "--pwd", str(workdir)]
    assert per_node[image + 3:image + 8] == ["python", "-m", "torch.distributed.run", "--nnodes=2",
                                             "--nproc-per-node=4"]
    # config/mn5.yaml's one PyTorch model, ViT-H/14 at 224 px, in DDP's default 25 MB buckets.
    assert per_node[-3:] == [f"{REPO}/scripts/probe_network.py", "--model=vit_h_14:224:25",
                             "--out=results/tables/network.csv"]
    assert "image_digest" in done.stdout  # the image's digest is recorded before the probe runs


def training_job(gpus, nodes, minutes=90):
    return {"framework": "pytorch", "gpus": gpus, "nodes": nodes, "gpus_per_node": gpus // nodes, "node_gpus": 4,
            "time_limit_min": minutes, "exclusive": "always", "whole_node": True}


def test_the_cluster_preview_lists_the_probe_and_counts_its_gpu_hours():
    from scalesweep.plan import preview

    probe = launch.network_probe_settings({"gpus_per_node": 4, "cpus_per_gpu": 20, "exclusive": "multinode"})
    jobs = {"a": training_job(4, 1), "b": training_job(8, 2)}
    summary = preview.plan_summary(["a", "b"], [], jobs, {"a"}, probe=probe).splitlines()
    # The 8-GPU run: 8 GPUs x 90 min = 12.0 GPU-hours; the probe: 8 GPUs x 10 min = 1.33; together
    # 13.3; with the measured 4-GPU run (6.0) the whole sweep is 19.3.
    assert summary[2] == "  network probe (probe_network): 2 nodes x 4 GPUs, 10 min: 1.3 GPU-hours"
    assert summary[3] == ("  GPUs of the jobs to run: 16; GPU-hours they book at their time limits (10-90 min): "
                          "13.3 (all 3 jobs: 19.3)")
    # Every run measured: the probe alone is left.
    alone = preview.plan_summary(["a", "b"], [], jobs, {"a", "b"}, probe=probe).splitlines()
    assert alone[1:] == ["  network probe (probe_network): 2 nodes x 4 GPUs, 10 min: 1.3 GPU-hours",
                         "  GPUs of the jobs to run: 8; GPU-hours they book at their time limits (10 min): 1.3 "
                         "(all 3 jobs: 19.3)"]
    without = preview.plan_summary(["a", "b"], [], jobs, {"a"}).splitlines()
    assert not any("probe" in line for line in without) and without[2].endswith("12.0 (all 2 jobs: 18.0)")


def test_the_local_preview_describes_the_probe_in_processes_and_minutes():
    from scalesweep.plan import preview

    probe = launch.network_probe_settings({"gpus_per_node": 4, "cpus_per_gpu": 20})
    jobs = {"a": {**training_job(2, 1, minutes=60), "gpus_per_node": 2}}
    lines = preview.plan_summary(["a"], [], jobs, set(), local=True, probe=probe).splitlines()
    assert lines[2] == "  network probe (probe_network): 2 processes (gloo) standing in for 2 nodes, at most 10 min"
    assert lines[3] == "  minutes at their time limits (10-60 min): at most 70 (all 2 jobs: 70)"
    assert not any("GPU-hours" in line or "node x" in line for line in lines)


def test_a_local_sweep_predicting_beyond_a_node_previews_and_plans_the_probe(tmp_path):
    from conftest import TINY, snakemake

    config = yaml.safe_load(TINY.read_text())
    config["analysis"] = {**(config.get("analysis") or {}), "predict_gpus": [8]}  # beyond a node of 4
    configfile = tmp_path / "sweep.yaml"
    configfile.write_text(yaml.safe_dump(config))
    done = snakemake(tmp_path, "-n", configfile=configfile)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "  network probe (probe_network): 2 processes (gloo) standing in for 2 nodes, at most 10 min" in done.stderr
    assert any(line.split()[:2] == ["probe_network", "1"] for line in done.stdout.splitlines()), done.stdout[-2000:]


def test_mn5_preview_books_the_probe_when_the_sweep_predicts_beyond_a_node(tmp_path):
    from mn5site import mn5_profile, run_with_profile
    from test_cluster_commands import mn5_config

    config = mn5_config(tmp_path)
    override = tmp_path / "more.yaml"
    override.write_text(yaml.safe_dump({"datasets": config["datasets"], "analysis": {"predict_gpus": [64]}}))
    workdir = tmp_path / "workdir"
    mn5_profile(workdir / "mn5")
    done = run_with_profile(workdir, "-n", "--configfile", "config/mn5.yaml", str(override))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout + done.stderr
    # Two exclusive nodes of 4 H100s for 10 minutes: 8 x 10 / 60 = 1.3 GPU-hours, in the total.
    assert "  network probe (probe_network): 2 nodes x 4 GPUs, 10 min: 1.3 GPU-hours" in said
    total = next(line for line in said.splitlines() if line.startswith("  GPUs of the jobs to run:"))
    # config/mn5.yaml's 18 training jobs book 234.0 GPU-hours; the probe's 1.3 joins them.
    assert total.endswith("time limits (10-90 min): 235.3 (all 19 jobs: 235.3)"), total
    assert any(line.split()[:2] == ["probe_network", "1"] for line in done.stdout.splitlines())


def test_the_predictor_reads_the_probes_row_back_as_the_all_reduce_it_timed(tmp_path):
    """network.csv as the probe writes it drives the communication rule with the runs' own bytes:
    at the probe's rank count, the rule's all-reduce of the probe's bytes takes the round the probe
    timed (bus bandwidth defined the same way on both sides)."""
    from scalesweep.analysis import predict

    # ViT-H/14's 2,528,183,200 gradient bytes over 2 nodes x 4 GPUs, a round of 97 buckets in 0.5 s:
    # algbw 5.056 GB/s, busbw x 2 x 7/8 = 8.849 GB/s; a one-element all-reduce of 140 us over
    # 2 x 7 = 14 hops: 10 us a hop.
    probed = {**PROBED, "bytes": 2_528_183_200}
    ranks = [(node, f"node{node + 1}") for node in (0, 1) for _ in range(4)]
    csv = tmp_path / "network.csv"
    probe_network.write_row(probe_network.probe_row([0.5] * 3, [140e-6] * 3, probed, ranks, "nccl", 3.0), str(csv))
    network = predict.read_network_csv(csv)
    assert network.busbw_gb_s == pytest.approx(2_528_183_200 / 0.5 / 1e9 * 2 * 7 / 8)
    assert network.latency_s == pytest.approx(10e-6)
    assert predict.ring_allreduce_s(8, 2_528_183_200, network.busbw_gb_s) == pytest.approx(0.5)

    # The book's ViT-H/14 step times at 1/2/4 GPUs (527.0/537.1/544.3 ms), its gradients
    # all-reduced at 100 GB/s in the node. At 8 GPUs the rule is tau(4) + the all-reduce across
    # nodes - the one inside tau(4): 0.5443 + (0.5 + 14 x 10 us) - 2 x 3/4 x 2.528e9 / 100e9
    # = 0.5443 + 0.50014 - 0.0379227 = 1.0065173 s.
    measured = predict.Measured(gpus=(1, 2, 4), step_time_s=(0.5270, 0.5371, 0.5443),
                                epoch_overhead_s=(0.706,) * 3, throughput_img_s=(243.0, 477.0, 941.0), noise=0.01,
                                train_images=12_500, per_gpu_batch=128, epochs=5,
                                allreduce_bytes=2_528_183_200, intra_busbw_gb_s=100.0)
    rules = predict.step_time_rules(8, measured, 4, network)
    assert rules["comm"] == pytest.approx(1.0065173, abs=1e-7)
    assert "8.85 GB/s across nodes" in rules["comm_basis"]
