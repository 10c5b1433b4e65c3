"""docs/mn5.md, walked command by command, offline: the commands are read from the page's `sh`
blocks (so the page and this test cannot drift apart: a command the test does not know fails it)
and run in order, on a temporary "laptop" and "login node". What cannot run here is replaced, and
the page's last section says how; COMMANDS below is that list, command by command."""

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bench_bundle import can_go_offline, offline
from stacks import STACKS, stack_python
from test_bundle import OTHER, bundle, python_bundle, python_of  # noqa: F401  (session fixtures)
from test_slurm import cluster  # noqa: F401  (the test cluster, started once)

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "mn5.md"

# Where each command of the page runs, or why it does not: (how the command begins, what the test does).
LAPTOP, LOGIN, LOGIN_ONLINE, SHOWN, BUNDLE = "laptop", "login", "login-online", "shown", "bundle"
COMMANDS = [
    ("make bundle PYTHON_VERSION=3.12", BUNDLE),  # the session's bundle, from the same script
    ("docker ", SHOWN),  # no Docker here
    ("scp MN5-NGC-TensorFlow-23.03.tar", SHOWN),  # no image was saved
    ("rsync -av --partial dist/", LAPTOP),
    ("rsync -av --partial datasets/", LAPTOP),
    ("ssh ", SHOWN),  # the test's shell is the login node
    ("cd ", LOGIN),
    ("tar -xzf ", LOGIN),
    ("module load python/", LOGIN),  # the stand-in module below
    ("bash install.sh", LOGIN),
    ("salloc ", SHOWN),  # no compute-node shell, no Singularity
    ("module load singularity", SHOWN),
    ("singularity build ", SHOWN),
    ("exit", SHOWN),
    ("bsc_project list", LOGIN),  # stand-in: the test cluster's account
    ("sed -i ", LOGIN),
    ("tmux new ", LOGIN),  # stand-in: the session is this shell
    ("source .venv/bin/activate", LOGIN),
    ("snakemake -n --profile mn5", LOGIN),
    ("snakemake --executor slurm --profile mn5", LOGIN_ONLINE),
    ("snakemake --unlock --executor slurm --profile mn5", LOGIN_ONLINE),
    ("cat results/findings.md", LOGIN_ONLINE),
    ("scalesweep analyze ", LOGIN_ONLINE),
    ("rsync -av <user>@", LAPTOP),
]
USER, GROUP, ACCOUNT = "student", "group", "scalesweep"  # ACCOUNT: the test cluster's

# The stand-ins of the login node: a Python module that poisons a venv as a real one does
# (PYTHONHOME at its own prefix, PYTHONPATH with packages named like ours that refuse to import),
# bsc_project answering the test cluster's account, and tmux whose session is this shell.
STAND_INS = """
module() {{
    export PATH="{python_bin}:$PATH" PYTHONHOME="{python_prefix}" PYTHONPATH="{shadow}"
}}
bsc_project() {{ echo "{account}"; }}
tmux() {{ :; }}
"""
# Status checks at the test cluster's pace: the mn5 profile's first look after 40 s and every
# ~10 s after (for a real queue) would be minutes of waiting (profiles/local-slurm).
PACE = ("--slurm-init-seconds-before-status-checks 3 --seconds-between-status-checks 2 "
        "--max-status-checks-per-second 1 --latency-wait 5")


def without_comment(line: str) -> str:
    """The line up to a `#` that starts a shell comment: unquoted, at a word's start."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].strip()
    return line.strip()


def page_commands(page: Path = PAGE):
    """Every command of the page's `sh` blocks, in order, comments dropped."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", page.read_text(), flags=re.S | re.M):
        commands += [command for command in map(without_comment, block.splitlines()) if command]
    return commands


def where(command: str) -> str:
    matches = [place for start, place in COMMANDS if command.startswith(start)]
    assert len(matches) == 1, f"docs/mn5.md: the walk does not know how to run {command!r}"
    return matches[0]


def filled(command: str, version: str, gpfs: Path) -> str:
    """The command as the test runs it: placeholders filled, /gpfs under the test's folder, the
    transfer node's host dropped (rsync/scp to a local folder)."""
    for name, value in {"<user>": USER, "<group>": GROUP, "<account>": ACCOUNT, "<version>": version}.items():
        command = command.replace(name, value)
    return command.replace(f"{USER}@transfer1.bsc.es:", "").replace("/gpfs/", f"{gpfs}/")


