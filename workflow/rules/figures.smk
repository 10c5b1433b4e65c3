# The figures stage: the scaling and fits tables -> seaborn figures (PNG), per model and with all
# models combined, by scalesweep/report/figures.py.
from scalesweep import pipeline, rulelog


rule figures:
    input:
        **{name: f"results/tables/{name}.csv" for name in pipeline.FIGURE_TABLES},
    output:
        report(
            directory("results/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
            labels={"figure": "{name}"},
        ),
    log:
        "logs/figures.log",
    localrule: True
    run:
        rulelog.run_logged(
            log[0], pipeline.write_figures, dict(input.items()), output[0]
        )
