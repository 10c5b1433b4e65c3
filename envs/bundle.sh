#!/usr/bin/env bash
# The offline bundle for a cluster without internet (MareNostrum 5; docs/install-offline.md):
# OUT/scalesweep-<code version>-py<XY>.tar.gz holding the repository's tracked files, bundle.json
# (the code version: an unpacked bundle has no .git), a wheelhouse of envs/workflow.txt for one
# Python minor version on manylinux x86_64, and install.sh at its top.
#
#   bash envs/bundle.sh [X.Y] [OUT]      (make bundle PYTHON_VERSION=X.Y; defaults 3.12, dist)
#
# The wheels are resolved by a Python X.Y (BUILD_PYTHON, else pyenv's or PATH's pythonX.Y): pip
# evaluates the dependencies' markers (`python_version < "3.12"`, `platform_machine == ...`) for
# the interpreter and machine it runs on, whatever --python-version says, so another version or a
# non-Linux-x86_64 machine could leave a needed wheel out. GLIBC (default 2.28) is the newest glibc
# a wheel may require; MareNostrum 5 runs RHEL 9 (glibc 2.34). Prints the tarball's path.
set -euo pipefail
version=${1:-3.12}
out=${2:-dist}
glibc=${GLIBC:-2.28}
# Dependencies published as source only (no wheel on the index): each is built into a wheel here
# (they must be pure Python, or the wheel would be this machine's), and the binary-only download
# below then finds it in the wheelhouse.
SDIST_ONLY=(connection_pool)

fail() { echo "bundle.sh: $*" >&2; exit 1; }

if ! [[ $version =~ ^3\.([0-9]+)$ ]] || ((BASH_REMATCH[1] < 11)); then
    fail "Python version '$version': give a minor version 3.11 or later (the pins need it: snakemake 9, numpy 2.4), e.g. make bundle PYTHON_VERSION=3.12"
fi
if ! [[ $glibc =~ ^2\.([0-9]+)$ ]] || ((BASH_REMATCH[1] < 17)); then
    fail "GLIBC=$glibc: give the target's glibc as 2.N with N >= 17 (RHEL 9: 2.34)"
fi
[ "$(uname -sm)" = "Linux x86_64" ] ||
    fail "this is $(uname -sm), not Linux x86_64: pip would evaluate the dependencies' platform markers for it; build on Linux x86_64 (a container will do)"
repo=$(git rev-parse --show-toplevel 2>/dev/null) || fail "$PWD is not in a git checkout of scalesweep: the bundle holds the files git tracks"
cd "$repo"

source envs/find-python.sh
python=${BUILD_PYTHON:-$(find_python "$version")}
[ -n "$python" ] ||
    fail "no Python $version on this machine to resolve the wheels with: install one (pyenv install $version) or name it, BUILD_PYTHON=/path/to/python$version"
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || fail "BUILD_PYTHON=$python does not run"
[ "$have" = "$version" ] || fail "BUILD_PYTHON=$python is Python $have: a bundle for $version needs a Python $version (see the top of envs/bundle.sh)"
pip=("$python" -m pip --disable-pip-version-check)
"${pip[@]}" --version >/dev/null || fail "$python has no pip"

mkdir -p "$out"
# Built in a folder inside OUT and moved at the end: a failed build leaves no tarball behind.
work=$(mktemp -d "$out/.bundle-XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/scalesweep
mkdir "$stage"

echo "bundle.sh: the tracked files of $repo" >&2
git ls-files -z | while IFS= read -r -d '' name; do
    # a tracked file deleted in the working tree is not part of the code being bundled
    if [ -e "$name" ] || [ -L "$name" ]; then printf '%s\0' "$name"; fi
done | tar -c --null -T - | tar -x -C "$stage"
cp envs/install.sh "$stage/install.sh"
code_version=$("$python" -m scalesweep.plan.code_version "$repo" "$stage")

wheels=$stage/wheelhouse
mkdir "$wheels"
echo "bundle.sh: wheels for Python $version, manylinux (glibc <= $glibc) x86_64" >&2
for name in "${SDIST_ONLY[@]}"; do
    pin=$(grep -i -E "^${name}==" envs/constraints.txt) || fail "$name: no pin in envs/constraints.txt"
    "${pip[@]}" wheel --quiet --no-deps -w "$wheels" "$pin"
done
for wheel in "$wheels"/*.whl; do
    [[ $wheel == *-none-any.whl ]] || fail "$(basename "$wheel"): a source-only dependency built a platform wheel; it cannot go into SDIST_ONLY"
done
# pip 23 takes --platform literally: every older manylinux tag a wheel may carry is listed.
platforms=()
for ((minor = ${glibc#2.}; minor >= 5; minor--)); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
"${pip[@]}" download --quiet --only-binary=:all: "${platforms[@]}" --implementation cp \
    --python-version "$version" --abi "cp${version/./}" --find-links "$wheels" -d "$wheels" \
    -r envs/workflow.txt -c envs/constraints.txt -r envs/build-backend.txt -r envs/installer.txt ||
    fail "pip download failed (above): a dependency without a wheel for Python $version on manylinux x86_64? If it is pure Python and published as source only, add it to SDIST_ONLY in envs/bundle.sh"
echo "$version" >"$wheels/python-version"

name=scalesweep-$code_version-py${version/./}
mv "$stage" "$work/$name"
tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$work/$name.tar.gz" "$name"
mv "$work/$name.tar.gz" "$out/$name.tar.gz"
echo "bundle.sh: $(du -m "$out/$name.tar.gz" | cut -f1) MB, $(ls "$work/$name/wheelhouse" | grep -c '\.whl$') wheels" >&2
echo "$out/$name.tar.gz"
