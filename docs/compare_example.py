"""docs/history.md's comparison figure (docs/compare.png), from crafted runs: two sweeps of the same
configurations, the second after a driver and NCCL upgrade that slows ViT-H/14 by 8 % from 16 GPUs
on and speeds ResNet-50 up by 5 % at 32 GPUs, 5 repeats each with 1.5 % noise.

    .venv/bin/python docs/compare_example.py      # writes docs/compare.png, prints the summary
"""

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from scalesweep.cli import main  # noqa: E402
from scalesweep.history import archive  # noqa: E402

GPUS = (4, 8, 16, 32)


def sweep(driver: str, nccl: str, day: int, change, rng) -> pd.DataFrame:
    rows = []
    for model, images_s in (("resnet50", 2600.0), ("vit_h_14", 95.0)):
        for gpus in GPUS:
            for repeat in range(5):
                throughput = images_s * gpus * 0.97 ** np.log2(gpus) * change(model, gpus)
                throughput *= np.exp(rng.normal(0, 0.015))
                rows.append({
                    "framework": "pytorch", "model": model, "dataset": "tiny-224", "gpus": gpus,
                    "nodes": max(1, gpus // 4), "repeat": repeat, "status": "ok",
                    "throughput_img_s": throughput, "steady_epoch_time_s": 100_000 / throughput,
                    "gpu_model": "NVIDIA H100", "gpu_driver": driver, "nccl_version": nccl,
                    "cluster": "mn5", "start_time": f"2026-11-{day:02d}T08:{repeat:02d}:00+00:00",
                })
    return pd.DataFrame(rows)


def upgrade(model: str, gpus: int) -> float:
    if model == "vit_h_14" and gpus >= 16:
        return 0.92
    return 1.05 if (model, gpus) == ("resnet50", 32) else 1.0


def main_example() -> int:
    rng = np.random.default_rng(11)
    folder = Path(tempfile.mkdtemp(prefix="scalesweep-compare-example-"))
    try:
        before = archive.archive(sweep("535.104.05", "2.21.5", 3, lambda m, g: 1.0, rng), folder / "history")
        after = archive.archive(sweep("550.54.15", "2.22.3", 20, upgrade, rng), folder / "history")
        code = main(["compare", before.sweep_id, after.sweep_id, "--history", str(folder / "history"),
                     "--out", str(folder / "compare")])
        shutil.copy(folder / "compare" / "compare.png", DOCS / "compare.png")
        return code
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main_example())
