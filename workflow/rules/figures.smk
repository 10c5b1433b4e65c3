# The figures stage: the scaling and fits tables -> seaborn figures, per model and with all models
# combined, by scalesweep/report/figures.py; each as PNG and SVG (layout.FIGURE_FORMATS), both in
# the report: the SVG stays sharp at any zoom and in print, the PNG goes into slides.
from scalesweep import pipeline, rulelog
from scalesweep.contract import layout


rule figures:
    input:
        **{name: layout.table(name) for name in pipeline.FIGURE_TABLES},
    output:
        report(
            directory(layout.FIGURES),
            patterns=[layout.FIGURE_FILE_PATTERN],
            caption="../report/figures.rst",
            category="Figures",
            labels={"figure": "{name}", "format": "{suffix}"},
        ),
    log:
        layout.rule_log("figures"),
    localrule: True
    threads: pipeline.FIGURE_PROCESSES
    run:
        rulelog.run_logged(
            log[0], pipeline.write_figures, dict(input.items()), output[0], threads
        )
