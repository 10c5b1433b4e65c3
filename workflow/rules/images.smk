# The sweep's container images (scalesweep/plan/containers.py), before any training: each distinct
# remote image (docker://, library://, ...) is pulled once into resources/containers/<name>.sif,
# where every job and node would otherwise convert it at once into one shared cache; each image's
# SHA-256 is written once per sweep for provenance (runs.csv: container_digest). Both run where
# Snakemake runs (localrule): a pull needs the network, which compute nodes often lack.
from scalesweep import rulelog
from scalesweep.contract import layout
from scalesweep.plan import containers, launch

# The sweep's images (common.smk: IMAGES) by file-safe name (the `image` wildcard).
IMAGE_NAMES = {containers.image_name(image): image for image in IMAGES.values()}


rule images:
    output:
        sif=layout.pulled_image("{image}"),
        digest=layout.pulled_image_digest("{image}"),
    log:
        layout.rule_log("images", "{image}"),
    wildcard_constraints:
        image=containers.name_pattern(IMAGES.values(), pulled=True),
    localrule: True
    params:
        command=lambda wildcards: launch.pull_command(
            config["container"],
            IMAGE_NAMES[wildcards.image],
            containers.pulled_sif(IMAGE_NAMES[wildcards.image]),
        ),
    run:
        rulelog.run_logged(
            log[0],
            containers.write_image,
            params.command,
            output.sif,
            output.digest,
        )


# A local image is run as it is and only hashed. Its path, size and modification time are the
# params: Snakemake hashes it again when they change (a rebuilt image), and only then.
LOCAL_IMAGE_PATHS = {
    name: launch.absolute(image, WORKDIR)
    for name, image in IMAGE_NAMES.items()
    if not containers.is_pulled(image)
}


rule image_digest:
    output:
        layout.local_image_digest("{image}"),
    log:
        layout.rule_log("images", "{image}.digest"),
    wildcard_constraints:
        image=containers.name_pattern(IMAGES.values(), pulled=False),
    localrule: True
    params:
        path=lambda wildcards: LOCAL_IMAGE_PATHS[wildcards.image],
        identity=lambda wildcards: containers.file_identity(
            LOCAL_IMAGE_PATHS[wildcards.image]
        ),
        key=lambda wildcards: containers.image_keys(IMAGES, wildcards.image),
    run:
        rulelog.run_logged(
            log[0], containers.write_digest, params.path, output[0], params.key
        )
