"""Figures: files written, and the plotted data is the table's."""

import math
from xml.etree import ElementTree

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from scalesweep.analysis.fits import fit_table
from scalesweep.analysis.scaling import scaling_table
from scalesweep.report.figures import FIGURE_NAMES, build_figures, plot_scaling
from scalesweep.report.plotkit import save_figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def runs_table():
    """Two models; 1 GPU repeated three times, 2 and 4 once, 8 GPUs out of memory."""
    rows = []
    for model, factor in (("resnet50v2", 1.0), ("resnet152v2", 2.0)):
        for gpus, times, total in ((1, [98.0, 100.0, 104.0], 1000.0), (2, [52.0], 560.0),
                                   (4, [30.0], 330.0), (8, [math.nan], math.nan)):
            for repeat, time in enumerate(times):
                rows.append({
                    "framework": "tensorflow", "model": model, "dataset": "cifar10", "gpus": gpus,
                    "nodes": 1, "repeat": repeat, "per_gpu_batch": 64,
                    "status": "oom" if gpus == 8 else "ok", "epochs": 5,
                    "steady_epoch_time_s": time * factor,
                    "throughput_img_s": 50_000 / (time * factor), "total_time_s": total * factor,
                })
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def tables():
    runs = runs_table()
    return scaling_table(runs), fit_table(runs, n_bootstrap=20)


@pytest.fixture(scope="module")
def figures(tables):
    built = build_figures(*tables)
    for figure in built.values():
        plt.close(figure.figure)  # off pyplot's list; the figure and its artists stay readable
    return built


def lines_xy(ax):
    return [(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.get_lines()]


@pytest.mark.slow
def shown_text_lines(figure):
    """The lines of text a reader sees on a figure: panel titles, axis labels, notes and marks."""
    texts = [text for ax in figure.axes for text in (ax.get_title(), ax.get_xlabel(), ax.get_ylabel())]
    texts += [text.get_text() for text in [*figure.texts, *(t for ax in figure.axes for t in ax.texts)]]
    return {line for text in texts for line in text.splitlines() if line.strip()}


def svg_text(path):
    """The text elements of an SVG in document order, one space apart (parsed as XML: a broken
    file raises); a line wrapped when drawn is split over elements, its words still in order."""
    root = ElementTree.parse(path).getroot()
    assert root.tag == f"{{{SVG_NAMESPACE}}}svg", path
    texts = ("".join(element.itertext()) for element in root.iter(f"{{{SVG_NAMESPACE}}}text"))
    return " ".join(" ".join(text.split()) for text in texts)


def assert_png_and_svg_with_the_same_text(built, folder):
    lines = {name: shown_text_lines(figure.figure) for name, figure in built.items()}
    paths = save_figures(built, folder)
    assert [p.name for p in paths] == [f"{name}.{suffix}" for name in built for suffix in ("png", "svg")]
    for name in built:
        png = folder / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5_000, name
        shown = svg_text(folder / f"{name}.svg")
        assert lines[name] and all(" ".join(line.split()) in shown for line in lines[name]), name
    assert not set(plt.get_fignums()) & {figure.figure.number for figure in built.values()}  # closed


@pytest.mark.slow
def test_a_figure_is_a_png_and_an_svg_with_the_same_text(tmp_path, figures):
    # A panel figure and a figure whose only text is a note wrapped when drawn.
    assert_png_and_svg_with_the_same_text(
        {name: figures[name] for name in ("time_by_model", "step_breakdown")}, tmp_path)


@pytest.mark.slow
def test_every_figure_is_a_png_and_an_svg_with_the_same_text(tmp_path, tables):
    built = build_figures(*tables)
    assert list(built) == list(FIGURE_NAMES)
    assert_png_and_svg_with_the_same_text(built, tmp_path)


@pytest.mark.slow
def test_time_all_plots_the_table_medians(figures, tables):
    scaling, _ = tables
    figure = figures["time_all"]
    ok = scaling.dropna(subset=["time_s"])
    assert sorted(zip(figure.data["label"], figure.data["gpus"], figure.data["value"])) == sorted(
        zip(ok["model"], ok["gpus"], ok["time_s"]))
    ax = figure.grid.ax
    drawn = lines_xy(ax)
    for model, rows in ok.groupby("model"):
        assert (tuple(rows["gpus"]), tuple(rows["time_s"])) in drawn
    assert ax.get_ylabel() == "Steady epoch time (s)" and ax.get_xlabel() == "GPUs"


@pytest.mark.slow
def test_gpu_axis_is_log2_with_the_measured_counts(figures):
    ax = figures["time_all"].grid.ax
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [1, 2, 4, 8]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]


