"""The offline bundle (envs/bundle.sh, envs/install.sh, scalesweep/plan/code_version.py;
docs/install-offline.md): built once per session from this checkout, unpacked and installed with
Python 3.12 (not the development 3.11) in a network namespace without network, under the
environment of a loaded Python module of another version; then the workflow runs from it, still
offline and still under that environment, and a real SLURM job shows what the head passes on.
"""

import csv
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from bench_bundle import build_bundle, can_go_offline, find_python, install, offline, unpack
from scalesweep.plan.code_version import code_version, write_manifest
from stacks import STACKS, stack_python
from test_slurm import cluster  # noqa: F401  (the test cluster, started once)

REPO = Path(__file__).resolve().parents[1]
VERSION = "3.12"  # the bundle's Python: another minor version than the development venv's 3.11
OTHER = "3.10"  # the loaded module's Python: another version again, the case that breaks hardest
INSTALL_SH = REPO / "envs" / "install.sh"

slow = pytest.mark.slow


def required(message):
    """Skip where this machine lacks what the test needs; under CI (CI set) fail instead."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def python_of(version):
    found = find_python(version)
    if found is None:
        required(f"no Python {version} here: pyenv install {version}")
    return found


def module_environment(folder: Path, python_other: str) -> dict:
    """A shell's environment after loading a site's Python module of another version, with
    another venv active: PYTHONHOME at that Python's prefix, PYTHONPATH at its site-packages and at
    packages named like ours that refuse to be imported, a startup file that exits, a user base,
    and the other venv's bin first on PATH."""
    prefix = Path(python_other).resolve().parents[1]
    shadow = folder / "module-site-packages"
    for package in ("scalesweep", "snakemake"):
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text("raise ImportError('imported from the module PYTHONPATH')\n")
    (folder / "startup.py").write_text("raise SystemExit('PYTHONSTARTUP ran')\n")
    other_venv = folder / "other-venv"
    subprocess.run([python_other, "-m", "venv", "--without-pip", str(other_venv)], check=True)
    return {
        **os.environ,
        "PYTHONHOME": str(prefix),
        "PYTHONPATH": f"{shadow}:{prefix}/lib/python{OTHER}/site-packages",
        "PYTHONSTARTUP": str(folder / "startup.py"),
        "PYTHONUSERBASE": str(folder / "userbase"),
        "VIRTUAL_ENV": str(other_venv),
        "PATH": f"{other_venv}/bin:{os.environ['PATH']}",
    }


MODULE_VARIABLES = ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")


