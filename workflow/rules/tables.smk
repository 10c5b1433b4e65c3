# The tables stage: runs.csv -> scaling (speedup, efficiency, time to solution, marginal gain,
# Karp-Flatt, step-breakdown attribution), Amdahl/Gustafson fits, sweet spot per intent,
# CPU-vs-GPU acceleration, model/dataset comparisons, by scalesweep/analysis/tables.py.
from scalesweep import pipeline, rulelog
from scalesweep.analysis import tables
from scalesweep.analysis.settings import AnalysisSettings


rule tables:
    input:
        "results/tidy/runs.csv",
        network=network_input,
    output:
        **{
            name: report(
                f"results/tables/{name}.csv",
                caption=f"../report/{name}.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in tables.TABLES
        },
    log:
        "logs/tables.log",
    localrule: True
    params:
        **AnalysisSettings.from_config(
            config["analysis"], config.get("cluster")
        ).as_params(),
    run:
        rulelog.run_logged(
            log[0],
            pipeline.write_tables,
            input[0],
            dict(output.items()),
            AnalysisSettings(**params),
            *input.network,
        )
