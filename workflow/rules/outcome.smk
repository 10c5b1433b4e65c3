# How a sweep ends on the terminal (scalesweep/outcome.py): runs ok and failed, each failure's
# reason and log, and where the tables, figures, findings, archive and report are.
from scalesweep import images, outcome, tidy


onsuccess:
    print(outcome.sweep_outcome(), file=sys.stderr)


# After a sweep with failures the tidy rule cannot run (its inputs are incomplete), yet the
# user needs to see what was measured and why the rest failed: write the same tables with one
# failed row per missing run, with SLURM's verdict where accounting has one, and rebuild the
# scaling tables, figures and findings from exactly those rows. The next invocation runs the missing
# configurations (each run's result is a target of rule all) and then rebuilds these tables
# from complete results.
onerror:
    items = zip(map(best_log, RUN_PATHS), run_configs())
    tidy.write_tidy_tables(
        items,
        rules.tidy.output.epochs,
        rules.tidy.output.runs,
        ask_slurm=True,
        digests=images.sweep_digests(config["container"], IMAGES),
    )
    rebuilt = outcome.rebuild_tables_and_figures(
        rules.tidy.output.runs,
        dict(rules.tables.output.items()),
        config["analysis"],
        rules.figures.input.scaling,
        rules.figures.input.fits,
        rules.figures.output[0],
        rules.findings.output[0],
    )
    print(rebuilt, outcome.sweep_outcome(), sep="\n", file=sys.stderr)
