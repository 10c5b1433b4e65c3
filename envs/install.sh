#!/usr/bin/env bash
# The installer at the top of an offline bundle (envs/bundle.sh copies it there;
# docs/install-offline.md): makes .venv beside it from the bundle's wheelhouse alone, touching no
# network, with an interpreter of the wheelhouse's Python minor version.
#
#   module load python/3.12.1        (the module of the bundle's Python version)
#   bash install.sh                  (or PYTHON=/path/to/python3.12 bash install.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
here=$PWD
venv=$here/.venv

# What a site's Python module (or another environment) sets that makes an interpreter start from,
# or import from, another Python's files. MareNostrum 5's python modules set PYTHONHOME and
# PYTHONPATH: a PYTHONHOME of another Python version stops an interpreter at start ("No module
# named 'encodings'"), one of the same version turns a venv's python into the module's own, and
# PYTHONPATH puts the module's packages before the venv's. Unset for this script's own runs, and
# by the venv's python wrapper (below) for everything run from the venv.
SHADOWING=(PYTHONHOME PYTHONPATH PYTHONSTARTUP PYTHONUSERBASE PYTHONPLATLIBDIR VIRTUAL_ENV)
unset "${SHADOWING[@]}"

fail() { echo "install.sh: $*" >&2; exit 1; }

# MareNostrum 5's module for a Python minor version (docs/install-offline.md).
module_for() {
    case $1 in
    3.12) echo "module load python/3.12.1" ;;
    3.11) echo "module load intel mkl impi hdf5 python/3.11.5-gcc" ;;
    *) echo "load a Python $1 module (module avail python)" ;;
    esac
}

[ -f wheelhouse/python-version ] ||
    fail "$here has no wheelhouse/python-version: this is the installer of an unpacked offline bundle (make bundle; docs/install-offline.md)"
wanted=$(<wheelhouse/python-version)
# Snakemake writes its interpreter's path unquoted into the shell commands that start its jobs
# (snakemake 9.27 executors/local.py spawn_job for `run:` rules; the slurm plugin's job command),
# so a space or shell character in this folder's path would fail the sweep after its training ran.
if [[ $venv =~ [^A-Za-z0-9_./+,:@%=-] ]]; then
    fail "the folder '$here' has a character a shell splits or expands (a space, quote, \$, ...): Snakemake puts .venv/bin/python's path unquoted into its jobs' commands; unpack the bundle under a path of letters, digits and _ . / + , @ % = - only"
fi
# Python's venv refuses a folder whose path holds the PATH separator (venv/__init__.py:
# "contains the PATH separator"): said here, before pip or ensurepip is blamed for it.
if [[ $venv == *:* ]]; then
    fail "the folder '$here' has a ':' in its path: Python's venv refuses to make a virtual environment there (':' separates PATH entries); unpack the bundle under a path of letters, digits and _ . / + , @ % = - only"
fi
# A venv holds its own folder's path (the python wrapper, the entry points' #! lines, pyvenv.cfg):
# a bundle moved to another folder keeps a .venv that runs nothing here. Installed means its python
# runs as this venv and imports the project.
if [ -f "$venv/.installed" ]; then
    if [ "$("$venv/bin/python" -c 'import sys, scalesweep; print(sys.prefix)' 2>/dev/null)" = "$venv" ]; then
        echo "install.sh: already installed in $venv (remove it to install again)"
        exit 0
    fi
    echo "install.sh: $venv does not run here (made in $(cat "$venv/.installed") and moved? a venv is bound to its folder): installing again"
fi
python=${PYTHON:-python3}
how="$(module_for "$wanted") and run bash install.sh again, or name the interpreter: PYTHON=/path/to/python$wanted bash install.sh"

command -v "$python" >/dev/null || fail "no interpreter '$python': $how"
where=$(command -v "$python")
[ "$where" = "$python" ] || python_named="$python ($where)"
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>&1) ||
    fail "${python_named:-$python} does not run without PYTHONHOME and PYTHONPATH (it said: $(head -c 200 <<<"$have")): $how"
# Anything else that runs (a shell, echo, a wrapper script) prints something else.
[[ $have =~ ^[0-9]+\.[0-9]+$ ]] ||
    fail "${python_named:-$python} is not a Python interpreter: asked for its version it printed '$(head -c 200 <<<"$have")': $how"
if ! [[ $have =~ ^3\.([0-9]+)$ ]] || ((BASH_REMATCH[1] < 11)); then
    fail "${python_named:-$python} is Python $have; the workflow needs Python 3.11 or later and this bundle's wheels are for Python $wanted: $how"
fi
if [ "$have" != "$wanted" ]; then
    fail "${python_named:-$python} is Python $have, but this bundle's wheels are for Python $wanted (compiled wheels fit one minor version): $how; or build a bundle for $have: make bundle PYTHON_VERSION=$have"
fi
[ "$(uname -m)" = x86_64 ] || fail "this machine is $(uname -m): the bundle's wheels are for x86_64"

# A wheel cut short or damaged (a copy interrupted, a disk full on unpacking) is named here: pip
# would stop with a traceback and say only that a wheel is missing.
damaged=$("$python" - wheelhouse <<'CHECK'
import pathlib, sys, zipfile
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError) as error:
        print(f"{wheel} ({error})")
CHECK
) || fail "could not read the wheelhouse $here/wheelhouse"
[ -z "$damaged" ] ||
    fail "damaged wheels in the wheelhouse (not a whole zip file): $(tr '\n' ' ' <<<"$damaged")- unpack the bundle again from its tarball"

