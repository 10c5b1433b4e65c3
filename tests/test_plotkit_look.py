"""The figures' look is seaborn's, written out in plotkit so that drawing a figure does not import
seaborn (and scipy.stats with it): every value checked here against seaborn's own."""

import subprocess
import sys
from pathlib import Path

import pytest
import seaborn as sns

from scalesweep.report import plotkit

REPO = Path(__file__).resolve().parents[1]


def test_the_style_is_seaborns_whitegrid_notebook_at_0_9_but_its_colormap():
    theirs = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.9)}
    assert theirs.pop("image.cmap") == "rocket"  # registered by seaborn's import only; no images drawn
    assert plotkit.SEABORN_WHITEGRID_NOTEBOOK == theirs
    assert plotkit.STYLE == {**theirs, "axes.titley": 1.0, "patch.facecolor": plotkit.DEFAULT_PATCH_FACE}


def test_a_patchs_default_face_is_the_colour_matplotlib_names_c0():
    from matplotlib import pyplot as plt
    from matplotlib.patches import Rectangle

    with plt.rc_context({**plotkit.STYLE, "patch.facecolor": "C0"}):
        named = Rectangle((0, 0), 1, 1).get_facecolor()
    with plt.rc_context(plotkit.STYLE):
        assert Rectangle((0, 0), 1, 1).get_facecolor() == named


def test_the_colorblind_palette_is_seaborns():
    assert list(plotkit.COLORBLIND) == sns.color_palette("colorblind").as_hex()


@pytest.mark.parametrize("n", [1, 3, 10, 12, 25])
def test_cycle_colours_are_seaborns_default_palette(n):
    assert plotkit.cycle_colours(n) == list(sns.color_palette(n_colors=n))


@pytest.mark.parametrize("n", [1, 4, 10, 11, 30])
def test_palette_of_labels_is_seaborns_default_up_to_ten_and_husl_beyond(n):
    labels = [f"series {index:02d}" for index in range(n)]
    expected = sns.color_palette(None if n <= plotkit.DEFAULT_PALETTE_SIZE else "husl", n_colors=n)
    assert plotkit.palette_of(reversed(labels)) == dict(zip(labels, expected))


@pytest.mark.parametrize("colour", ["#1f77b4", (0.8, 0.2, 0.1), "#949494", "white"])
@pytest.mark.parametrize("proportion", [0.0, 0.75, 1.0])
def test_desaturate_is_seaborns(colour, proportion):
    assert plotkit.desaturate(colour, proportion) == pytest.approx(sns.desaturate(colour, proportion), abs=1e-12)


@pytest.mark.parametrize("svg", [False, True], ids=["png-only", "svg-too"])
def test_an_analysis_imports_neither_seaborn_nor_scipy_stats(tmp_path, svg):
    """The whole analyze command on recorded logs (every table, the 17 figures, the findings) in a
    fresh interpreter: PNG only by default, both formats with --svg (the figures stage's)."""
    program = """
import sys
from scalesweep import cli
status = cli.main(["analyze", *sys.argv[1:]])
print(status, sorted(name for name in ("seaborn", "scipy.stats") if name in sys.modules))
"""
    out = tmp_path / "analysis"
    options = ["--svg"] if svg else []
    done = subprocess.run([sys.executable, "-c", program, str(REPO / "tests" / "data" / "logs"), "--out",
                           str(out), *options], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] in ("0 []", "None []")
    assert len(list((out / "figures").glob("*.png"))) == 17
    assert len(list((out / "figures").glob("*.svg"))) == (17 if svg else 0)
