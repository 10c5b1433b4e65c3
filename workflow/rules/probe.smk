# The network probe (scripts/probe_network.py, docs/prediction.md): the all-reduce of the sweep's
# largest PyTorch model's gradient bytes in its DDP buckets across two nodes, one process per GPU,
# a few seconds; its bus bandwidth and latency drive the predictions' communication rule beyond
# one node. `snakemake probe_network` runs it alone; a cluster sweep runs it when it predicts
# beyond one node (launch.network_probe_wanted). On a cluster it runs in the PyTorch container
# as a 2-node training job does; locally two torchrun processes stand in for the two nodes.
from scalesweep.contract import frameworks, layout
from scalesweep.plan import launch

# The probe all-reduces the gradients of the sweep's models of its framework: a sweep without a
# run of that framework has none, and the probe's job is refused when it is built.
NETWORK_PROBE_MODELS = launch.network_probe_models(SETTINGS.values())
NETWORK_PROBE_FRAMEWORK = NETWORK_PROBE_SETTINGS["framework"]


rule probe_network:
    input:
        image=image_needs(NETWORK_PROBE_SETTINGS["framework"]),
    output:
        NETWORK_CSV,
    log:
        layout.rule_log("probe_network"),
    conda:
        conda_env(frameworks.network_probe_framework())
    resources:
        **launch.slurm_resources(NETWORK_PROBE_SETTINGS, config["cluster"]),
        mpi="srun",
    params:
        # The command (launch.network_probe_shell), built when the job is.
        command=(
            (
                lambda wildcards: launch.network_probe_shell(
                    config["cluster"],
                    config["container"],
                    workflow.basedir,
                    WORKDIR,
                    PYTHON,
                    NETWORK_CSV,
                    NETWORK_PROBE_MODELS,
                )
            )
            if NETWORK_PROBE_MODELS
            else refusal(
                f"probe_network all-reduces the gradients of the sweep's {NETWORK_PROBE_FRAMEWORK} "
                f"models, and matrix.framework plans no {NETWORK_PROBE_FRAMEWORK} run "
                "(docs/prediction.md)"
            )
        ),
    shell:
        "({params.command}) > {log:q} 2>&1"
