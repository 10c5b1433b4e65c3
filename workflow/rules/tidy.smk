# The tidy stage: every run's log -> results/tidy/epochs.csv (run x epoch) and runs.csv (one row
# per run) by scalesweep/tidy/rows.py.
from scalesweep import rulelog
from scalesweep.contract import layout
from scalesweep.plan import containers
from scalesweep.tidy import after_failure, rows


rule tidy:
    input:
        logs=all_run_logs(),
        digests=[containers.digest_file(image) for image in IMAGES.values()],
        written_after_failure=after_failure.marker_input(layout.WRITTEN_AFTER_FAILURE),
    output:
        epochs=report(
            layout.tidy_table("epochs"),
            caption="../report/epochs.rst",
            category="Tables",
            labels={"table": "epochs"},
        ),
        runs=report(
            layout.tidy_table("runs"),
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "runs"},
        ),
    log:
        layout.rule_log("tidy"),
    localrule: True
    params:
        configs=key_ordered(run_axes()),
        container=key_ordered(config["container"]),
        frameworks=list(IMAGES),
        peak_override=config["hardware"]["peak_tflops"],
    run:
        rulelog.run_logged(
            log[0],
            rows.write_tidy_tables,
            zip(input.logs, params.configs),
            *output,
            digests=containers.sweep_digests(params.container, params.frameworks),
            peak_override=params.peak_override,
        )
