"""The sweep's container images: each pulled once (rule `images`) and hashed once (`image_digest`).

A `docker://` (or any `scheme://`) image given to `apptainer exec` is converted into a SIF by every
job that runs it, and in a run across nodes by every node, all at once into one shared cache: a
known way to corrupt an Apptainer/Singularity cache. The workflow pulls each distinct such image
once, before the trainings, into resources/containers/<name>.sif, and the trainings run that
file. A local image (a .sif path, a sandbox folder) is run as it is.

Provenance records the image's digest beside its path: the SHA-256 of the image file, so two
sweeps that ran the same path with a rebuilt image are told apart. Hashing a multi-GB image in
every job would cost minutes per job, so it is hashed once per sweep into a small file in
`sha256sum`'s format (beside a pulled SIF; under resources/containers/local/ for a local image),
and not again while the image keeps its path, size and modification time.
"""

import hashlib
import os
import re
import subprocess
from pathlib import Path

from scalesweep.contract import atomic, layout

# What a file name may hold: a config's image text can hold anything (`$(...)`, spaces, quotes).
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
CHUNK = 8 << 20
SHA256 = re.compile(r"[0-9a-f]{64}")


def is_pulled(image: str) -> bool:
    """An image a runtime would fetch (docker://, library://, oras://, ...), not a local path."""
    return "://" in image


def image_name(image: str) -> str:
    """A file-name-safe, unique name of an image: its readable part plus a hash of the whole text,
    so two images whose readable parts coincide never share a file."""
    readable = UNSAFE.sub("-", image.split("://", 1)[-1]).strip("-.")[:80] or "image"
    return f"{readable}-{hashlib.sha256(image.encode()).hexdigest()[:8]}"


def pulled_sif(image: str) -> str:
    """Where the workflow pulls a remote image to (relative to the working directory)."""
    return layout.pulled_image(image_name(image))


def digest_file(image: str) -> str:
    """The file that holds an image's digest: beside the SIF of a pulled image."""
    if is_pulled(image):
        return layout.pulled_image_digest(image_name(image))
    return layout.local_image_digest(image_name(image))


def image_file(image: str) -> str:
    """The image file `<runtime> exec` runs: the pulled SIF, or the local image as given."""
    return pulled_sif(image) if is_pulled(image) else image


def sweep_images(container: dict, frameworks) -> dict:
    """{framework: image} of the frameworks that run, for a container runtime (none: {})."""
    if container["runtime"] == "none":
        return {}
    return {framework: container["images"][framework] for framework in sorted(set(frameworks))}


def name_pattern(images, pulled: bool) -> str:
    """A regex of the names (image_name) of the pulled (or local) `images`, a rule's wildcard
    constraint; one matching nothing where there are none (a rule must still parse)."""
    names = sorted({image_name(image) for image in images if is_pulled(image) == pulled})
    return "|".join(map(re.escape, names)) or "(?!)"


def image_keys(images: dict, name: str) -> str:
    """The config keys of the image named `name` among {framework: image} (sweep_images), for
    messages: container.images.<framework>, joined by "and"."""
    return " and ".join(f"container.images.{framework}" for framework, image in images.items()
                        if image_name(image) == name)


def sha256_of(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_identity(path) -> str:
    """What tells a rebuilt image from the one hashed before without reading it: path, size and
    modification time (a missing image: its path alone; the rule then says it is missing)."""
    try:
        stat = os.stat(path)
    except OSError:
        return os.path.abspath(path)
    return f"{os.path.abspath(path)} size={stat.st_size} mtime_ns={stat.st_mtime_ns}"


def write_digest(image_path, digest_path, what="the image") -> str:
    """The rule `image_digest`: hash a local image file into digest_path, as `sha256sum` writes it
    (`<hex>  <path>`, so `sha256sum -c` checks it). The workflow hashes it again only when its
    file_identity changed: that is the rule's params, and Snakemake reruns a job whose params
    changed. `what` names the config key in errors. Returns the rule's log line."""
    Path(digest_path).parent.mkdir(parents=True, exist_ok=True)
    if os.path.isdir(image_path):
        # A sandbox folder is no single file to hash: its path is all provenance can say.
        atomic.write_text("", digest_path)
        return f"{image_path}: a folder (a sandbox image): no digest"
    if not os.path.isfile(image_path):
        raise FileNotFoundError(f"{what}: '{image_path}' does not exist")
    digest = sha256_of(image_path)
    atomic.write_text(f"{digest}  {os.path.abspath(image_path)}\n", digest_path)
    return f"{image_path}: sha256 {digest}"


def read_digest(digest_path) -> str | None:
    """`sha256:<hex>` from a digest file, or None (no file, a sandbox folder, anything else)."""
    try:
        words = Path(digest_path).read_text().split()
    except OSError:
        return None
    return f"sha256:{words[0]}" if words and SHA256.fullmatch(words[0]) else None


def sweep_digests(container: dict, frameworks) -> dict:
    """{framework: 'sha256:...' or None} of the sweep's images, from their digest files."""
    return {framework: read_digest(digest_file(image))
            for framework, image in sweep_images(container, frameworks).items()}


def write_image(command: str, sif, digest_path) -> str:
    """The rule `images`: pull one image with `command` (launch.pull_command: module load, then
    `<runtime> pull SIF URI`, run by bash as a rule's shell would), then hash the SIF. A failed
    pull raises with its output (the rule's log gets it); so does a pull that left no SIF."""
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"pulling into {sif} failed (exit {done.returncode}): {command}\n{done.stdout}{done.stderr}"
        )
    if not os.path.isfile(sif) or os.path.getsize(sif) == 0:
        raise RuntimeError(f"'{command}' succeeded but left no image at {sif}")
    return write_digest(sif, digest_path)


def sdm_warnings(deployment_methods, container: dict) -> list:
    """What Snakemake's --sdm does not do here, as warnings. `deployment_methods`: the names
    given (`apptainer`, `conda`, `env-modules`); `container`: the config's section.

    The train rules carry no `container:` directive on purpose: Snakemake would run a job's whole
    command inside the image, the `srun` of a run across nodes included, where no SLURM client
    is; launch.py puts the runtime inside the job instead, around each trainer process. So
    --sdm apptainer changes nothing, and --sdm conda builds environments no trainer runs in
    once the trainers run in images."""
    runtime = container.get("runtime", "none")
    warnings = []
    if "apptainer" in deployment_methods:
        where = (f"the config's container section runs them: runtime {runtime}, one image per framework"
                 if runtime != "none" else
                 "with the config's container.runtime none they run on the host; set runtime "
                 "apptainer or singularity and container.images to run them in images")
        warnings.append(
            "--sdm apptainer changes nothing for the trainers: " + where + " (docs/containers.md). "
            "The rules build the container command themselves because Snakemake would put the "
            "whole job, srun included, inside the image, where no SLURM client is")
    if "conda" in deployment_methods and runtime != "none":
        warnings.append(
            f"--sdm conda builds the train rules' conda environments, but the trainers run in the "
            f"images of the config's container section (runtime {runtime}), not in them; leave "
            "--sdm conda out, or set container.runtime none to train in the conda environments")
    return warnings


def image_files(image) -> list:
    """What a job needs of its framework's `image`: the digest (rule image_digest, or rule `images`
    with the pulled SIF); nothing without a container runtime (`image` None)."""
    if not image:
        return []
    return ([pulled_sif(image)] if is_pulled(image) else []) + [digest_file(image)]
