# The compare stage (with `compare_with` set): this sweep against that one, with confidence
# intervals, by scalesweep/history/compare.py:
# results/compare/{compare.csv,compare.png,summary.txt}.
from scalesweep import rulelog
from scalesweep.contract import layout
from scalesweep.history import sides


rule compare:
    input:
        layout.archived_marker(),
    output:
        **{
            f"output_{number}": report(
                layout.comparison_file(name),
                caption="../report/compare.rst",
                category="Comparison",
            )
            for number, name in enumerate(sides.COMPARE_OUTPUTS)
        },
    log:
        layout.rule_log("compare"),
    localrule: True
    params:
        baseline=config["compare_with"],
        history_dir=config["history_dir"],
    run:
        # imported here: scipy would slow down every parse of the workflow (cluster jobs included)
        from scalesweep.history import compare

        outdir = os.path.dirname(output[0])
        rulelog.run_logged(
            log[0],
            compare.write_compare,
            params.baseline,
            input[0],
            params.history_dir,
            outdir,
        )
