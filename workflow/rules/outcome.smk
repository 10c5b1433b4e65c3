# How a sweep ends on the terminal (scalesweep/report/outcome.py): runs ok and failed, each
# failure's reason and log, and where the tables, figures, findings, archive and report are.
from scalesweep import pipeline
from scalesweep.contract import layout
from scalesweep.plan import containers
from scalesweep.report import outcome


# `snakemake trace` alone is no sweep: its end writes no failed rows into the tidy tables, it
# names where the traces are.
def traces_only():
    """Whether this invocation's only target is `trace` (known once the DAG is being built)."""
    return set(getattr(workflow.dag_settings, "targets", None) or ()) == {"trace"}


TRACES_ONLY_LINE = (
    f"scalesweep: traces and their summaries under {layout.TRACES}/ (docs/traces.md)"
)


def best_log(path):
    """The run's result if it finished, else the log a failed attempt left, else None."""
    for candidate in (run_log(path), layout.attempt_log("train", path)):
        if Path(candidate).exists():
            return candidate
    return None


onsuccess:
    print(
        TRACES_ONLY_LINE if traces_only() else outcome.sweep_outcome(),
        file=sys.stderr,
    )


# After a sweep with failures the tidy rule cannot run (its inputs are incomplete), yet the
# user needs to see what was measured and why the rest failed: write the same tables with one
# failed row per missing run, with SLURM's verdict where accounting has one, and rebuild the
# scaling tables, figures and findings from exactly those rows. The next invocation runs the missing
# configurations (each run's result is a target of rule all) and then rebuilds these tables
# from complete results; with nothing left to train it still tidies again, because the failure
# path leaves a marker that is an input of rule tidy (scalesweep/tidy/after_failure.py). On a
# full, over-quota or read-only disk the closing lines still come, with the file that could not
# be written (pipeline.failure_outcome).
onerror:
    print(
        (
            TRACES_ONLY_LINE
            if traces_only()
            else pipeline.failure_outcome(
                zip(map(best_log, RUN_PATHS), run_axes()),
                dict(rules.tidy.output.items()),
                {
                    "table_outputs": dict(rules.tables.output.items()),
                    "settings": ANALYSIS,
                    "figures_dir": rules.figures.output[0],
                    "findings_md": rules.findings.output[0],
                },
                layout.WRITTEN_AFTER_FAILURE,
                digests=containers.sweep_digests(config["container"], IMAGES),
                peak_override=config["hardware"]["peak_tflops"],
            )
        ),
        file=sys.stderr,
    )
