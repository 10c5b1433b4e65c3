"""The preview says which files made the config: a --configfile merged with config/config.yaml
is named as merged, with the option that leaves the default out (issue 28.7)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from scalesweep.plan.preview import config_files_line

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def test_a_merged_configfile_is_named_with_the_option_that_replaces_the_default():
    line = config_files_line(["config/config.yaml", "one.yaml"], ["one.yaml"])
    assert line.startswith("scalesweep: config from config/config.yaml, then one.yaml (merged:")
    assert "--configfile one.yaml --replace-workflow-config" in line
    alone = config_files_line(["one.yaml"], ["one.yaml"])
    assert alone == "scalesweep: config from one.yaml"
    assert config_files_line(["config/config.yaml"], []) == "scalesweep: config from config/config.yaml"


def test_the_preview_of_a_merged_config_says_so(tmp_path):
    """A one-combination file beside the default config: the default's repeats leak in, and the
    preview says where from."""
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    one = tmp_path / "one.yaml"
    one.write_text("matrix:\n  framework: [pytorch]\n  model: [vit_tiny]\n  dataset: [synth-folder]\n  gpus: [1]\n")
    result = subprocess.run(
        [str(SNAKEMAKE), "-n", "--snakefile", str(REPO / "Snakefile"), "--configfile", str(one)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "SLURM_CONF": os.devnull})
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"scalesweep: config from config/config.yaml, then {one} (merged:" in result.stderr
    assert "--replace-workflow-config" in result.stderr
