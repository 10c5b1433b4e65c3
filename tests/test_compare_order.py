"""A comparison depends on the runs, not on the order they were read in: DuckDB gives the history's
rows in no fixed order, and the bootstrap draws positions, so the same seed must give the same
intervals whatever the order (before, two runs of one `compare` gave two compare.csv files)."""

import numpy as np
import pandas as pd

from scalesweep.analysis.intervals import MIN_BOOTSTRAP_REPEATS
from scalesweep.history.compare import compare_runs


def pooled_side(driver: str, factor: float, rng: np.random.Generator) -> pd.DataFrame:
    """Two GPU counts with enough repeats for the bootstrap, 3 % noise, some failed runs."""
    repeats = MIN_BOOTSTRAP_REPEATS + 5
    rows = [{"framework": "pytorch", "model": "vit_h_14", "dataset": "tiny-224", "gpus": gpus,
             "repeat": repeat, "status": "oom" if repeat % 9 == 4 else "ok",
             "throughput_img_s": 100.0 * gpus * factor * np.exp(rng.normal(0, 0.03)),
             "steady_epoch_time_s": 10.0 / gpus, "gpu_model": "NVIDIA H100", "gpu_driver": driver,
             "cluster": ["mn5", "leonardo"][repeat % 2]}
            for gpus in (1, 2) for repeat in range(repeats)]
    return pd.DataFrame(rows)


def test_the_same_runs_in_another_order_give_the_same_table_and_facts():
    rng = np.random.default_rng(1)
    baseline, candidate = pooled_side("535.104.05", 1.0, rng), pooled_side("550.54.15", 0.9, rng)
    table, facts = compare_runs(baseline, candidate, seed=3)
    assert set(table["ci_method"]) == {"bootstrap"} and set(table["verdict"]) == {"slower"}
    for order in range(3):
        shuffled = [side.sample(frac=1, random_state=order) for side in (baseline, candidate)]
        again, facts_again = compare_runs(*shuffled, seed=3)
        pd.testing.assert_frame_equal(again, table, check_exact=False, rtol=1e-12)
        assert facts_again["provenance"] == facts["provenance"]
    assert facts["provenance"] == {"gpu_driver": (("535.104.05",), ("550.54.15",))}
    assert table["note"].tolist() == ["", ""]


def test_another_seed_draws_other_resamples():
    rng = np.random.default_rng(1)
    baseline, candidate = pooled_side("535.104.05", 1.0, rng), pooled_side("550.54.15", 0.9, rng)
    one, _ = compare_runs(baseline, candidate, seed=3)
    other, _ = compare_runs(baseline, candidate, seed=4)
    assert (one["ratio"] == other["ratio"]).all()
    assert (one["ratio_ci_low"] != other["ratio_ci_low"]).any()
