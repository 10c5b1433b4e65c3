"""The box a figure is saved in, measured once: for plotkit's figures (every format of each) and
for the comparison's figure, which is drawn without pyplot (this module imports matplotlib alone).
"""

from __future__ import annotations

import matplotlib


def tight_bbox(figure, dpi: int):
    """What `bbox_inches="tight"` crops to, found once for every format: each savefig with "tight"
    lays the figure out again in a draw of its own, and drawing (text extents above all) is most
    of the figures' time. The layout is final here: without a layout engine left on the figure,
    savefig draws each file once. Measured without a draw before (savefig's "tight" draws first):
    nothing a draw changes moves our figures' artists (fixed titles, legends at a fixed anchor,
    ticks updated by the measure itself), and the PNGs are the same bytes."""
    figure.set_dpi(dpi)
    figure.set_layout_engine(None)
    return figure.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
