"""The data stage's rules (workflow/rules/data.smk) run from a checkout whose path holds shell
syntax: every value that reaches their shell is quoted, so the path is just a path."""

import shutil
import subprocess

import pytest
import yaml

from conftest import REPO, SNAKEMAKE, TINY

# What a checkout, and the working directory, may be called; MARKER (in the shell's working
# directory, the checkout) must never be created.
HOSTILE_FOLDER = "co py $(touch MARKER) `touch MARKER` it's; touch MARKER"
CHECKOUT_PARTS = ("Snakefile", "workflow", "scalesweep", "scripts", "config", "envs")


@pytest.mark.slow
def test_synthetic_data_rules_run_from_a_checkout_whose_path_holds_shell_syntax(tmp_path):
    checkout = tmp_path / HOSTILE_FOLDER
    checkout.mkdir()
    for part in CHECKOUT_PARTS:
        copy = shutil.copytree if (REPO / part).is_dir() else shutil.copy
        copy(REPO / part, checkout / part)
    config = yaml.safe_load(TINY.read_text())
    (checkout / "tiny.yaml").write_text(yaml.safe_dump(config))
    targets = ["resources/datasets/cifar10/synth-cifar", "resources/datasets/imagefolder/synth-folder"]
    result = subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(checkout / "Snakefile"), "--configfile", str(checkout / "tiny.yaml"),
         "--replace-workflow-config", "--cores", "1", *targets],
        cwd=checkout, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (checkout / "MARKER").exists()
    assert sorted(p.name for p in (checkout / targets[0] / "cifar-10-batches-py").iterdir())[:2] == [
        "batches.meta", "data_batch_1"]
    assert len(list((checkout / targets[1] / "train").glob("*/*.jpeg"))) == 4 * 32
