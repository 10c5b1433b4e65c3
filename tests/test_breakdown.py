"""Where a step's time goes: crafted record logs with known parts give the hand-computed loss
attribution in scaling.csv (scalesweep/analysis/breakdown.py), the achieved TFLOP/s and the MFU."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from scalesweep.analysis import breakdown, scaling
from scalesweep.contract import hardware
from scalesweep.tidy import rows
from scalesweep.tidy.table import BREAKDOWN_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
from scalesweep.train.common import runlog  # noqa: E402


def breakdown_log(tmp_path, gpus, per_gpu_batch, parts, name=None, header_extra=None):
    """A steps-protocol run whose median step splits into `parts` = (data, compute, sync, other)."""
    step = sum(parts)
    global_batch = per_gpu_batch * gpus
    header = {"framework": "pytorch", "model": "vit_tiny", "dataset": "synth", "gpus": gpus,
              "world_size": gpus, "nodes": 1, "per_gpu_batch": per_gpu_batch,
              "global_batch": global_batch, "protocol": "steps", "epochs": 2, "train_images": 4096,
              "precision": "bf16", **(header_extra or {})}
    window = runlog.epoch_record(2, 50 * global_batch, 50 * step, phase="timed")
    data, compute, wait, comm, other = parts if len(parts) == 5 else (*parts[:2], 0.0, *parts[2:])
    summary = {"status": "ok", "reason": None, "epochs": 2, "total_time_s": None,
               "breakdown_step_s": step, "data_wait_s": data, "compute_s": compute,
               "sync_wait_s": wait, "sync_comm_s": comm, "sync_exposed_s": wait + comm, "other_s": other, "breakdown_steps": 50,
               # one process has nothing to all-reduce: no probe, null keys
               "allreduce_s": 0.02 if gpus > 1 else None,
               "comm_compute_ratio": 0.02 / compute if gpus > 1 else None}
    lines = [runlog.format_record({"record": "header", **header}),
             runlog.format_record(runlog.epoch_record(1, 5 * global_batch, 1.0, phase="warmup")),
             runlog.format_record(window), runlog.format_record({"record": "summary", **summary})]
    path = tmp_path / (name or f"g{gpus}.log")
    path.write_text("\n".join(lines) + "\n")
    return path


def scaling_of(tmp_path, specs):
    items = [(breakdown_log(tmp_path, gpus, batch, parts, name=f"g{gpus}.log"), {})
             for gpus, batch, parts in specs]
    return scaling.scaling_table(rows.runs_table(items)[1]).set_index("gpus")


def test_fixed_per_gpu_batch_attribution_by_hand(tmp_path):
    """32 images per GPU; per-image GPU time c = N x step / (32 N) = step / 32, so
    E(2) = 0.100 / 0.120 = 83.33 %: data (0.012 - 0.010)/0.120 = 1.667 %, compute 0.002/0.120 =
    1.667 %, sync wait 0.006/0.120 = 5 %, sync comm 0.010/0.120 = 8.333 %, other 0;
    E(4) = 0.100 / 0.160 = 62.5 %: data 0.010/0.160 = 6.25 %, compute 0.005/0.160 = 3.125 %,
    sync wait 0.015/0.160 = 9.375 %, sync comm 0.030/0.160 = 18.75 %, other 0. Each row's parts
    add up to 100 - E."""
    table = scaling_of(tmp_path, [(1, 32, (0.010, 0.080, 0.000, 0.000, 0.010)),
                                  (2, 32, (0.012, 0.082, 0.006, 0.010, 0.010)),
                                  (4, 32, (0.020, 0.085, 0.015, 0.030, 0.010))])
    assert table["step_efficiency_pct"].tolist() == pytest.approx([100.0, 250 / 3, 62.5])
    losses = ["loss_data_pct", "loss_compute_pct", "loss_sync_wait_pct", "loss_sync_comm_pct", "loss_other_pct"]
    assert table.loc[2, losses].tolist() == pytest.approx([5 / 3, 5 / 3, 5.0, 25 / 3, 0.0], abs=1e-9)
    assert table.loc[4, losses].tolist() == pytest.approx([6.25, 3.125, 9.375, 18.75, 0.0], abs=1e-9)
    losses = table[[c for c in breakdown.LOSS_COLUMNS if c.startswith("loss_")]].sum(axis=1)
    assert losses.tolist() == pytest.approx((100 - table["step_efficiency_pct"]).tolist())
    # step efficiency = throughput efficiency here (the window holds exactly the median steps)
    assert table["step_efficiency_pct"].tolist() == pytest.approx(table["efficiency_pct"].tolist())


def test_fixed_global_batch_attribution_by_hand():
    """128 images per step at every N: c(1) = 0.400/128, c(2) = 2 x 0.250/128 -> E = 80 %;
    data (2 x 0.03 - 0.04)/0.5 = 4 %, compute (2 x 0.17 - 0.34)/0.5 = 0, sync wait 2 x 0.01/0.5 = 4 %, comm 2 x 0.02/0.5 = 8 %,
    other (2 x 0.02 - 0.02)/0.5 = 4 %."""
    parts = dict(zip(breakdown.PARTS, ([0.04, 0.03], [0.34, 0.17], [0.0, 0.01], [0.0, 0.02], [0.02, 0.02])))
    columns = breakdown.attribute_loss([1, 2], [128, 128], {k: np.array(v) for k, v in parts.items()}, 0)
    assert columns["step_efficiency_pct"][1] == pytest.approx(80.0)
    assert [columns[f"loss_{name}_pct"][1] for name in ("data", "compute", "sync_wait", "sync_comm", "other")] == (
        pytest.approx([4.0, 0.0, 4.0, 8.0, 4.0], abs=1e-9))


def test_runs_table_carries_the_parts_and_they_add_up(tmp_path):
    _, runs = rows.runs_table([(breakdown_log(tmp_path, 2, 32, (0.012, 0.082, 0.016, 0.010)), {})])
    row = runs.iloc[0]
    assert row[list(breakdown.PARTS)].sum() == pytest.approx(row["breakdown_step_s"])
    assert (row["breakdown_steps"], row["allreduce_s"]) == (50, 0.02)
    assert row["comm_compute_ratio"] == pytest.approx(0.02 / 0.082)


def test_logs_without_a_breakdown_leave_the_columns_empty_with_a_note():
    logs = ROOT / "tests" / "data" / "logs"
    _, runs = rows.runs_table([(logs / "tf_keras2_resnet50_1gpus.log", {}),
                               (logs / "tf_keras2_resnet50_2gpus.log", {})])
    assert runs[list(BREAKDOWN_COLUMNS)].isna().all().all()
    table = scaling.scaling_table(runs)
    assert (table["breakdown_note"] == breakdown.NO_BREAKDOWN_NOTE).all()
    assert table["loss_data_pct"].isna().all()
    assert table["speedup"].notna().all()  # nothing else changes for them


def test_mfu_of_a_vit_h_run_on_one_h100_by_hand(tmp_path):
    """1.004 TFLOP per trained image (ViT-H/14, 224 px) at 240 img/s = 240.96 TFLOP/s;
    the H100 SXM's bf16 peak is 989 TFLOP/s -> MFU 24.36 %."""
    header = {"device_kind": "gpu", "gpu_models": ["NVIDIA H100 80GB HBM3"], "flops_per_image": 1.004e12}
    path = breakdown_log(tmp_path, 1, 64, (0.0, 64 / 240, 0.0, 0.0), header_extra=header)
    row = rows.runs_table([(path, {})])[1].iloc[0]
    assert row["throughput_img_s"] == pytest.approx(240.0)
    assert row["tflops_per_gpu"] == pytest.approx(240.96)
    assert row["mfu_pct"] == pytest.approx(100 * 240.96 / 989)


