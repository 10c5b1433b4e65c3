# Sourced by envs/make_stack.sh and envs/bundle.sh.
# find_python X.Y prints the path of a Python X.Y interpreter that can make virtual environments:
# pyenv's newest X.Y.Z, else pythonX.Y on PATH; nothing when the machine has none.
find_python() {
    local version=$1 newest
    if command -v pyenv >/dev/null; then
        newest=$(pyenv versions --bare | grep -E "^${version//./\\.}\.[0-9]+$" | sort -t. -k3 -n | tail -n 1 || true)
        if [ -n "$newest" ]; then echo "$(pyenv prefix "$newest")/bin/python$version"; return; fi
    fi
    if command -v "python$version" >/dev/null && "python$version" -c 'import venv' 2>/dev/null; then
        command -v "python$version"
    fi
}
