# Tidy runs -> tables: scaling (speedup, efficiency, time to solution, marginal gain, Karp-Flatt),
# Amdahl/Gustafson fits, sweet spot per intent, CPU-vs-GPU acceleration, model/dataset comparisons.
from scalesweep import stages


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
            for name in stages.TABLES
        },
    params:
        efficiency_floor=config["analysis"]["efficiency_floor_pct"],
        gpu_hour_budget=config["analysis"]["gpu_hour_budget"],
        epoch_budget=config["analysis"]["epoch_budget"],
    log:
        "logs/tables.log",
    localrule: True
    run:
        stages.write_log(log[0], stages.write_tables(input[0], "results/tables", **params))
