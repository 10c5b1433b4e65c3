"""Benchmark of the offline bundle (issues 25, 36): its size and how long its install takes.

    .venv/bin/python benchmarks/bench_bundle.py [--python-version 3.12] [--rounds 3] [--bundle TARBALL]
        [--base-bundle TARBALL | --base-commit 817bbc2]

Builds the bundle once (envs/bundle.sh, the network needed; or takes --bundle), then unpacks and
installs it `--rounds` times, each into a fresh folder, in a network namespace without network
where `unshare --net` is allowed (as on the cluster: everything from the wheelhouse). Prints
`name value unit` lines:

    bundle_build_s <s> s                   # envs/bundle.sh, downloads included (not with --bundle)
    bundle_py312_mb <MB> MB                # the tarball
    bundle_py312_wheels <n> wheels
    install_py312_s <median> s             # `bash install.sh` (venv, pip, wrappers, checks)
    install_py312_s_min / _max             # the fastest and slowest install
    install_py312_cpu_s (+ _min, _max)     # its CPU seconds (install.sh and its children)
    unpack_py312_s <median> s              # `tar -xzf` of the tarball
    installed_py312_mb <MB> MB             # the unpacked folder with its .venv

With a base (a tarball, or a commit whose own envs/bundle.sh builds one), the base's install.sh
runs alternately with this one's (benchmarks/paired.py): `install_py312_paired_cpu_s`, `..._wall_s`
and `..._paired_base_...` (median, min, max), and each pair's `..._cpu_ratio_to_base` and
`..._wall_ratio_to_base`.

Its functions are also the harness of tests/test_bundle.py.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paired  # noqa: E402  (beside this file)

REPO = Path(__file__).resolve().parent.parent
IP = shutil.which("ip", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or "ip"


def find_python(version: str) -> str | None:
    """A Python `version` (X.Y) interpreter, found as envs/bundle.sh finds one; None if none."""
    found = subprocess.run(["bash", "-c", 'source envs/find-python.sh && find_python "$1"', "find", version],
                           cwd=REPO, capture_output=True, text=True)
    path = found.stdout.strip()
    return path if found.returncode == 0 and path and os.access(path, os.X_OK) else None


def offline(argv: list) -> list:
    """`argv` run in a network namespace of its own: no interface but loopback, so nothing can
    be downloaded, as on MareNostrum 5's login and compute nodes. Loopback is up: a node has
    one, and torchrun's rendezvous store listens on it."""
    return ["unshare", "--net", "sh", "-c", '"$0" link set lo up && exec "$@"', IP, *map(str, argv)]


def can_go_offline() -> bool:
    """Whether this machine lets us make a network namespace (root, or user namespaces)."""
    return shutil.which("unshare") is not None and subprocess.run(offline(["true"]), capture_output=True).returncode == 0