def run(argv, env, cwd, timeout=300, without_network=False):
    """`argv` with stdin empty; its output as text."""
    return subprocess.run(offline(argv) if without_network else [str(arg) for arg in argv], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ session fixtures
@pytest.fixture(scope="session")
def python_bundle():
    return python_of(VERSION)


@pytest.fixture(scope="session")
def module_env(tmp_path_factory):
    return module_environment(tmp_path_factory.mktemp("module"), python_of(OTHER))


@pytest.fixture(scope="session")
def without_network():
    if not can_go_offline():
        required("unshare --net is not permitted here (it needs root or user namespaces)")


@pytest.fixture(scope="session")
def bundle(tmp_path_factory, python_bundle):
    """The tarball `make bundle PYTHON_VERSION=3.12` makes, built into tmp (the index reachable)."""
    return build_bundle(tmp_path_factory.mktemp("dist"), VERSION, python_bundle)


@pytest.fixture(scope="session")
def installed(bundle, without_network, module_env, python_bundle, tmp_path_factory):
    """The bundle unpacked and installed offline, under the module's environment: (folder,
    install.sh's process)."""
    folder = unpack(bundle, tmp_path_factory.mktemp("cluster"))
    done, _ = install(folder, python_bundle, env=module_env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return folder, done


# ------------------------------------------------------------------ the bundle
@slow
def test_the_bundle_holds_the_tracked_files_its_code_version_and_wheels_for_one_python(bundle):
    version = code_version(REPO)
    assert bundle.name == f"scalesweep-{version}-py312.tar.gz"
    top = f"scalesweep-{version}-py312"
    with tarfile.open(bundle) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        record = json.load(archive.extractfile(f"{top}/bundle.json"))
        wheel_python = archive.extractfile(f"{top}/wheelhouse/python-version").read().decode().strip()
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split("\0")
    assert {name for name in tracked if name and (REPO / name).exists()} <= names
    assert {"install.sh", "bundle.json"} <= names
    assert not {name for name in names if name.split("/")[0] in {".git", ".venv", "results", "dist", ".stacks"}}
    assert record["code_version"] == version and "scalesweep/plan/code_version.py" in record["files"]
    assert wheel_python == VERSION

    wheels = [name.split("/")[1] for name in names if name.startswith("wheelhouse/") and name.endswith(".whl")]
    projects = {wheel.split("-")[0].lower() for wheel in wheels}
    assert {"snakemake", "connection_pool", "setuptools", "numpy", "duckdb"} <= projects
    assert not projects & {"torch", "tensorflow_cpu", "tensorflow", "keras", "triton"}  # the site's images run them
    compiled = [wheel for wheel in wheels if not wheel.endswith("-none-any.whl")]
    assert len(compiled) >= 15
    for wheel in compiled:
        python_tag, abi, platform = wheel[:-4].split("-")[-3:]
        if wheel.startswith("uv-"):  # install.sh's installer: a binary with no Python ABI of its own
            assert (python_tag, abi) == ("py3", "none") and "manylinux" in platform, wheel
            continue
        assert python_tag in {"cp312", "cp36", "cp37", "cp38", "cp39", "py3"} and abi in {"cp312", "abi3"}, wheel
        assert "manylinux" in platform and platform.endswith("x86_64"), wheel


# ------------------------------------------------------------------ installed offline
@slow
def test_the_namespace_has_no_network_though_the_index_answers_outside_it(tmp_path, without_network, python_bundle):
    download = [python_bundle, "-m", "pip", "--isolated", "download", "--no-deps", "--no-cache-dir",
                "--index-url", "https://pypi.org/simple", "-d", tmp_path, "six==1.17.0"]
    assert run(download, os.environ, tmp_path).returncode == 0  # the same call with the network works
    (tmp_path / "six-1.17.0-py2.py3-none-any.whl").unlink()
    blocked = run(download, os.environ, tmp_path, without_network=True)
    assert blocked.returncode != 0 and not list(tmp_path.glob("*.whl")), blocked.stdout + blocked.stderr


@slow
def test_install_offline_under_a_module_of_another_python(installed, module_env, python_bundle):
    folder, done = installed
    # the module's environment is what it claims: the bundle's own interpreter dies in it
    poisoned = run([python_bundle, "-c", "pass"], module_env, folder)
    assert poisoned.returncode != 0 and "encodings" in poisoned.stderr
    assert (folder / ".venv" / ".installed").exists()
    again = run(["bash", folder / "install.sh"], module_env, folder)
    assert again.returncode == 0 and "already installed" in again.stdout
    version = json.loads((folder / "bundle.json").read_text())["code_version"]
    assert f"installed scalesweep {version}" in done.stdout
    wrapper = (folder / ".venv" / "bin" / "python").read_text()
    assert wrapper.startswith("#!/bin/bash") and all(name in wrapper for name in MODULE_VARIABLES)


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3.*")) / "site-packages"


@slow
def test_uv_leaves_no_cache_and_every_module_but_the_test_suites_compiled(installed):
    folder, done = installed
    assert "installed with uv" in done.stdout
    assert not (folder / ".install-cache").exists()
    packages = site_packages(folder / ".venv")
    assert (packages / "pip").is_dir()  # a user's pip, as before uv (docs/install-offline.md)
    assert list((packages / "pandas" / "core" / "__pycache__").glob("frame.cpython-3*.pyc"))
    assert list((folder / "scalesweep" / "plan" / "__pycache__").glob("matrix.cpython-3*.pyc"))
    assert (packages / "pandas" / "tests").is_dir()
    assert not list((packages / "pandas" / "tests").rglob("*.pyc"))


@slow
def test_without_uv_in_the_wheelhouse_pip_installs_the_same_venv(bundle, python_bundle, without_network, tmp_path):
    folder = unpack(bundle, tmp_path)
    for uv_wheel in (folder / "wheelhouse").glob("uv-*.whl"):
        uv_wheel.unlink()
    done, _ = install(folder, python_bundle)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "installed with uv" not in done.stdout and "installed scalesweep" in done.stdout
    assert (site_packages(folder / ".venv") / "pip").is_dir()
    runs = subprocess.run([str(folder / ".venv" / "bin" / "python"), "-c", "import pandas, snakemake, scalesweep"],
                          capture_output=True, text=True)
    assert runs.returncode == 0, runs.stderr[-2000:]

@slow
def test_what_a_user_types_runs_clean_under_the_module(installed, module_env):
    folder, _ = installed
    venv = folder / ".venv"
    probe = ("import json, os, sys; print(json.dumps({'executable': sys.executable, 'path': sys.path, "
             "'environ': {k: os.environ.get(k) for k in %r}}))" % (MODULE_VARIABLES,))
    commands = {
        "snakemake --version": [venv / "bin" / "snakemake", "--version"],
        "python -m scalesweep --help": [venv / "bin" / "python", "-m", "scalesweep", "--help"],
        "scalesweep --help": [venv / "bin" / "scalesweep", "--help"],
        "python3.12 (its pip's interpreter)": [venv / "bin" / "python3.12", "-m", "pip", "--version"],
        "activated": ["bash", "-c", 'source .venv/bin/activate && snakemake --version && python -c "$0"', probe],
        "interactive": [venv / "bin" / "python", "-i"],
    }
    results = {name: run(argv, module_env, folder) for name, argv in commands.items()}
    for name, done in results.items():
        assert done.returncode == 0, (name, done.stdout[-2000:], done.stderr[-3000:])
    assert results["snakemake --version"].stdout.strip() == "9.27.1"
    assert "check-config" in results["python -m scalesweep --help"].stdout
    seen = json.loads(results["activated"].stdout.splitlines()[-1])
    assert seen["executable"] == str(venv / "bin" / "python")
    assert seen["environ"] == dict.fromkeys(MODULE_VARIABLES)
    assert not [entry for entry in seen["path"] if "module-site-packages" in entry or f"python{OTHER}" in entry]


@slow
def test_a_dry_run_with_the_mn5_profile_offline(installed, module_env, tmp_path):
    folder, _ = installed
    config = yaml.safe_load((REPO / "config" / "mn5.yaml").read_text())
    for name, dataset in config["datasets"].items():
        dataset["path"] = str(tmp_path / "datasets" / name)
        Path(dataset["path"]).mkdir(parents=True)
    (tmp_path / "mn5.yaml").write_text(yaml.safe_dump(config))
    env = {**module_env, "SLURM_CONF": os.devnull}  # no controller in the namespace to wait for
    done = run([folder / ".venv" / "bin" / "snakemake", "-n", "--profile", "mn5", "--configfile", tmp_path / "mn5.yaml",
                "--default-resources", "slurm_account=x", "qos=acc_debug", "mem_mb=0", "--directory", tmp_path / "work"],
               env, folder, without_network=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "This was a dry-run" in output
    jobs = dict(line.split() for line in output.splitlines() if line.startswith(("train_tensorflow ", "train_pytorch")))
    assert jobs == {"train_tensorflow": "6", "train_pytorch": "6", "train_pytorch_multinode": "6"}, output[-3000:]
    assert "slurm_account=x, qos=acc_debug" in output


@slow
@pytest.mark.stacks
def test_a_tiny_local_sweep_offline_runs_the_trainers_in_the_stacks_all_ok(installed, module_env, tmp_path):
    folder, _ = installed
    config = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    config["container"] = {"runtime": "none",
                           "python": {framework: str(stack_python(stack)) for framework, stack in STACKS.items()}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    env = {**module_env, "SLURM_CONF": os.devnull}
    done = run([folder / ".venv" / "bin" / "snakemake", "--cores", "2", "--configfile", tmp_path / "tiny.yaml",
                "--replace-workflow-config", "--directory", tmp_path / "work"], env, folder, timeout=1200,
               without_network=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    with open(tmp_path / "work" / "results" / "tidy" / "runs.csv", newline="") as table:
        runs = list(csv.DictReader(table))
    assert len(runs) == 4 and {run["status"] for run in runs} == {"ok"}, runs
    # the trainers ran in the stand-ins of the site's images (TF 2.11, torch 2.4), and every run
    # records the bundle's code version, with no .git there
    assert {run["framework_version"][:4] for run in runs} == {"2.11", "2.4."}
    assert {run["scalesweep_version"] for run in runs} == {json.loads((folder / "bundle.json").read_text())["code_version"]}
    assert not (folder / ".git").exists()


JOB_ENVIRONMENT = '''
rule job:
    output:
        "job.json",
    run:
        import json, os, sys

        with open(output[0], "w") as record:
            json.dump({"environ": dict(os.environ), "executable": sys.executable, "path": sys.path}, record)
'''


@slow
@pytest.mark.slurm
def test_a_slurm_job_gets_none_of_the_modules_variables(installed, module_env, cluster, tmp_path):  # noqa: F811
    folder, _ = installed
    (tmp_path / "Snakefile").write_text(JOB_ENVIRONMENT)
    done = run([folder / ".venv" / "bin" / "snakemake", "--executor", "slurm", "--profile",
                folder / "profiles" / "local-slurm", "--jobs", "1"], module_env, tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job = json.loads((tmp_path / "job.json").read_text())
    assert job["environ"].get("SLURM_JOB_ID")  # the record comes from the job's own Snakemake
    assert {name: job["environ"].get(name) for name in MODULE_VARIABLES} == dict.fromkeys(MODULE_VARIABLES)
    assert job["executable"] == str(folder / ".venv" / "bin" / "python")
    assert not [entry for entry in job["path"] if "module-site-packages" in entry or f"python{OTHER}" in entry]


# ------------------------------------------------------------------ install.sh refuses
def fake_bundle(folder: Path, wheel_python: str) -> Path:
    """A folder with install.sh and a wheelhouse for `wheel_python`: all a refusal reads."""
    (folder / "wheelhouse").mkdir(parents=True)
    (folder / "wheelhouse" / "python-version").write_text(wheel_python + "\n")
    shutil.copy(INSTALL_SH, folder / "install.sh")
    return folder


def refusal(folder: Path, python: str, env=None) -> str:
    done = subprocess.run(["bash", str(folder / "install.sh")], env={**(env or os.environ), "PYTHON": python},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and not (folder / ".venv").exists(), done.stdout + done.stderr
    return done.stderr


def test_install_refuses_python_310_naming_the_version_needed_and_the_module(tmp_path, module_env):
    message = refusal(fake_bundle(tmp_path / "b", "3.12"), python_of("3.10"), module_env)
    assert "is Python 3.10" in message and "Python 3.11 or later" in message
    assert "wheels are for Python 3.12" in message and "module load python/3.12.1" in message


def test_install_refuses_a_wheelhouse_of_another_minor_version(tmp_path):
    message = refusal(fake_bundle(tmp_path / "b", "3.11"), python_of("3.12"))
    assert "is Python 3.12, but this bundle's wheels are for Python 3.11" in message
    assert "module load intel mkl impi hdf5 python/3.11.5-gcc" in message
    assert "make bundle PYTHON_VERSION=3.12" in message


def test_install_refuses_a_missing_interpreter_and_a_folder_that_is_no_bundle(tmp_path):
    assert "no interpreter 'python3.99'" in refusal(fake_bundle(tmp_path / "b", "3.12"), "python3.99")
    (tmp_path / "c").mkdir()
    shutil.copy(INSTALL_SH, tmp_path / "c" / "install.sh")
    assert "no wheelhouse/python-version" in refusal(tmp_path / "c", "python3")


@pytest.mark.parametrize("name", ["with space", "x$(touch made)", "it's"])
def test_install_refuses_a_folder_whose_path_snakemake_would_split(tmp_path, name):
    message = refusal(fake_bundle(tmp_path / name, "3.12"), python_of("3.12"))
    assert "has a character a shell splits or expands" in message and name in message
    assert not list(tmp_path.rglob("made"))


# ------------------------------------------------------------------ hostile input (issue 38, round 4)

@pytest.mark.parametrize("impostor", ["/bin/echo", "/bin/true"])
def test_an_interpreter_that_is_no_python_is_named_as_such_with_what_it_printed(tmp_path, impostor):
    message = refusal(fake_bundle(tmp_path / "b", "3.12"), impostor)
    assert f"{impostor} is not a Python interpreter: asked for its version it printed" in message
    assert "is Python" not in message


def test_a_folder_with_a_colon_is_refused_for_what_venv_refuses_before_anything_runs(tmp_path):
    message = refusal(fake_bundle(tmp_path / "site:b", "3.12"), python_of("3.12"))
    assert "has a ':' in its path: Python's venv refuses" in message and "site:b" in message
    assert "ensurepip" not in message and "pip could not" not in message


def test_a_damaged_wheel_is_named_before_anything_is_installed(tmp_path):
    folder = fake_bundle(tmp_path / "b", "3.12")
    (folder / "wheelhouse" / "numpy-2.4.0-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"PK\x03\x04 cut short")
    with zipfile.ZipFile(folder / "wheelhouse" / "whole-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("whole/__init__.py", "")
    message = refusal(folder, python_of("3.12"))
    assert "damaged wheels in the wheelhouse" in message and "numpy-2.4.0-cp312" in message
    assert "whole-1.0" not in message and "unpack the bundle again" in message
    assert "Traceback" not in message


@pytest.mark.slow
def test_a_bundle_moved_to_another_folder_installs_again_instead_of_saying_installed(installed, python_bundle, tmp_path):
    folder, _ = installed
    moved = tmp_path / "moved"
    shutil.copytree(folder, moved, symlinks=True)
    done, _ = install(moved, python_bundle)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "does not run here" in done.stdout and "installing again" in done.stdout
    assert "already installed" not in done.stdout
    runs = subprocess.run([str(moved / ".venv" / "bin" / "python"), "-c", "import sys, scalesweep; print(sys.prefix)"],
                          capture_output=True, text=True)
    assert runs.stdout.strip() == str(moved / ".venv")
    again, _ = install(moved, python_bundle)
    assert "already installed" in again.stdout


@pytest.mark.slow
def test_a_failed_install_leaves_no_venv_behind(tmp_path):
    folder = fake_bundle(tmp_path / "b", "3.12")  # a wheelhouse without its wheels
    shutil.copytree(REPO / "envs", folder / "envs")
    message = refusal(folder, python_of("3.12"))
    assert "pip could not install envs/workflow.txt from" in message and "the wheelhouse lacks a wheel" in message
    assert "install.sh: failed, removed" in message


def test_bundle_refuses_a_python_older_than_311_and_a_build_python_of_another_version(tmp_path):
    too_old = subprocess.run(["bash", "envs/bundle.sh", "3.10", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert too_old.returncode != 0 and "3.11 or later" in too_old.stderr
    other = subprocess.run(["bash", "envs/bundle.sh", "3.12", str(tmp_path)], cwd=REPO, capture_output=True,
                           text=True, env={**os.environ, "BUILD_PYTHON": python_of("3.10")})
    assert other.returncode != 0 and "is Python 3.10: a bundle for 3.12 needs a Python 3.12" in other.stderr
    assert list(tmp_path.iterdir()) == []  # nothing half-built left


# ------------------------------------------------------------------ the code version without .git
def copied_checkout(folder: Path) -> Path:
    """A copy of a tiny git checkout's files, without its .git (what an unpacked bundle is),
    with the record bundle.sh writes."""
    repo = folder / "repo"
    (repo / "scalesweep").mkdir(parents=True)
    (repo / "scalesweep" / "x.py").write_text("A = 1\n")
    (repo / "config.yaml").write_text("a: 1\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    copy = folder / "unpacked"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    assert write_manifest(repo, copy) == code_version(repo)
    return copy


def test_an_unpacked_bundle_records_its_commit_and_dirty_after_a_code_edit(tmp_path):
    copy = copied_checkout(tmp_path)
    commit = code_version(tmp_path / "repo")
    assert code_version(copy) == commit and len(commit) == 12
    (copy / "config.yaml").write_text("a: 2\n")  # a config edit is no code change
    assert code_version(copy) == commit
    (copy / "scalesweep" / "x.py").write_text("A = 2\n")
    assert code_version(copy) == commit + "-dirty"
    (copy / "scalesweep" / "x.py").unlink()
    assert code_version(copy) == commit + "-dirty"


def test_a_bundle_made_from_a_dirty_tree_stays_dirty_once(tmp_path):
    repo = tmp_path / "repo"
    copy = copied_checkout(tmp_path)
    (repo / "scalesweep" / "x.py").write_text("A = 3\n")
    (copy / "scalesweep" / "x.py").write_text("A = 3\n")
    assert write_manifest(repo, copy).endswith("-dirty")
    (copy / "scalesweep" / "x.py").write_text("A = 4\n")
    assert code_version(copy).count("-dirty") == 1


def test_a_damaged_bundle_record_is_an_error_naming_it(tmp_path):
    (tmp_path / "bundle.json").write_text("{\"code_version\": ")
    with pytest.raises(ValueError, match=r"bundle\.json: not a readable bundle record"):
        code_version(tmp_path)
