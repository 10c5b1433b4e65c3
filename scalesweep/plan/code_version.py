"""The code record of an offline bundle (envs/bundle.sh; docs/install-offline.md).

An unpacked bundle has the repository's tracked files but no .git, so git cannot say which code a
run ran. The builder writes `bundle.json` at the bundle's top: the code version of the checkout it
was made from (`provenance.code_version`: the commit, `-dirty` with uncommitted code changes) and
the SHA-256 of every tracked code file (provenance.CODE_PATHS). `provenance.bundle_version` reads
it back, and adds `-dirty` when a code file was edited after unpacking.

    python -m scalesweep.bundle REPO FOLDER    (writes FOLDER/bundle.json, prints the version)
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from scalesweep import provenance


def code_files(repo: Path) -> list:
    """The tracked files under CODE_PATHS that the working tree holds (a file deleted but not yet
    committed is not in the bundle, so not in its record)."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--", *provenance.CODE_PATHS],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    return sorted(name for name in listed.split("\0") if name and (repo / name).is_file())


def manifest(repo: Path, folder: Path) -> dict:
    """The record of `folder`, a copy of `repo`'s tracked files: the checkout's code version and
    the SHA-256 of each code file as copied."""
    return {
        "code_version": provenance.code_version(repo),
        "files": {name: provenance.file_sha256(folder / name) for name in code_files(repo)},
    }


def write_manifest(repo: Path, folder: Path) -> str:
    """Write `folder`/bundle.json; the code version it records."""
    record = manifest(Path(repo), Path(folder))
    missing = sorted(name for name, digest in record["files"].items() if digest is None)
    if missing:
        raise ValueError(f"{folder}: the bundle lacks tracked code files: {', '.join(missing[:5])}")
    (Path(folder) / provenance.BUNDLE_MANIFEST).write_text(json.dumps(record, indent=1) + "\n")
    return record["code_version"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalesweep.bundle", description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="the git checkout the bundle is made from")
    parser.add_argument("folder", type=Path, help="the bundle's folder, holding a copy of its tracked files")
    args = parser.parse_args(argv)
    print(write_manifest(args.repo, args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
