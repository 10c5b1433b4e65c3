# The network probe (scripts/probe_network.py, docs/prediction.md): the gradients' all-reduce
# across two nodes, one process per GPU, a few seconds; its bus bandwidth and latency drive the
# predictions' communication rule beyond one node. `snakemake probe_network` runs it alone; a
# cluster sweep runs it when it predicts beyond one node (launch.network_probe_wanted). Locally two
# torchrun processes on this machine stand in for the two nodes.


rule probe_network:
    output:
        NETWORK_CSV,
    log:
        layout.rule_log("probe_network"),
    conda:
        conda_env(frameworks.network_probe_framework())
    resources:
        nodes=2,
        tasks=2,
        mpi="srun",
        gres=f"gpu:{config['cluster']['gpus_per_node']}",
        cpus_per_task=config["cluster"]["cpus_per_gpu"]
        * config["cluster"]["gpus_per_node"],
        tasks_per_gpu=0,
        runtime=10,
    params:
        command=launch.network_probe_shell(
            config["cluster"],
            PYTHON,
            workflow.basedir,
            NETWORK_CSV,
            NETWORK_PROBE_BYTES,
        ),
    shell:
        "({params.command}) > {log:q} 2>&1"
