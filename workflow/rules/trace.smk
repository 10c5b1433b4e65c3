# `snakemake trace`: the configurations `trace.select` picks, rerun briefly with the framework's
# profiler on into results/traces/<run path>/ (scripts/torch_trace.py, scripts/tf_trace.py), each
# with a summary from the trace itself (scalesweep/logs/traces.py). A trace changes timing: its
# own rule and folder, never results/runs/ or the tidy tables (docs/traces.md).
from scalesweep.contract import layout
from scalesweep.logs import traces

TRACED_PATHS = [RUN_PATHS[index] for index in matrix.traced_runs(RUNS, config["trace"])]


def trace_output(framework):
    return directory(layout.trace_dir(f"{framework}/{RUN_PATTERN}"))


def trace_command(framework):
    def command_of(wildcards):
        path = run_path(framework, wildcards)
        settings = matrix.trace_settings(
            SETTINGS[path], config["trace"], layout.trace_dir(path)
        )
        return launch.job_command(
            settings, config["container"], workflow.basedir, WORKDIR, PYTHON
        )

    return command_of


def traced_dir(path):
    return layout.trace_dir(path)


for traced_framework in frameworks.FRAMEWORKS:

    rule:
        name:
            f"trace_{traced_framework.name}"
        input:
            data=dataset_input(traced_framework.name, result_of=traced_dir),
            image=image_inputs(traced_framework.name, result_of=traced_dir),
        output:
            trace_output(traced_framework.name),
        log:
            layout.rule_log("trace", traced_framework.name, RUN_PATTERN),
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
                log[0],
                traces.write_summary,
                output[0],
                f"{output[0]}/summary.json",
                f"{output[0]}/summary.md",
            )


def traced_outputs(wildcards):
    if not TRACED_PATHS:
        raise WorkflowError(
            "config key 'trace.select': picks no planned configuration to trace "
            f"({config['trace'].get('select', [])}); docs/traces.md"
        )
    return [layout.trace_dir(path) for path in TRACED_PATHS]


rule trace:
    input:
        traced_outputs,
    localrule: True
