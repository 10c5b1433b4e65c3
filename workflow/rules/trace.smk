# `snakemake trace`: the configurations `trace.select` picks, rerun briefly with the framework's
# profiler on into results/traces/<run path>/ (scalesweep/train/torch_backend/trace.py,
# scalesweep/train/tf_backend/trace.py), each
# with a summary from the trace itself (scalesweep/logs/traces.py). A trace changes timing: its
# own rule and folder, never results/runs/ or the tidy tables (docs/traces.md).
# Its input functions: common.smk (trace_output, trace_command, traced_outputs).
from scalesweep.logs import traces

for traced_framework in frameworks.FRAMEWORKS:

    rule:
        name:
            f"trace_{traced_framework.name}"
        input:
            data=dataset_input(traced_framework.name, result_of=layout.trace_dir),
            image=image_inputs(traced_framework.name, result_of=layout.trace_dir),
        output:
            trace_output(traced_framework.name),
        log:
            layout.rule_log("trace", run_pattern(traced_framework.name)),
        wildcard_constraints:
            gpus=gpu_counts(multinode=False),
        threads: trainer_threads(traced_framework.name)
        resources:
            **slurm_resources(traced_framework.name),
        params:
            command=trace_command(traced_framework.name),
        run:
            shell(
                "mkdir -p {output:q} && ({params.command}) > {output:q}/trace.log 2>&1"
            )
            rulelog.run_logged(
                log[0], traces.write_summary, output[0], *trace_summaries(output[0])
            )


rule trace:
    input:
        traced_outputs,
    localrule: True
