# The tables stage: runs.csv -> scaling (speedup, efficiency, time to solution, marginal gain,
# Karp-Flatt, step-breakdown attribution), Amdahl/Gustafson fits, sweet spot per intent,
# CPU-vs-GPU acceleration, model/dataset comparisons, by scalesweep/tables.py.
from scalesweep import rulelog, tables


rule tables:
    input:
        "results/tidy/runs.csv",
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
        efficiency_floor=config["analysis"]["efficiency_floor_pct"],
        gpu_hour_budget=config["analysis"]["gpu_hour_budget"],
        epoch_budget=config["analysis"]["epoch_budget"],
        greenest_time_bound_s=config["analysis"]["greenest_time_bound_s"],
        allow_superlinear=config["analysis"]["allow_superlinear"],
    run:
        rulelog.run_logged(
            log[0], tables.write_tables, input[0], dict(output.items()), **params
        )
