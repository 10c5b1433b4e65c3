"""The inter-node network probe (`snakemake probe_network`; docs/prediction.md): one process per
GPU across the nodes of its job all-reduce the gradient bytes of the sweep's largest model, split
into its DDP buckets as DDP sends them, a few timed rounds after untimed ones, plus a one-element
all-reduce for the latency. Rank 0 writes one CSV row: the bus bandwidth and latency the scaling
prediction's communication rule uses beyond one node.

NCCL between GPUs, gloo between CPU processes (the laptop and the test SLURM cluster). Launched
like the trainer: torchrun (one per node under srun) sets RANK/WORLD_SIZE/MASTER_ADDR.
"""

from __future__ import annotations

import argparse
import csv
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

from scalesweep.train.common import stepparts
from scalesweep.train.torch_backend import distributed
from scalesweep.train.torch_backend.model import MODELS, build_model
from scalesweep.train.torch_backend.probes import timed_allreduces

COLUMNS = ("busbw_gb_s", "algbw_gb_s", "allreduce_s", "latency_s", "nodes", "ranks", "model", "gradient_bytes",
           "bytes", "bucket_bytes", "buckets", "backend", "node_names", "seconds", "note")
MIB = 1024 * 1024
# DDP's gradients are fp32 whatever the autocast precision: the parameters stay fp32.
GRADIENT_ELEMENT_BYTES = 4
# The classifier's classes when counting parameters. The dataset's own count is known only to the
# trainer that reads it; the head is hidden x classes, 0.2 % of ViT-H/14 at 1000 classes, and what
# the probe measures is the bandwidth at the buckets' size, which the head barely changes.
PROBE_CLASSES = 1000
# gloo on CPUs all-reduces ~1 GB/s on a laptop, and every rank holds a copy of the bytes: a 2.5 GB
# model would take seconds a round and 10 GB on a 4-rank test node. CPUs time at most this many
# bytes (whole buckets); the row says so in `note`. GPUs time the model's whole gradient.
CPU_BYTES_CAP = 4 * 25 * MIB


def model_spec(word: str) -> tuple:
    """`NAME:RESOLUTION:BUCKET_CAP_MB` (launch.network_probe_models) -> (name, resolution, MB)."""
    parts = word.split(":")
    if len(parts) != 3 or parts[0] not in MODELS:
        raise argparse.ArgumentTypeError(f"--model {word!r}: expected NAME:RESOLUTION:BUCKET_CAP_MB, "
                                         f"NAME one of {', '.join(MODELS)}")
    try:
        resolution, cap = int(parts[1]), float(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"--model {word!r}: RESOLUTION and BUCKET_CAP_MB must be numbers") from None
    if resolution < 1 or not cap > 0:
        raise argparse.ArgumentTypeError(f"--model {word!r}: RESOLUTION and BUCKET_CAP_MB must be > 0")
    return parts[0], resolution, cap


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=model_spec, action="append", required=True,
                        help="NAME:RESOLUTION:BUCKET_CAP_MB of a model the sweep trains (repeat it: the largest is probed)")
    parser.add_argument("--repeats", type=int, default=stepparts.ALLREDUCE_REPEATS, help="timed all-reduce rounds")
    parser.add_argument("--out", required=True, help="the CSV to write (rank 0), replaced whole")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    return args


def gradient_bytes(name: str, resolution: int) -> int:
    """The bytes of one step's gradients: trainable parameters x 4, counted on torch's meta device
    (shapes without memory: ViT-H/14's 632 M parameters in no time and no RAM)."""
    with torch.device("meta"):
        model = build_model(name, PROBE_CLASSES, resolution)
    return GRADIENT_ELEMENT_BYTES * sum(p.numel() for p in model.parameters() if p.requires_grad)


def largest(specs_and_bytes) -> tuple:
    """((name, resolution, bucket MB), bytes) of the most gradient bytes; between bucket caps of
    that model, the smallest (the most buckets: the most per-message latency)."""
    return max(specs_and_bytes, key=lambda item: (item[1], -item[0][2]))


def bucket_sizes(total_bytes: int, bucket_bytes: int) -> list:
    """The byte sizes of the buckets `total_bytes` of gradients fill, the last one partial."""
    full, rest = divmod(total_bytes, bucket_bytes)
    return [bucket_bytes] * full + ([rest] if rest else [])


