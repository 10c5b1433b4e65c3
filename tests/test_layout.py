"""Every figure the analysis writes passes the layout check (tests/layout_check.py) on five data
sets (tests/layout_data.py), and the check itself catches each kind of problem it names."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from layout_check import checking_savefig, layout_problems  # noqa: E402
from layout_data import DATA_SETS  # noqa: E402
from scalesweep.analysis.fits import fit_table  # noqa: E402
from scalesweep.analysis.scaling import scaling_table  # noqa: E402
from scalesweep.contract.layout import figure_names  # noqa: E402
from scalesweep.history import compare  # noqa: E402
from scalesweep.report import compare_figure
from scalesweep.report.figures import FIGURE_NAMES, plot_scaling  # noqa: E402


# ----------------------------------------------------------------------------- the check itself

def kinds(problems):
    return sorted({problem.split(":")[0] for problem in problems})


def test_a_clean_figure_passes():
    figure, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2, 4], [1.0, 1.9, 3.5], "o-", label="measured")
    ax.set(xlabel="GPUs", ylabel="Speedup")
    figure.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    assert layout_problems(figure, bbox_inches="tight") == []
    plt.close(figure)


def test_a_label_off_the_canvas_is_clipped():
    figure, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2], [1, 2])
    ax.set_ylabel("a y label far too long for a figure two inches high, clipped at both ends")
    problems = layout_problems(figure)  # no tight box: the canvas is the figure
    assert kinds(problems) == ["clipped"] and "far too long" in problems[0]
    plt.close(figure)


def test_crowded_tick_labels_overlap():
    figure, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(4), [1, 2, 3, 4])
    ax.set_xticks(range(4), [f"tensorflow, synth-cifar | {n}" for n in (1, 2, 4, 8)])
    problems = layout_problems(figure, bbox_inches="tight")
    assert kinds(problems) == ["overlap"]
    for left, right in ((1, 2), (2, 4), (4, 8)):  # each label runs into its neighbour at least
        assert any(f"| {left}'" in p and f"| {right}'" in p for p in problems), (left, right)
    plt.close(figure)


def test_a_legend_on_the_data_is_found():
    figure, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2, 3], [3.0, 3.0, 3.0], "o-", label="flat at the top")
    ax.plot([1, 2, 3], [1.0, 2.0, 3.1], "o-", label="rising")
    ax.legend(loc="upper left")
    problems = layout_problems(figure, bbox_inches="tight")
    assert kinds(problems) == ["legend"]
    plt.close(figure)


def test_a_panel_without_tick_labels_or_with_one_log_tick_is_found():
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(4, 4))
    for ax in (top, bottom):
        ax.plot([1, 2, 4], [1, 2, 3])
    assert kinds(layout_problems(figure, bbox_inches="tight")) == ["ticks"]  # the top panel
    top.tick_params(labelbottom=True)
    assert layout_problems(figure, bbox_inches="tight") == []
    plt.close(figure)
    figure, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0.8, 0.9, 1.2], [0, 1, 2], "o")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # only the decade, 1, labelled
    problems = layout_problems(figure, bbox_inches="tight")
    assert problems == ["ticks: panel 'axes' labels only 1 x tick"]
    plt.close(figure)


# ----------------------------------------------------------------------------- the figures

# The 10,000-run set takes most of this file's time: slow, the others are the fast check.
@pytest.fixture(scope="module", params=[pytest.param(name, marks=pytest.mark.slow) if name == "many" else name
                                        for name in DATA_SETS])
def data_set(request):
    runs = DATA_SETS[request.param]()
    scaling = scaling_table(runs)
    # Fits without bootstrap: the figures draw p and its predictions, not their intervals.
    return request.param, runs, scaling, fit_table(runs, n_bootstrap=0, scaling=scaling)


@pytest.mark.slow
def test_every_scaling_figure_passes_the_layout_check(data_set, tmp_path, monkeypatch):
    name, _, scaling, fits = data_set
    problems = checking_savefig(monkeypatch, write=False)
    plot_scaling(scaling, tmp_path, fits=fits)
    assert sorted(problems) == sorted(name for figure in FIGURE_NAMES for name in figure_names(figure))
    found = {figure: found for figure, found in problems.items() if found}
    assert not found, f"{name}: " + "\n".join(
        f"{figure}: {problem}" for figure, lines in found.items() for problem in lines[:5])


def test_the_comparison_figure_passes_the_layout_check(data_set, tmp_path, monkeypatch):
    """compare.png of the data set against itself 5 % slower (every run's interval scaled); more
    configurations than it can label legibly: the most changed, the title says how many."""
    name, runs, _, _ = data_set
    if len(runs) > 2_000:  # compare_runs' statistics dominate: one model's 400 configurations
        runs = runs[runs["model"] == runs["model"].iloc[0]]
    slower = runs.copy()
    for column in ("throughput_img_s", "throughput_ci_low_img_s", "throughput_ci_high_img_s"):
        slower[column] = slower[column] * 0.95
    slower["steady_epoch_time_s"] = slower["steady_epoch_time_s"] / 0.95
    table, facts = compare.compare_runs(runs, slower)
    assert np.isfinite(table["ratio"]).any(), name
    problems = checking_savefig(monkeypatch, write=False)
    compare_figure.plot_ratios(table, facts, tmp_path / "compare.png")
    assert problems == {"compare.png": []}, name