@pytest.mark.slow
def test_repeats_get_min_max_error_bars(figures):
    ax = figures["time_all"].grid.ax
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    # only 1 GPU had repeats: one bar per model, from 98 to 104 s (x2 for resnet152v2)
    assert len(bars) == 2
    segments = sorted(tuple(seg[:, 1]) for bar in bars for seg in bar.lines[2][0].get_segments())
    assert segments == [(98.0, 104.0), (196.0, 208.0)]


@pytest.mark.slow
def test_throughput_has_the_ideal_line(figures, tables):
    scaling, _ = tables
    ax = figures["throughput_by_model"].grid.axes_dict["resnet50v2"]
    rows = scaling[(scaling["model"] == "resnet50v2")].dropna(subset=["throughput_img_s"])
    drawn = lines_xy(ax)
    # ideal = thr(1) x N: 500 x (1, 2, 4)
    assert (tuple(rows["gpus"]), tuple(rows["ideal_throughput_img_s"])) in drawn
    assert rows["ideal_throughput_img_s"].tolist() == [500.0, 1000.0, 2000.0]
    assert "images/s" in figures["throughput_by_model"].grid.axes.flat[0].get_ylabel()


@pytest.mark.slow
def test_speedup_carries_the_fitted_amdahl_curve(figures, tables):
    _, fits = tables
    figure = figures["speedup_by_model"]
    fit = fits[(fits["model"] == "resnet50v2") & (fits["law"] == "amdahl")
               & (fits["target"] == "speedup")].iloc[0]
    curves = figure.curves[figure.curves["model"] == "resnet50v2"]
    curve = curves[curves["kind"] == "curve"]
    assert curve["speedup"].iloc[0] == pytest.approx(1.0)  # S(N_min) = 1 on every Amdahl curve
    points = curves[curves["kind"] == "prediction"]
    # TensorFlow runs on one node, which held the 8 GPUs of its out-of-memory run: no 16
    assert points["gpus"].tolist() == [8.0] and pd.isna(fit["pred_speedup_2"])
    assert points["speedup"].tolist() == pytest.approx([fit["pred_speedup_1"]])
    ax = figure.grid.axes_dict["resnet50v2"]
    assert (tuple(points["gpus"]), tuple(points["speedup"])) in lines_xy(ax)
    assert list(ax.get_xticks()) == [1, 2, 4, 8]


@pytest.mark.slow
def test_derived_figures_plot_the_table_values(figures, tables):
    scaling, _ = tables
    gains = figures["marginal_gain"].data
    expected = scaling.dropna(subset=["marginal_gain_pct"])
    assert sorted(zip(gains["model"], gains["gpus"], gains["marginal_gain_pct"])) == sorted(
        zip(expected["model"], expected["gpus"], expected["marginal_gain_pct"]))
    kf = figures["karp_flatt"].data
    assert len(kf) == 4 and kf["karp_flatt"].notna().all()  # N=2 and N=4 of each model
    two_axes = figures["throughput_efficiency"].figure.axes
    assert len(two_axes) == 4  # a throughput axis and its efficiency twin per model
    assert any("%" in ax.get_ylabel() for ax in two_axes)
    assert any("images/s" in ax.get_ylabel() for ax in two_axes)
    assert "(%)" in figures["efficiency_all"].grid.ax.get_ylabel()


@pytest.mark.slow
def test_single_gpu_count_still_writes_every_figure_with_a_note(tmp_path):
    runs = runs_table().query("gpus == 2 and model == 'resnet50v2'")
    scaling = scaling_table(runs)
    figures = build_figures(scaling, fit_table(runs))
    texts = [t.get_text() for t in figures["time_all"].figure.texts]
    assert any("single GPU count: no scaling" in t for t in texts)
    assert "no doubling" in figures["marginal_gain"].note
    paths = save_figures(figures, tmp_path)
    assert len(paths) == 2 * len(FIGURE_NAMES) and all(p.stat().st_size > 0 for p in paths)


@pytest.mark.slow
def test_nan_rows_and_an_empty_table_do_not_crash(tmp_path):
    runs = runs_table()
    runs.loc[runs["gpus"] == 2, "status"] = "failed"
    runs.loc[runs["gpus"] == 2, ["steady_epoch_time_s", "throughput_img_s"]] = np.nan
    figures = build_figures(scaling_table(runs))
    assert set(figures["time_all"].data["gpus"]) == {1, 4}
    plt.close("all")
    empty = plot_scaling(scaling_table(runs.iloc[:0]), tmp_path / "empty")
    assert len(empty) == 2 * len(FIGURE_NAMES) and all(p.stat().st_size > 0 for p in empty)


