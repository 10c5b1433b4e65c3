"""Flagged numbers are never a headline or a fit's evidence, and figures ring them (issue 28.3):
logs with hand-computed epoch times -> runs.csv -> tables -> fits -> sweet spot -> figures ->
findings. A framework that runs on one node gets no prediction past the GPUs it was measured on."""

import math

import pandas as pd
import pytest

from epoch_logs import write_epochs_log
from scalesweep import pipeline
from scalesweep.analysis import tables
from scalesweep.plan.analysis_settings import AnalysisSettings
from scalesweep.report.plotkit import FLAGGED_LABEL

# Each test reads a sweep analysed once per module, seconds of figures: the full suite's.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flagged")
    logs = folder / "logs"
    logs.mkdir()
    # tensorflow: steady times 10, 4, 4, 2.5 s -> speedups 2.5 (125 %: flagged), 2.5, 4
    for gpus, steady in ((1, 10.0), (2, 4.0), (4, 4.0), (8, 2.5)):
        write_epochs_log(logs / f"tf{gpus}.log", gpus, [30.0, steady, steady], framework="tensorflow",
                         model="cnn_small")
    # pytorch: 10, 5.5, 2 s -> 1.82x (90.9 %), 5x at 4 GPUs (125 %: flagged)
    for gpus, steady in ((1, 10.0), (2, 5.5), (4, 2.0)):
        write_epochs_log(logs / f"pt{gpus}.log", gpus, [30.0, steady, steady])
    runs_csv, refused, _ = pipeline.collect_runs([logs], folder / "tidy")
    assert refused == []
    outputs = tables.outputs_in(folder / "tables")
    lines = list(pipeline.tables_figures_findings(runs_csv, outputs, AnalysisSettings.from_config({}),
                                                  folder / "figures", folder / "findings.md"))
    assert len(lines) == 3
    return folder, outputs


def test_the_scaling_table_flags_the_superlinear_points(analysed):
    _, outputs = analysed
    scaling = pd.read_csv(outputs["scaling"]).fillna({"flags": ""})
    flagged = scaling[scaling["flags"] == "superlinear"]
    assert sorted(zip(flagged.framework, flagged.gpus, flagged.efficiency_pct.round(1))) == [
        ("pytorch", 4, 125.0), ("tensorflow", 2, 125.0)]


def test_fits_leave_flagged_points_out_and_predict_no_second_node_for_tensorflow(analysed):
    _, outputs = analysed
    fits = pd.read_csv(outputs["fits"]).set_index(["framework", "law", "target"])
    tf = fits.loc[("tensorflow", "amdahl", "speedup")]
    assert tf["gpus_fitted"] == "1,4,8"
    assert "left out the flagged point(s) at N=2" in tf["note"]
    # Amdahl through S(4) = 2.5 and S(8) = 4 cannot be exact, but p is fitted and no prediction
    # reaches 16 GPUs: MirroredStrategy runs on one node.
    assert 0 < tf["p"] <= 1
    assert math.isnan(tf["pred_gpus_1"]) and math.isnan(tf["pred_speedup_1"])
    assert "no prediction beyond 8 GPUs: tensorflow's MirroredStrategy runs on one node" in tf["note"]
    pt = fits.loc[("pytorch", "amdahl", "speedup")]
    # the 4-GPU point left out leaves 2 counts: too few to fit, not a fit through 5x
    assert pt["gpus_fitted"] == "1,2" and math.isnan(pt["p"])
    assert "too few GPU counts to fit" in pt["note"]


def test_findings_never_open_with_a_flagged_point(analysed):
    folder, _ = analysed
    text = (folder / "findings.md").read_text()
    pytorch = text[text.index("**pytorch"):]
    assert "Scaling: measured up to 2 GPUs, speedup 1.82× at 90.9 % efficiency." in pytorch
    assert "Left out as flagged (superlinear" in pytorch and "4 GPUs at 125 %" in pytorch
    assert "5.00×" not in text and "125.0 %" not in text
    tensorflow = text[text.index("**tensorflow"):]
    assert "measured up to 8 GPUs, speedup 4.00× at 50.0 % efficiency." in tensorflow
    assert "2 GPUs at 125 %" in tensorflow


def test_figures_ring_flagged_points_with_a_legend_entry(analysed):
    _, outputs = analysed
    from scalesweep.report import figures

    drawn = figures.build_figures(pd.read_csv(outputs["scaling"]), pd.read_csv(outputs["fits"]))
    for name in ("speedup_by_model", "efficiency_all"):
        figure = drawn[name]
        assert sorted(zip(figure.flagged.model, figure.flagged.gpus)) == [("cnn_small", 2), ("vit_tiny", 4)]
        legend_texts = [t.get_text() for legend in figure.figure.legends for t in legend.get_texts()]
        assert FLAGGED_LABEL in legend_texts
    assert sorted(drawn["time_by_model"].flagged.gpus) == [2, 4]


def test_flagged_gpus_as_a_scaling_table_holds_them_and_as_runs_csv_reads_them_back(tmp_path):
    from scalesweep.analysis.scaling import flagged_gpus

    group = pd.DataFrame({"gpus": [4, 1, 2, 8, 16], "flags": ["superlinear", "", None, "superlinear", 1.5]})
    assert flagged_gpus(group) == [4, 8]
    group.to_csv(tmp_path / "scaling.csv", index=False)
    read_back = pd.read_csv(tmp_path / "scaling.csv")  # the empty flags read back as NaN
    assert read_back["flags"].isna().sum() == 2
    assert flagged_gpus(read_back) == [4, 8]
    assert flagged_gpus(group.drop(columns="flags")) == []
