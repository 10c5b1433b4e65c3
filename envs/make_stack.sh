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

find_python() {
    if command -v pyenv >/dev/null; then
        local newest
        newest=$(pyenv versions --bare | grep -E "^${version//./\\.}\.[0-9]+$" | sort -t. -k3 -n | tail -n 1 || true)
        if [ -n "$newest" ]; then echo "$(pyenv prefix "$newest")/bin/python$version"; return; fi
    fi
    if command -v "python$version" >/dev/null && "python$version" -c 'import venv' 2>/dev/null; then
        command -v "python$version"
    fi
}

python=$(find_python)
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
