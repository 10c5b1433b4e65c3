# Tidy runs -> scaling tables (speedup, efficiency, time to solution per group and GPU count).
from scalesweep import stages


rule scaling_table:
    input:
        "results/tidy/runs.csv",
    output:
        report("results/tables/scaling.csv", caption="../report/scaling.rst", category="Tables"),
    log:
        "logs/scaling_table.log",
    localrule: True
    run:
        stages.write_log(log[0], stages.scaling_csv(input[0], output[0]))
