"""Where the sweep history may live: never where the workflow writes or deletes.

The history is the one folder a sweep never recreates: every other file under results/, logs/,
resources/ and .snakemake/ can be made again by running the workflow, and is treated so. A rule
with a directory output has it deleted and made anew (Snakemake removes an output before its job
runs: `history_dir: results/figures` lost every archive when the figures were drawn), a wildcard
output writes and removes files anywhere below its fixed part, and `make clean` removes those
folders whole. So the history folder is refused, before any job, when it is (or is inside) a
folder that a rule's output or log lives in, or any folder between it and the working folder,
with one exception: the folders that hold the default history folder (results/ for
results/history) are the workflow's own place for it, so there only the folder itself is
refused (results/ itself holds findings.md), not its other subfolders. Snakemake's metadata
folder (.snakemake/) is refused as well.

A history folder that *contains* such folders loses nothing by it (the archive reads and writes
only its own `sweep-*.parquet` files, directly in its folder) unless a rule's output could land
on one of those names: that is refused too.

The folders are derived from the rules' outputs and logs (the Snakefile passes the rules in once
every one is defined), so a new rule's folder is covered without editing a list.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from scalesweep.contract import layout
from scalesweep.plan.checks import ConfigError

# The history folder when the config names none (the schema's `history_dir` default): the
# workflow's own place for it, and what `scalesweep history` and `compare` read by default.
DEFAULT_HISTORY_DIR = layout.DEFAULT_HISTORY
SNAKEMAKE_FOLDER = ".snakemake"  # Snakemake's metadata, conda environments, SLURM logs
# A name the archive would write (history/query.py: FILE_PREFIX, FILE_SUFFIX), tried against the outputs.
SAMPLE_ARCHIVE = "sweep-20260101T000000Z-0123456789ab.parquet"


@dataclass(frozen=True)
class Output:
    """One output or log of a rule, as written in the workflow."""

    rule: str
    pattern: str
    directory: bool = False


@dataclass(frozen=True)
class Owned:
    """A folder the workflow writes: `below` when every folder under it is the workflow's too."""

    folder: str
    why: str
    below: bool = True


def fixed_folder(output: Output) -> str:
    """The deepest folder an output lives in that no wildcard names: the output itself for a
    directory output without wildcards."""
    fixed = output.pattern.split("{", 1)[0]
    if fixed == output.pattern and output.directory:
        return os.path.normpath(fixed)
    return os.path.normpath(os.path.dirname(fixed) or ".")


def owned_folders(outputs, default_history: str) -> list[Owned]:
    """The folders of the outputs and every folder between each and the working folder; those
    that hold `default_history` are owned only themselves (below=False)."""
    reserved = {str(parent) for parent in PurePosixPath(os.path.normpath(default_history)).parents}
    owned = {}
    for output in outputs:
        folder = PurePosixPath(fixed_folder(output))
        if folder.is_absolute() or str(folder) == ".":
            chain = [folder]
        else:
            chain = [folder, *(parent for parent in folder.parents if str(parent) != ".")]
        what = "deletes and remakes" if output.directory and "{" not in output.pattern else "writes"
        for place in chain:
            key = str(place)
            if key not in owned:
                owned[key] = Owned(key, f"rule {output.rule} {what} {output.pattern}", key not in reserved)
    owned.setdefault(SNAKEMAKE_FOLDER, Owned(SNAKEMAKE_FOLDER, "Snakemake keeps its metadata there"))
    return list(owned.values())


def history_place_problem(history_dir: str, outputs, default_history: str, workdir=".",
                          matches=None) -> str | None:
    """Why `history_dir` cannot hold the history, or None. `matches(pattern, path)`: whether an
    output pattern names a path (snakemake.io's own matching, given by the workflow)."""
    history = _absolute(history_dir, workdir)
    for owned in owned_folders(outputs, default_history):
        folder = _absolute(owned.folder, workdir)
        inside = history == folder or (owned.below and folder in history.parents)
        if inside:
            where = "is" if history == folder else "is inside"
            return (f"'{history_dir}' {where} {owned.folder}/, which the workflow owns ({owned.why}): "
                    "and the workflow deletes what it owns (a directory output before its rule runs, "
                    "`make clean` whole folders): give the history a folder of its own, e.g. the "
                    f"default {DEFAULT_HISTORY_DIR} or a shared path")
    if matches is not None:
        for output in outputs:
            archive = os.path.relpath(history / SAMPLE_ARCHIVE, _absolute(".", workdir))
            if matches(output.pattern, archive):
                return (f"'{history_dir}': rule {output.rule} writes {output.pattern}, which names the "
                        f"history's own files ({SAMPLE_ARCHIVE}): give the history a folder of its own")
    return None


def _absolute(path: str, workdir) -> Path:
    """`path` from `workdir`, links resolved (a link into results/figures is results/figures)."""
    return (Path(workdir) / path).resolve()


def rule_outputs(rules) -> list[Output]:
    """Every output and log of Snakemake's `rules`, as written."""
    return [Output(rule.name, str(path), path.is_directory) for rule in rules for path in [*rule.output, *rule.log]]


def snakemake_matches(pattern: str, path: str) -> bool:
    """Whether an output pattern names `path`, as Snakemake matches it."""
    from snakemake.io import regex_from_filepattern

    return re.match(regex_from_filepattern(pattern), path) is not None


def refuse_owned_history(history_dir: str, rules, workdir, sources: str) -> None:
    """WorkflowError (the key, the folder, the config files `sources`) for a history folder where
    one of `rules` writes; called when the workflow is parsed, before any job."""
    from snakemake.exceptions import WorkflowError

    problem = history_place_problem(history_dir, rule_outputs(rules), DEFAULT_HISTORY_DIR, workdir,
                                    snakemake_matches)
    if problem:
        raise WorkflowError(f"{ConfigError('history_dir', problem)} {sources}")
