"""The trainers start clean of another Python's settings (docs/containers.md, "Environment").

On MareNostrum 5 the sweep's head runs with a Python module loaded (PYTHONHOME, PYTHONPATH for its
3.11), sbatch passes the whole environment on (--export=ALL), and Apptainer/SingularityCE pass
host variables into the container, whose Python is 3.8 (TensorFlow 23.03) or 3.10 (PyTorch 24.07).
Here the workflow's own train commands run through Snakemake with exactly that environment: a
stub `singularity` on PATH does what the real runtime does with the environment (passes the
host's, replaces PATH and LD_LIBRARY_PATH by the image's, sets SINGULARITY_CONTAINER; --cleanenv
keeps only HOME, LANG, TERM), changes to --pwd, refuses a bind source that does not exist, and runs
the command with the image's `python`: a folder image whose bin/python starts the stack stand-in's
interpreter (.stacks/) after writing down the environment it was given. A stub srun starts each
node's shell of a 2-node run on this machine, so torchrun's rendezvous needs MASTER_ADDR/PORT.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SNAKEMAKE
from test_slurm import header_of
from stacks import STACKS, stack_python

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

# What real runtimes do (Apptainer/SingularityCE user guide, "Environment and Metadata"): the host's
# environment passes but for PS1, PATH (the image's) and LD_LIBRARY_PATH; --cleanenv/-e keeps a
# minimal set; {PREFIX}ENV_X sets X; the container's own variables say which image runs.
RUNTIME = r'''#!/bin/bash
set -eu
name=${0##*/}; upper=$(printf %s "$name" | tr a-z A-Z)
[ "${1:-}" = exec ] || { echo "FATAL: stub $name: only exec" >&2; exit 255; }
shift
clean=""; pwd_dir=""; declare -a set_env=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nv) shift ;;
    -e|--cleanenv) clean=1; shift ;;
    --pwd) pwd_dir=$2; shift 2 ;;
    --env) set_env+=("$2"); shift 2 ;;
    --bind|-B)
      IFS=, read -r -a specs <<< "$2"
      for spec in "${specs[@]}"; do
        [ -e "${spec%%:*}" ] || { echo "FATAL: container creation failed: mount ${spec%%:*}: no such file or directory" >&2; exit 255; }
      done
      shift 2 ;;
    -*) echo "FATAL: stub $name: unknown flag $1" >&2; exit 255 ;;
    *) break ;;
  esac
done
image=$1; shift
[ -e "$image" ] || { echo "FATAL: could not open image $image" >&2; exit 255; }
declare -a kept=()
while IFS= read -r -d '' entry; do
  key=${entry%%=*}
  case "$key" in PATH|LD_LIBRARY_PATH|PS1) continue ;; esac
  case "$key" in
    "${upper}ENV_"*) kept+=("${key#"${upper}ENV_"}=${entry#*=}"); continue ;;
  esac
  if [ -n "$clean" ]; then case "$key" in HOME|LANG|TERM) ;; *) continue ;; esac; fi
  kept+=("$entry")
done < <(env -0)
kept+=("PATH=$image/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
       "LD_LIBRARY_PATH=/.singularity.d/libs" "${upper}_CONTAINER=$image"
       "${upper}_NAME=${image##*/}" "${upper}_COMMAND=exec" "${set_env[@]}")
if [ -n "$pwd_dir" ]; then cd "$pwd_dir"; fi
exec env -i "${kept[@]}" "$@"
'''
# srun starts the per-node command once per node, all at once, with the node's id.
SRUN = r'''#!/bin/bash
nodes=1
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do
  case "$1" in --nodes=*) nodes=${1#--nodes=} ;; esac
  shift
done
pids=()
for ((node = 0; node < nodes; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node SLURMD_NODENAME=node$((node + 1)) "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
'''
STUBS = {
    "singularity": RUNTIME,
    "srun": SRUN,
    "squeue": "#!/bin/bash\necho 'node[1-2]'\n",
    "scontrol": "#!/bin/bash\necho 127.0.0.1\necho 127.0.0.1\n",
    # On a site `module` is a shell function that changes the job's own environment; here the
    # poisoned environment is already the job's.
    "module": "#!/bin/bash\nexit 0\n",
}
POISONED = ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")
# What a run needs from the job's environment (beside what Snakemake and srun set).
NEEDED = {"SLURM_CLUSTER_NAME": "marenostrum5", "SLURM_JOB_NODELIST": "node[1-2]",
          "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "lo",
          "NCCL_VERSION": "2.17.1"}
MODELS = {"tensorflow": "cnn_small", "pytorch": "vit_tiny"}
PYTHON_VERSIONS = {"tensorflow": "3.8.", "pytorch": "3.10."}
RUNS = {  # result path below results/runs/ -> (framework, nodes)
    "tensorflow/model~cnn_small/dataset~synth-cifar/gpus~1/epochs~2/per_gpu_batch~16": ("tensorflow", 1),
    "pytorch/model~vit_tiny/dataset~synth-folder/gpus~1/epochs~2/per_gpu_batch~16": ("pytorch", 1),
    "pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16": ("pytorch", 2),
}


def write_executable(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def recording_python(folder, framework, records):
    """A folder image (or a host interpreter) whose bin/python writes down its environment, then
    runs the stack stand-in's interpreter."""
    python = stack_python(STACKS[framework])
    return write_executable(folder / "bin" / "python", (
        "#!/bin/bash\n"
        f'env -0 > "{records}/{framework}.$$.env"\n'
        f'exec "{python}" "$@"\n'
    ))


