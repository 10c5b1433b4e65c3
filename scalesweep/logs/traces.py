"""A profiler trace -> its short summary (summary.json and summary.md beside it): the top
operations, and the time in communication against computation, read from the trace itself.

PyTorch: Kineto's Chrome-trace JSON per rank (`rank<R>.pt.trace.json`,
scalesweep/train/torch_backend/trace.py). Durations are inclusive, so the summary's times are unions
of intervals: `comm_s` the time some collective was running (c10d, gloo, NCCL events and kernels),
`compute_s` the time some other operation was (GPU: kernels; CPU: operators), `overlap_s` both at
once. TensorFlow: the profile plugin's `plugins/profile/<run>/<host>.xplane.pb`
(scalesweep/train/tf_backend/trace.py), read with the XPlane protocol buffer TensorFlow ships; the
top operations by their events' time, the same split by name.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from scalesweep.contract import atomic

COMMUNICATION = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast|barrier|nccl|gloo|c10d::|"
                           r"collective|send|recv", re.IGNORECASE)
TOP = 10
TORCH_TRACE_GLOB = "rank*.pt.trace.json"
TF_TRACE_GLOB = "plugins/profile/*/*.xplane.pb"


def union_seconds(intervals) -> float:
    """Seconds covered by (start, end) intervals, each instant counted once."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def intersection_seconds(first, second) -> float:
    return union_seconds(first) + union_seconds(second) - union_seconds([*first, *second])


def split_summary(timed_ops) -> dict:
    """The summary of (name, start_s, duration_s) operations: top by total time, comm vs compute."""
    totals, comm, compute = Counter(), [], []
    for name, start, duration in timed_ops:
        totals[name] += duration
        (comm if COMMUNICATION.search(name) else compute).append((start, start + duration))
    comm_s, compute_s = union_seconds(comm), union_seconds(compute)
    busy = comm_s + compute_s - intersection_seconds(comm, compute)
    return {
        "top_operations": [{"name": name, "total_s": seconds} for name, seconds in totals.most_common(TOP)],
        "comm_s": comm_s, "compute_s": compute_s, "overlap_s": comm_s + compute_s - busy,
        "comm_pct": 100.0 * comm_s / busy if busy > 0 else None,
    }


def torch_trace_ops(path) -> list:
    """(name, start s, duration s) of a Chrome trace's operations: GPU kernels where the trace has
    them (the device's time), else CPU operators."""
    events = json.loads(Path(path).read_text())["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    kernels = [e for e in complete if e.get("cat") in ("kernel", "gpu_memcpy")]
    chosen = kernels or [e for e in complete if e.get("cat") in ("cpu_op", "user_annotation")]
    return [(e["name"], e["ts"] / 1e6, e["dur"] / 1e6) for e in chosen]


def xplane_ops(path) -> list:
    """(name, start s, duration s) of an XPlane's events, its device planes where it has any
    (the GPUs' kernels), else its host plane's TensorFlow ops."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # the pinned TensorFlow's

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    devices = [plane for plane in space.planes if plane.name.startswith("/device:GPU")]
    planes = devices or [plane for plane in space.planes if plane.name == "/host:CPU"]
    ops = []
    for plane in planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                start_ps = line.timestamp_ns * 1000 + event.offset_ps
                ops.append((name, start_ps / 1e12, event.duration_ps / 1e12))
    return ops


def summarize(trace_dir) -> dict:
    """Every trace file under `trace_dir`: {relative path: its summary}."""
    trace_dir = Path(trace_dir)
    found = {path: torch_trace_ops for path in sorted(trace_dir.glob(TORCH_TRACE_GLOB))}
    found.update({path: xplane_ops for path in sorted(trace_dir.glob(TF_TRACE_GLOB))})
    if not found:
        raise FileNotFoundError(f"{trace_dir}: no trace ({TORCH_TRACE_GLOB} or {TF_TRACE_GLOB})")
    return {str(path.relative_to(trace_dir)): split_summary(read(path)) for path, read in found.items()}


def summary_markdown(summaries: dict) -> str:
    lines = []
    for trace, summary in summaries.items():
        pct = summary["comm_pct"]
        lines += [f"## {trace}", "",
                  f"communication {summary['comm_s'] * 1000:.2f} ms, computation {summary['compute_s'] * 1000:.2f} ms, "
                  f"both at once {summary['overlap_s'] * 1000:.2f} ms"
                  + (f"; communication {pct:.1f} % of the busy time" if pct is not None else ""), "",
                  "| operation | total ms |", "| --- | --- |"]
        lines += [f"| `{op['name'][:80]}` | {op['total_s'] * 1000:.3f} |" for op in summary["top_operations"]]
        lines.append("")
    return "\n".join(lines)


def write_summary(trace_dir, json_path, markdown_path) -> str:
    """The trace rule's summary files; the log line."""
    summaries = summarize(trace_dir)
    atomic.write_text(json.dumps(summaries, indent=1) + "\n", json_path)
    atomic.write_text(summary_markdown(summaries), markdown_path)
    return f"{len(summaries)} trace(s) summarized in {markdown_path}"
