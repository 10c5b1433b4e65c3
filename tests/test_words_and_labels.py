"""Words and labels a careful reader takes at their word (issue 28.6), on the hand-made sweep of
tests/test_flagged_points.py."""

import pandas as pd
import pytest

from scalesweep.report import outcome
from scalesweep.report.findings import group_title
from test_flagged_points import analysed  # noqa: F401  (the fixture)

# Each test reads a sweep analysed once per module, seconds of figures: the full suite's.
pytestmark = pytest.mark.slow


def test_fastest_says_what_it_minimised(analysed):  # noqa: F811
    folder, _ = analysed
    text = (folder / "findings.md").read_text()
    assert "fastest (shortest time to solution) " in text
    assert "Where to stop: fastest 1" not in text


def test_no_nan_key_and_no_doubled_word_in_findings(analysed):  # noqa: F811
    folder, outputs = analysed
    text = (folder / "findings.md").read_text()
    assert "=nan" not in text and "speedup speedup" not in text
    assert "speedup speedup" not in " ".join(pd.read_csv(outputs["fits"])["note"].dropna())
    assert group_title({"framework": "pytorch", "model": "vit_h_14", "per_gpu_batch": float("nan")}) == \
        "pytorch, vit_h_14"


def test_karp_flatt_axis_admits_values_outside_0_1_and_energy_figure_names_energy_note(analysed):  # noqa: F811
    _, outputs = analysed
    from scalesweep.report import figures

    drawn = figures.build_figures(pd.read_csv(outputs["scaling"]), pd.read_csv(outputs["fits"]))
    label = drawn["karp_flatt"].grid.axes.flat[0].get_ylabel()
    from matplotlib.text import Text

    drawn_text = " ".join(t.get_text() for t in drawn["karp_flatt"].figure.findobj(Text))
    assert "(0-1)" not in label and "e < 0: superlinear; e > 1: slower" in drawn_text
    # the hand-made logs measured no energy: the placeholder says where the reason is
    assert "energy_note column of tidy/runs.csv" in drawn["energy_per_image"].note
    karp_flatt = pd.read_csv(outputs["scaling"])["karp_flatt"]
    assert karp_flatt.min() < 0  # the superlinear points: drawn on an axis that says what < 0 is


def test_a_failure_line_names_its_repeat_where_the_sweep_has_repeats():
    row = {"framework": "pytorch", "model": "vit_tiny", "dataset": "d", "gpus": "2", "log": "a.log"}
    runs = pd.DataFrame([{**row, "repeat": "1", "status": "failed", "reason": "boom"},
                         {**row, "repeat": "0", "status": "ok", "reason": ""}])
    assert outcome.failed_lines(runs) == ["  failed: pytorch vit_tiny d gpus=2 repeat=1: boom (log: a.log)"]
    single = runs.assign(repeat="0")
    assert outcome.failed_lines(single) == ["  failed: pytorch vit_tiny d gpus=2: boom (log: a.log)"]
