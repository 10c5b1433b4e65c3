"""Trainer command lines, built from a run's settings (scalesweep.matrix.run_settings).

Pure string building, so the exact commands a sweep will run are testable without running them.
"""

import shlex

TRAINER_SCRIPTS = {"tensorflow": "scripts/train_tf.py", "pytorch": "scripts/train_torch.py"}


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
    ]
    if settings["compile"]:
        args.append("--compile")
    if settings["framework"] == "pytorch":
        args += ["--nodes", settings["nodes"], "--num-workers", settings["num_workers"]]
        if settings["channels_last"]:
            args.append("--channels-last")
    return [str(arg) for arg in args]


def local_command(settings, python="python"):
    """The command that trains one configuration on this machine (no SLURM, no container).

    PyTorch runs under torchrun (as `python -m torch.distributed.run`, so the interpreter of the
    sweep is used) with one process per stand-in GPU; gpus 0 is a plain single process.
    """
    script = TRAINER_SCRIPTS[settings["framework"]]
    args = trainer_args(settings)
    if settings["framework"] == "pytorch" and settings["gpus"] >= 1:
        launcher = [python, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={settings['gpus']}"]
    else:
        launcher = [python]
    return shlex.join(launcher + [script] + args)
