"""config/README.md, every config key with its type, default and description, written from the
config schema: the schema is the one owner of what a key means, so the reference is generated
from it and a test fails when the committed file differs (`python -m scalesweep config-doc`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from scalesweep.plan.config import SCHEMA

HEADER = """# Config keys

Every key of a sweep config (`config/config.yaml`, `config/mn5.yaml`, a `--configfile`), generated
from `workflow/schemas/config.schema.yaml` by `python -m scalesweep config-doc > config/README.md`;
edit the schema, not this file. How a config is checked and which combinations run:
[docs/config.md](../docs/config.md). `<name>` stands for a key you choose (a dataset's name, a
model's, a QoS's); `[]` for each entry of a list.

| key | type | default | description |
| --- | --- | --- | --- |
"""


def resolve(node: dict, schema: dict) -> dict:
    """`node` with a local `$ref` (#/definitions/x) replaced by what it names, its own keys kept."""
    if "$ref" not in node:
        return node
    target = schema
    for part in node["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return {**resolve(target, schema), **{k: v for k, v in node.items() if k != "$ref"}}


def type_text(node: dict, schema: dict) -> str:
    """A key's type in words: `integer >= 1`, `one of fp32, bf16, fp16`, `list of string`, ..."""
    node = resolve(node, schema)
    if "enum" in node:
        return "one of " + ", ".join(str(value) for value in node["enum"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in node and "type" not in node:
            return " or ".join(type_text(option, schema) for option in node[combinator])
    types = node.get("type", "any")
    text = " or ".join(types) if isinstance(types, list) else types
    if text == "array" and "items" in node:
        text = "list of " + type_text(node["items"], schema)
    elif "array" in str(types) and "items" in node:
        text = text.replace("array", "list of " + type_text(node["items"], schema))
    bounds = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "minLength": "length >="}
    limits = [f"{sign} {node[key]}" for key, sign in bounds.items() if key in node]
    return " ".join([text, *limits]) if limits else text


def cell(text: str) -> str:
    """One table cell: whitespace folded, pipes escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def rows(node: dict, schema: dict, prefix: str = "", required: tuple = ()):
    """(key, type, default, description) for every key under `node`, depth first in schema order."""
    node = resolve(node, schema)
    for name, child in node.get("properties", {}).items():
        yield from key_rows(f"{prefix}{name}", resolve(child, schema), schema, name in required)
    named = node.get("additionalProperties")
    if isinstance(named, dict):
        yield from key_rows(f"{prefix}<name>", resolve(named, schema), schema, False)


def key_rows(key: str, node: dict, schema: dict, required: bool):
    if "default" in node:
        default = f"`{json.dumps(node['default'])}`"
    else:
        default = "required" if required else "—"
    yield key, type_text(node, schema), default, node.get("description", "")
    yield from rows(node, schema, f"{key}.", tuple(node.get("required", ())))
    items = node.get("items")
    if isinstance(items, dict) and "properties" in resolve(items, schema):
        yield from rows(items, schema, f"{key}[].")


def config_reference(schema_path: Path = SCHEMA) -> str:
    """The text of config/README.md for the schema at `schema_path`."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    table = "".join(f"| `{key}` | {cell(kind)} | {cell(default)} | {cell(text)} |\n"
                    for key, kind, default, text in rows(schema, schema, required=tuple(schema.get("required", ()))))
    return HEADER + table
