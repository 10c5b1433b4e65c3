# Tables -> seaborn figures (PNG), per model and with all models combined.
from scalesweep import stages


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
        stages.write_log(log[0], stages.figures("results/tables", output[0]))
