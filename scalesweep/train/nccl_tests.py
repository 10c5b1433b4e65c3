"""nccl-tests' `all_reduce_perf` beside torch's all-reduce in the network probe (docs/prediction.md).

Where the PyTorch image holds NVIDIA's `all_reduce_perf` (the probe job asks with `args`, inside
the image: it prints the command or exits 3 without one), the probe job runs it across the same
two nodes, one process per node driving its GPUs (`-g`), from one DDP bucket to the whole
gradient (`-b`, `-e`, `-f 2`), and `merge` adds its bus bandwidths to network.csv beside torch's:
`nccl_busbw_gb_s` at the bucket size (what a round of buckets, torch's measurement, is made of),
`nccl_gradient_busbw_gb_s` at the largest size, `nccl_avg_busbw_gb_s` its "Avg bus bandwidth",
and `source`. The prediction keeps torch's and says when the two differ by more than 10 %.

The table is nccl-tests' own (src/common.cu and each collective's print_header and
print_line_header): `#` lines around rows of size, count, type, redop and root, then time, algbw,
busbw and #wrong out of place, the same in place; `# Avg bus bandwidth    : %g` at the end.
Older versions print no root column and `error` for `#wrong`: the sides are read from the row's
end, which both layouts share.

Standard library only (it runs in the image's Python and on the head alike).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import sys

PROGRAM = "all_reduce_perf"
ABSENT_EXIT = 3
AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
COLUMNS = ("nccl_busbw_gb_s", "nccl_gradient_busbw_gb_s", "nccl_avg_busbw_gb_s", "source")
SOURCE = "busbw_gb_s: torch.distributed; nccl_*: nccl-tests all_reduce_perf"


def parse_table(text: str) -> dict:
    """{"rows": [(size bytes, out-of-place busbw, in-place busbw)], "avg_busbw_gb_s"} of an
    all_reduce_perf output; ValueError when it holds no row or no average (a run that failed)."""
    rows, average = [], None
    for line in text.splitlines():
        match = AVERAGE.match(line)
        if match:
            average = float(match.group(1))
            continue
        words = line.split()
        if line.startswith("#") or len(words) < 9 or not words[0].isdigit():
            continue  # headers, the devices, NCCL's INFO lines
        try:
            rows.append((int(words[0]), float(words[-6]), float(words[-2])))
        except ValueError:
            continue
    if not rows or average is None:
        raise ValueError(f"no {PROGRAM} table (rows and '# Avg bus bandwidth') in its output")
    return {"rows": rows, "avg_busbw_gb_s": average}


def command(row: dict, gpus_per_node: int) -> list:
    """all_reduce_perf's words for the probe's row: one bucket to the whole gradient, doubling."""
    return [PROGRAM, "-b", str(int(row["bucket_bytes"])), "-e", str(int(row["gradient_bytes"])), "-f", "2",
            "-g", str(gpus_per_node)]


def merged(row: dict, parsed: dict) -> dict:
    """The probe's row with nccl-tests' bus bandwidths beside torch's."""
    rows = sorted(parsed["rows"])
    return {**row, "nccl_busbw_gb_s": rows[0][1], "nccl_gradient_busbw_gb_s": rows[-1][1],
            "nccl_avg_busbw_gb_s": parsed["avg_busbw_gb_s"], "source": SOURCE}


def read_row(path: str) -> dict:
    with open(path, newline="") as stream:
        return next(csv.DictReader(stream))


def write_row(row: dict, path: str) -> None:
    """The CSV replaced whole: a crash leaves torch's row, never half of one."""
    partial = f"{path}.partial-{os.getpid()}"
    with open(partial, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    os.replace(partial, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    ask = steps.add_parser("args", help=f"print the {PROGRAM} command for network.csv's row (exit {ABSENT_EXIT}: "
                                        "the image has no such program)")
    ask.add_argument("--out", required=True)
    ask.add_argument("--gpus-per-node", type=int, required=True)
    merge = steps.add_parser("merge", help=f"add {PROGRAM}'s bus bandwidths to network.csv")
    merge.add_argument("--out", required=True)
    merge.add_argument("--table", required=True, help=f"{PROGRAM}'s output")
    args = parser.parse_args(argv)
    if args.step == "args":
        if shutil.which(PROGRAM) is None:
            return ABSENT_EXIT
        print(" ".join(command(read_row(args.out), args.gpus_per_node)))
        return 0
    with open(args.table) as stream:
        row = merged(read_row(args.out), parse_table(stream.read()))
    write_row(row, args.out)
    print(f"network probe: nccl-tests {PROGRAM} busbw {row['nccl_busbw_gb_s']} GB/s at {row['bucket_bytes']} bytes, "
          f"{row['nccl_gradient_busbw_gb_s']} GB/s at the largest size (torch: {float(row['busbw_gb_s']):.3f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
