# Tidy runs -> scaling tables (speedup, efficiency, time to solution per group and GPU count).
import pandas as pd

from scalesweep import scaling


rule scaling_table:
    input:
        "results/tidy/runs.csv",
    output:
        report("results/tables/scaling.csv", caption="../report/scaling.rst", category="Tables"),
    localrule: True
    run:
        scaling.scaling_table(pd.read_csv(input[0])).to_csv(output[0], index=False)
