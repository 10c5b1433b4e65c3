"""DistributedDataParallel's knobs as trainer options (`bucket_cap_mb`, `gradient_as_bucket_view`,
`static_graph`: the registry's PyTorch trainer options) and as the header reports them: read back
from the wrapped model, so the header says what DDP was built with, not only what was asked.

Python 3.8, no torch import: it only passes values to DistributedDataParallel and reads its
attributes (the same names in torch 2.4 and the pinned torch).
"""

from __future__ import annotations

import argparse

from scalesweep.contract.frameworks import DDP_BUCKET_CAP_MB

MIB = 1024 * 1024


def add_ddp_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--bucket-cap-mb", type=float, default=DDP_BUCKET_CAP_MB,
        help="DDP gradient bucket size in MiB (default %(default)s, DDP's own)")
    add("--gradient-as-bucket-view", action="store_true",
        help="DDP: gradients as views into the all-reduce buckets (no copy, less memory)")
    add("--static-graph", action="store_true",
        help="DDP: the used parameters do not change between steps")


def check_ddp_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.bucket_cap_mb > 0:
        parser.error(f"--bucket-cap-mb must be > 0, got {args.bucket_cap_mb}")


def asked(args: argparse.Namespace) -> dict:
    """DistributedDataParallel's keyword arguments for the options, and the header's DDP keys
    as the command line asked them (a single process has no DDP to read them back from)."""
    return {"bucket_cap_mb": args.bucket_cap_mb, "gradient_as_bucket_view": args.gradient_as_bucket_view,
            "static_graph": args.static_graph}


def built_with(ddp) -> dict:
    """The header's DDP keys as the wrapped model holds them."""
    return {"bucket_cap_mb": ddp.bucket_bytes_cap / MIB, "gradient_as_bucket_view": bool(ddp.gradient_as_bucket_view),
            "static_graph": bool(ddp.static_graph)}
