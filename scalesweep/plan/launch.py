"""Trainer command lines and SLURM resources, built from a run's settings.

Pure string building (settings come from scalesweep.plan.matrix.run_settings), so the exact commands
a sweep will run on a cluster are testable on a machine without SLURM or Apptainer.

Commands are built from argument lists and quoted once per shell they pass through (the job's
shell; for runs across nodes also the per-node shell srun starts), so config text (paths, images,
container options, module names) always arrives as written; only the launcher's own variables
($SLURM_NODEID, $MASTER_ADDR, ...) are left for a shell to expand.
"""

import os
import shlex

from scalesweep.contract import frameworks, layout, run_env
from scalesweep.plan import containers

# torchrun's rendezvous port: offset by the job id so two jobs sharing a node don't collide.
RENDEZVOUS_PORT = "$((29500 + SLURM_JOB_ID % 1000))"


def trainer_args(settings):
    """The trainer's options, in the trainers' own spelling: those every trainer takes, then its
    framework's own (the registry entry's `trainer_options`)."""
    args = [
        "--model", settings["model"],
        "--data", settings["data_path"],
        "--dataset-name", settings["dataset"],
        "--resolution", settings["resolution"],
        "--gpus", settings["gpus"],
        "--per-gpu-batch", settings["per_gpu_batch"],
        "--base-lr", settings["base_lr"],
        "--epochs", settings["epochs"],
        "--max-train-images", settings["max_train_images"],
        "--precision", settings["precision"],
        "--seed", settings["seed"] + settings["repeat"],
        "--protocol", settings["protocol"],
        "--warmup-steps", settings["warmup_steps"],
        "--timed-steps", settings["timed_steps"],
        "--target-ci-pct", settings["target_ci_pct"],
        "--max-timed-steps", settings["max_timed_steps"],
        "--oom-policy", settings["oom_policy"],
    ]
    if settings["compile"]:
        args.append("--compile")
    if settings.get("env"):
        args += ["--env-names", run_env.names_word(settings["env"])]
    if settings.get("trace_dir"):
        args += ["--trace-dir", settings["trace_dir"], "--trace-ranks", settings["trace_ranks"]]
    if settings.get("find_max_batch"):
        args += ["--find-max-batch", "--max-batch-limit", settings["max_batch_limit"]]
    for option in frameworks.get(settings["framework"]).trainer_options:
        args += option.words(settings)
    return [str(arg) for arg in args]


def is_multinode(settings):
    return settings["nodes"] > 1


def trainer_script(framework, repo):
    """The trainer's words before its options: its program under scripts/, or the generic
    `scripts/train.py <framework>` (frameworks.Framework.trainer_argv)."""
    program, *words = frameworks.get(framework).trainer_argv
    return [f"{repo}/scripts/{program}", *words]


class InnerShellWord(str):
    """A word the launcher itself writes for the per-node shell to expand ($SLURM_NODEID, ...).

    Only these constants stay unquoted in `srun ... bash -c`; every other word, config text
    included, is quoted. str() of one gives a plain str, so config text can never become one.
    """


NODE_RANK = InnerShellWord("--node-rank=$SLURM_NODEID")
RENDEZVOUS_ID = InnerShellWord("--rdzv-id=$SLURM_JOB_ID")
RENDEZVOUS_ENDPOINT = InnerShellWord("--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT")

# The per-node shell's rendezvous address: the allocation's first node. The slurm-jobstep plugin
# clears the allocation's SLURM_* variables except the job id before an `mpi` rule's shell runs,
# so the node list is asked of squeue.
# `sed -n 1p`, not `head -n 1`: head exits after the first line, and scontrol, still writing the
# next node names, dies of SIGPIPE; the job's shell runs under `set -o pipefail` (Snakemake's
# shell prefix), so the job failed with status 141, more often the more nodes it has.
MASTER_ADDR = 'MASTER_ADDR=$(scontrol show hostnames "$(squeue -h -j "$SLURM_JOB_ID" -o %N)" | sed -n 1p)'

# Runtimes a site may provide as an environment module; `none` runs the host's Python.
MODULE_RUNTIMES = ("apptainer", "singularity")


def shell_words(argv):
    """One shell level's command line: every word quoted but the launcher's InnerShellWords."""
    return " ".join(word if isinstance(word, InnerShellWord) else shlex.quote(word) for word in argv)