rm -rf "$venv" # what an install that failed left
tools=$(mktemp -d)
# uv unpacks the wheels into this cache and hard-links the venv's files to it: a cache on the venv's
# own file system, so the links hold (elsewhere uv copies instead); the venv keeps its files when
# the cache goes.
cache=$here/.install-cache
trap 'status=$?; rm -rf "$tools" "$cache"; if [ $status -ne 0 ]; then rm -rf "$venv"; echo "install.sh: failed, removed $venv" >&2; fi' EXIT

echo "install.sh: $venv from $where (Python $have) and $here/wheelhouse"
# No index and no pip or uv configuration (a site's pip.conf, uv.toml or PIP_*/UV_* variables
# could name one): everything comes from the wheelhouse, and a missing wheel is an error here, not
# a download.
export PIP_CONFIG_FILE=/dev/null
unset $(compgen -e | grep '^UV_' || true)
pip=("$venv/bin/python" -m pip --isolated --disable-pip-version-check install --quiet --no-index --find-links "$here/wheelhouse")
# uv (envs/installer.txt), where the wheelhouse holds it: its wheel is a zip whose one binary is
# taken out into a temporary folder, never installed. It installs the same wheels into the same
# venv several times faster than pip (which also compiles one file at a time: most of its 82 s).
# A bundle made before uv, or uv failing, falls back to pip.
uv=""
uv_wheel=$(compgen -G "wheelhouse/uv-*.whl" | head -n 1 || true)
if [ -n "$uv_wheel" ] && "$python" - "$uv_wheel" "$tools/uv" <<'UNZIP'; then uv=$tools/uv; fi
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".data/scripts/uv"))
    with wheel.open(name) as binary, open(sys.argv[2], "wb") as out:
        out.write(binary.read())
os.chmod(sys.argv[2], 0o755)
UNZIP
"$python" -m venv "$venv" || fail "$python could not make a virtual environment (is its venv/ensurepip module installed?)"
uv_pip=("$uv" pip install --offline --no-index --no-config --cache-dir "$cache" --quiet --link-mode hardlink
    --python "$venv/bin/python" --find-links "$here/wheelhouse")
# Every module's .pyc written now, on every core, so the first import on GPFS reads compiled files:
# all but the packages' own test suites (a third of their modules, never imported by a sweep).
compile_ahead() {
    "$venv/bin/python" -m compileall -q -j 0 -x '/tests?/' "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" "$here/scalesweep" >/dev/null ||
        echo "install.sh: some modules could not be compiled ahead (Python compiles them at their first import)" >&2
}
if [ -n "$uv" ] && "${uv_pip[@]}" -r envs/workflow.txt -c envs/constraints.txt -r envs/build-backend.txt &&
    "${uv_pip[@]}" --no-deps --no-build-isolation -e .; then
    compile_ahead
    echo "install.sh: installed with uv $("$uv" --version | cut -d' ' -f2)"
else
    [ -z "$uv" ] || echo "install.sh: uv could not install (above); pip installs instead" >&2
    "${pip[@]}" -r envs/workflow.txt -c envs/constraints.txt -r envs/build-backend.txt ||
        fail "pip could not install envs/workflow.txt from $here/wheelhouse alone (its error above): the wheelhouse lacks a wheel it needs; unpack the bundle again, or build a new one (make bundle PYTHON_VERSION=$wanted)"
    "${pip[@]}" --no-deps --no-build-isolation -e . || fail "pip could not install the project itself (its error above)"
fi

# The venv's interpreter becomes a wrapper that unsets SHADOWING and then starts the real one.
# Python cannot ignore PYTHONHOME itself in time (an interpreter of another version dies before
# any of its code runs), and `python -E` would keep the variables in the environment of every
# process started from it: `sbatch --export=ALL` (the slurm executor plugin) hands the head's
# environment to each job, whose Snakemake runs this venv's python again, and the rules run the
# trainers' interpreters. Unset here, they reach no job. `exec -a` keeps the wrapper's path as
# sys.executable, so a Python the workflow starts again (a job's Snakemake, multiprocessing) passes
# through the wrapper too, even where a job's environment got them back. The entry points
# (.venv/bin/snakemake, .venv/bin/scalesweep, after `source .venv/bin/activate` too) run it through
# their `#!.../.venv/bin/python` line.
interpreter=$(readlink -f "$venv/bin/python")
wrapper=$(mktemp "$venv/bin/.python-XXXXXX")
{
    echo '#!/bin/bash'
    echo '# Written by install.sh (docs/install-offline.md): see the comment there.'
    echo "unset ${SHADOWING[*]}"
    printf 'exec -a %q %q "$@"\n' "$venv/bin/python" "$interpreter"
} >"$wrapper"
chmod 755 "$wrapper"
mv -f "$wrapper" "$venv/bin/python" # replaces the link, not what it points to
for name in python3 "python$wanted"; do ln -sfn python "$venv/bin/$name"; done

version=$("$venv/bin/python" -c 'from scalesweep.plan.code_version import code_version; print(code_version())')
# An empty SLURM_CONF: the slurm plugin, imported at Snakemake's start, asks the controller for its
# configuration, and a login node whose controller does not answer would wait 10 s for nothing.
SLURM_CONF=/dev/null "$venv/bin/snakemake" --version >/dev/null
echo "$venv" >"$venv/.installed"
echo "install.sh: installed scalesweep $version in $venv"
echo "install.sh: next, from $here: .venv/bin/snakemake --executor slurm --profile mn5 -n"
