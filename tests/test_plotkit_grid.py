"""The figures drawn with matplotlib on the plot kit's panel grid: a coarse figure's median lines
and min-max bands, the marginal gain's bars side by side per series, and the grid's fixed layout
(no tight_layout) keeping a wrapped grid's panels apart."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from scalesweep.analysis.scaling import scaling_table
from scalesweep.report.figures import build_figure, figure_makers
from scalesweep.report.plotkit import PanelGrid, STYLE


def runs(models, batches, scale=lambda batch: batch):
    """Epoch time 100 x scale(batch) / N and throughput 500 x N^0.9 per run, one run per count."""
    return pd.DataFrame([
        {"model": model, "per_gpu_batch": batch, "gpus": gpus, "status": "ok",
         "steady_epoch_time_s": 100.0 * scale(batch) / gpus, "throughput_img_s": 500.0 * gpus ** 0.9,
         "total_time_s": 1000.0 / gpus}
        for model in models for batch in batches for gpus in (1, 2, 4)])


def drawn(name, table):
    figure = build_figure(figure_makers(scaling_table(table))[name])
    plt.close(figure.figure)
    return figure


def test_a_coarse_figure_draws_the_median_of_each_colour_and_their_range_as_a_band():
    """14 series (2 models x 7 batches) are more than 12 colours: a colour per model, its line the
    median over the 7 batches (batch 4: 400, 200, 100 s), its band from batch 1 to batch 7."""
    figure = drawn("time_all", runs("ab", range(1, 8)))
    ax = figure.grid.ax
    lines = {(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.get_lines()}
    assert ((1.0, 2.0, 4.0), (400.0, 200.0, 100.0)) in lines
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # one per model
    for band in bands:
        vertices = band.get_paths()[0].vertices
        for gpus in (1.0, 2.0, 4.0):
            at = vertices[np.isclose(vertices[:, 0], gpus), 1]
            assert min(at) == pytest.approx(100.0 / gpus) and max(at) == pytest.approx(700.0 / gpus)
    assert figure.data["label"].nunique() == 14  # every series in the data


def test_marginal_gain_bars_stand_side_by_side_per_series():
    """Two series in one model panel: each GPU count's slot (0.8 wide) holds two bars of 0.4, centred
    0.2 left and right of the count's tick, as high as the gain 2^0.9 - 1 of a doubling."""
    figure = drawn("marginal_gain", runs("a", (1, 2)))
    ax = figure.grid.ax
    bars = sorted((round(p.get_x() + p.get_width() / 2, 9), p.get_width(), p.get_height())
                  for p in ax.patches)
    gain = 100.0 * (2 ** 0.9 - 1)
    assert [(x, width) for x, width, _ in bars] == [(-0.2, 0.4), (0.2, 0.4), (0.8, 0.4), (1.2, 0.4)]
    assert [height for *_, height in bars] == pytest.approx([gain] * 4)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4"]


def test_a_wrapped_grid_is_laid_out_from_its_geometry():
    """Five panels in rows of three: the same panel size everywhere, the second row under the
    first with room for the first row's tick and axis labels, and a legend taller than the panels
    makes the figure as tall, the panels keeping their size."""
    with plt.rc_context(STYLE):
        grid = PanelGrid(list("abcde"), wrap=3, titles=[f"model = {m}" for m in "abcde"])
        grid.set_axis_labels("GPUs", "Speedup")
        sizes = {tuple(np.round(ax.get_position().size * grid.figure.get_size_inches(), 6))
                 for ax in grid.axes}
        assert len(sizes) == 1 and grid.axes_dict["d"].get_position().x0 == grid.ax.get_position().x0
        first, below = grid.axes_dict["a"].get_position(), grid.axes_dict["d"].get_position()
        gap = (first.y0 - below.y1) * grid.figure.get_size_inches()[1]
        assert gap == pytest.approx(grid.geometry.bottom + grid.geometry.top)
        # Labels as FacetGrid put them: x under a panel with none below, y on the first column.
        assert [ax.get_xlabel() for ax in grid.axes] == ["", "", "GPUs", "GPUs", "GPUs"]
        assert [ax.get_ylabel() for ax in grid.axes] == ["Speedup", "", "", "Speedup", ""]
        height = grid.figure.get_size_inches()[1]
        grid.legend([plt.Line2D([], [])] * 40, [str(i) for i in range(40)], title="many")
        assert grid.figure.get_size_inches()[1] > height
        assert {tuple(np.round(ax.get_position().size * grid.figure.get_size_inches(), 6))
                for ax in grid.axes} == sizes
        plt.close(grid.figure)
