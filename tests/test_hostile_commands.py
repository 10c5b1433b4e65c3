"""Config text that reaches a shell arrives as written: the job commands of launch.py run for real
through stub srun / apptainer / singularity / module / python executables (first on PATH; srun and
the container runtimes exec what they were given, so the per-node shell and the container's
command run too), and no hostile value ever runs a command. Also: a rerun keeps the log of the
attempt that failed, through the real workflow."""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from conftest import REPO, SNAKEMAKE
from scalesweep.contract import frameworks
from scalesweep.plan import containers, launch, matrix

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
MN5 = REPO / "config" / "mn5.yaml"

# {marker} is replaced by a file that must never be created.
HOSTILE = {
    "command-substitution": "$(touch {marker})",
    "backticks": "`touch {marker}`",
    "semicolon": "x; touch {marker}",
    "pipe": "x | touch {marker}",
    "and": "x && touch {marker}",
    "background": "x & touch {marker} &",
    "redirect": "x > {marker}",
    "ifs": "x${{IFS}}&&${{IFS}}touch${{IFS}}{marker}",
    "newline": "x\ntouch {marker}\n",
    "single-quotes": "it's'; touch {marker}; '",
    "double-quotes": 'say "$(touch {marker})" "',
    "backslashes": "back\\slash \\$(touch {marker}) \\",
    "spaces": "two  spaces\tand a tab",
    "home": "$HOME/data ${{HOME}}",
    "unicode": "données-ü-数据-🚀",
    "glob-tilde-brace": "~/x*?[a]{{a..c}}",
}

# Records argv NUL-separated (exact for any text): program name, argument count, arguments.
RECORD = 'printf \'%s\\0\' "${0##*/}" "$#" "$@" >> "$STUB_RECORD"\n'
STUBS = {
    # srun drops its own options and starts the rest (bash -c PER_NODE) as node 0 would.
    "srun": RECORD + 'while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done\n'
                     'SLURM_NODEID=0 exec "$@"\n',
    # `<runtime> exec OPTIONS --pwd DIR IMAGE COMMAND...` runs COMMAND.
    "apptainer": RECORD + 'while [ $# -gt 0 ] && [ "$1" != --pwd ]; do shift; done\n'
                          'shift 3 && exec "$@"\n',
    "module": RECORD,
    "python": RECORD,
    "scontrol": "echo node-a\n",
    # env runs its command as the real one does (-u NAME unsets, NAME=VALUE sets), and says what
    # it was given.
    "env": RECORD + 'while [ "$1" = -u ] || [ "${1#*=}" != "$1" ]; do\n'
                    '  if [ "$1" = -u ]; then unset "$2"; shift 2; else export "$1"; shift; fi\ndone\n'
                    'exec "$@"\n',
    "squeue": "echo node-a\n",
}
STUBS["singularity"] = STUBS["apptainer"]

JOB_ID = 4242
MASTER = "node-a:29742"  # scontrol's first node; port 29500 + 4242 % 1000


def write_stubs(folder, stubs):
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in stubs.items():
        stub = folder / name
        stub.write_text("#!/bin/bash\n" + body)
        stub.chmod(0o755)
    return folder