def absolute(path, workdir):
    """A path as the job sees it from its working directory, made absolute: the runtimes resolve a
    relative bind source against their own working directory, not the job's. An absolute path
    stays exactly as written."""
    path = str(path)
    return path if os.path.isabs(path) else os.path.abspath(os.path.join(str(workdir), path))


def absolute_bind(spec, workdir):
    """A `binds` entry (src[:dest[:opts]]) with its source made absolute."""
    source, *rest = str(spec).split(":", 1)
    return ":".join([absolute(source, workdir), *rest])


def bound_paths(settings, repo, workdir):
    """The paths the launcher binds itself, absolute. `--bind` reads ',' as a list separator and
    ':' as src:dest, so such a path cannot be bound as it is: refuse it with the key to change."""
    paths = {
        "the repository": absolute(repo, workdir),
        "the working directory": absolute(workdir, workdir),
    }
    if settings.get("dataset"):  # the network probe reads no dataset
        paths[f"datasets.{settings['dataset']}.path"] = absolute(settings["data_path"], workdir)
    for what, path in paths.items():
        if "," in path or ":" in path:
            raise ValueError(
                f"{what} '{path}' cannot be bound into the container: "
                "apptainer/singularity --bind read ',' and ':' in a path as separators"
            )
    return list(paths.values())


# What a host's Python leaves in the environment for the next Python: a loaded `python` module
# sets PYTHONHOME/PYTHONPATH for its own version, an activated venv VIRTUAL_ENV. The job inherits
# them (sbatch --export=ALL) and Apptainer/SingularityCE pass host variables into the container,
# where the image's Python (3.8, 3.10) would read another version's library (docs/containers.md).
FOREIGN_PYTHON_VARIABLES = ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")
# The user's own site-packages ($HOME is bound) would shadow the image's packages.
NO_USER_SITE = "PYTHONNOUSERSITE=1"


def python_env_hygiene():
    """`env -u PYTHONHOME ... PYTHONNOUSERSITE=1`: the trainer's Python (the container runtime's,
    or the host interpreter's) starts without another Python's settings, and with everything else
    a run needs (SLURM_*, MASTER_ADDR/PORT, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES, NCCL_*). A fixed
    list, not --cleanenv plus what to keep: what a run needs is open-ended (NCCL_*, SLURM_*), and the
    command must not change with the environment it is planned in."""
    unset = [word for name in FOREIGN_PYTHON_VARIABLES for word in ("-u", name)]
    return ["env", *unset, NO_USER_SITE]


def container_prefix(settings, container, repo, workdir):
    """`env -u ... apptainer exec --nv --bind ... IMAGE`, or only the `env -u ...` when runs use
    the host's Python.

    The repository, the working directory and the dataset are bound so the trainer, its outputs
    and its data are visible at the same paths inside; --pwd keeps relative paths working.
    `binds` entries are the runtime's own bind specs (src[:dest[:opts]]), passed on as written but
    for a relative source, made absolute. A pulled image runs from the SIF rule `images` wrote.
    """
    if container["runtime"] == "none":
        return python_env_hygiene()
    binds = [*bound_paths(settings, repo, workdir),
             *(absolute_bind(spec, workdir) for spec in container["binds"])]
    return [
        *python_env_hygiene(),
        container["runtime"], "exec", *container["args"],
        "--bind", ",".join(dict.fromkeys(binds)),
        "--pwd", absolute(workdir, workdir),
        absolute(containers.image_file(container["images"][settings["framework"]]), workdir),
    ]


def python_for(container, framework, host_python):
    """Inside a container its own `python`; on the host the framework's `container.python` if
    set, else the sweep's interpreter (a venv path that compute nodes on the shared file system
    can run too)."""
    if container["runtime"] != "none":
        return "python"
    return container.get("python", {}).get(framework) or host_python


def processes_per_node(settings):
    """Trainer processes on one node: torchrun starts one per GPU; a single-process launcher
    (TensorFlow's MirroredStrategy) and the CPU baseline are one process."""
    if starts_process_per_gpu(settings):
        return settings["gpus_per_node"]
    return 1


def starts_process_per_gpu(settings):
    """torchrun, one process per GPU: the framework's launcher, unless the run is the CPU
    baseline (one process)."""
    return frameworks.get(settings["framework"]).one_process_per_gpu and settings["gpus"] >= 1


