# The findings stage: the scaling, fits and sweet-spot tables -> results/findings.md, the answer
# in words (how far each configuration scales, where to stop, why efficiency fell, what the fit
# predicts), by scalesweep/report/findings.py. The report's front page includes the same text.
from scalesweep import pipeline, rulelog
from scalesweep.contract import layout


rule findings:
    input:
        **{name: layout.table(name) for name in pipeline.FINDINGS_TABLES},
    output:
        report(
            layout.FINDINGS,
            caption="../report/findings.rst",
            category="Findings",
            labels={"findings": "findings.md"},
        ),
    log:
        layout.rule_log("findings"),
    localrule: True
    run:
        rulelog.run_logged(
            log[0], pipeline.write_findings, dict(input.items()), output[0]
        )
