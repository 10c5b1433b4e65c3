# Synthetic datasets, written in exactly the on-disk formats of the real ones.
from scalesweep.contract import layout
from scalesweep.plan import matrix

# The generator's options of each synthetic dataset: its `synthetic:` entry, by name.
SYNTHETIC_OPTIONS = {
    name: matrix.synthetic_options(spec["synthetic"])
    for name, spec in config["datasets"].items()
    if spec.get("synthetic") is not None
}


rule make_synthetic_cifar:
    output:
        directory(layout.dataset_dir("cifar10", "{dataset}")),
    log:
        layout.rule_log("data", "cifar10", "{dataset}"),
    conda:
        "../../envs/data.yaml"
    params:
        options=lambda wildcards: SYNTHETIC_OPTIONS[wildcards.dataset],
        python=PYTHON,
        script=script("make_cifar.py"),
    shell:
        "{params.python:q} {params.script:q} --out {output:q} {params.options} > {log:q} 2>&1"


rule make_synthetic_imagefolder:
    output:
        directory(layout.dataset_dir("imagefolder", "{dataset}")),
    log:
        layout.rule_log("data", "imagefolder", "{dataset}"),
    conda:
        "../../envs/data.yaml"
    params:
        options=lambda wildcards: SYNTHETIC_OPTIONS[wildcards.dataset],
        python=PYTHON,
        script=script("make_imagefolder.py"),
    shell:
        "{params.python:q} {params.script:q} --out {output:q} {params.options} > {log:q} 2>&1"
