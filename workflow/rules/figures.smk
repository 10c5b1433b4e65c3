# The figures stage: the scaling and fits tables -> seaborn figures (PNG), per model and with all
# models combined, by scalesweep/report/figures.py.
from scalesweep import pipeline, rulelog
from scalesweep.contract import layout


rule figures:
    input:
        **{name: layout.table(name) for name in pipeline.FIGURE_TABLES},
    output:
        report(
            directory(layout.FIGURES),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
            labels={"figure": "{name}"},
        ),
    log:
        layout.rule_log("figures"),
    localrule: True
    run:
        rulelog.run_logged(
            log[0], pipeline.write_figures, dict(input.items()), output[0]
        )