def shell_script(commands, prologue: str) -> str:
    """One bash script running `commands` in order, each announced (`::: N`) so its output can be
    told apart, stopping at the first that fails."""
    steps = [f"echo '::: {number}'\n{command} || {{ echo \"::: failed {number} rc=$?\"; exit 1; }}"
             for number, command in commands]
    return "exec 2>&1\n" + prologue + "\n".join(steps) + "\n"


def outputs(text: str) -> dict:
    """{command number: its output} from a script's announced output."""
    parts = re.split(r"^::: (\d+)\n", text, flags=re.M)
    return {int(number): output for number, output in zip(parts[1::2], parts[2::2])}


def run_script(script: str, cwd: Path, env: dict, without_network: bool, timeout: int):
    argv = ["bash", "-c", script]
    return subprocess.run(offline(argv) if without_network else argv, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def tiny_sweep_config(path: Path) -> Path:
    """Two 1-GPU runs on synthetic data, the trainers in the container-stack stand-ins: what the
    test cluster can run in place of the reference sweep."""
    config = yaml.safe_load((REPO / "tests" / "configs" / "slurm.yaml").read_text())
    config["matrix"].update(dataset=["synth-cifar", "synth-folder"], gpus=[1])
    config["exclude"] = []
    del config["datasets"]["late-folder"]
    config["container"] = {"runtime": "none",
                           "python": {framework: str(stack_python(stack)) for framework, stack in STACKS.items()}}
    path.write_text(yaml.safe_dump(config))
    return path


def site_stand_ins(gpfs: Path) -> None:
    """What MN5 holds and the shown commands would make: the site's PyTorch image, the SIF that
    singularity build writes, and the course's datasets on the laptop (a file each: the preview
    checks presence, not content)."""
    reference = yaml.safe_load((REPO / "config" / "mn5.yaml").read_text())
    images = {framework: image.replace("YOUR_GROUP", GROUP).replace("/gpfs/", f"{gpfs}/")
              for framework, image in reference["container"]["images"].items()}
    for image in images.values():
        Path(image).parent.mkdir(parents=True, exist_ok=True)
        Path(image).write_bytes(b"stand-in image\n")
    (gpfs / "projects" / GROUP / USER).mkdir(parents=True, exist_ok=True)
    return [Path(dataset["path"]).name for dataset in reference["datasets"].values()]


def test_a_comment_is_cut_only_outside_quotes():
    assert without_comment("bash install.sh   # offline") == "bash install.sh"
    assert without_comment("sed -i 's/^  # x: .*/  x: 1/' f  # set x") == "sed -i 's/^  # x: .*/  x: 1/' f"
    assert without_comment("sed -i 's#A#B#' f") == "sed -i 's#A#B#' f"
    assert without_comment("# only a comment") == ""


def test_every_command_of_the_page_is_known_to_the_walk():
    commands = page_commands()
    assert "sed -i 's/^  # slurm_account: .*/  slurm_account: <account>/' profiles/mn5/config.yaml" in commands
    assert len(commands) >= 20 and all(where(command) for command in commands)
    placed = [where(command) for command in commands]
    assert placed.index(LOGIN_ONLINE) > max(i for i, place in enumerate(placed) if place == LOGIN)


def test_the_pages_bundle_command_is_what_make_bundle_runs():
    # the walk takes the session's bundle, built by `bash envs/bundle.sh 3.12`: so must make be
    assert "\tbash envs/bundle.sh $(PYTHON_VERSION) dist\n" in (REPO / "Makefile").read_text()
    assert "make bundle PYTHON_VERSION=3.12" in page_commands()


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.stacks
def test_walk_mn5_step_by_step_offline(bundle, python_bundle, cluster, tmp_path):  # noqa: F811
    if not can_go_offline():
        pytest.skip("unshare --net is not permitted here")
    version = bundle.name.removesuffix(".tar.gz").removeprefix("scalesweep-").removesuffix("-py312")
    gpfs, laptop = tmp_path / "gpfs", tmp_path / "laptop"
    (laptop / "dist").mkdir(parents=True)
    shutil.copy(bundle, laptop / "dist" / bundle.name)
    for name in site_stand_ins(gpfs):
        (laptop / "datasets" / name).mkdir(parents=True)
        (laptop / "datasets" / name / "data").write_text("stand-in\n")
    shadow = tmp_path / "module-site-packages"
    for package in ("scalesweep", "snakemake"):
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text("raise ImportError('imported from the module PYTHONPATH')\n")
    python_bin = Path(python_bundle).parent
    prologue = STAND_INS.format(python_bin=python_bin, python_prefix=Path(python_bundle).resolve().parents[1],
                                shadow=shadow, account=ACCOUNT)
    folder = gpfs / "projects" / GROUP / USER / f"scalesweep-{version}-py312"
    tiny = tiny_sweep_config(tmp_path / "tiny.yaml")
    base_env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
    assert python_of(OTHER)  # the module's variables are another Python's, as in tests/test_bundle.py

    numbered = [(n, where(c), filled(c, version, gpfs)) for n, c in enumerate(page_commands(), 1)]
    login = [(n, c) for n, place, c in numbered if place == LOGIN]
    online = [(n, c) for n, place, c in numbered if place == LOGIN_ONLINE]
    laptop_before = [(n, c) for n, place, c in numbered if place == LAPTOP and n < login[0][0]]
    laptop_after = [(n, c) for n, place, c in numbered if place == LAPTOP and n > login[0][0]]

    done = run_script(shell_script(laptop_before, ""), laptop, base_env, False, 300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (gpfs / "projects" / GROUP / USER / bundle.name).exists()

    # After the transfer: offline. The unpacked config's /gpfs paths move under the test's folder
    # with the commands' (a step of the test's own, right after the page's `cd` into the bundle).
    relocate = f"sed -i 's#/gpfs/#{gpfs}/#g' config/mn5.yaml"
    steps = []
    for number, command in login:
        steps.append((number, command))
        if command == f"cd scalesweep-{version}-py312":
            steps.append((0, relocate))
    done = run_script(shell_script(steps, prologue), tmp_path, {**base_env, "SLURM_CONF": os.devnull}, True, 900)
    said = outputs(done.stdout)
    assert done.returncode == 0, done.stdout[-6000:]
    assert (folder / ".venv" / ".installed").exists()
    assert said[next(n for n, c in login if c == "bsc_project list")].strip() == ACCOUNT
    assert f"slurm_account: {ACCOUNT}" in (folder / "profiles" / "mn5" / "config.yaml").read_text()
    preview = said[next(n for n, c in login if c.startswith("snakemake -n"))]
    assert "This was a dry-run" in preview and "GPU-hours" in preview, preview[-4000:]
    assert "missing or empty" not in preview, preview[-4000:]  # the datasets and images arrived
    jobs = dict(line.split() for line in preview.splitlines() if line.startswith(("train_tensorflow ", "train_pytorch")))
    assert jobs == {"train_tensorflow": "6", "train_pytorch": "6", "train_pytorch_multinode": "6"}, preview[-3000:]

    # The submission needs the test cluster's controller, on the host's loopback: with the network.
    # A tmux session keeps its shell's folder, module and venv: the same state, set up again.
    resume = f"cd {folder}\nmodule load python/3.12.1\nsource .venv/bin/activate\n"
    steps = [(n, f"{c} --configfile {tiny} {PACE}" if c.startswith("snakemake ") else c) for n, c in online]
    done = run_script(shell_script(steps, prologue + resume), tmp_path, base_env, False, 1200)
    said = outputs(done.stdout)
    assert done.returncode == 0, done.stdout[-6000:]
    with open(folder / "results" / "tidy" / "runs.csv", newline="") as table:
        runs = list(csv.DictReader(table))
    assert len(runs) == 2 and {run["status"] for run in runs} == {"ok"}, runs
    assert {run["framework_version"][:4] for run in runs} == {"2.11", "2.4."}  # the stacks' trainers
    assert all(run["slurm_job_id"] for run in runs), runs  # real SLURM jobs
    first, again = [n for n, c in online if c == "snakemake --executor slurm --profile mn5"]
    assert "Nothing to be done" in said[again], said[again][-3000:]  # nothing measured runs twice
    assert (folder / "analysis" / "tidy" / "runs.csv").exists()

    done = run_script(shell_script(laptop_after, ""), laptop, base_env, False, 300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (laptop / "mn5-results" / "findings.md").read_text() == (folder / "results" / "findings.md").read_text()
