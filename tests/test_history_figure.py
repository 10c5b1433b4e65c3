"""The history figure: each configuration's throughput across three archived sweeps, dated, with
intervals, passing the layout check (tests/layout_check.py)."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from layout_check import checking_savefig
from layout_data import laptop_runs, mn5_runs
from scalesweep.history import archive, query
from scalesweep.report import history_figure

DATES = ("2026-11-01T08:00:00Z", "2026-11-08T08:00:00Z", "2026-11-22T08:00:00Z")


def three_sweeps(folder, runs, factors=(1.0, 1.1, 0.9)):
    """The same sweep archived on three dates, its throughput scaled by `factors`."""
    for date, factor in zip(DATES, factors):
        sweep = runs.assign(start_time=date)
        for column in ("throughput_img_s", "throughput_ci_low_img_s", "throughput_ci_high_img_s"):
            sweep[column] = sweep[column] * factor
        sweep["steady_epoch_time_s"] = sweep["steady_epoch_time_s"] / factor
        archive.archive(sweep, folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("make_runs", [laptop_runs, mn5_runs])
def test_three_sweeps_give_one_dated_point_per_sweep_and_count(tmp_path, monkeypatch, make_runs):
    runs = make_runs()
    folder = three_sweeps(tmp_path / "history", runs)
    problems = checking_savefig(monkeypatch)
    table = query.history_table(query.archived_runs(folder))
    line = history_figure.write_history_figure(table, tmp_path / "throughput_history.png")
    assert line.startswith("throughput_history: 3 sweeps")
    assert problems == {"throughput_history.png": []}

    figure = history_figure.history_figure(table)
    data = figure.data
    assert sorted(data["sweep_date"].dt.strftime("%Y-%m-%d").unique()) == [
        "2026-11-01", "2026-11-08", "2026-11-22"]
    # One point per configuration (group x GPU count) and sweep: the run's throughput x factor.
    assert len(data) == 3 * len(runs)
    one = runs.iloc[0]
    points = data[(data["model"] == one["model"]) & (data["dataset"] == one["dataset"])
                  & (data["gpus"] == one["gpus"])].sort_values("sweep_date")
    assert points["throughput_img_s"].tolist() == pytest.approx(
        [one["throughput_img_s"] * f for f in (1.0, 1.1, 0.9)])
    # Intervals as bars: the run's own interval, drawn on every panel.
    for ax in figure.grid.axes.flat:
        assert any(isinstance(c, ErrorbarContainer) for c in ax.containers)
        assert ax.get_xlabel() == "Sweep date (UTC)"
    plt.close(figure.figure)


def test_one_sweep_says_there_is_nothing_over_time(tmp_path):
    folder = tmp_path / "history"
    archive.archive(laptop_runs().assign(start_time=DATES[0]), folder)
    figure = history_figure.history_figure(query.history_table(query.archived_runs(folder)))
    assert "1 sweep(s) in the history" in figure.note
    empty = history_figure.history_figure(pd.DataFrame(columns=["sweep_id"]))
    assert empty.note.startswith("0 ")
    plt.close(figure.figure)
    plt.close(empty.figure)


@pytest.mark.slow
def test_names_that_look_like_math_or_are_100_kb_long_give_the_history_figure(tmp_path):
    """A model `$x^2$` (mathtext) and a dataset named by 100 kB: the figure is written, its panel
    titles show the names escaped (plotkit.plot_text) and cut to LABEL_LIMIT characters."""
    from matplotlib import cbook

    from scalesweep.report.plotkit import LABEL_LIMIT
    from test_figures import PNG_MAGIC

    runs = laptop_runs()
    runs.loc[runs["model"] == "cnn_small", "model"] = "$x^2$"
    runs = pd.concat([runs, runs.assign(dataset="d" * 100_000)], ignore_index=True)
    folder = three_sweeps(tmp_path / "history", runs)
    table = query.history_table(query.archived_runs(folder))
    line = history_figure.write_history_figure(table, tmp_path / "throughput_history.png")
    assert line.startswith("throughput_history: 3 sweeps")
    assert (tmp_path / "throughput_history.png").read_bytes()[:8] == PNG_MAGIC

    figure = history_figure.history_figure(table)
    titles = {ax.get_title() for ax in figure.figure.axes}
    assert r"\$x^2\$, synth-cifar" in titles
    long = [title.replace(r"\$", "$") for title in titles if "d" * 20 in title]  # one per model
    assert len(long) == 4 and all(len(title) == LABEL_LIMIT and "…#" in title for title in long)
    texts = [*titles, *(t.get_text() for t in figure.figure.texts)]
    for legend in figure.figure.legends:
        texts += [legend.get_title().get_text(), *(t.get_text() for t in legend.get_texts())]
    assert not any(cbook.is_math_text(text) for text in texts)
    plt.close(figure.figure)