def omp_threads_word(processes):
    """`OMP_NUM_THREADS=<the job's threads // processes, at least 1>`, computed by the shell
    that starts the launcher from the OMP_NUM_THREADS Snakemake exports (the job's threads).
    Worked out at run time, not written into the command: the job's threads depend on where it
    runs (--cores here, cpus_per_task on SLURM, 1 in a dry run), and a command that differed
    with them would make Snakemake rerun every measured run after a preview."""
    share = "${OMP_NUM_THREADS:-1}/%d" % processes
    return InnerShellWord(f"OMP_NUM_THREADS=$(({share}>0?{share}:1))")


def with_run_env(argv, settings):
    """The launcher under `env NAME=value ...` with the run's own variables (`matrix.env`),
    inside the container (a runtime started with --cleanenv would drop them outside), each word
    quoted by the shell level that runs it."""
    assignments = run_env.assignments(settings.get("env") or {})
    return ["env", *assignments, *argv] if assignments else argv


def with_omp_threads(argv, settings):
    """The trainer's launcher under `env OMP_NUM_THREADS=<share>` where several processes share
    the node (torchrun leaves a set value to every rank: 4 ranks x 80 threads on 80 cores would
    oversubscribe it 4 times); one process keeps the job's value. `env` runs inside the
    container, where every image has it."""
    processes = processes_per_node(settings)
    if processes == 1 or "OMP_NUM_THREADS" in (settings.get("env") or {}):
        return argv  # a value the run asks for in env is what it runs with, as its run path says
    return ["env", omp_threads_word(processes), *argv]


def single_node_argv(settings, python, repo):
    """One process for a single-process launcher and the CPU baseline; torchrun with a process
    per GPU."""
    script = trainer_script(settings["framework"], repo)
    if starts_process_per_gpu(settings):
        launcher = [python, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={settings['gpus']}"]
    else:
        launcher = [python]
    return launcher + script + trainer_args(settings)


def torchrun_per_node_argv(nodes, processes_per_node, python, script_argv):
    """torchrun on one node of `nodes`, running `script_argv` in `processes_per_node` processes."""
    return [
        python, "-m", "torch.distributed.run",
        f"--nnodes={nodes}",
        f"--nproc-per-node={processes_per_node}",
        NODE_RANK,
        RENDEZVOUS_ID,
        "--rdzv-backend=c10d",
        RENDEZVOUS_ENDPOINT,
        *script_argv,
    ]


def module_names(container):
    """`container.module`: one module name or a list of them (none: an empty string or list)."""
    module = container.get("module") or []
    return [module] if isinstance(module, str) else list(module)


def module_load(container):
    """`module load NAME...` as the job's first step, for container runtimes only: a runtime
    `none` job runs the host's Python and loads nothing."""
    names = module_names(container)
    if container["runtime"] not in MODULE_RUNTIMES or not names:
        return []
    return [shlex.join(["module", "load", *names])]


def max_batch_settings(settings):
    """The same run as a search for the largest per-GPU batch that fits (one GPU is enough)."""
    return {**settings, "find_max_batch": True}


def job_command(settings, container, repo, workdir, host_python, script_argv=None):
    """The shell command of one training job, locally or inside a SLURM allocation: its steps
    joined by &&, so a step that fails (a module that does not load) stops the job.
    `script_argv`: another script of the framework's (the network probe) launched as its trainer
    would be, in the same container and processes."""
    python = python_for(container, settings["framework"], host_python)
    prefix = container_prefix(settings, container, repo, workdir)
    if is_multinode(settings):
        script_argv = script_argv or [*trainer_script(settings["framework"], repo), *trainer_args(settings)]
        steps = multinode_steps(settings, prefix, python, script_argv)
    else:
        launcher = with_omp_threads(single_node_argv(settings, python, repo), settings)
        steps = [shell_words(prefix + with_run_env(launcher, settings))]
    return " && ".join(module_load(container) + steps)


def pull_command(container, image, sif):
    """`module load ... && <runtime> pull SIF IMAGE`: the one conversion of a remote image into a
    SIF file (rule `images`), every word quoted."""
    return " && ".join(module_load(container) + [shlex.join([container["runtime"], "pull", str(sif), image])])


def multinode_steps(settings, prefix, python, script_argv):
    """srun outside the container starts one torchrun per node inside it; torchrun's c10d
    rendezvous sits on the allocation's first node.

    Two shell levels: this job's shell runs srun, srun runs `bash -c PER_NODE` on each node. The
    per-node line is quoted for the per-node shell, then as one word for this one. srun gets
    every option itself: the job's SLURM_* variables are cleared (see MASTER_ADDR).
    """
    torchrun_argv = torchrun_per_node_argv(settings["nodes"], settings["gpus_per_node"], python, script_argv)
    torchrun = with_run_env(with_omp_threads(torchrun_argv, settings), settings)
    return srun_per_node_steps(settings["nodes"], settings["gpus_per_node"], settings["cpus_per_task"],
                               shell_words(prefix + torchrun))


def srun_words(nodes, gpus_per_node, cpus_per_task):
    """srun with every option itself, one task per node."""
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", f"--gres=gpu:{gpus_per_node}",
            f"--cpus-per-task={cpus_per_task}", "--kill-on-bad-exit=1"]


