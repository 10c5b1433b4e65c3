"""The tables stage: results/tidy/runs.csv -> results/tables/<table>.csv (rule `tables`,
workflow/rules/tables.smk; `python -m scalesweep analyze` too).

The stage's own arithmetic lives in the modules it calls: scaling (speedup, efficiency, the
CPU-vs-GPU and side-by-side tables), fits (Amdahl/Gustafson), sweetspot (the GPU count per intent).
fits imports scipy: loaded in the function that uses it, since every Snakemake run (cluster
jobsteps included) imports this module to parse the workflow.
"""

from pathlib import Path

from scalesweep.analysis import predict, scaling, sweetspot
from scalesweep.analysis.settings import AnalysisSettings
from scalesweep.contract import atomic, layout
from scalesweep.tidy.table import read_runs

TABLES = ("scaling", "fits", "sweet_spot", "acceleration", "compare_models", "compare_datasets", "predictions")


def analysis_tables(runs, settings: AnalysisSettings, network: predict.Network | None = None) -> dict:
    """Every table of the analysis, by name (TABLES), from a runs table (and the network probe's
    inter-node all-reduce, for the predictions beyond one node)."""
    from scalesweep.analysis import fits

    table = scaling.scaling_table(runs, settings.epoch_budget)
    return {
        "scaling": table,
        "fits": fits.fit_table(runs, scaling=table),
        "sweet_spot": sweetspot.sweet_spot_table(table, settings),
        "acceleration": scaling.acceleration_table(runs),
        "compare_models": scaling.comparison_table(table, by="model"),
        "compare_datasets": scaling.comparison_table(table, by="dataset"),
        "predictions": predict.prediction_table(runs, settings.predict_gpus, settings.gpus_per_node, network, table),
    }


def write_tables(runs_csv, outputs: dict, settings: AnalysisSettings, network_csv=None) -> str:
    """runs.csv (and network.csv of the network probe, when given) -> every table of TABLES at
    outputs[name]; the log line."""
    network = predict.read_network_csv(network_csv) if network_csv else None
    tables = analysis_tables(read_runs(runs_csv), settings, network)
    for name, table in tables.items():
        path = Path(outputs[name])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_csv(table, path)
    return ", ".join(f"{name}: {len(table)} rows" for name, table in tables.items())


def outputs_in(folder) -> dict:
    """{table name: folder/<name>.csv} for every table."""
    return {name: Path(folder) / layout.csv_name(name) for name in TABLES}
