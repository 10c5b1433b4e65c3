"""Peak dense throughput of the GPUs the MFU is computed against, by exact part (NVIDIA
datasheets, TFLOP/s without sparsity; docs/metrics.md, "Peaks by exact part", cites each).

MFU (model FLOPs utilisation) = achieved model TFLOP/s per GPU / the device's peak for the run's
precision. Which peak a precision uses: bf16 and fp16 the tensor-core figures; fp32 under
TensorFlow the TF32 tensor-core figure (TensorFlow enables TF32 by default on Ampere and later),
fp32 under PyTorch the plain FP32 figure (PyTorch leaves TF32 matmuls off by default): each
framework's `fp32_dtype` (contract/frameworks.py), and the plain FP32 figure for a framework not there.

A part is recognised by the exact name the CUDA driver gives it (what nvidia-smi, PyTorch's
get_device_name and TensorFlow's device details print), case and spacing aside: a loose
substring would take an H100 NVL or PCIe for an SXM part. A device not in the table (any CPU, an
unknown GPU) or a precision a part has no figure for gives no MFU and a note saying why; the
config's `hardware.peak_tflops` supplies the peaks where the table cannot.
"""

from __future__ import annotations

import os
import sys

from dataclasses import dataclass, field

from scalesweep.contract import frameworks

# Prefixes the driver puts before some parts' names and not before others ("Tesla V100-…",
# "NVIDIA A100-…"), dropped before the exact comparison.
_VENDOR_PREFIXES = ("nvidia ", "tesla ")


@dataclass(frozen=True)
class Part:
    """One GPU part: its name for readers, the driver's names for it, its dense peaks by dtype,
    and what a reader must know about them (an assumption), if anything."""

    label: str
    driver_names: tuple
    peaks: dict = field(hash=False)
    assumption: str = ""


_HOPPER_SXM = {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}
_HOPPER_NVL = {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}
_AMPERE_A100 = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}

PARTS = (
    Part("H100 SXM5 80 GB", ("NVIDIA H100 80GB HBM3",), _HOPPER_SXM),
    Part("H100 SXM5 64 GB", ("NVIDIA H100",), _HOPPER_SXM,
         "MareNostrum 5's 64 GB part: the 80 GB SXM5's datasheet peaks assumed (no datasheet of its own)"),
    Part("H100 PCIe", ("NVIDIA H100 PCIe",), {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    Part("H100 NVL", ("NVIDIA H100 NVL",), _HOPPER_NVL),
    Part("H200 SXM", ("NVIDIA H200",), _HOPPER_SXM),
    Part("H200 NVL", ("NVIDIA H200 NVL",), _HOPPER_NVL),
    Part("GH200", ("NVIDIA GH200 480GB", "NVIDIA GH200 120GB", "NVIDIA GH200 144G HBM3e"),
         {"bf16": 990.0, "fp16": 990.0, "tf32": 494.0, "fp32": 67.0}),
    Part("A100 SXM4 40 GB", ("NVIDIA A100-SXM4-40GB",), _AMPERE_A100),
    # "A100-SXM-80GB": the same part under the R450 drivers, which put no "NVIDIA " before it.
    Part("A100 SXM4 80 GB", ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"), _AMPERE_A100),
    Part("A100 PCIe 40 GB", ("NVIDIA A100-PCIE-40GB",), _AMPERE_A100),
    Part("A100 PCIe 80 GB", ("NVIDIA A100 80GB PCIe",), _AMPERE_A100),
    Part("V100 SXM2", ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"), {"fp16": 125.0, "fp32": 15.7}),
    Part("V100 PCIe", ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"), {"fp16": 112.0, "fp32": 14.0}),
    Part("L40S", ("NVIDIA L40S",), {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6}),
)


@dataclass(frozen=True)
class Peak:
    """The peak a run's MFU is measured against (None: no MFU) and where it came from or why
    there is none (runs.csv's peak_tflops and peak_note)."""

    tflops: float | None
    note: str


def normalised_name(device_name: str) -> str:
    name = " ".join(device_name.lower().split())
    for prefix in _VENDOR_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


_BY_NAME = {normalised_name(name): part for part in PARTS for name in part.driver_names}


def find_part(device_name: str | None) -> Part | None:
    """The part a driver's device name names exactly (case and spacing aside), or None."""
    return _BY_NAME.get(normalised_name(device_name)) if device_name else None


def compute_dtype(framework: str | None, precision: str | None) -> str | None:
    """The dtype whose peak a run at `precision` is measured against (see the module docstring)."""
    if precision in ("bf16", "fp16"):
        return precision
    if precision == "fp32":
        known = frameworks.find(framework)
        return known.fp32_dtype if known else "fp32"
    return None


def peak_tflops(device_name: str | None, dtype: str | None) -> float | None:
    """The table's peak for a device (the driver's name) and dtype, or None."""
    part = find_part(device_name)
    return part.peaks.get(dtype) if part and dtype else None


def run_peak(device_name: str | None, dtype: str | None, override: dict | None = None) -> Peak:
    """The peak of a GPU run (device_name None: a CPU run) at `dtype`: the config's
    `hardware.peak_tflops` ({dtype: TFLOP/s}) first, then the part table."""
    if device_name is None:
        return Peak(None, "no MFU: not a GPU run")
    if dtype is None:
        return Peak(None, "no MFU: the run's precision is unknown")
    if override and override.get(dtype) is not None:
        return Peak(float(override[dtype]), f"{dtype} peak from the config's hardware.peak_tflops")
    part = find_part(device_name)
    if part is None:
        return Peak(None, f"no MFU: GPU {device_name!r} is not in the peak table; "
                          "give its peaks as hardware.peak_tflops in the config")
    if part.peaks.get(dtype) is None:
        return Peak(None, f"no MFU: the {part.label} datasheet gives no dense {dtype} peak")
    note = f"{part.label} datasheet, dense {dtype}"
    return Peak(part.peaks[dtype], f"{note}; {part.assumption}" if part.assumption else note)


def tflops_per_gpu(flops_per_image, throughput_img_s, gpus) -> float:
    """Achieved model TFLOP/s per GPU (the CPU baseline counts as one device)."""
    return float(flops_per_image) * float(throughput_img_s) / max(float(gpus), 1.0) / 1e12


def mfu_pct(tflops_per_gpu, peak: float | None) -> float | None:
    """Achieved TFLOP/s per GPU in % of the peak; None where the peak is unknown."""
    if peak is None or tflops_per_gpu is None:
        return None
    return 100.0 * float(tflops_per_gpu) / peak


# Where a plain process (not Snakemake's, which has threads of its own) may fork helpers that
# inherit its imports instead of importing them again. macOS offers fork, but a forked child of a
# process that loaded its system frameworks (numpy's Accelerate) may crash: Python's own default
# there is spawn, whose start-up would cost more than the helpers save.
FORKS_SAFELY = sys.platform.startswith("linux")


def may_fork_helpers() -> bool:
    """Whether this process may fork helpers now: FORKS_SAFELY, and no thread but this one (a
    fork copies whatever lock another thread holds: a test runner's, a library's)."""
    import threading

    return FORKS_SAFELY and threading.active_count() == 1


def usable_cpu_count() -> int:
    """CPUs this process may run on (the affinity mask a scheduler set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity masks
        return os.cpu_count() or 1
