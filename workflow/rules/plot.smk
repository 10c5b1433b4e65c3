# Scaling tables -> seaborn figures (PNG), per model and with all models combined.
import pandas as pd

from scalesweep import plots


rule figures:
    input:
        "results/tables/scaling.csv",
    output:
        report(
            directory("results/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    localrule: True
    run:
        plots.plot_scaling(pd.read_csv(input[0]), output[0])
