"""config/README.md is generated from the config schema (scalesweep/plan/config.py, config_reference): the
committed file must be what the schema gives now, and the generator must reach every key."""

import subprocess
import sys

import yaml

from conftest import REPO
from scalesweep.plan.config import CONFIG_SCHEMA, config_reference, reference_rows

REGENERATE = "python -m scalesweep config-doc > config/README.md"


def test_config_readme_is_what_the_schema_gives():
    committed = (REPO / "config" / "README.md").read_text()
    assert committed == config_reference(), f"config/README.md is out of date with the schema: {REGENERATE}"


def test_the_command_prints_the_reference():
    done = subprocess.run([sys.executable, "-m", "scalesweep", "config-doc"], capture_output=True, text=True,
                          cwd=REPO, check=True)
    assert done.stdout == config_reference()


def schema_keys(node, schema, prefix=""):
    """Every key path the schema defines, found independently of the generator's walk."""
    if "$ref" in node:
        node = schema["definitions"][node["$ref"].split("/")[-1]]
    for name, child in node.get("properties", {}).items():
        yield f"{prefix}{name}"
        yield from schema_keys(child, schema, f"{prefix}{name}.")
    named = node.get("additionalProperties")
    if isinstance(named, dict):
        placeholder = f"<{named.get('title', 'name')}>"
        yield f"{prefix}{placeholder}"
        yield from schema_keys(named, schema, f"{prefix}{placeholder}.")


def test_every_key_of_the_schema_has_a_row_with_its_default_and_description():
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())
    table = {key: (kind, default, text) for key, kind, default, text in reference_rows(schema, schema, required=("matrix",))}
    assert set(schema_keys(schema, schema)) <= set(table)
    assert table["training.oom_policy"][:2] == ("one of fail, halve", '`"fail"`')
    assert table["matrix"][1] == "required"
    assert table["datasets.<name>.synthetic.seed"][1] == "`0`"
    # a key reached through a $ref carries the definition's description
    assert table["models.<framework>.<model>.whole_node"][2] == schema["definitions"]["whole_node"]["description"]
    assert table["training.timed_steps"][0] == "integer >= 1 or one of auto"


def test_a_changed_schema_changes_the_reference(tmp_path):
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())
    schema["properties"]["history_dir"]["default"] = "elsewhere/history"
    schema["properties"]["brand_new"] = {"type": "string", "description": "a key added | with a pipe"}
    changed = tmp_path / "schema.yaml"
    changed.write_text(yaml.safe_dump(schema))
    text = config_reference(changed)
    assert text != config_reference()
    assert '| `history_dir` | string length >= 1 | `"elsewhere/history"` |' in text
    assert "| `brand_new` | string | — | a key added \\| with a pipe |" in text