@pytest.mark.slow
def test_breakdown_figures_draw_the_hand_computed_parts(tmp_path):
    """Stacked bars of N x part / images per step: at N=4, 4 x 0.015 / 128 s = 0.46875 ms of
    sync wait and 4 x 0.030 / 128 s = 0.9375 ms of sync comm per image, two bars of their own; the bus-bandwidth figure marks where runs span nodes."""
    from scalesweep.report import plotkit
    from scalesweep.report.figures import build_figures

    items = []
    for gpus, parts, nodes in ((1, (0.010, 0.080, 0.000, 0.010), 1), (2, (0.012, 0.082, 0.016, 0.010), 1),
                               (4, (0.020, 0.085, 0.015, 0.030, 0.010), 1), (8, (0.030, 0.085, 0.105, 0.010), 2)):
        extra = {"nodes": nodes}
        items.append((breakdown_log(tmp_path, gpus, 32, parts, header_extra=extra), {}))
    _, runs = rows.runs_table(items)
    runs.loc[runs["gpus"] > 1, "busbw_gb_s"] = [90.0, 80.0, 20.0]
    table = scaling.scaling_table(runs)
    figures = build_figures(table)
    bars = figures["step_breakdown"].data.set_index(["gpus", "part"])["ms_per_image"]
    assert bars[(4, "sync wait")] == pytest.approx(0.46875) and bars[(4, "sync comm")] == pytest.approx(0.9375)
    assert bars[(1, "compute")] == pytest.approx(1000 * 0.080 / 32)
    bus = figures["bus_bandwidth"]
    assert sorted(bus.data["value"]) == [20.0, 80.0, 90.0]
    ax = bus.grid.axes.flat[0]
    assert any(abs(line.get_xdata()[0] - (4 * 8) ** 0.5) < 1e-9 for line in ax.get_lines()
               if len(line.get_xdata()) == 2 and line.get_xdata()[0] == line.get_xdata()[1])
    assert set(figures["comm_compute_ratio"].data["gpus"]) == {2, 4, 8}
    plotkit.plt.close("all")
