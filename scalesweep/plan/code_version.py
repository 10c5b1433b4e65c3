"""The code a sweep's trainers run: its version, and the code record of an offline bundle.

The workflow computes `code_version` once when it is parsed and hands it to every trainer in
VERSION_ENV: the trainers may run in a container without git, and a SLURM job's own Snakemake
inherits the submitter's value. A run's header records it (docs/records.md), never the version at
tidy time, which a later edit would stamp on every earlier run.

An unpacked bundle has the repository's tracked files but no .git, so git cannot say which code a
run ran. The builder writes `bundle.json` at the bundle's top: the code version of the checkout it
was made from (`code_version`: the commit, `-dirty` with uncommitted code changes) and the SHA-256
of every tracked code file (CODE_PATHS). `bundle_version` reads it back, and adds `-dirty` when a
code file was edited after unpacking (envs/bundle.sh; docs/install-offline.md).

    python -m scalesweep.plan.code_version REPO FOLDER    (writes FOLDER/bundle.json, prints the version)
"""

import argparse
import functools
import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def scalesweep_version() -> str:
    """The git commit of this checkout (`-dirty` with uncommitted changes), else the installed
    package's version: the code that tabulated (and normally launched) the sweep."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=10,
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return metadata.version("scalesweep")
    except metadata.PackageNotFoundError:
        return "unknown"


# What `-dirty` looks at: the code that launches, trains and tabulates. config/ is an input that
# settings_hash already records; results, logs and docs change nothing a run computes.
CODE_PATHS = ("scalesweep", "scripts", "workflow", "Snakefile", "envs", "pyproject.toml")

# Set by the workflow, read by the trainers (scalesweep/train/common/runlog.py).
VERSION_ENV = "SCALESWEEP_VERSION"


def code_version(repo: Path = REPO) -> str:
    """The checkout's commit, `-dirty` when CODE_PATHS hold uncommitted changes; in an unpacked
    offline bundle the commit it was made from (bundle_version); the installed package's version
    without either (a copy without .git, say)."""
    recorded = bundle_version(repo)
    if recorded is not None:
        return recorded
    try:
        commit = _git(repo, "rev-parse", "--short=12", "HEAD")
        changed = _git(repo, "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
        return commit + ("-dirty" if changed else "")
    except (OSError, subprocess.SubprocessError):
        return scalesweep_version()


# An offline bundle (envs/bundle.sh) carries no .git: it records the code version it was made
# from and the SHA-256 of each code file in this file at its top (write_manifest).
BUNDLE_MANIFEST = "bundle.json"


def bundle_version(folder: Path) -> str | None:
    """The code version an unpacked bundle recorded, `-dirty` when a code file it holds was
    changed or removed since; None where `folder` is no bundle. ValueError naming the file when
    the record cannot be read: a run would otherwise record a version it did not run."""
    path = Path(folder) / BUNDLE_MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        version, files = str(manifest["code_version"]), dict(manifest["files"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a readable bundle record ({error!r}); "
                         "unpack the bundle again or remove the file") from None
    edited = any(file_sha256(Path(folder) / name) != digest for name, digest in files.items())
    return version + "-dirty" if edited and not version.endswith("-dirty") else version


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 in hex; None where it is missing."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _git(repo: Path, *args) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          timeout=10, check=True)
    return done.stdout.strip()


def code_files(repo: Path) -> list:
    """The tracked files under CODE_PATHS that the working tree holds (a file deleted but not yet
    committed is not in the bundle, so not in its record)."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--", *CODE_PATHS],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    return sorted(name for name in listed.split("\0") if name and (repo / name).is_file())


def manifest(repo: Path, folder: Path) -> dict:
    """The record of `folder`, a copy of `repo`'s tracked files: the checkout's code version and
    the SHA-256 of each code file as copied."""
    return {
        "code_version": code_version(repo),
        "files": {name: file_sha256(folder / name) for name in code_files(repo)},
    }


def write_manifest(repo: Path, folder: Path) -> str:
    """Write `folder`/bundle.json; the code version it records."""
    record = manifest(Path(repo), Path(folder))
    missing = sorted(name for name, digest in record["files"].items() if digest is None)
    if missing:
        raise ValueError(f"{folder}: the bundle lacks tracked code files: {', '.join(missing[:5])}")
    (Path(folder) / BUNDLE_MANIFEST).write_text(json.dumps(record, indent=1) + "\n")
    return record["code_version"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalesweep.plan.code_version",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="the git checkout the bundle is made from")
    parser.add_argument("folder", type=Path, help="the bundle's folder, holding a copy of its tracked files")
    args = parser.parse_args(argv)
    print(write_manifest(args.repo, args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
