"""What a cluster demands of the jobs submitted to it, checked before anything is submitted.

A site's needs (`site:` in the config, docs/mn5-site.md) are declared by its profile's `config:`
entry (profiles/mn5): an account on every job, a QoS with per-job limits of nodes, GPUs and time,
no network. Each check is a pure function of the config, the planned jobs' settings and the values
of the profile's resources, so the preview (`snakemake -n`), a submission and
`python -m scalesweep check-config` say the same.

The paths the jobs read (datasets, local images) are looked up here too: the preview lists every
one that is missing or empty and still shows the plan; only a submission is refused until they
hold something.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from scalesweep.contract.input_files import not_a_file_refusal
from scalesweep.plan import containers, launch
from scalesweep.plan.checks import ConfigError

# The book's way to bring a Docker image to a site whose nodes reach no registry (docs/containers.md).
OFFLINE_IMAGE_ROUTE = (
    "build the image where Docker runs and bring the file over: `docker save IMAGE -o X.tar`, "
    "`scp X.tar` to the cluster, `singularity build X.sif docker-archive://X.tar` on a compute node, "
    "then give X.sif's path (docs/containers.md)"
)


def site_name(site) -> str:
    return site.get("name") or "this site"


def from_command_line(value):
    """A site declared by a profile's `config:` entry (or --config) as Snakemake hands it over:
    below the top level every value is text ('True', '8'), read with YAML's BaseLoader. Each text
    is read again as YAML, keeping what becomes a boolean or a number and the text otherwise."""
    if isinstance(value, dict):
        return {key: from_command_line(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_command_line(item) for item in value]
    if isinstance(value, str):
        try:
            read = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return read if isinstance(read, (bool, int, float)) else value
    return value


# ------------------------------------------------------------------ paths the jobs read
def holds_a_file(folder) -> bool:
    """True at the first file found in the folder or below it (linked folders followed once)."""
    seen = set()
    for root, folders, files in os.walk(folder, followlinks=True):
        stat = os.stat(root)
        if (stat.st_dev, stat.st_ino) in seen:
            folders[:] = []
            continue
        seen.add((stat.st_dev, stat.st_ino))
        if files:
            return True
    return False


def dataset_problem(path, fmt=None) -> str | None:
    """Why a dataset folder (of format `fmt`) cannot be read yet, or None."""
    path = Path(path)
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is a file, not the dataset's folder"
    if not holds_a_file(path):
        return "is empty (no file in it or below it)"
    if fmt == "imagefolder":
        return split_problem(path)
    return None


# The split an imagefolder trainer reads first (scalesweep/train/torch_backend/data.py: load_split).
TRAIN_SPLIT = "train"


def split_problem(path: Path) -> str | None:
    """An imagefolder dataset is the folder that holds train/<class>/*.jpeg: a path naming the
    train/ split itself (its class folders one level too high) failed in every job's trainer."""
    if path.name == TRAIN_SPLIT and not (path / TRAIN_SPLIT).is_dir():
        return (f"is the {TRAIN_SPLIT}/ split itself; an imagefolder dataset is the folder that holds "
                f"{TRAIN_SPLIT}/ (and val/): give {path.parent}")
    # A folder without train/ yet may still be filling (a copy under way, a dataset made by an
    # earlier step of the user's): the trainer names what it lacks.
    return None


def image_problem(path) -> str | None:
    """Why a local image (a SIF file or a sandbox folder) cannot be run yet, or None."""
    path = Path(path)
    if not path.exists():
        return "does not exist"
    if path.is_dir():
        return None if holds_a_file(path) else "is an empty folder"
    return None if path.stat().st_size else "is an empty file"


def read_from(path, workdir) -> str:
    """' in <folder>' for a relative path: the jobs read it from the working folder (Snakemake's
    --directory), which need not be the folder the user typed the command in."""
    return "" if Path(path).is_absolute() else f" in {Path(workdir).resolve()}"


def path_problems(config, all_settings, workdir=".") -> list:
    """(config key, path as written, why) of every dataset and local image the jobs would read
    that is missing or empty; generated datasets and pulled images are made by the workflow."""
    all_settings = list(all_settings)
    problems = []
    for name in sorted({settings["dataset"] for settings in all_settings}):
        spec = config["datasets"][name]
        if spec.get("synthetic") is None:
            why = dataset_problem(Path(workdir) / spec["path"], spec["format"])
            if why:
                problems.append((f"datasets.{name}.path", spec["path"], why + read_from(spec["path"], workdir)))
    container = config["container"]
    for framework, image in containers.sweep_images(container, {s["framework"] for s in all_settings}).items():
        if not containers.is_pulled(image):
            why = image_problem(Path(workdir) / image)
            if why:
                problems.append((f"container.images.{framework}", image, why + read_from(image, workdir)))
    return problems


def path_problem_lines(problems) -> list:
    return [f"  {key}: '{path}' {why}" for key, path, why in problems]


def missing_paths_warning(problems) -> str:
    """The preview's note: the plan is shown, a submission would be refused."""
    return "\n".join([
        f"scalesweep: warning: {len(problems)} path(s) the jobs read are missing or empty; "
        "the plan is shown, but a run is refused until they hold their data:",
        *path_problem_lines(problems),
    ])


def missing_paths_error(problems) -> str:
    """The refusal before any job is submitted."""
    return "\n".join([
        f"{len(problems)} path(s) the jobs read are missing or empty; nothing runs until they hold "
        "their data (copy them first; `snakemake -n` shows the plan meanwhile):",
        *path_problem_lines(problems),
    ])


# ------------------------------------------------------------------ what the site demands
def check_images(config, runs) -> None:
    """A remote image on a site without network is refused with the route that works."""
    site = config["site"]
    if site["network"]:
        return
    for framework, image in containers.sweep_images(config["container"], {run["framework"] for run in runs}).items():
        if containers.is_pulled(image):
            raise ConfigError(
                f"container.images.{framework}",
                f"'{image}' is a remote image, but {site_name(site)} declares no network "
                f"(site.network: false), so no node can pull it: {OFFLINE_IMAGE_ROUTE}",
            )


def command_line_defaults(default_resources) -> str:
    """`--default-resources` with the account first and the profile's other defaults restated:
    given on the command line it replaces the profile's default-resources, it does not add to them."""
    kept = [arg for arg in default_resources if not arg.startswith(("slurm_account=", "tmpdir="))]
    return " ".join(["--default-resources", "slurm_account=<account>", *kept])


def account_problem(site, account, default_resources=()) -> str | None:
    """The refusal of a sweep without an account on a site that requires one, or None.

    `default_resources`: the CLI-style defaults in force (`qos=acc_debug`, ...), to spell out the
    command-line form that keeps them."""
    if not site["account_required"] or (account is not None and str(account).strip()):
        return None
    lookup = f" `{site['account_lookup']}` lists yours." if site["account_lookup"] else ""
    return (
        f"{site_name(site)} refuses jobs without an account (site.account_required), and none is set: "
        "set `slurm_account: <account>` under `default-resources:` in the profile, or give "
        f"`{command_line_defaults(default_resources)}` on the command line (it replaces the "
        f"profile's default-resources, so restate the others).{lookup}"
    )


def qos_problems(site, qos, jobs: dict) -> list:
    """Messages for each job (run path -> settings) that the QoS it would be submitted with
    cannot take; an unset QoS where the site requires one is one message."""
    if qos is None or not str(qos).strip():
        if site["qos_required"]:
            known = ", ".join(site["qos_limits"]) or "see the site's documentation"
            return [f"{site_name(site)} refuses jobs without a QoS (site.qos_required), and none is set: "
                    f"set `qos: <name>` under the profile's `default-resources:` ({known})"]
        return []
    limits = site["qos_limits"].get(str(qos))
    if limits is None:
        return []
    problems = []
    for run_path, settings in jobs.items():
        asked = {"max_nodes": (settings["nodes"], "nodes"),
                 "max_gpus": (launch.held_gpus(settings), "GPUs"),
                 "max_time_min": (settings["time_limit_min"], "minutes")}
        for key, (value, unit) in asked.items():
            if value > limits[key]:
                problems.append(
                    f"job {run_path}: {value} {unit} exceed QoS {qos}'s limit of {limits[key]} {unit} "
                    f"(site.qos_limits.{qos}.{key})"
                )
    return problems


def qos_warning(site, qos) -> str | None:
    """A QoS the site declares limits for, except the one given: its jobs are not checked."""
    if qos is None or not site["qos_limits"] or str(qos) in site["qos_limits"]:
        return None
    return (f"QoS {qos} has no limits in site.qos_limits ({', '.join(site['qos_limits'])}): "
            "its jobs' nodes, GPUs and time are not checked")


def job_problems(site, account, default_resources, jobs: dict, rule_of, qos_of) -> tuple[list, list]:
    """(refusals, warnings) of the jobs to run ({run path: settings}) on the site: the account
    every job needs (account_problem), then for each rule the jobs run under (`rule_of(settings)`,
    in name order) the QoS it is submitted with (`qos_of(rule name)`) against the site's limits
    (qos_problems, qos_warning). No job to run, no QoS to check."""
    refusals, warnings, by_rule = [account_problem(site, account, default_resources)], [], {}
    for run_path, settings in jobs.items():
        by_rule.setdefault(rule_of(settings), {})[run_path] = settings
    for rule_name, rule_jobs in sorted(by_rule.items()):
        qos = qos_of(rule_name)
        refusals += qos_problems(site, qos, rule_jobs)
        warnings.append(qos_warning(site, qos))
    return [refusal for refusal in refusals if refusal], [warning for warning in warnings if warning]


def site_refusal(problems) -> str:
    return "\n".join(["the sweep cannot be submitted as planned:", *(f"  {p}" for p in problems)])


# ------------------------------------------------------------------ a profile, read for check-config
@dataclass
class Profile:
    """What `python -m scalesweep check-config --profile DIR` takes from a Snakemake profile: its
    config files, the site its `config:` entry declares and its default-resources."""

    configfiles: list = field(default_factory=list)
    site: dict | None = None
    default_resources: dict = field(default_factory=dict)

    def resource(self, name):
        return self.default_resources.get(name)

    def resource_args(self) -> list:
        return [f"{name}={value}" for name, value in self.default_resources.items()]


def resource_text(value) -> str:
    """A profile's resource as a job gets it: a quoted string ("'--nice=10'") loses its quotes."""
    text = str(value)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def key_values(entries) -> dict:
    """A profile's `default-resources`/`config`: a mapping, or a list of NAME=VALUE texts."""
    if isinstance(entries, dict):
        return dict(entries)
    pairs = (str(entry).split("=", 1) for entry in entries or [])
    return {name: yaml.safe_load(value) for name, value in pairs}


def read_profile(folder) -> Profile:
    """The profile in `folder` (its config.yaml), as Snakemake would apply it; relative config
    files stay relative to the working directory, as Snakemake reads them."""
    path = Path(folder) / "config.yaml"
    refusal = not_a_file_refusal(path, "a profile's config file")
    if refusal:
        raise ConfigError("", refusal)
    settings = yaml.safe_load(path.read_text()) or {}
    configfiles = settings.get("configfile") or []
    resources = key_values(settings.get("default-resources"))
    return Profile(
        configfiles=[configfiles] if isinstance(configfiles, str) else list(configfiles),
        site=key_values(settings.get("config")).get("site"),
        default_resources={name: resource_text(value) for name, value in resources.items()},
    )
