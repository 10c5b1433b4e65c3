"""GPU energy from NVML's total-energy counter, read through ctypes (docs/records.md, "Energy").

NVIDIA GPUs since Volta count the energy they used since the driver was loaded, in millijoules:
`nvmlDeviceGetTotalEnergyConsumption(device, unsigned long long *energy)` (NVML API reference,
"Device Queries"). A read is a driver call: no device synchronisation, no kernel, but not free
(3.5 ms per read on an H100 with driver 580), so the harness reads at the edges of a timed window,
outside its seconds (harness.py, WindowMeter). `apptainer exec
--nv` binds `libnvidia-ml.so.1` into the container, so the standard library is enough: nothing to
install in the training images.

Where there is no NVML (CPU runs, old drivers, a GPU without the counter) every reading is None with
the reason, and the records say it. The library is `libnvidia-ml.so.1` unless SCALESWEEP_NVML_LIBRARY
names another file (the tests' fake NVML, tests/fake_nvml.c, whose counters advance at known powers);
a CPU run reads counters only when that variable names a library (a CPU stand-in reading the node's
real GPUs would report energy it did not use).

Standard library only, Python 3.8: it runs inside the TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from typing import NamedTuple, Optional, Sequence

NVML_LIBRARY_ENV = "SCALESWEEP_NVML_LIBRARY"
DEFAULT_NVML_LIBRARY = "libnvidia-ml.so.1"
SOURCE = "nvml"  # the records' energy_source of a counter reading
NVML_SUCCESS = 0
MJ_PER_J = 1000.0


class Reading(NamedTuple):
    """One read of every counter a process owns: millijoules per device (None when the read
    failed, with `reason`), and the seconds the reads took (what they cost the window)."""

    millijoules: Optional[tuple]
    reason: Optional[str]
    cost_s: float = 0.0


def nvml_indices(local_indices: Sequence[int], cuda_visible_devices: Optional[str]) -> list:
    """The NVML device index of each local device a process drives. CUDA numbers the devices it
    sees 0.. in the order CUDA_VISIBLE_DEVICES lists them; NVML ignores that variable and numbers
    every GPU of the node, so local device i is CUDA_VISIBLE_DEVICES' i-th entry when the list
    holds integer indices. UUIDs or MIG names (or no list) leave the local index as it is."""
    entries = [entry.strip() for entry in (cuda_visible_devices or "").split(",") if entry.strip()]
    if not entries or not all(entry.isdigit() for entry in entries):
        return list(local_indices)
    return [int(entries[index]) if index < len(entries) else index for index in local_indices]


def library_setting(on_gpu: bool, environ=None) -> tuple:
    """(library to load, None) or (None, why no counter is read)."""
    env = os.environ if environ is None else environ
    named = env.get(NVML_LIBRARY_ENV, "").strip()
    if named:
        return named, None
    if not on_gpu:
        return None, f"CPU run: no GPU energy counter (set {NVML_LIBRARY_ENV} to read one anyway)"
    return DEFAULT_NVML_LIBRARY, None


class Counters:
    """The NVML energy counters of the devices one process drives."""

    source = SOURCE

    def __init__(self, library: str, indices: Sequence[int]):
        self.indices = list(indices)
        self.nvml = ctypes.CDLL(library)
        self._declare()
        self._check(self.nvml.nvmlInit_v2(), "nvmlInit_v2")
        self.handles = []
        for index in self.indices:
            handle = ctypes.c_void_p()
            self._check(self.nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)),
                        f"nvmlDeviceGetHandleByIndex_v2({index})")
            self.handles.append(handle)
        # A GPU without the counter (pre-Volta) says so at the first read: better now than per window.
        first = self.read()
        if first.millijoules is None:
            self.close()
            raise OSError(first.reason)

    def _declare(self) -> None:
        nvml = self.nvml
        nvml.nvmlErrorString.restype = ctypes.c_char_p
        nvml.nvmlErrorString.argtypes = [ctypes.c_int]
        nvml.nvmlDeviceGetHandleByIndex_v2.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        nvml.nvmlDeviceGetTotalEnergyConsumption.argtypes = [ctypes.c_void_p,
                                                             ctypes.POINTER(ctypes.c_ulonglong)]

    def _error(self, status: int, call: str) -> str:
        text = self.nvml.nvmlErrorString(status)
        return f"NVML {call} failed: {text.decode(errors='replace') if text else status} (error {status})"

    def _check(self, status: int, call: str) -> None:
        if status != NVML_SUCCESS:
            raise OSError(self._error(status, call))

    def read(self) -> Reading:
        began = time.perf_counter()
        values = []
        value = ctypes.c_ulonglong()
        for index, handle in zip(self.indices, self.handles):
            status = self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(value))
            if status != NVML_SUCCESS:
                reason = self._error(status, f"nvmlDeviceGetTotalEnergyConsumption(device {index})")
                return Reading(None, reason, time.perf_counter() - began)
            values.append(value.value)
        return Reading(tuple(values), None, time.perf_counter() - began)

    def close(self) -> None:
        self.nvml.nvmlShutdown()


class NoCounters:
    """Stands in where no counter can be read: every reading is None with the reason."""

    source = None

    def __init__(self, reason: str, devices: int = 1):
        self.reason, self.devices = reason, devices

    def read(self) -> Reading:
        return Reading(None, self.reason)

    def close(self) -> None:
        pass


def open_counters(on_gpu: bool, local_indices: Sequence[int], environ=None):
    """Counters of the local devices a process drives (NVML indices through CUDA_VISIBLE_DEVICES),
    or NoCounters saying why none can be read. Never raises: energy is a side measurement."""
    env = os.environ if environ is None else environ
    library, reason = library_setting(on_gpu, env)
    if library is None:
        return NoCounters(reason, len(local_indices))
    indices = nvml_indices(local_indices, env.get("CUDA_VISIBLE_DEVICES"))
    try:
        return Counters(library, indices)
    except (OSError, AttributeError) as error:  # no library, a missing symbol, an NVML error
        return NoCounters(f"no NVML energy counter ({library}): {error}", len(local_indices))


def joules_between(start: Reading, end: Reading, devices: int) -> tuple:
    """(joules per device, reason): the counters' advance from `start` to `end` in J (NVML counts
    mJ), None where unknown. A counter that went backwards (it wrapped, or the driver reloaded)
    gives None, never a negative energy."""
    for reading in (start, end):
        if reading.millijoules is None:
            return [None] * devices, reading.reason
    deltas = [after - before for before, after in zip(start.millijoules, end.millijoules)]
    if any(delta < 0 for delta in deltas):
        return [None] * devices, "energy counter went backwards (wrapped or reset) during the window"
    return [delta / MJ_PER_J for delta in deltas], None


def per_rank_values(values: Sequence) -> list:
    """Joules per rank as the records hold them: NaN (a rank without a reading, after a reduce)
    becomes None."""
    return [None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
            for value in values]


def energy_keys(per_rank: Sequence, own_reason: Optional[str], source: Optional[str], prefix: str = "") -> dict:
    """The records' energy keys from the joules of every rank: their sum (None unless every rank
    has one), the list, where they come from, and why they are missing."""
    per_rank = per_rank_values(per_rank)
    missing = [rank for rank, value in enumerate(per_rank) if value is None]
    note = None
    if missing:
        note = own_reason if own_reason and 0 in missing else f"no energy reading from rank(s) {missing}"
    return {f"{prefix}energy_j": None if missing else sum(per_rank), f"{prefix}energy_j_per_rank": per_rank,
            "energy_source": None if missing else source, "energy_note": note}
