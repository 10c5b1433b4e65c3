# The tables stage: runs.csv -> scaling (speedup, efficiency, time to solution, marginal gain,
# Karp-Flatt, step-breakdown attribution), Amdahl/Gustafson fits, sweet spot per intent,
# CPU-vs-GPU acceleration, model/dataset comparisons, by scalesweep/analysis/tables.py.
from scalesweep import pipeline, rulelog
from scalesweep.contract import layout
from scalesweep.analysis import tables
from scalesweep.plan import launch
from scalesweep.plan.analysis_settings import AnalysisSettings


rule tables:
    input:
        layout.tidy_table("runs"),
        # network.csv when the sweep runs the network probe (probe.smk); none otherwise.
        network=lambda wildcards: (
            [NETWORK_CSV]
            if launch.network_probe_wanted(ANALYSIS, config["matrix"]["framework"])
            else []
        ),
    output:
        **{
            name: report(
                layout.table(name),
                caption=f"../report/{name}.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in tables.TABLES
        },
    log:
        layout.rule_log("tables"),
    localrule: True
    params:
        **ANALYSIS.as_params(),
    run:
        rulelog.run_logged(
            log[0],
            pipeline.write_tables,
            input[0],
            dict(output.items()),
            AnalysisSettings(**params),
            *input.network,
        )
