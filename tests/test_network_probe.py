"""The inter-node network probe (scripts/probe_network.py, docs/prediction.md): its row from
hand-computed timings, its job command quoted, and the real job across the test SLURM cluster's
two nodes with gloo."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.plan import launch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import probe_network  # noqa: E402
import stepparts  # noqa: E402


def test_probe_row_is_nccl_tests_bandwidth_over_the_buckets():
    # 100 MB in 4 buckets of 25 MiB, 10 ms each: 40 ms per step; algbw = 1e8 / 0.04 = 2.5 GB/s,
    # busbw over 4 ranks x 2 x 3/4 = 3.75 GB/s; latency 60 us over 2 x 3 = 6 hops = 10 us.
    row = probe_network.probe_row([0.010, 0.010, 0.011, 0.009], [60e-6] * 3, 100_000_000,
                                  [(0, "node1"), (0, "node1"), (1, "node2"), (1, "node2")], "gloo", 1.5)
    assert row["allreduce_s"] == pytest.approx(0.040)
    assert row["algbw_gb_s"] == pytest.approx(2.5) and row["busbw_gb_s"] == pytest.approx(3.75)
    assert row["latency_s"] == pytest.approx(10e-6)
    assert (row["nodes"], row["ranks"], row["node_names"]) == (2, 4, "node1 node2")
    assert row["bucket_bytes"] == stepparts.BUCKET_BYTES and list(row) == list(probe_network.COLUMNS)


def test_the_probe_command_quotes_every_path(tmp_path):
    hostile = tmp_path / "it's $(touch pwned) dir" / "network.csv"
    command = launch.network_probe_command({"gpus_per_node": 4, "cpus_per_gpu": 2}, "/usr/bin/python3",
                                           "/repo with space", hostile, 2_520_000_000)
    srun = shlex.split(command.split(" && ")[-1])
    assert srun[:3] == ["srun", "--nodes=2", "--ntasks=2"] and "--cpus-per-task=8" in srun
    per_node = shlex.split(srun[-1].replace("$SLURM_NODEID", "0").replace("$SLURM_JOB_ID", "1")
                           .replace("$MASTER_ADDR:$MASTER_PORT", "h:1"))
    assert f"--out={hostile}" in per_node and "/repo with space/scripts/probe_network.py" in per_node
    assert "--nnodes=2" in per_node and "--nproc-per-node=4" in per_node and "--bytes=2520000000" in per_node


@pytest.mark.slow
@pytest.mark.slurm
def test_the_probe_runs_across_the_test_clusters_two_nodes(tmp_path):
    if subprocess.run(["sinfo"], capture_output=True).returncode != 0:
        pytest.skip("the test SLURM cluster is down: sudo bash tests/cluster/slurm-up.sh")
    out = tmp_path / "net work" / "network.csv"
    command = launch.network_probe_command({"gpus_per_node": 2, "cpus_per_gpu": 1}, sys.executable, REPO, out,
                                           4 * stepparts.BUCKET_BYTES)
    job = tmp_path / "probe.sh"
    job.write_text("#!/bin/bash\nset -e\n" + command + "\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    done = subprocess.run(["sbatch", "--wait", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=2",
                           "--account=scalesweep", "--qos=acc_debug", "--time=5", f"--output={tmp_path / 'job.out'}",
                           str(job)], capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert done.returncode == 0, done.stderr + log[-3000:]
    row = pd.read_csv(out).iloc[0]
    assert (row["nodes"], row["ranks"], row["backend"], row["node_names"]) == (2, 4, "gloo", "node1 node2")
    assert row["busbw_gb_s"] > 0 and row["latency_s"] > 0 and row["bytes"] == 4 * stepparts.BUCKET_BYTES
    assert "network probe: 2 node(s), 4 ranks, gloo" in log


def test_the_sweep_probes_only_on_a_cluster_when_it_predicts_beyond_a_node():
    config = {"matrix": {"framework": ["pytorch"], "gpus": [1, 2, 4]}, "cluster": {"gpus_per_node": 4},
              "analysis": {"predict_gpus": [8, 16], "gpus_per_node": None}}
    assert launch.network_probe_wanted(config, on_cluster=True)  # 8 and 16 lie beyond a node of 4
    # The default counts (next two doublings) book no 2-node job the user did not ask for.
    assert not launch.network_probe_wanted({**config, "analysis": {"predict_gpus": None}}, on_cluster=True)
    assert not launch.network_probe_wanted(config, on_cluster=False)
    assert not launch.network_probe_wanted({**config, "analysis": {"predict_gpus": [4]}}, on_cluster=True)
    assert not launch.network_probe_wanted({**config, "cluster": {"gpus_per_node": 16}}, on_cluster=True)
    single_node = {**config, "matrix": {"framework": ["tensorflow"], "gpus": [1, 2, 4]}}
    assert not launch.network_probe_wanted(single_node, on_cluster=True)


def test_a_probed_network_drives_the_communication_rule(tmp_path):
    from scalesweep.analysis import predict

    csv = tmp_path / "network.csv"
    csv.write_text("busbw_gb_s,latency_s,nodes\n92.0,5e-06,2\n")
    network = predict.read_network_csv(csv)
    assert network == predict.Network(92.0, 5e-06)
    broken = tmp_path / "broken.csv"
    broken.write_text("busbw_gb_s,latency_s\n0,0\n")
    with pytest.raises(ValueError, match="broken.csv: busbw_gb_s must be > 0"):
        predict.read_network_csv(broken)


@pytest.mark.slow
@pytest.mark.workflow
def test_snakemake_probe_network_writes_network_csv_locally(tmp_path):
    from conftest import snakemake

    done = snakemake(tmp_path, "probe_network", "--cores", "2", configfile=REPO / "config" / "config.yaml")
    assert done.returncode == 0, done.stderr[-4000:]
    row = pd.read_csv(tmp_path / "results" / "tables" / "network.csv").iloc[0]
    assert (row["ranks"], row["backend"], row["bytes"]) == (2, "gloo", 4 * stepparts.BUCKET_BYTES)
    assert row["busbw_gb_s"] > 0