def stub_env(bin_dir, record, **extra):
    """The environment a job shell gets, with the stubs first on PATH and no exported shell
    function `module` (an Lmod host has one) hiding the stub."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("BASH_FUNC_")}
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}", "STUB_RECORD": str(record), **extra}


def recorded_calls(record):
    """[(program, argv)] in the order the stubs ran."""
    if not record.exists():
        return []
    fields = record.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
    calls, i = [], 0
    while i < len(fields):
        count = int(fields[i + 1])
        calls.append((fields[i], fields[i + 2 : i + 2 + count]))
        i += 2 + count
    return calls


def hostile_config(data, runtime, module, value):
    """The reference config with every config value that reaches a command made hostile."""
    config = yaml.safe_load(MN5.read_text())
    config["matrix"] = {
        "framework": ["tensorflow", "pytorch"], "model": ["resnet50v2", "vit_h_14"],
        "dataset": ["hostile-cifar", "hostile-folder"], "gpus": [4, 8],
    }
    # TensorFlow reads CIFAR-10 pickles, PyTorch image folders: one hostile path for both.
    config["datasets"] = {
        "hostile-cifar": {"format": "cifar10", "path": str(data), "resolution": 32},
        "hostile-folder": {"format": "imagefolder", "path": str(data), "resolution": 32},
    }
    config["container"] = {
        "runtime": runtime,
        "module": module,
        "args": ["--nv", f"--env=NOTE={value}"],
        "binds": [f"/scratch/{value}"],
        "images": {"tensorflow": f"/images/tf {value}.sif", "pytorch": f"docker://nvcr.io/{value}"},
    }
    validate(config, str(SCHEMA))
    return config


def launcher_argv(layout, settings, script):
    """What torchrun / python must receive, launcher variables expanded as on node 0."""
    if layout == "pytorch-2-nodes":
        return ["-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=4", "--node-rank=0",
                f"--rdzv-id={JOB_ID}", "--rdzv-backend=c10d", f"--rdzv-endpoint={MASTER}",
                script, *launch.trainer_args(settings)]
    if layout == "pytorch-1-node":
        return ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", script,
                *launch.trainer_args(settings)]
    return [script, *launch.trainer_args(settings)]


LAYOUTS = {"tensorflow-1-node": ("tensorflow", 4), "pytorch-1-node": ("pytorch", 4),
           "pytorch-2-nodes": ("pytorch", 8)}
# Each container runtime with one form of `module`; none must load nothing.
RUNTIMES = {"none": "string", "apptainer": "string", "singularity": "list"}


def module_value(form, runtime, value):
    return f"{runtime} {value}" if form == "string" else [runtime, value]


@pytest.fixture
def sandbox(tmp_path):
    bin_dir = write_stubs(tmp_path / "bin", STUBS)
    return tmp_path, bin_dir


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_config_values_reach_every_program_as_written(sandbox, name, layout, runtime):
    tmp, bin_dir = sandbox
    marker = tmp / "PWNED"
    value = HOSTILE[name].format(marker=marker)
    data, repo, workdir = tmp / "data" / f"{value}-folder", tmp / f"repo {value}", tmp / f"work {value}"
    for folder in (data, workdir):
        folder.mkdir(parents=True)
    module = module_value(RUNTIMES[runtime], runtime, value)
    config = hostile_config(data, runtime, module, value)
    runs, _ = matrix.plan(config)
    framework, gpus = LAYOUTS[layout]
    run = next(r for r in runs if (r["framework"], r["gpus"]) == (framework, gpus))
    settings = matrix.run_settings(run, config)
    command = launch.job_command(settings, config["container"], str(repo), str(workdir),
                                 str(bin_dir / "python"))
    record = tmp / "calls"

    # As Snakemake runs a rule's shell: bash, strict mode.
    result = subprocess.run(["bash", "-c", "set -euo pipefail; " + command], cwd=workdir,
                            env=stub_env(bin_dir, record, SLURM_JOB_ID=str(JOB_ID),
                                         HOME=str(tmp / "home"), OMP_NUM_THREADS="80"),
                            capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    calls = recorded_calls(record)
    programs = [program for program, _ in calls]
    script = f"{repo}/scripts/{frameworks.get(framework).trainer_script}"
    expected = launcher_argv(layout, settings, script)
    assert calls[-1] == ("python", expected)
    assert expected[expected.index("--data") + 1] == str(data)
    # Each trainer process gets its share of the job's 80 CPUs (OMP_NUM_THREADS, as Snakemake
    # exports it): torchrun starts 4 per node; TensorFlow's one process keeps them all.
    shared = ["env", "OMP_NUM_THREADS=20"] if framework == "pytorch" else []
    # Another Python's settings never reach the trainer's (docs/containers.md): the runtime, or the
    # host interpreter, starts under `env -u PYTHONHOME ...`.
    hygiene = launch.python_env_hygiene()[1:]
    if runtime == "none":
        assert "module" not in programs and runtime not in programs
        assert calls[-2 - len(shared) // 2] == ("env", [*hygiene, *shared, str(bin_dir / "python"), *expected])
        if shared:
            assert calls[-2] == ("env", [shared[1], str(bin_dir / "python"), *expected])
    else:
        names = [module] if isinstance(module, str) else module
        assert calls[0] == ("module", ["load", *names])
        image = config["container"]["images"][framework]
        # A pulled image runs from the SIF rule `images` wrote (file-safe name), a local one as is.
        run = f"{workdir}/{containers.pulled_sif(image)}" if framework == "pytorch" else image
        runtime_argv = [
            "exec", "--nv", f"--env=NOTE={value}",
            "--bind", f"{repo},{workdir},{data},/scratch/{value}",
            "--pwd", str(workdir), run, *shared, "python", *expected,
        ]
        assert calls[-2 - len(shared) // 2] == (runtime, runtime_argv)
        assert calls[-3 - len(shared) // 2] == ("env", [*hygiene, runtime, *runtime_argv])
    if layout == "pytorch-2-nodes":
        srun = dict(calls)["srun"]
        assert srun[:6] == ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gres=gpu:4",
                            "--cpus-per-task=80", "--kill-on-bad-exit=1"]
        assert srun[6:8] == ["bash", "-c"]
    else:
        assert "srun" not in programs


def test_only_the_launchers_own_words_are_left_to_the_inner_shell():
    assert launch.shell_words(["$HOME", launch.NODE_RANK, "a b"]) == (
        "'$HOME' --node-rank=$SLURM_NODEID 'a b'"
    )
    # Config text never becomes an inner-shell word, even when it spells one.
    assert launch.shell_words([str(launch.NODE_RANK)]) == "'--node-rank=$SLURM_NODEID'"


def test_a_failing_module_load_stops_the_job(sandbox):
    tmp, bin_dir = sandbox
    write_stubs(bin_dir, {"module": RECORD + "exit 1\n"})
    config = hostile_config(tmp, "apptainer", "apptainer", "x")
    runs, _ = matrix.plan(config)
    settings = matrix.run_settings(next(r for r in runs if r["gpus"] == 8), config)
    command = launch.job_command(settings, config["container"], str(tmp), str(tmp), "python")
    record = tmp / "calls"
    result = subprocess.run(["bash", "-c", "set -euo pipefail; " + command], cwd=tmp,
                            env=stub_env(bin_dir, record, SLURM_JOB_ID=str(JOB_ID)),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert [program for program, _ in recorded_calls(record)] == ["module"]


@pytest.mark.parametrize("path", ["data,more", "data:/elsewhere"])
def test_a_dataset_path_that_bind_would_split_is_refused_in_a_container(tmp_path, path):
    data = tmp_path / path
    data.mkdir(parents=True)
    config = hostile_config(data, "apptainer", "", "x")
    runs, _ = matrix.plan(config)
    settings = matrix.run_settings(runs[0], config)
    with pytest.raises(ValueError, match=r"datasets\.hostile-\w+\.path .* cannot be bound"):
        launch.job_command(settings, config["container"], "/repo", "/work", "python")
    host = {**config["container"], "runtime": "none"}
    assert f"--data {data}" in launch.job_command(settings, host, "/repo", "/work", "python")


def test_schema_takes_module_as_a_name_or_a_list_of_names():
    config = hostile_config("/data", "singularity", ["singularity/3.11", "cuda/12"], "x")
    assert config["container"]["module"] == ["singularity/3.11", "cuda/12"]
    with pytest.raises(Exception, match="module"):
        hostile_config("/data", "singularity", ["singularity", 3], "x")


# The workflow itself: the real train rule, with a container runtime that fails twice.
APPTAINER_ATTEMPT = RECORD + 'echo "attempt $STUB_LABEL"\nexit "$STUB_EXIT"\n'


def sweep_config(tmp, value):
    # The image must exist: the workflow hashes a local image before the trainings use it.
    image = tmp / "images" / f"{value}.sif"
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(b"an image")
    config = {
        "matrix": {"framework": ["pytorch"], "model": ["vit_tiny"], "dataset": ["d"], "gpus": [1]},
        "training": {"epochs": 1},
        "datasets": {
            "d": {"format": "imagefolder", "resolution": 32, "path": str(tmp / f"data {value}")},
        },
        "container": {"runtime": "apptainer", "module": f"apptainer {value}",
                      "binds": [f"/scratch/{value}"], "images": {"pytorch": str(image)}},
    }
    # Not empty: a run refuses to start on an empty dataset folder (scalesweep/plan/cluster/site.py).
    (tmp / f"data {value}").mkdir(parents=True)
    (tmp / f"data {value}" / "train").write_text("")
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def train(workdir, configfile, env):
    # epochs 1 is away from the default (3), so it is a folder of the run's path
    target = "results/runs/pytorch/model~vit_tiny/dataset~d/gpus~1/epochs~1/train.log"
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--configfile", str(configfile),
         "--replace-workflow-config", "--cores", "1", target],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )


def test_rerun_keeps_the_log_of_every_attempt_and_links_the_latest(tmp_path):
    marker = tmp_path / "PWNED"
    value = f"$(touch {marker}); `touch {marker}`"
    configfile = sweep_config(tmp_path, value)
    bin_dir = write_stubs(tmp_path / "bin", {"apptainer": APPTAINER_ATTEMPT, "module": RECORD})
    workdir = tmp_path / "work"
    workdir.mkdir()
    record = tmp_path / "calls"
    logs = workdir / "logs/train/pytorch/model~vit_tiny/dataset~d/gpus~1"
    latest = logs / "epochs~1.log"
    result = workdir / "results/runs/pytorch/model~vit_tiny/dataset~d/gpus~1/epochs~1/train.log"

    for label, code in (("first", "3"), ("second", "3"), ("third", "0")):
        run = train(workdir, configfile, stub_env(bin_dir, record, STUB_LABEL=label, STUB_EXIT=code))
        assert (run.returncode == 0) == (code == "0"), run.stderr[-3000:]
        if label == "second":
            # What the analysis reads for a failed run (best_log): the latest attempt.
            assert latest.read_text() == "attempt second\n" and not result.exists()

    attempts = sorted(path.name for path in logs.glob("epochs~1.attempt-*.log"))
    assert attempts == [f"epochs~1.attempt-{n}.log" for n in (1, 2, 3)]
    assert [(logs / name).read_text() for name in attempts] == [
        "attempt first\n", "attempt second\n", "attempt third\n"]
    assert os.readlink(latest) == "epochs~1.attempt-3.log"
    assert result.read_text() == "attempt third\n"
    assert not marker.exists()
    calls = recorded_calls(record)
    assert calls[0] == ("module", ["load", f"apptainer {value}"])
    assert calls[1][1][calls[1][1].index("--pwd") + 2] == str(tmp_path / "images" / f"{value}.sif")


# Rule `images`: a hostile module and image URI reach `module` and the runtime's pull as written.
APPTAINER_PULL = RECORD + 'if [ "$1" = pull ]; then printf "pulled %s" "$3" > "$2"; fi\n'


def test_images_are_pulled_and_hashed_with_hostile_names_as_written(tmp_path):
    marker = tmp_path / "PWNED"
    value = f"$(touch {marker}); `touch {marker}` it's \"x\""
    uri = f"docker://nvcr.io/{value}"
    local = tmp_path / f"tf {value}.sif"
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(b"a local image")
    config = {
        "matrix": {"framework": ["tensorflow", "pytorch"], "model": ["cnn_small", "vit_tiny"],
                   "dataset": ["c", "d"], "gpus": [1, 2]},
        "datasets": {"c": {"format": "cifar10", "resolution": 32, "path": str(tmp_path)},
                     "d": {"format": "imagefolder", "resolution": 32, "path": str(tmp_path)}},
        "container": {"runtime": "apptainer", "module": f"apptainer {value}",
                      "images": {"tensorflow": str(local), "pytorch": uri}},
    }
    configfile = tmp_path / "sweep.yaml"
    configfile.write_text(yaml.safe_dump(config))
    bin_dir = write_stubs(tmp_path / "bin", {"apptainer": APPTAINER_PULL, "module": RECORD})
    workdir = tmp_path / "work"
    workdir.mkdir()
    record = tmp_path / "calls"
    sif, digest, local_digest = containers.pulled_sif(uri), containers.digest_file(uri), containers.digest_file(str(local))

    done = subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--configfile", str(configfile),
         "--replace-workflow-config", "--cores", "1", sif, local_digest],
        cwd=workdir, env=stub_env(bin_dir, record), capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    assert not marker.exists()
    assert recorded_calls(record) == [("module", ["load", f"apptainer {value}"]),
                                      ("apptainer", ["pull", sif, uri])]
    pulled = f"pulled {uri}".encode()
    assert (workdir / sif).read_bytes() == pulled
    assert (workdir / digest).read_text() == f"{hashlib.sha256(pulled).hexdigest()}  {workdir / sif}\n"
    assert (workdir / local_digest).read_text() == (
        f"{hashlib.sha256(b'a local image').hexdigest()}  {local}\n")
