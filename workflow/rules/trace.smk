# `snakemake trace`: the configurations `trace.select` picks, rerun briefly with the framework's
# profiler on into results/traces/<run path>/ (scalesweep/train/torch_backend/trace.py,
# scalesweep/train/tf_backend/trace.py), each
# with a summary from the trace itself (scalesweep/logs/traces.py). A trace changes timing: its
# own rule and folder, never results/runs/ or the tidy tables (docs/traces.md).
import os

from scalesweep import rulelog
from scalesweep.contract import frameworks, layout
from scalesweep.logs import traces
from scalesweep.plan import matrix

TRACED_PATHS = [RUN_PATHS[index] for index in matrix.traced_runs(RUNS, config["trace"])]

# Rule all's input (Snakefile): the trace folders of planned configurations that `snakemake trace`
# made, for the sweep's report to show; none otherwise. Only while a report is made (Snakemake runs
# no executor then): a sweep never reruns a trace, which would change no measured number.
reported_traces = lambda wildcards: (
    []
    if workflow.executor_plugin is not None
    else [
        layout.trace_dir(path)
        for path in RUN_PATHS
        if os.path.isdir(layout.trace_dir(path))
    ]
)


# The trace folder: its summary (layout.trace_summaries) and trace files go into the report,
# category Traces: that of `snakemake trace --report traces.html` and the sweep's (reported_traces).
for traced_framework in frameworks.FRAMEWORKS:

    rule:
        name:
            f"trace_{traced_framework.name}"
        input:
            data=dataset_input(traced_framework.name, result_of=layout.trace_dir),
            image=image_inputs(traced_framework.name, result_of=layout.trace_dir),
        output:
            report(
                directory(layout.trace_dir(run_pattern(traced_framework.name))),
                patterns=[layout.TRACE_REPORT_PATTERN],
                caption="../report/traces.rst",
                category="Traces",
                labels={
                    "framework": traced_framework.name,
                    "model": "{model}",
                    "dataset": "{dataset}",
                    "gpus": "{gpus}",
                    "settings": "{settings}",
                    "file": "{file}",
                },
            ),
        log:
            layout.rule_log("trace", run_pattern(traced_framework.name)),
        wildcard_constraints:
            gpus=gpu_counts(multinode=False),
        threads: trainer_threads(traced_framework.name)
        resources:
            **slurm_resources(traced_framework.name),
        params:
            command=job_command(traced_framework.name, traced=True),
        run:
            shell(
                "mkdir -p {output:q} && ({params.command}) > {output:q}/trace.log 2>&1"
            )
            rulelog.run_logged(
                log[0],
                traces.write_summary,
                output[0],
                *layout.trace_summaries(output[0]),
            )


rule trace:
    input:
        [layout.trace_dir(path) for path in TRACED_PATHS]
        or refusal(
            "config key 'trace.select': picks no planned configuration to trace "
            f"({config['trace'].get('select', [])}); docs/traces.md"
        ),
    localrule: True
