"""The peak each GPU part's MFU is measured against: matched on the driver's exact name (an H100
NVL or PCIe is no SXM), recorded in runs.csv beside mfu_pct with where it came from, none for an
unknown part (with a note), and the config's hardware.peak_tflops over the table."""

import copy

import pandas as pd
import pytest
import yaml

from conftest import TINY
from scalesweep.contract import hardware
from scalesweep.plan import checks
from scalesweep.plan.config import validate_config
from scalesweep.tidy import rows
from test_breakdown import breakdown_log

# One row per part of the table: a name the driver gives it, then its dense datasheet peaks.
PEAK_ROWS = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80 GB", {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}),
    ("NVIDIA H100", "H100 SXM5 64 GB", {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}),
    ("NVIDIA H100 PCIe", "H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("NVIDIA H100 NVL", "H100 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("NVIDIA H200", "H200 SXM", {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}),
    ("NVIDIA H200 NVL", "H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("NVIDIA GH200 480GB", "GH200", {"bf16": 990.0, "fp16": 990.0, "tf32": 494.0, "fp32": 67.0}),
    ("NVIDIA GH200 120GB", "GH200", {"bf16": 990.0, "fp16": 990.0, "tf32": 494.0, "fp32": 67.0}),
    ("NVIDIA GH200 144G HBM3e", "GH200", {"bf16": 990.0, "fp16": 990.0, "tf32": 494.0, "fp32": 67.0}),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40 GB", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80 GB", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40 GB", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80 GB", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("Tesla V100-SXM2-32GB", "V100 SXM2", {"bf16": None, "fp16": 125.0, "tf32": None, "fp32": 15.7}),
    ("Tesla V100-PCIE-16GB", "V100 PCIe", {"bf16": None, "fp16": 112.0, "tf32": None, "fp32": 14.0}),
    ("NVIDIA L40S", "L40S", {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6}),
]


@pytest.mark.parametrize("driver_name, label, peaks", PEAK_ROWS, ids=[row[1] for row in PEAK_ROWS])
def test_each_part_has_its_datasheet_peaks(driver_name, label, peaks):
    assert hardware.find_part(driver_name).label == label
    assert {dtype: hardware.peak_tflops(driver_name, dtype) for dtype in peaks} == peaks


def test_every_part_of_the_table_is_checked_above():
    assert {part.label for part in hardware.PARTS} == {label for _, label, _ in PEAK_ROWS}


@pytest.mark.parametrize("driver_name, label", [
    ("NVIDIA H100 NVL", "H100 NVL"),  # "h100" without "pcie" used to make this an SXM part
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("nvidia  h100   pcie", "H100 PCIe"),  # case and spacing are not the name
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),  # any "v100" used to be an SXM2
    ("A100-SXM-80GB", "A100 SXM4 80 GB"),  # the R450 drivers' name, no vendor prefix
    ("NVIDIA A100-SXM-80GB", "A100 SXM4 80 GB"),
])
def test_a_part_is_matched_by_its_whole_name(driver_name, label):
    assert hardware.find_part(driver_name).label == label


@pytest.mark.parametrize("driver_name", [
    "h100", "NVIDIA H100 SXM5 94GB", "NVIDIA H100 PCIe MIG 1g.10gb", "Tesla V100-SXM3-32GB",
    "NVIDIA GeForce RTX 4090", "NVIDIA H800", "Quadro V100 lookalike",
])
def test_a_name_that_only_contains_a_known_part_is_no_part(driver_name):
    if driver_name == "h100":  # the bare word is the 64 GB SXM's whole driver name, nothing looser
        assert hardware.find_part(driver_name).label == "H100 SXM5 64 GB"
        return
    assert hardware.find_part(driver_name) is None


def test_the_64_gb_part_says_whose_peaks_it_borrows():
    peak = hardware.run_peak("NVIDIA H100", "bf16")
    assert peak.tflops == 989.0 and "80 GB SXM5's datasheet peaks assumed" in peak.note


def test_an_unknown_part_or_a_cpu_gives_no_peak_and_says_why():
    unknown = hardware.run_peak("NVIDIA GeForce RTX 4090", "bf16")
    assert unknown.tflops is None
    assert "'NVIDIA GeForce RTX 4090' is not in the peak table" in unknown.note
    assert "hardware.peak_tflops" in unknown.note
    assert hardware.run_peak(None, "fp32") == hardware.Peak(None, "no MFU: not a GPU run")
    volta_bf16 = hardware.run_peak("Tesla V100-SXM2-32GB", "bf16")
    assert volta_bf16.tflops is None and "no dense bf16 peak" in volta_bf16.note


