"""The trainers' shared options (scalesweep/train/common/trainer_args.py) and the config schema say
the same thing: the trainers own the defaults and scalesweep/contract/records.py the vocabularies;
the schema, which a container cannot read, keeps copies this test holds in step."""

import argparse
from pathlib import Path

import pytest
import yaml

from scalesweep.contract import records
from scalesweep.train.common import trainer_args

SCHEMA = yaml.safe_load((Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml").read_text())
TRAINING = SCHEMA["properties"]["training"]["properties"]
# The config's epochs (3: a laptop sweep's budget) is always passed to the trainer; a trainer run
# by hand trains the reference setups' 5. Every other shared setting has one default.
PASSED_ALWAYS = {"epochs"}
# The run's own variables reach the trainer as its environment, named by --env-names.
AS_ENVIRONMENT = {"env"}


def trainer_defaults() -> argparse.Namespace:
    """The shared options' defaults and the PyTorch trainer's own (num_workers, channels_last)."""
    from scalesweep.train.torch_backend import trainer as train_torch

    shared = vars(trainer_args.common_parser(models=("m",), data_help="").parse_args([]))
    torch_own = vars(train_torch.parse_args(["--model", train_torch.MODELS[0], "--data", "."]))
    return argparse.Namespace(**{**torch_own, **shared})


@pytest.mark.parametrize("key", sorted(k for k, v in TRAINING.items() if "default" in v and k not in PASSED_ALWAYS | AS_ENVIRONMENT))
def test_the_schema_default_is_the_trainers(key):
    defaults = vars(trainer_defaults())
    assert key in defaults, f"training.{key} has a schema default but no trainer option --{key.replace('_', '-')}"
    assert TRAINING[key]["default"] == defaults[key]


def test_every_shared_trainer_default_has_its_schema_default_or_is_per_model():
    per_model = {"per_gpu_batch", "base_lr", "resolution"}  # the registry's, per model (scalesweep/contract/frameworks.py)
    per_run = {"model", "data", "dataset_name", "gpus", "max_train_images", "list_models", "find_max_batch",
               "nodes", "eval_batch_size", "optimizer", "eval", "env_names", "heartbeat_s",
               "trace_dir", "trace_ranks"}  # trace_*: set by the trace rules from the trace: section
    options = set(vars(trainer_defaults())) - per_model - per_run
    assert options - set(TRAINING) == set()


@pytest.mark.parametrize("key, vocabulary", [
    ("protocol", records.PROTOCOLS), ("oom_policy", records.OOM_POLICIES),
])
def test_the_schema_enums_are_the_records_vocabularies(key, vocabulary):
    assert tuple(TRAINING[key]["enum"]) == vocabulary


def test_precisions_are_the_records_vocabulary():
    assert tuple(SCHEMA["definitions"]["precision"]["enum"]) == records.PRECISIONS


def test_the_trainers_choices_are_the_records_vocabularies():
    actions = {action.dest: action for action in trainer_args.common_parser(("m",), "")._actions}
    assert tuple(actions["protocol"].choices) == records.PROTOCOLS
    assert tuple(actions["oom_policy"].choices) == records.OOM_POLICIES
    assert tuple(actions["precision"].choices) == records.PRECISIONS