@pytest.mark.slow
def test_many_series_share_colours_and_keep_every_series_in_the_data():
    from scalesweep.report.figures import build_figures
    from scalesweep.report.plotkit import MAX_COLOURS
    from scalesweep.analysis.scaling import scaling_table

    rows = [{"model": model, "per_gpu_batch": batch, "gpus": gpus, "status": "ok",
             "steady_epoch_time_s": 100.0 / gpus ** 0.9, "throughput_img_s": 500.0 * gpus ** 0.9,
             "total_time_s": 1000.0 / gpus ** 0.8}
            for model in ("a", "b") for batch in range(1, 21) for gpus in (1, 2, 4)]
    figure = build_figures(scaling_table(pd.DataFrame(rows)))["time_all"]
    assert figure.data["label"].nunique() == 40
    legend = figure.figure.legends[0]
    assert legend.get_title().get_text() == "model"
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b"] and MAX_COLOURS >= 2
    assert "40 series, coloured by model" in " ".join(t.get_text() for t in figure.figure.texts)


@pytest.mark.slow
def test_an_amdahl_fit_that_explains_nothing_is_not_drawn():
    """Time to solution growing with the GPU count (1000, 1500, 2800 s: speedups 1, 0.67, 0.36):
    Amdahl cannot go below 1, its best fit is flat at 1 and explains nothing (R² <= 0), so the
    figure draws no curve and says why; the throughput speedup keeps its curve."""
    runs = runs_table().query("gpus < 8 and model == 'resnet50v2' and repeat == 0").copy()
    runs["total_time_s"] = runs["gpus"].map({1: 1000.0, 2: 1500.0, 4: 2800.0})
    fits = fit_table(runs, n_bootstrap=0)
    tts_fit = fits[(fits["law"] == "amdahl") & (fits["target"] == "time_to_solution")].iloc[0]
    assert tts_fit["r2"] <= 0
    figures = build_figures(scaling_table(runs), fits)
    assert figures["tts_speedup_all"].curves.empty
    notes = " ".join(t.get_text() for t in figures["tts_speedup_all"].figure.texts)
    assert "no Amdahl curve where the fit explains nothing" in notes
    assert not figures["speedup_all"].curves.empty
    plt.close("all")


def test_plot_text_escapes_every_dollar_and_cuts_long_names_keeping_them_apart():
    from matplotlib import cbook

    from scalesweep.report.plotkit import LABEL_LIMIT, plot_text

    assert plot_text("$x^2$") == r"\$x^2\$" and not cbook.is_math_text(plot_text("$x^2$"))
    assert plot_text(plot_text("$x^2$")) == plot_text("$x^2$")  # a label of labels: once
    first, second = plot_text("d" * 100_000), plot_text("d" * 99_999 + "e")
    assert len(first) == len(second) == LABEL_LIMIT and first != second
    assert first.startswith("d" * (LABEL_LIMIT - 8) + "…#")
    assert plot_text(first) == first
    assert plot_text("resnet50v2") == "resnet50v2"


@pytest.mark.slow
def test_names_that_look_like_math_or_are_100_kb_long_still_give_every_figure(tmp_path):
    """A model `$x^2$` (mathtext), a dataset `$\\frac{$` (a mathtext parse error: before, no
    figure at all) and one of 100 kB (before, a legend of gigapixels: out of memory) give every
    figure, the names shown verbatim and cut to LABEL_LIMIT characters, in well under 1 GB."""
    import resource

    from matplotlib import cbook

    from scalesweep.report.plotkit import LABEL_LIMIT

    runs = runs_table()
    runs.loc[runs["model"] == "resnet152v2", "model"] = "$x^2$"
    runs = pd.concat([runs, runs.assign(dataset="d" * 100_000), runs.assign(dataset=r"$\frac{$")],
                     ignore_index=True)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures = build_figures(scaling_table(runs), fit_table(runs, n_bootstrap=5))
    texts = []
    for figure in figures.values():
        texts += [t.get_text() for t in figure.figure.texts]
        for legend in figure.figure.legends:
            texts += [legend.get_title().get_text(), *(t.get_text() for t in legend.get_texts())]
        texts += [ax.get_title() for ax in figure.figure.axes]
    assert not any(cbook.is_math_text(text) for text in texts)
    assert max(len(line) for text in texts for line in text.split("\n")) < 2_000
    legend = [t.get_text() for t in figures["time_all"].figure.legends[0].get_texts()]
    assert r"\$x^2\$, cifar10" in legend and r"\$x^2\$, \$\frac{\$" in legend
    assert any(label.startswith("resnet50v2, " + "d" * 10) and len(label) == LABEL_LIMIT for label in legend)
    assert r"\$x^2\$" in set(figures["speedup_by_model"].curves["model"])  # fits still matched
    paths = save_figures(figures, tmp_path)
    assert [p.name for p in paths[::2]] == [f"{name}.png" for name in FIGURE_NAMES]
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in paths[::2])
    assert all(svg_text(p) for p in paths[1::2])
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 1 << 20  # 1 GiB
