"""--sdm apptainer (or conda where the trainers run in images) is not silently accepted: the
workflow says the config's container section does that work, and why."""

import pytest

from conftest import snakemake
from scalesweep.plan import containers

IN_IMAGES = {"runtime": "apptainer", "images": {"pytorch": "/images/torch.sif"}}
ON_THE_HOST = {"runtime": "none"}


def test_apptainer_names_the_container_section_and_srun():
    (warning,) = containers.sdm_warnings({"apptainer"}, IN_IMAGES)
    assert warning.startswith("--sdm apptainer changes nothing for the trainers: the config's container "
                              "section runs them: runtime apptainer")
    assert "srun included, inside the image, where no SLURM client is" in warning


def test_apptainer_on_the_host_says_how_to_use_images():
    (warning,) = containers.sdm_warnings({"apptainer"}, ON_THE_HOST)
    assert "container.runtime none they run on the host" in warning


def test_conda_is_warned_about_only_where_the_images_make_it_moot():
    (warning,) = containers.sdm_warnings({"conda"}, {"runtime": "singularity"})
    assert "the trainers run in the images of the config's container section (runtime singularity)" in warning
    # With runtime none the rules' conda environments are what the trainers run in (common.smk: PYTHON).
    assert containers.sdm_warnings({"conda"}, ON_THE_HOST) == []
    assert containers.sdm_warnings(set(), IN_IMAGES) == []
    assert len(containers.sdm_warnings({"conda", "apptainer"}, IN_IMAGES)) == 2


@pytest.mark.slow
def test_the_workflow_prints_the_warning_with_sdm_apptainer_only(tmp_path):
    warned = snakemake(tmp_path, "-n", "--sdm", "apptainer")
    assert warned.returncode == 0, warned.stderr
    assert "scalesweep: warning: --sdm apptainer changes nothing for the trainers" in warned.stderr
    plain = snakemake(tmp_path, "-n")
    assert plain.returncode == 0 and "--sdm" not in plain.stderr
