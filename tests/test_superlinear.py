"""Results that are too good, and fits that explain nothing (issue 16, item 6): flagged in the
tables, kept out of the sweet spot unless asked. Logs -> analyze (parse, tidy, tables, fits,
sweet spot, figures), epoch times chosen by hand."""

import pandas as pd
import pytest

from scalesweep import cli
from scalesweep.analysis import fits
from test_run_identity import write_log


def analyze(tmp_path, times, *options):
    for gpus, seconds in times.items():
        write_log(tmp_path / "logs" / f"g{gpus}.log", gpus, f"2026-11-20T08:0{gpus}:00+00:00", seconds)
    assert cli.main(["analyze", str(tmp_path / "logs"), "--out", str(tmp_path / "out"), *options]) == 0
    return {name: pd.read_csv(tmp_path / "out" / "tables" / f"{name}.csv").fillna({"flags": "", "note": ""})
            for name in ("scaling", "fits", "sweet_spot")}


@pytest.mark.slow
def test_superlinear_rows_are_flagged_and_left_out_of_the_sweet_spot(tmp_path):
    # 2 GPUs at 3.3 s against 10 s: speedup 3.03, efficiency 151.5 % (a slowed baseline)
    tables = analyze(tmp_path, {1: 10.0, 2: 3.3, 4: 3.5})
    scaling = tables["scaling"].set_index("gpus")
    assert scaling.loc[2, "efficiency_pct"] == pytest.approx(100 * 10 / 3.3 / 2)
    assert scaling["flags"].tolist() == ["", "superlinear", ""]
    assert "likely a slowed baseline" in scaling.loc[2, "note"]
    assert (tmp_path / "out" / "figures" / "efficiency_all.png").is_file()
    spot = tables["sweet_spot"].set_index("intent")
    # without 2 GPUs: fastest is 4 GPUs (3.5 s), the most GPUs at >= 80 % is 1 (4 GPUs: 71.4 %)
    assert (spot.loc["fastest", "gpus"], spot.loc["efficient", "gpus"]) == (4, 1)
    assert "left out as superlinear: 2 GPUs" in spot.loc["efficient", "note"]


@pytest.mark.slow
def test_allow_superlinear_lets_the_sweet_spot_choose_them(tmp_path):
    tables = analyze(tmp_path, {1: 10.0, 2: 3.3, 4: 3.5}, "--allow-superlinear")
    spot = tables["sweet_spot"].set_index("intent")
    assert (spot.loc["fastest", "gpus"], spot.loc["efficient", "gpus"]) == (2, 2)
    assert tables["scaling"]["flags"].tolist() == ["", "superlinear", ""]  # still flagged


@pytest.mark.slow
def test_a_fit_that_explains_nothing_is_flagged(tmp_path):
    # Slower with more processes (2 CPU cores): speedups 1, 0.8, 0.9, 0.85. The best p is 0
    # (S = 1 everywhere), which explains less than the weighted mean: R^2 < 0.
    speedups = [1.0, 0.8, 0.9, 0.85]
    tables = analyze(tmp_path, {n: 10.0 / s for n, s in zip((1, 2, 4, 8), speedups)})
    weights = [1 / s**2 for s in speedups]
    centre = sum(w * s for w, s in zip(weights, speedups)) / sum(weights)
    r2 = 1 - sum(w * (s - 1) ** 2 for w, s in zip(weights, speedups)) / sum(
        w * (s - centre) ** 2 for w, s in zip(weights, speedups))
    amdahl = tables["fits"].set_index(["law", "target"]).loc[("amdahl", "speedup")]
    assert amdahl["p"] == pytest.approx(0.0, abs=1e-6)
    assert amdahl["r2"] == pytest.approx(r2, abs=1e-4) and r2 == pytest.approx(-3.069, abs=1e-3)
    assert amdahl["flags"] == fits.NO_FIT_FLAG and "explains none" in amdahl["note"]
    # a fit that explains the points is not flagged
    good = analyze(tmp_path / "good", {1: 10.0, 2: 5.5, 4: 3.2})["fits"]
    assert good.set_index(["law", "target"]).loc[("amdahl", "speedup"), "flags"] == ""


def steps_log(path, gpus, stop_reason, ci_pct):
    """A steps-protocol run: a warm-up window and an adaptive timed window of 60 steps of 64 x N."""
    from test_run_identity import record

    images = 60 * 64 * gpus
    seconds = 6.0 / gpus ** 0.9
    lines = [record("header", framework="pytorch", model="resnet18", dataset="synth", gpus=gpus,
                    world_size=gpus, nodes=1, per_gpu_batch=64, global_batch=64 * gpus, epochs=2,
                    images_per_epoch=None, protocol="steps", timed_steps="auto", warmup_steps=5,
                    target_ci_pct=1.0, max_timed_steps=60, start_time=f"2026-11-20T08:0{gpus}:00+00:00"),
             record("epoch", epoch=1, images=5 * 64 * gpus, seconds=2.0, throughput_img_s=5 * 64 * gpus / 2.0,
                    phase="warmup"),
             record("epoch", epoch=2, images=images, seconds=seconds, throughput_img_s=images / seconds,
                    phase="timed", steps=60, timed_steps_rule="auto", target_ci_pct=1.0,
                    stop_reason=stop_reason, step_time_ci_pct=ci_pct, step_time_mean_s=seconds / 60),
             record("summary", status="ok", epochs=2)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_a_window_that_hit_its_step_cap_gets_a_note(tmp_path):
    steps_log(tmp_path / "logs" / "g1.log", 1, "target", 0.9)
    steps_log(tmp_path / "logs" / "g2.log", 2, "cap", 2.4)
    assert cli.main(["analyze", str(tmp_path / "logs"), "--out", str(tmp_path / "out")]) == 0
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    assert runs["timed_stop_reason"].tolist() == ["target", "cap"]
    scaling = pd.read_csv(tmp_path / "out" / "tables" / "scaling.csv").fillna({"note": ""})
    assert "step cap" not in scaling["note"][0]
    assert "1 run(s) timed to the step cap" in scaling["note"][1]
