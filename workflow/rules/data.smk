# Synthetic datasets, written in exactly the on-disk formats of the real ones.


rule make_synthetic_cifar:
    output:
        directory("resources/datasets/cifar10/{dataset}"),
    params:
        options=synthetic_options,
    log:
        "logs/data/cifar10/{dataset}.log",
    shell:
        "{PYTHON} scripts/make_cifar.py --out {output} {params.options} > {log} 2>&1"


rule make_synthetic_imagefolder:
    output:
        directory("resources/datasets/imagefolder/{dataset}"),
    params:
        options=synthetic_options,
    log:
        "logs/data/imagefolder/{dataset}.log",
    shell:
        "{PYTHON} scripts/make_imagefolder.py --out {output} {params.options} > {log} 2>&1"