def rendezvous_job_id():
    """A SLURM job id whose rendezvous port (29500 + id % 1000, launch.RENDEZVOUS_PORT) is free."""
    for offset in range(1000):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", 29500 + offset))
            except OSError:
                continue
        return 4_200_000 + offset
    pytest.skip("no free port in 29500-30499 for torchrun's rendezvous")


def head_python_prefix():
    """The prefix of the Python the sweep's venv was made from: a valid PYTHONHOME for the
    workflow's own 3.11, fatal for the containers' 3.8 and 3.10."""
    venv_config = dict(line.split(" = ", 1) for line in (Path(sys.prefix) / "pyvenv.cfg").read_text().splitlines()
                       if " = " in line)
    return str(Path(venv_config["home"]).parent)


def poisoned_environment(tmp, bin_dir, job_id):
    """The head's environment on MareNostrum 5 with a Python module loaded and the venv active."""
    site = tmp / "module-site"
    write_executable(site / "sitecustomize.py", (
        "import sys\n"
        f"with open({str(tmp / 'imported-from-pythonpath')!r}, 'a') as seen:\n"
        "    seen.write('%d.%d %s\\n' % (sys.version_info[0], sys.version_info[1], sys.executable))\n"
    ))
    startup = write_executable(tmp / "startup.py", f"open({str(tmp / 'startup-ran')!r}, 'w')\n")
    return {
        **{key: value for key, value in os.environ.items() if not key.startswith("BASH_FUNC_")},
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONHOME": head_python_prefix(),
        "PYTHONPATH": str(site),
        "PYTHONSTARTUP": str(startup),
        "PYTHONUSERBASE": str(tmp / "userbase"),
        "VIRTUAL_ENV": str(Path(sys.executable).parents[1]),
        "SLURM_JOB_ID": str(job_id),
        "SLURM_CONF": os.devnull,
        **NEEDED,
    }


