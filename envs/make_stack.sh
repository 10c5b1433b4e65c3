#!/usr/bin/env bash
# Build one container-stack stand-in: .stacks/NAME/, a venv of the Python version the stack's
# requirements file names on its first line (`# python: X.Y`), with exactly its pins.
#
#   bash envs/make_stack.sh NAME        (envs/stack-<name>.txt -> .stacks/<name>/)
#
# The interpreter is pyenv's newest X.Y.Z, else python X.Y on PATH. Without one, the stack
# cannot be built: under CI (CI set) that fails the run, elsewhere the stack's tests are
# skipped and this says how to get the interpreter.
set -euo pipefail
name=$1
requirements="envs/stack-$name.txt"
target=".stacks/$name"
version=$(sed -n '1s/^# python: *\([0-9.]*\) *$/\1/p' "$requirements")
[ -n "$version" ] || { echo "$requirements: first line must be '# python: X.Y'" >&2; exit 2; }

source "$(dirname "${BASH_SOURCE[0]}")/find-python.sh"
python=$(find_python "$version")
if [ -z "$python" ]; then
    message="stack $name needs Python $version, which is not on this machine: install it (pyenv install $version, or your system's python$version with venv) and run make test again"
    if [ -n "${CI:-}" ]; then echo "error: $message" >&2; exit 1; fi
    echo "skipping: $message" >&2
    rm -rf "$target"
    exit 0
fi

rm -rf "$target"
"$python" -m venv "$target"
"$target/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
touch "$target/.installed"
echo "stack $name: $("$target/bin/python" --version) in $target"