def test_the_override_wins_per_dtype_and_leaves_the_others_to_the_table():
    override = {"bf16": 400.0}
    assert hardware.run_peak("NVIDIA GeForce RTX 4090", "bf16", override).tflops == 400.0
    assert hardware.run_peak("NVIDIA H100", "bf16", override).note == "bf16 peak from the config's hardware.peak_tflops"
    assert hardware.run_peak("NVIDIA H100", "fp32", override).tflops == 67.0


def gpu_run(tmp_path, device, precision="bf16", name="g1.log"):
    """A one-GPU PyTorch run at 240 img/s of 1.004 TFLOP per image: 240.96 TFLOP/s achieved."""
    header = {"device_kind": "gpu", "gpu_models": [device], "flops_per_image": 1.004e12, "precision": precision}
    return breakdown_log(tmp_path, 1, 64, (0.0, 64 / 240, 0.0, 0.0), name=name, header_extra=header)


def written_runs(tmp_path, items, peak_override=None):
    rows.write_tidy_tables(items, tmp_path / "epochs.csv", tmp_path / "runs.csv", peak_override=peak_override)
    return pd.read_csv(tmp_path / "runs.csv").set_index("log")


def test_runs_csv_records_the_peak_beside_the_mfu(tmp_path):
    known, nvl, unknown = (gpu_run(tmp_path, device, name=f"{i}.log") for i, device in
                           enumerate(("NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA GeForce RTX 4090")))
    runs = written_runs(tmp_path, [(known, {}), (nvl, {}), (unknown, {})])
    columns = list(runs.columns)
    assert columns.index("peak_tflops") == columns.index("mfu_pct") + 1
    assert runs.loc[str(known), "peak_tflops"] == 989.0
    assert runs.loc[str(known), "mfu_pct"] == pytest.approx(100 * 240.96 / 989.0)
    assert runs.loc[str(known), "peak_note"] == "H100 SXM5 80 GB datasheet, dense bf16"
    assert runs.loc[str(nvl), "mfu_pct"] == pytest.approx(100 * 240.96 / 835.5)
    assert pd.isna(runs.loc[str(unknown), "peak_tflops"]) and pd.isna(runs.loc[str(unknown), "mfu_pct"])
    assert runs.loc[str(unknown), "tflops_per_gpu"] == pytest.approx(240.96)  # measured all the same
    assert "not in the peak table" in runs.loc[str(unknown), "peak_note"]


@pytest.fixture
def config():
    config = yaml.safe_load(TINY.read_text())
    return config


def test_the_configs_peak_reaches_runs_csv_through_the_schema(tmp_path, config):
    config["hardware"] = {"peak_tflops": {"bf16": 482.0}}
    validate_config(config)
    run = gpu_run(tmp_path, "NVIDIA GeForce RTX 4090")
    runs = written_runs(tmp_path, [(run, {})], config["hardware"]["peak_tflops"])
    assert runs.loc[str(run), "peak_tflops"] == 482.0
    assert runs.loc[str(run), "mfu_pct"] == pytest.approx(100 * 240.96 / 482.0)
    assert runs.loc[str(run), "peak_note"] == "bf16 peak from the config's hardware.peak_tflops"


def test_without_the_key_the_schema_gives_an_empty_override(config):
    validate_config(config)
    assert config["hardware"] == {"peak_tflops": {}}


@pytest.mark.parametrize("peaks, message", [
    ({"bf16": 0}, "config key 'hardware.peak_tflops.bf16': 0 is less than or equal to the minimum of 0"),
    ({"int8": 1000}, "hardware.peak_tflops"),
    ({"bf16": "989"}, "config key 'hardware.peak_tflops.bf16'"),
])
def test_a_bad_peak_is_refused_naming_its_key(config, peaks, message):
    bad = copy.deepcopy(config)
    bad["hardware"] = {"peak_tflops": peaks}
    with pytest.raises(checks.ConfigError, match=message.replace(".", r"\.")):
        validate_config(bad)
