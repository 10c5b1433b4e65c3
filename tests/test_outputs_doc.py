"""docs/outputs.md's list of what a sweep leaves in results/, against what the
workflow asks for and writes. The fast test reads the target `all` of the default config's dry
run; the slow one the files the tiny sweep (tests/configs/tiny.yaml) wrote. Both configs' `all`
asks for the same files but the runs (rule all in the Snakefile), and compare/ exists only with
`compare_with` set, which neither config sets."""

import re

import pytest

from conftest import REPO, snakemake
from scalesweep.contract import layout
from scalesweep.history import sides
from scalesweep.report import figures

RESULTS_HEADING = "Afterwards `results/` holds"
ONLY_WITH_COMPARE = "compare/"
PER_RUN = "runs/"


def outputs_listing():
    """(entries, figure names, the block): docs/outputs.md's results/ listing, its first word per
    entry (lines indented by two) and the figure names (the lines indented by four)."""
    block = (REPO / "docs" / "outputs.md").read_text().split(RESULTS_HEADING)[1].split("```")[1]
    lines = block.splitlines()
    entries = [line.split()[0] for line in lines if re.match(r"^  \S", line)]
    names = [name for line in lines if re.match(r"^    \S", line) for name in line.split()]
    return entries, names, block


def sweep_wide(entries):
    """The entries every sweep writes once (not per run, not only with compare_with)."""
    return {entry for entry in entries if not entry.startswith((PER_RUN, ONLY_WITH_COMPARE))}


def test_outputs_doc_lists_every_figure_and_says_how_many():
    _, names, block = outputs_listing()
    assert sorted(names) == sorted(figures.FIGURE_NAMES)
    assert len(names) == len(set(names)) == 17
    assert f"{len(names)} figures, each as <name>.png and <name>.svg" in block


def test_outputs_doc_lists_the_comparison_files_of_compare_with():
    entries, _, _ = outputs_listing()
    listed = [entry for entry in entries if entry.startswith(ONLY_WITH_COMPARE)]
    assert listed == sides.comparison_outputs("some-sweep", "compare")
    assert listed == ["compare/compare.csv", "compare/compare.png", "compare/summary.txt"]


def test_outputs_doc_lists_what_the_default_sweeps_target_all_asks_for(tmp_path):
    dryrun = snakemake(tmp_path, "-n", configfile=REPO / "config" / "config.yaml")
    assert dryrun.returncode == 0, dryrun.stderr[-3000:]
    inputs = dryrun.stdout.split("rule all:\n    input: ")[1].split("\n")[0].split(", ")
    asked = {path.removeprefix("results/") for path in inputs}
    runs = {path for path in asked if path.startswith(PER_RUN)}
    assert len(runs) == 12
    # history/ is no output (the archive folder may be shared): archived.json stands for it
    listed = sweep_wide(outputs_listing()[0]) - {"history/sweep-<id>.parquet"}
    assert {entry.rstrip("/") for entry in listed} == asked - runs


@pytest.mark.slow
def test_outputs_doc_lists_the_files_a_sweep_writes(tiny_sweep):
    results = tiny_sweep / "results"
    written = {str(path.relative_to(results)) for path in results.rglob("*")
               if path.is_file() and not path.name.startswith(".")}
    entries, names, _ = outputs_listing()
    assert {path for path in written if path.startswith("figures/")} == {
        f"figures/{file}" for name in names for file in layout.figure_names(name)}
    archived = [path for path in written if path.startswith("history/")]
    assert len(archived) == 1 and re.fullmatch(r"history/sweep-\d{8}T\d{6}Z-[0-9a-f]{12}\.parquet", archived[0])
    sweep_files = {path for path in written if not path.startswith((PER_RUN, "figures/", "history/"))}
    assert sweep_files | {"figures/", "history/sweep-<id>.parquet"} == sweep_wide(entries)
    assert len([path for path in written if path.startswith(PER_RUN)]) == 4