def timed_bytes(total_bytes: int, bucket_bytes: int, on_gpu: bool) -> tuple:
    """(bytes to all-reduce per round, note): the whole gradient on GPUs; on CPUs at most
    CPU_BYTES_CAP, in whole buckets, the note saying what was left out."""
    if on_gpu or total_bytes <= CPU_BYTES_CAP:
        return total_bytes, ""
    capped = max(bucket_bytes, CPU_BYTES_CAP // bucket_bytes * bucket_bytes)
    capped = min(capped, total_bytes)
    return capped, (f"CPU (gloo): timed {len(bucket_sizes(capped, bucket_bytes))} of "
                    f"{len(bucket_sizes(total_bytes, bucket_bytes))} buckets ({capped} of {total_bytes} bytes); "
                    "the bandwidth is theirs")


def node_of_process() -> tuple:
    """(this process's node rank, its node's name): torchrun's GROUP_RANK counts the nodes even
    where they share a host name (the test cluster's do, and a job step may inherit the batch
    node's SLURMD_NODENAME); the name is SLURM's, else the host's."""
    return int(os.environ.get("GROUP_RANK", "0")), os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def probe_row(round_seconds, latency_seconds, probed: dict, nodes: list, backend: str, took: float) -> dict:
    """The CSV row from the timings (pure): nccl-tests' bandwidths of one round (all of `probed`'s
    `bytes`, bucket after bucket) and the latency per ring hop, 2(n-1) hops per all-reduce.
    `probed`: model, gradient_bytes, bytes, bucket_bytes, note; `nodes`: every rank's (node rank,
    node name)."""
    ranks = len(nodes)
    seconds = statistics.median(round_seconds)
    algbw = probed["bytes"] / seconds / 1e9
    hops = 2 * (ranks - 1)
    return {"busbw_gb_s": stepparts.bus_bandwidth(algbw, ranks), "algbw_gb_s": algbw, "allreduce_s": seconds,
            "latency_s": statistics.median(latency_seconds) / hops if hops else None,
            "nodes": len({rank for rank, _ in nodes}), "ranks": ranks, "model": probed["model"],
            "gradient_bytes": probed["gradient_bytes"], "bytes": probed["bytes"],
            "bucket_bytes": probed["bucket_bytes"], "buckets": len(bucket_sizes(probed["bytes"], probed["bucket_bytes"])),
            "backend": backend, "node_names": " ".join(sorted({name for _, name in nodes})), "seconds": took,
            "note": probed["note"]}


def what_to_probe(specs, on_gpu: bool) -> dict:
    """The model, its gradient and bucket bytes, and the bytes a round all-reduces."""
    (name, resolution, cap_mb), total = largest([(spec, gradient_bytes(*spec[:2])) for spec in specs])
    bucket = int(cap_mb * MIB)
    nbytes, note = timed_bytes(total, bucket, on_gpu)
    return {"model": f"{name}@{resolution}", "gradient_bytes": total, "bytes": nbytes, "bucket_bytes": bucket,
            "note": note}


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
    console = distributed.Console(distributed.rank_hint())
    world = distributed.world_info_from_env()
    gpus = world.world_size if torch.cuda.is_available() else 0
    world, device = distributed.start_process(gpus, console)
    if not world.distributed:
        raise SystemExit("probe_network needs at least two processes (torchrun, one per GPU, on two nodes)")
    try:
        probed = what_to_probe(args.model, device.type == "cuda")
        nodes = [None] * world.world_size
        dist.all_gather_object(nodes, node_of_process())
        gradients = torch.ones(probed["bytes"] // GRADIENT_ELEMENT_BYTES, dtype=torch.float32, device=device)
        buckets = list(gradients.split(probed["bucket_bytes"] // GRADIENT_ELEMENT_BYTES))
        rounds = timed_allreduces(buckets, device, stepparts.ALLREDUCE_WARMUP, args.repeats)
        latency = timed_allreduces(torch.ones(1, device=device), device, stepparts.ALLREDUCE_WARMUP, args.repeats)
        row = probe_row(rounds, latency, probed, nodes, dist.get_backend(), time.perf_counter() - began)
        if world.rank == 0:
            write_row(row, args.out)
            console.info(f"network probe: {row['nodes']} node(s), {row['ranks']} ranks, {row['backend']}: busbw "
                         f"{row['busbw_gb_s']:.3f} GB/s, latency {1e6 * row['latency_s']:.1f} us per hop; "
                         f"{row['model']}: {row['gradient_bytes'] / 1e6:.1f} MB of gradients, {row['buckets']} "
                         f"bucket(s) of {row['bucket_bytes'] / MIB:g} MiB timed" + (f" ({row['note']})" if row["note"] else ""))
    finally:
        distributed.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