def srun_per_node_steps(nodes, gpus_per_node, cpus_per_task, per_node):
    """The job's steps that run the shell line `per_node` once on each of its `nodes`, with the
    rendezvous address and port exported for it."""
    srun = srun_words(nodes, gpus_per_node, cpus_per_task)
    return [
        MASTER_ADDR,
        f"MASTER_PORT={RENDEZVOUS_PORT}",
        "export MASTER_ADDR MASTER_PORT",
        shlex.join([*srun, "bash", "-c", per_node]),
    ]


PROBE_NODES = 2
# A few seconds of timing after the processes start (a container and torch's import take longer
# on a shared file system); the limit SLURM books and the preview charges.
PROBE_TIME_LIMIT_MIN = 10


def network_probe_settings(cluster):
    """The probe's job as a 2-node run of the probe framework's (frameworks.network_probe_framework):
    every GPU of both nodes, one process per GPU, so it starts, binds, rendezvouses and is booked
    (slurm_resources, booked_gpu_hours) exactly as such a training run."""
    gpus_per_node = cluster["gpus_per_node"]
    return {"framework": frameworks.network_probe_framework().name, "nodes": PROBE_NODES,
            "gpus": PROBE_NODES * gpus_per_node, "gpus_per_node": gpus_per_node, "node_gpus": gpus_per_node,
            "cpus_per_task": cluster["cpus_per_gpu"] * gpus_per_node, "time_limit_min": PROBE_TIME_LIMIT_MIN,
            "exclusive": cluster.get("exclusive", "never"), "whole_node": False}


def network_probe_models(all_settings):
    """The probe's `--model` words, `NAME:RESOLUTION:BUCKET_CAP_MB`, one per distinct model,
    resolution and DDP bucket cap among the runs of the probe framework (the script all-reduces
    the largest model's gradients, in its buckets)."""
    framework = frameworks.network_probe_framework().name
    return sorted({f"{s['model']}:{s['resolution']}:{s.get('bucket_cap_mb') or frameworks.DDP_BUCKET_CAP_MB}"
                   for s in all_settings if s["framework"] == framework})


def network_probe_script_argv(repo, out, models):
    return [os.path.join(str(repo), "scripts", "probe_network.py"),
            *(f"--model={model}" for model in models), f"--out={out}"]


def network_probe_command(cluster, container, repo, workdir, host_python, out, models):
    """The network probe's job (scripts/probe_network.py, docs/prediction.md): one process per
    GPU on each of two nodes inside the probe framework's container, the all-reduce of the largest
    of `models`' gradient bytes, its row to `out`."""
    settings = network_probe_settings(cluster)
    torch_step = job_command(settings, container, repo, workdir, host_python,
                             network_probe_script_argv(repo, out, models))
    return f"{torch_step} && {nccl_tests_step(settings, container, repo, workdir, host_python, out)}"


def nccl_tests_step(settings, container, repo, workdir, host_python, out):
    """nccl-tests' all_reduce_perf across the probe's nodes where the image has it
    (scalesweep/train/nccl_tests.py): asked inside the image (no program: nothing
    runs, network.csv stays torch's), run by srun as one task per node driving its GPUs (the
    ranks nccl-tests' MPI build expects), its table kept beside network.csv and merged into it. A
    failure of it leaves torch's row and says so: the prediction does not need it."""
    prefix = container_prefix(settings, container, repo, workdir)
    python = python_for(container, settings["framework"], host_python)
    script = [os.path.join(str(repo), "scripts", "probe_nccl_tests.py")]
    table = layout.nccl_tests_output(str(out))
    ask = shell_words(prefix + [python, *script, "args", f"--out={out}", f"--gpus-per-node={settings['gpus_per_node']}"])
    srun = shlex.join(srun_words(settings["nodes"], settings["gpus_per_node"], settings["cpus_per_task"]))
    run = f"{srun} {shell_words(prefix)} $NCCL_TESTS > {shlex.quote(table)}"
    merge = shell_words(prefix + [python, *script, "merge", f"--out={out}", f"--table={table}"])
    return (f"if NCCL_TESTS=$({ask}); then ({run} && {merge}) || "
            f"echo 'nccl-tests: all_reduce_perf failed: network.csv keeps the torch bandwidth alone' >&2; fi")


