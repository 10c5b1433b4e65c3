# The figures stage: the scaling and fits tables -> seaborn figures (PNG), per model and with all
# models combined, by scalesweep/figures.py.
from scalesweep import rulelog


rule figures:
    input:
        scaling="results/tables/scaling.csv",
        fits="results/tables/fits.csv",
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
        # imported here: matplotlib would slow down every parse of the workflow
        from scalesweep import figures

        rulelog.run_logged(
            log[0], figures.write_figures, input.scaling, input.fits, output[0]
        )
