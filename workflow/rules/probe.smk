# The network probe (scripts/probe_network.py, docs/prediction.md): the all-reduce of the sweep's
# largest PyTorch model's gradient bytes in its DDP buckets across two nodes, one process per GPU,
# a few seconds; its bus bandwidth and latency drive the predictions' communication rule beyond
# one node. `snakemake probe_network` runs it alone; a cluster sweep runs it when it predicts
# beyond one node (launch.network_probe_wanted). On a cluster it runs in the PyTorch container
# as a 2-node training job does; locally two torchrun processes stand in for the two nodes.


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
        command=network_probe_command,
    shell:
        "({params.command}) > {log:q} 2>&1"
