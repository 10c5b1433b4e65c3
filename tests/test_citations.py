"""Every repository path the code, configs and docs cite exists, and nothing cites material the
repository does not ship."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOP_FOLDERS = ("docs", "scripts", "scalesweep", "tests", "workflow", "benchmarks", "envs", "config", "profiles")
CITED_PATH = re.compile(r"(?<![\w./~-])((?:%s)/[\w./~-]*\w\.(?:py|md|smk|yaml|yml|txt|rst|sh|csv|png|in))\b"
                        % "|".join(TOP_FOLDERS))
# Paths a sweep or a test makes (outputs, temporary layouts), not files of the repository.
MADE_BY_RUNS = ("results/", "logs/", "resources/", "tests/data/broken/EXPECTED.csv")
UNSHIPPED = ("REFERENCE.md", "../shared")


def tracked_text_files():
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in names.split():
        path = REPO / name
        if path.suffix in {".py", ".md", ".smk", ".yaml", ".yml", ".rst", ".toml", ".sh", ".txt", ".in"} or \
                path.name in {"Makefile", "Snakefile", "run"}:
            yield path


def cited_paths(text):
    return {match.group(1) for match in CITED_PATH.finditer(text)}


def test_every_cited_repository_path_exists():
    missing = []
    for path in tracked_text_files():
        for cited in cited_paths(path.read_text(errors="replace")):
            if not cited.startswith(MADE_BY_RUNS) and not (REPO / cited).exists():
                missing.append(f"{path.relative_to(REPO)} cites {cited}")
    assert missing == []


def test_nothing_cites_material_the_repository_does_not_ship():
    this_file = Path(__file__).resolve()
    citing = [f"{path.relative_to(REPO)}: {marker}" for path in tracked_text_files() if path != this_file
              for marker in UNSHIPPED if marker in path.read_text(errors="replace")]
    assert citing == []


def test_the_path_pattern_finds_citations_and_not_their_neighbours():
    assert cited_paths("see docs/reference.md §3 and scripts/train_tf.py.") == {"docs/reference.md", "scripts/train_tf.py"}
    assert cited_paths("results/tidy/runs.csv a/docs/x.md") == set()
