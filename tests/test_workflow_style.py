"""The workflow's own hygiene, as its CI checks would: snakefmt's formatting and Snakemake's
linter, run on the repository's Snakefile and rules from an empty working directory."""

import subprocess
import sys
from pathlib import Path

from conftest import REPO

BIN = Path(sys.executable).parent


def test_snakefiles_are_snakefmt_clean():
    done = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_lint_is_clean_with_and_without_a_comparison(tmp_path):
    # The sweep to compare with must exist when the workflow is parsed: here a runs table of it.
    (tmp_path / "base-sweep").mkdir()
    (tmp_path / "base-sweep" / "runs.csv").write_text("framework,model,dataset,gpus,status\n")
    for extra in ([], ["--config", "compare_with=base-sweep"]):
        done = subprocess.run(
            [str(BIN / "snakemake"), "--lint", "--snakefile", str(REPO / "Snakefile"),
             "--configfile", str(REPO / "config" / "config.yaml"), *extra],
            cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Lints for" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert "Congratulations, your workflow is in a good condition!" in done.stdout + done.stderr
