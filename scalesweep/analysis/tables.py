"""The tables stage: results/tidy/runs.csv -> results/tables/<table>.csv (rule `tables`,
workflow/rules/tables.smk; `python -m scalesweep analyze` too).

The stage's own arithmetic lives in the modules it calls: scaling (speedup, efficiency, the
CPU-vs-GPU and side-by-side tables), fits (Amdahl/Gustafson), sweetspot (the GPU count per intent).
fits imports scipy: loaded in the function that uses it, since every Snakemake run (cluster
jobsteps included) imports this module to parse the workflow.
"""

from pathlib import Path
from typing import Callable

from scalesweep.analysis import predict, scaling, sweetspot
from scalesweep.contract import atomic, layout
from scalesweep.plan.analysis_settings import AnalysisSettings
from scalesweep.tidy.table import read_runs

TABLES = ("scaling", "fits", "sweet_spot", "acceleration", "compare_models", "compare_datasets", "predictions")


def analysis_tables(runs, settings: AnalysisSettings, network: predict.Network | None = None) -> dict:
    """Every table of the analysis, by name (TABLES), from a runs table (and the network probe's
    inter-node all-reduce, for the predictions beyond one node)."""
    return dict(each_analysis_table(runs, settings, network))


def each_analysis_table(runs, settings: AnalysisSettings, network: predict.Network | None = None):
    """(name, table) for every table of TABLES as it is computed: the scaling table first, then
    the fits and predictions, the other tables the figures are drawn from, so the figures stage
    can start on a table while the next is computed."""
    from scalesweep.analysis import fits

    table = scaling.scaling_table(runs, settings.epoch_budget)
    yield "scaling", table
    yield "fits", fits.fit_table(runs, scaling=table)
    yield "predictions", predict.prediction_table(runs, settings, network, table)
    yield "sweet_spot", sweetspot.sweet_spot_table(table, settings)
    yield "acceleration", scaling.acceleration_table(runs)
    yield "compare_models", scaling.comparison_table(table, by="model")
    yield "compare_datasets", scaling.comparison_table(table, by="dataset")


def write_tables(runs_csv, outputs: dict, settings: AnalysisSettings, network_csv=None,
                 table_written: Callable[[str], None] = lambda name: None) -> str:
    """runs.csv (and network.csv of the network probe, when given) -> every table of TABLES at
    outputs[name], `table_written(name)` called as each one is; the log line."""
    network = predict.read_network_csv(network_csv) if network_csv else None
    rows = {}
    for name, table in each_analysis_table(read_runs(runs_csv), settings, network):
        path = Path(outputs[name])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_csv(table, path)
        rows[name] = len(table)
        table_written(name)
    return ", ".join(f"{name}: {rows[name]} rows" for name in TABLES)


def outputs_in(folder) -> dict:
    """{table name: folder/<name>.csv} for every table."""
    return {name: Path(folder) / layout.csv_name(name) for name in TABLES}