def sweep_config(tmp, runtime, records):
    config = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    config["matrix"].update(model=list(MODELS.values()), gpus=[1, 2])
    # One stand-in GPU per node: 2 GPUs are 2 nodes, one torchrun each (srun, MASTER_ADDR).
    config["cluster"] = {"gpus_per_node": 1, "cpus_per_gpu": 1}
    pythons = {framework: recording_python(tmp / "images" / f"{framework}-stack", framework, records)
               for framework in MODELS}
    if runtime == "none":
        config["container"] = {"runtime": "none", "python": {f: str(p) for f, p in pythons.items()}}
    else:
        config["container"] = {"runtime": runtime, "module": runtime, "args": ["--nv"],
                               "images": {f: str(p.parents[1]) for f, p in pythons.items()}}
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def environments(records, framework):
    """The environments the framework's `python` was started with, one per start."""
    return [dict(entry.split("=", 1) for entry in path.read_bytes().decode().split("\0") if entry)
            for path in sorted(records.glob(f"{framework}.*.env"))]


@pytest.mark.parametrize("runtime", ["singularity", "none"])
def test_train_commands_run_clean_of_the_heads_python_in_both_stacks(tmp_path, runtime):
    records = tmp_path / "records"
    records.mkdir()
    bin_dir = tmp_path / "bin"
    for name, text in STUBS.items():
        write_executable(bin_dir / name, text)
    job_id = rendezvous_job_id()
    workdir = tmp_path / "work"
    workdir.mkdir()
    configfile = sweep_config(tmp_path, runtime, records)
    targets = [f"results/runs/{path}/train.log" for path in RUNS]

    result = subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--configfile", str(configfile),
         "--replace-workflow-config", "--cores", "2", *targets],
        cwd=workdir, env=poisoned_environment(tmp_path, bin_dir, job_id), capture_output=True, text=True,
        timeout=900)

    assert result.returncode == 0, result.stderr[-6000:]
    port = str(29500 + job_id % 1000)
    for path, (framework, nodes) in RUNS.items():
        header = header_of(workdir / "results" / "runs" / path / "train.log")
        # The stack's own Python ran the trainer, given what the job's environment holds for it.
        assert header["versions"]["python"].startswith(PYTHON_VERSIONS[framework]), header["versions"]
        assert (header["world_size"], header["nodes"]) == (nodes, nodes)
        assert header["slurm_job_id"] == str(job_id) and header["slurm_cluster_name"] == "marenostrum5"
        assert header["omp_num_threads_env"] == "2"  # the job's 2 threads, one trainer process per node
        image = str(tmp_path / "images" / f"{framework}-stack")
        assert header["container_image"] == (None if runtime == "none" else image)
    assert environments(records, "tensorflow") and header_of(
        workdir / "results" / "runs" / next(iter(RUNS)) / "train.log")["versions"]["nccl"] == "2.17.1"

    started = {framework: environments(records, framework) for framework in MODELS}
    assert [len(started["tensorflow"]), len(started["pytorch"])] == [1, 1 + 2]  # a 2-node run: one per node
    for framework, seen in started.items():
        for environment in seen:
            assert not set(POISONED) & set(environment), (framework, sorted(set(POISONED) & set(environment)))
            assert environment["PYTHONNOUSERSITE"] == "1"
            assert {key: environment.get(key) for key in NEEDED} == NEEDED
            assert environment["SLURM_JOB_ID"] == str(job_id) and environment["OMP_NUM_THREADS"] == "2"
            if runtime != "none":
                assert environment["PATH"].startswith(str(tmp_path / "images" / f"{framework}-stack" / "bin"))
                assert str(Path(sys.executable).parent) not in environment["PATH"]
    across_nodes = [env for env in started["pytorch"] if "MASTER_ADDR" in env]
    assert len(across_nodes) == 2
    assert {(env["MASTER_ADDR"], env["MASTER_PORT"], env["SLURM_NODEID"]) for env in across_nodes} == {
        ("127.0.0.1", port, "0"), ("127.0.0.1", port, "1")}
    # Only the head's own Python (3.11: Snakemake, the data generators) read the module's path.
    imported = (tmp_path / "imported-from-pythonpath").read_text().splitlines()
    assert imported and {line.split()[0] for line in imported} == {"3.11"}
    assert not (tmp_path / "startup-ran").exists()
