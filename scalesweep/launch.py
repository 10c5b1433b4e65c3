"""Trainer command lines and SLURM resources, built from a run's settings.

Pure string building (settings come from scalesweep.matrix.run_settings), so the exact commands
a sweep will run on a cluster are testable on a machine without SLURM or Apptainer.
"""

import shlex

TRAINER_SCRIPTS = {"tensorflow": "train_tf.py", "pytorch": "train_torch.py"}

# torchrun's rendezvous port: offset by the job id so two jobs sharing a node don't collide.
RENDEZVOUS_PORT = "$((29500 + SLURM_JOB_ID % 1000))"


def trainer_args(settings):
    """Options both trainers take, in the trainers' own spelling."""
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
    if settings.get("find_max_batch"):
        args += ["--find-max-batch", "--max-batch-limit", settings["max_batch_limit"]]
    if settings["framework"] == "pytorch":
        args += ["--nodes", settings["nodes"], "--num-workers", settings["num_workers"]]
        if settings["channels_last"]:
            args.append("--channels-last")
    return [str(arg) for arg in args]


def is_multinode(settings):
    return settings["nodes"] > 1


def trainer_script(framework, repo):
    return f"{repo}/scripts/{TRAINER_SCRIPTS[framework]}"


def container_prefix(settings, container, repo, workdir):
    """`apptainer exec --nv --bind ... IMAGE`, or nothing when runs use the host's Python.

    The repository, the working directory and the dataset are bound so the trainer, its outputs
    and its data are visible at the same paths inside; --pwd keeps relative paths working.
    """
    if container["runtime"] == "none":
        return []
    binds = [repo, workdir, settings["data_path"], *container["binds"]]
    return [
        container["runtime"], "exec", *container["args"],
        "--bind", ",".join(dict.fromkeys(binds)),
        "--pwd", workdir,
        container["images"][settings["framework"]],
    ]


def python_for(container, host_python):
    """Inside a container its own `python`; on the host the sweep's interpreter (a venv path that
    compute nodes on the shared file system can run too)."""
    return host_python if container["runtime"] == "none" else "python"


def single_node_argv(settings, python, repo):
    """One process for TensorFlow and the CPU baseline; torchrun with a process per GPU."""
    script = trainer_script(settings["framework"], repo)
    if settings["framework"] == "pytorch" and settings["gpus"] >= 1:
        launcher = [python, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={settings['gpus']}"]
    else:
        launcher = [python]
    return launcher + [script] + trainer_args(settings)


def multinode_torchrun_argv(settings, python, repo):
    """torchrun for one node of a multi-node run; $SLURM_NODEID and $MASTER_ADDR stay unexpanded
    for the per-node shell that srun starts."""
    return [
        python, "-m", "torch.distributed.run",
        f"--nnodes={settings['nodes']}",
        f"--nproc-per-node={settings['gpus_per_node']}",
        "--node-rank=$SLURM_NODEID",
        "--rdzv-id=$SLURM_JOB_ID",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT",
        trainer_script("pytorch", repo),
        *trainer_args(settings),
    ]


def quote_keeping_variables(argv):
    """shlex-quote each word unless it only carries $VARIABLES meant for the inner shell."""
    return " ".join(arg if "$" in arg else shlex.quote(arg) for arg in argv)


def module_load(container):
    return f"module load {container['module']} && " if container.get("module") else ""


def max_batch_settings(settings):
    """The same run as a search for the largest per-GPU batch that fits (one GPU is enough)."""
    return {**settings, "find_max_batch": True}


def job_command(settings, container, repo, workdir, host_python):
    """The shell command of one training job, locally or inside a SLURM allocation."""
    python = python_for(container, host_python)
    prefix = container_prefix(settings, container, repo, workdir)
    if not is_multinode(settings):
        return module_load(container) + shlex.join(prefix + single_node_argv(settings, python, repo))
    return module_load(container) + multinode_command(settings, prefix, python, repo)


def multinode_command(settings, prefix, python, repo):
    """srun outside the container starts one torchrun per node inside it; torchrun's c10d
    rendezvous sits on the allocation's first node.

    The slurm-jobstep plugin clears the allocation's SLURM_* variables except the job id before
    an `mpi` rule's shell runs, so the node list is asked of squeue and srun gets every option.
    """
    nodes, gpus_per_node = settings["nodes"], settings["gpus_per_node"]
    per_node = quote_keeping_variables(prefix + multinode_torchrun_argv(settings, python, repo))
    srun = [
        "srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
        f"--gres=gpu:{gpus_per_node}", f"--cpus-per-task={settings['cpus_per_task']}",
        "--kill-on-bad-exit=1",
    ]
    return (
        'MASTER_ADDR=$(scontrol show hostnames "$(squeue -h -j "$SLURM_JOB_ID" -o %N)" | head -n 1)'
        f" MASTER_PORT={RENDEZVOUS_PORT}; export MASTER_ADDR MASTER_PORT; "
        + shlex.join(srun)
        + " bash -c "
        + shlex.quote(per_node)
    )


def local_command(settings, python="python", repo="."):
    """The command that trains one configuration on this machine (no SLURM, no container)."""
    return shlex.join(single_node_argv(settings, python, repo))


def slurm_resources(settings, cluster):
    """The job's SLURM shape for snakemake-executor-plugin-slurm.

    One node up to gpus_per_node GPUs, else whole nodes with one task per node. tasks_per_gpu=0
    because the plugin otherwise turns `tasks` into --ntasks-per-gpu on GPU jobs.
    """
    gpus_per_node = settings["gpus_per_node"]
    resources = {
        "nodes": settings["nodes"],
        "cpus_per_task": settings["cpus_per_task"],
        "runtime": settings["time_limit_min"],
        "tasks_per_gpu": 0,
    }
    if gpus_per_node >= 1:
        resources["gres"] = f"gpu:{gpus_per_node}"
    if is_multinode(settings):
        resources["tasks"] = settings["nodes"]
    if cluster["exclusive"] == "always" or (cluster["exclusive"] == "multinode" and is_multinode(settings)):
        resources["slurm_extra"] = "--exclusive"
    return resources


def gpu_hours(settings):
    """GPU-hours a job books: its GPUs times its time limit (what the allocation is charged)."""
    return settings["gpus"] * settings["time_limit_min"] / 60
