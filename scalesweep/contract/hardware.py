"""Peak dense tensor throughput of the GPUs the MFU is computed against (NVIDIA datasheets,
TFLOP/s without sparsity; docs/reference.md §6).

MFU (model FLOPs utilisation) = achieved model TFLOP/s per GPU / the device's peak for the run's
precision. Which peak a precision uses: bf16 and fp16 the tensor-core figures; fp32 under
TensorFlow the TF32 tensor-core figure (TensorFlow enables TF32 by default on Ampere and later),
fp32 under PyTorch the plain FP32 figure (PyTorch leaves TF32 matmuls off by default): each
framework's `fp32_dtype` (contract/frameworks.py), and the plain FP32 figure for a framework not there. A device
not in the table (any CPU, an unknown GPU) or a precision a device has no figure for gives no MFU.
"""

from __future__ import annotations

from scalesweep.contract import frameworks

# name pattern (lower case, all words must appear; first match wins) -> peak TFLOP/s by dtype
PEAK_TFLOPS = (
    (("h100", "pcie"), {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    (("h100",), {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}),  # SXM5 (MN5: 64 GB)
    (("h200",), {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}),
    (("a100",), {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (("v100",), {"fp16": 125.0, "fp32": 15.7}),
)


def compute_dtype(framework: str | None, precision: str | None) -> str | None:
    """The dtype whose peak a run at `precision` is measured against (see the module docstring)."""
    if precision in ("bf16", "fp16"):
        return precision
    if precision == "fp32":
        known = frameworks.find(framework)
        return known.fp32_dtype if known else "fp32"
    return None


def peak_tflops(device_name: str | None, dtype: str | None) -> float | None:
    """The table's peak for a device (nvidia-smi or framework name) and dtype, or None."""
    if not device_name or not dtype:
        return None
    name = device_name.lower()
    for words, peaks in PEAK_TFLOPS:
        if all(word in name for word in words):
            return peaks.get(dtype)
    return None


def tflops_per_gpu(flops_per_image, throughput_img_s, gpus) -> float:
    """Achieved model TFLOP/s per GPU (the CPU baseline counts as one device)."""
    return float(flops_per_image) * float(throughput_img_s) / max(float(gpus), 1.0) / 1e12


def mfu_pct(tflops_per_gpu, device_name, framework, precision) -> float | None:
    """Achieved TFLOP/s per GPU in % of the device's peak; None where the peak is unknown."""
    peak = peak_tflops(device_name, compute_dtype(framework, precision))
    if peak is None or tflops_per_gpu is None:
        return None
    return 100.0 * float(tflops_per_gpu) / peak
