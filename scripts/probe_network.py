"""The inter-node network probe (`snakemake probe_network`; docs/prediction.md): one process per
GPU across the nodes of its job, the all-reduce of a model's gradient bytes in DDP-bucket-sized
pieces, as the step breakdown's probe does it inside a node (torch_probes.timed_allreduces), plus
a one-element all-reduce for the latency. Rank 0 writes one CSV row: the bus bandwidth and latency
the scaling prediction's communication rule uses beyond one node.

NCCL between GPUs, gloo between CPU processes (the laptop and the test SLURM cluster). Launched
like the trainer: torchrun (one per node under srun) sets RANK/WORLD_SIZE/MASTER_ADDR.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

import stepparts
import torch_distributed
from torch_probes import timed_allreduces

COLUMNS = ("busbw_gb_s", "algbw_gb_s", "allreduce_s", "latency_s", "nodes", "ranks", "bytes", "bucket_bytes",
           "backend", "node_names", "seconds")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=int, default=4 * stepparts.BUCKET_BYTES,
                        help="gradient bytes of one step (default: four DDP buckets)")
    parser.add_argument("--repeats", type=int, default=stepparts.ALLREDUCE_REPEATS, help="timed all-reduces")
    parser.add_argument("--out", required=True, help="the CSV to write (rank 0), replaced whole")
    args = parser.parse_args(argv)
    if args.bytes < 4 or args.repeats < 1:
        parser.error(f"--bytes must be >= 4 and --repeats >= 1, got {args.bytes} and {args.repeats}")
    return args


def node_of_process() -> tuple:
    """(this process's node rank, its node's name): torchrun's GROUP_RANK counts the nodes even
    where they share a host name (the test cluster's do, and a job step may inherit the batch
    node's SLURMD_NODENAME); the name is SLURM's, else the host's."""
    return int(os.environ.get("GROUP_RANK", "0")), os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def probe_row(seconds_per_bucket, latency_seconds, nbytes: int, nodes: list, backend: str, took: float) -> dict:
    """The CSV row from the timings (pure): nccl-tests' bandwidths over the step's buckets
    (stepparts.allreduce_keys) and the latency per ring hop, 2(n-1) hops per all-reduce.
    `nodes`: every rank's (node rank, node name)."""
    ranks = len(nodes)
    names = [name for _, name in nodes]
    keys = stepparts.allreduce_keys(nbytes, seconds_per_bucket, ranks, {})
    hops = 2 * (ranks - 1)
    return {"busbw_gb_s": keys["busbw_gb_s"], "algbw_gb_s": keys["algbw_gb_s"], "allreduce_s": keys["allreduce_s"],
            "latency_s": statistics.median(latency_seconds) / hops if hops else None,
            "nodes": len({rank for rank, _ in nodes}), "ranks": ranks, "bytes": nbytes,
            "bucket_bytes": min(nbytes, stepparts.BUCKET_BYTES), "backend": backend,
            "node_names": " ".join(sorted(set(names))), "seconds": took}


def write_row(row: dict, path: str) -> None:
    """The CSV, replaced whole (a crash leaves the old one or none, never half a row)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    partial = f"{path}.partial-{os.getpid()}"
    with open(partial, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerow(row)
    os.replace(partial, path)


def main(argv=None) -> int:
    args = parse(argv if argv is not None else sys.argv[1:])
    began = time.perf_counter()
    console = torch_distributed.Console(torch_distributed.rank_hint())
    world = torch_distributed.world_info_from_env()
    gpus = world.world_size if torch.cuda.is_available() else 0
    world, device = torch_distributed.start_process(gpus, console)
    if not world.distributed:
        raise SystemExit("probe_network needs at least two processes (torchrun, one per GPU, on two nodes)")
    try:
        nodes = [None] * world.world_size
        dist.all_gather_object(nodes, node_of_process())
        bucket = torch.ones(stepparts.bucket_elements(args.bytes, 4), dtype=torch.float32, device=device)
        per_bucket = timed_allreduces(bucket, device, stepparts.ALLREDUCE_WARMUP, args.repeats)
        latency = timed_allreduces(torch.ones(1, device=device), device, stepparts.ALLREDUCE_WARMUP, args.repeats)
        row = probe_row(per_bucket, latency, args.bytes, nodes, dist.get_backend(), time.perf_counter() - began)
        if world.rank == 0:
            write_row(row, args.out)
            console.info(f"network probe: {row['nodes']} node(s), {row['ranks']} ranks, {row['backend']}: busbw "
                         f"{row['busbw_gb_s']:.3f} GB/s, latency {1e6 * row['latency_s']:.1f} us per hop, "
                         f"{math.ceil(args.bytes / stepparts.BUCKET_BYTES)} bucket(s) of {row['bucket_bytes'] / 1e6:.1f} MB")
    finally:
        torch_distributed.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