def build_bundle(out: Path, version: str, build_python: str | None = None) -> Path:
    """The tarball envs/bundle.sh writes into `out`; RuntimeError with its output when it fails."""
    env = {**os.environ, **({"BUILD_PYTHON": build_python} if build_python else {})}
    done = subprocess.run(["bash", "envs/bundle.sh", version, str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"envs/bundle.sh failed:\n{done.stdout[-3000:]}{done.stderr[-5000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def unpack(tarball: Path, into: Path) -> Path:
    """The bundle's folder, unpacked into `into` as a user does on the cluster (tar -xzf)."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xzf", str(tarball), "-C", str(into)], check=True)
    with tarfile.open(tarball) as archive:
        top = archive.next().name.split("/")[0]
    return into / top


def install(folder: Path, python: str, env: dict | None = None, without_network: bool = True):
    """`bash install.sh` in an unpacked bundle with interpreter `python`: (process, seconds)."""
    argv = ["bash", str(folder / "install.sh")]
    start = time.perf_counter()
    done = subprocess.run(offline(argv) if without_network else argv, cwd=folder, capture_output=True,
                          text=True, timeout=1200, env={**(env or os.environ), "PYTHON": python})
    return done, time.perf_counter() - start


def folder_mb(folder: Path) -> float:
    return sum(path.lstat().st_size for path in folder.rglob("*")) / 1e6


def report(name: str, values: list, unit: str) -> None:
    print(f"{name} {statistics.median(values):.2f} {unit}", flush=True)
    if len(values) > 1:
        print(f"{name}_min {min(values):.2f} {unit}", flush=True)
        print(f"{name}_max {max(values):.2f} {unit}", flush=True)


def timed_install(tarball: Path, into: Path, python: str, without_network: bool):
    """(the installed folder, install.sh's paired.Timing, unpacking's seconds); exits when
    install.sh fails."""
    start = time.perf_counter()
    folder = unpack(tarball, into)
    unpacked = time.perf_counter() - start
    cpu = paired.children_cpu_s()
    done, seconds = install(folder, python, without_network=without_network)
    if done.returncode != 0:
        sys.exit(f"bench_bundle: install.sh of {tarball} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return folder, paired.Timing(seconds, paired.children_cpu_s() - cpu), unpacked


def base_bundle(args, scratch: Path, python: str) -> Path | None:
    """The base side's tarball: --base-bundle, or the bundle of --base-commit built by that
    commit's own envs/bundle.sh in a checkout of the commit (bundle.sh packs a repository's
    tracked files)."""
    if args.base_bundle is not None or not args.base_commit:
        return args.base_bundle
    checkout = paired.unpack_commit(args.base_commit, scratch / "base-checkout")
    done = subprocess.run(["bash", "envs/bundle.sh", args.python_version, str(scratch / "base-dist")],
                          cwd=checkout, env={**os.environ, "BUILD_PYTHON": python},
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        sys.exit(f"bench_bundle: {args.base_commit}'s envs/bundle.sh failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", default="3.12", help="the bundle's Python minor version")
    parser.add_argument("--rounds", type=int, default=3, help="installs to time (median, min, max)")
    parser.add_argument("--bundle", type=Path, help="an existing tarball instead of building one")
    parser.add_argument("--base-bundle", type=Path,
                        help="an older checkout's tarball, installed alternately with this one")
    parser.add_argument("--base-commit", help="a commit whose own bundle is built and installed "
                        "alternately with this one (ignored with --base-bundle)")
    args = parser.parse_args(argv)
    python = find_python(args.python_version)
    if python is None:
        sys.exit(f"bench_bundle: no Python {args.python_version} here (pyenv install {args.python_version})")
    without_network = can_go_offline()
    if not without_network:
        print("bench_bundle: unshare --net is not allowed here: the installs run with the network "
              "(they use only the wheelhouse all the same)", file=sys.stderr)
    tag = "py" + args.python_version.replace(".", "")
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as scratch:
        scratch = Path(scratch)
        tarball = args.bundle
        if tarball is None:
            start = time.perf_counter()
            tarball = build_bundle(scratch / "dist", args.python_version, python)
            print(f"bundle_build_s {time.perf_counter() - start:.1f} s", flush=True)
        print(f"bundle_{tag}_mb {tarball.stat().st_size / 1e6:.1f} MB", flush=True)
        with tarfile.open(tarball) as archive:
            wheels = sum(1 for name in archive.getnames() if name.endswith(".whl"))
        print(f"bundle_{tag}_wheels {wheels} wheels", flush=True)
        base = base_bundle(args, scratch, python)
        installs, unpacks, folders = [], [], []

        def run_side(side, bundle, index):
            into = scratch / f"{side}-{index}"
            folder, timing, unpacked = timed_install(bundle, into, python, without_network)
            if side == paired.BASE:
                shutil.rmtree(into, ignore_errors=True)  # a venv each: the disk is not endless
                return timing
            installs.append(timing)
            unpacks.append(unpacked)
            folders.append(folder)
            print(f"install_{tag}_s_round{index + 1} {timing.wall_s:.1f} s", flush=True)
            return timing

        if base is None:
            for index in range(args.rounds):
                run_side(paired.HEAD, tarball, index)
        else:  # alternated: both sides see the same load (paired.py)
            pairs = paired.run_pairs(run_side, {paired.HEAD: tarball, paired.BASE: base}, args.rounds)
            paired.print_lines(paired.pair_lines(f"install_{tag}_paired", pairs))
        report(f"install_{tag}_s", [t.wall_s for t in installs], "s")
        report(f"install_{tag}_cpu_s", [t.cpu_s for t in installs], "s")
        report(f"unpack_{tag}_s", unpacks, "s")
        print(f"installed_{tag}_mb {folder_mb(folders[-1]):.0f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
