# The findings stage: the scaling, fits and sweet-spot tables -> results/findings.md, the answer
# in words (how far each configuration scales, where to stop, why efficiency fell, what the fit
# predicts), by scalesweep/findings.py. The report's front page includes the same text.
from scalesweep import rulelog


rule findings:
    input:
        scaling="results/tables/scaling.csv",
        fits="results/tables/fits.csv",
        sweet_spot="results/tables/sweet_spot.csv",
    output:
        report(
            "results/findings.md",
            caption="../report/findings.rst",
            category="Findings",
            labels={"findings": "findings.md"},
        ),
    log:
        "logs/findings.log",
    localrule: True
    run:
        # imported here: the stage's module is loaded only when the rule runs
        from scalesweep import findings

        rulelog.run_logged(
            log[0],
            findings.write_findings,
            input.scaling,
            input.fits,
            input.sweet_spot,
            output[0],
        )