def gres_gpus_per_node(settings):
    """GPUs per node the job asks SLURM for: the run's, or the whole node's with `whole_node`
    (a run of 1 GPU on a node of 4 then holds all 4, as the course's TensorFlow jobs did)."""
    if settings["whole_node"] and settings["gpus"] >= 1:
        return settings["node_gpus"]
    return settings["gpus_per_node"]


def is_exclusive(settings):
    """--exclusive: `exclusive: always`, or `multinode` for a run across nodes."""
    return settings["exclusive"] == "always" or (settings["exclusive"] == "multinode" and is_multinode(settings))


def holds_whole_nodes(settings):
    return settings["whole_node"] or is_exclusive(settings)


def slurm_resources(settings, cluster, user_extra=""):
    """The job's SLURM shape for snakemake-executor-plugin-slurm.

    One node up to gpus_per_node GPUs, else whole nodes with one task per node. tasks_per_gpu=0
    because the plugin otherwise turns `tasks` into --ntasks-per-gpu on GPU jobs. slurm_extra
    holds the workflow's options, then the config's (cluster.slurm_extra), then `user_extra`
    (the profile's default-resources slurm_extra and a --set-resources one, which would
    otherwise replace, or be replaced by, the rule's own: workflow/rules/resources.smk).
    """
    gres = gres_gpus_per_node(settings)
    resources = {
        "nodes": settings["nodes"],
        "cpus_per_task": settings["cpus_per_task"],
        "runtime": settings["time_limit_min"],
        "tasks_per_gpu": 0,
    }
    if gres >= 1:
        resources["gres"] = f"gpu:{gres}"
    if is_multinode(settings):
        resources["tasks"] = settings["nodes"]
    extra = " ".join(part.strip() for part in ("--exclusive" if is_exclusive(settings) else "",
                                                cluster.get("slurm_extra", ""), user_extra or "")
                     if part and part.strip())
    if extra:
        resources["slurm_extra"] = extra
    return resources


def held_gpus(settings):
    """GPUs the job holds while it runs: all of its nodes' GPUs when it takes them whole (nobody
    else can use them), else the GPUs it asks for."""
    if holds_whole_nodes(settings):
        return settings["nodes"] * settings["node_gpus"]
    return settings["nodes"] * gres_gpus_per_node(settings)


def booked_gpu_hours(settings):
    """GPU-hours a job is charged: the GPUs it holds times its time limit (what the allocation
    books, whether the trainer uses every GPU or not)."""
    return held_gpus(settings) * settings["time_limit_min"] / 60


def network_probe_wanted(analysis, swept_frameworks):
    """Whether the sweep runs the network probe itself: when a framework that runs across nodes
    is swept (`swept_frameworks`: matrix.framework) and a GPU count the config asks to predict
    (the analysis settings' predict_gpus) lies beyond one node (their node_gpus); on a cluster
    across two nodes, locally in two processes standing in for them. The default counts (the next
    two doublings) book no 2-node job the user did not ask for: `snakemake probe_network` runs it
    alone."""
    asked = analysis.predict_gpus
    if not asked or analysis.network_busbw_gb_s is not None:  # a what-if network replaces the probe's
        return False
    spans_nodes = any(frameworks.get(name).multinode for name in swept_frameworks)
    return spans_nodes and max(asked) > analysis.node_gpus()


def network_probe_shell(cluster, container, repo, workdir, host_python, out, models):
    """The probe rule's command: across two nodes inside a SLURM allocation (the job's), two local
    processes of the sweep's own Python elsewhere. Decided when the job runs: the executor is not
    known when the workflow is parsed, and a dry run hides it."""
    across_nodes = network_probe_command(cluster, container, repo, workdir, host_python, out, models)
    return (f'if [ -n "${{SLURM_JOB_ID:-}}" ]; then {across_nodes}; '
            f"else {shell_words(local_network_probe_argv(host_python, repo, out, models))}; fi")


def local_network_probe_argv(python, repo, out, models):
    """The probe on one machine: two processes under torchrun stand in for two nodes (gloo)."""
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PROBE_NODES}",
            *network_probe_script_argv(repo, out, models)]
