"""The MareNostrum 5 profile as tests use it: profiles/mn5 copied with an account (the site refuses
jobs without one) and, where a test needs it, its site declaration or default resources changed,
then run from a working directory laid out like the repository root."""

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
# The account a test's copy of the profile sets.
ACCOUNT = "abc123"


def mn5_profile(folder, resources=None, configfile=True, site=None, account=ACCOUNT):
    """profiles/mn5 copied into `folder`: the account set (None: left unset, as shipped), more
    default `resources`, the site's declaration changed by `site`, and without its config file
    unless `configfile`."""
    folder.mkdir(parents=True)
    settings = yaml.safe_load((REPO / "profiles" / "mn5" / "config.yaml").read_text())
    settings["default-resources"].update(resources or {})
    if account is not None:
        settings["default-resources"]["slurm_account"] = account
    settings["config"]["site"].update(site or {})
    if not configfile:
        settings.pop("configfile")
    (folder / "config.yaml").write_text(yaml.safe_dump(settings))
    return folder


def run_with_profile(workdir, *args, timeout=120, env=None):
    """`snakemake --profile mn5 ARGS` from `workdir`, which holds ./mn5 (a profile) and ./config
    (the repository's config/, as from the repository root)."""
    if not (workdir / "config").exists():
        (workdir / "config").symlink_to(REPO / "config")
    return subprocess.run(
        [str(SNAKEMAKE), "--profile", "mn5", "--snakefile", str(REPO / "Snakefile"), *args],
        cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env,
    )
