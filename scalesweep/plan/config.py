"""Reading the config files strictly, and schema problems in one line naming the key.

Snakemake reads config files with a YAML loader that keeps the last of two equal keys without a
word and reports a syntax error naming no file, line or column; its schema validation prints the
whole schema and config after the problem. The workflow reads every config file it uses once more
through `load_strict` and rephrases schema errors with `schema_problem`.

`python -m scalesweep check-config FILE...` runs the same checks outside Snakemake: Snakemake reads
--configfile files before the workflow's code runs, so a syntax error in one of them is reported by
Snakemake alone ("Config file is not valid JSON or YAML"), and this names its file, line and column.
"""

import copy
import functools
import json
import re
import reprlib
from collections import Counter
from pathlib import Path

import yaml

from scalesweep.contract.input_files import not_a_file_refusal

from scalesweep.plan import checks, matrix
from scalesweep.plan.checks import ConfigError, did_you_mean
from scalesweep.plan.cluster.site import check_images

# A link to workflow/schemas/config.schema.yaml in a checkout, a copy of it in an installed wheel.
CONFIG_SCHEMA = Path(__file__).with_name("config.schema.yaml")

# Instances shown in a message are cut to a line (jsonschema writes them out whole).
SHORT = reprlib.Repr()
SHORT.maxlevel, SHORT.maxdict, SHORT.maxlist, SHORT.maxstring = 2, 4, 6, 40


class ConfigFileError(ValueError):
    """A config file that does not read as written; the message names the file, line and column."""


def where(path, mark):
    return f"{path}, line {mark.line + 1}, column {mark.column + 1}"


class DuplicateKeyError(yaml.MarkedYAMLError):
    pass


class StrictLoader(yaml.SafeLoader):
    """SafeLoader refusing a key written twice in one mapping (SafeLoader keeps the last one)."""

    def construct_mapping(self, node, deep=False):
        first_marks = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys merged in with << may be overridden on purpose
            key = self.construct_object(key_node, deep=True)
            try:
                first = first_marks.setdefault(key, key_node.start_mark)
            except TypeError:
                continue  # an unhashable key: SafeLoader refuses it itself
            if first is not key_node.start_mark:
                raise DuplicateKeyError(
                    problem=f"duplicate key '{key}' (first at line {first.line + 1}); "
                    "YAML would silently keep only the last one",
                    problem_mark=key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def yaml_error_message(path, error):
    """'FILE, line L, column C: problem (context at line ..)' from a PyYAML error."""
    mark = error.problem_mark or error.context_mark
    if mark is None:
        return f"{path}: {error}"
    message = f"{where(path, mark)}: {error.problem or error.context}"
    if error.context and error.problem:
        context_mark = error.context_mark
        message += f" ({error.context}" + (
            f" at line {context_mark.line + 1}, column {context_mark.column + 1})" if context_mark else ")"
        )
    return message


def refuse_duplicate_pairs(path):
    """A json object_pairs_hook refusing a key given twice (json keeps the last one)."""

    def pairs_to_dict(pairs):
        twice = [key for key, count in Counter(key for key, _ in pairs).items() if count > 1]
        if twice:
            raise ConfigFileError(f"{path}: duplicate key '{twice[0]}' in one JSON object; only the last would count")
        return dict(pairs)

    return pairs_to_dict


def load_strict(path):
    """The config in `path` (JSON or YAML, as Snakemake reads them); ConfigFileError naming the
    file, line and column for a syntax error, a duplicate key or a top level that is no mapping."""
    text = read_utf8(path)
    try:
        data = json.loads(text, object_pairs_hook=refuse_duplicate_pairs(path))
    except json.JSONDecodeError:
        try:
            data = load_yaml(text, path)
        except yaml.MarkedYAMLError as error:
            raise ConfigFileError(yaml_error_message(path, error)) from None
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"{path}: the top level must be keys (matrix:, datasets:, ...), not {checks.value_kind(data)}"
        )
    return data


def read_utf8(path) -> str:
    refusal = not_a_file_refusal(path, "a config file")
    if refusal:
        raise ConfigFileError(refusal)
    size = Path(path).stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"{path}: {size:,} bytes; a config is a few kilobytes, and one over "
                              f"{MAX_CONFIG_BYTES:,} bytes is refused before it is parsed")
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ConfigFileError(f"{path}, line {line}: not UTF-8 text (byte 0x{raw[error.start]:02x}): "
                              "save the file as UTF-8") from None


# A config is a few kilobytes. The YAML parser composes a megabyte of values in about a minute
# (10^6 list items measured here: 64 s), long before MAX_CONFIG_VALUES below can refuse them.
MAX_CONFIG_BYTES = 1_000_000
# A config is a few hundred values; YAML aliases can make a few hundred bytes stand for billions
# (each alias repeats a node that may itself hold aliases), which nothing that walks the config
# would finish.
MAX_CONFIG_VALUES = 100_000


def expanded_size(node, sizes=None) -> int:
    """Values `node` stands for with every alias expanded (each node's size computed once)."""
    sizes = {} if sizes is None else sizes
    if id(node) not in sizes:
        sizes[id(node)] = 0  # a node that contains itself: counted once, YAML refuses it later
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        sizes[id(node)] = 1 + sum(expanded_size(child, sizes) for child in children)
    return sizes[id(node)]


def load_yaml(text, path):
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and expanded_size(node) > MAX_CONFIG_VALUES:
            raise ConfigFileError(f"{path}: holds more than {MAX_CONFIG_VALUES:,} values (YAML aliases "
                                  "expanded); a config needs a few hundred")
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def files_used(default, cli_files, replaced):
    """The config files the workflow's config is made of, in the order they apply: the
    Snakefile's default (if it exists) unless the command line replaced it, then --configfile files."""
    cli_files = [str(f) for f in cli_files]
    if replaced or not Path(default).exists():
        return cli_files
    return [str(default), *cli_files]


def unknown_keys(error, key):
    allowed = list(error.schema.get("properties", {}))
    unknown = [name for name in error.instance if name not in allowed]
    names = ", ".join(f"'{name}'" for name in unknown)
    plural = "s" if len(unknown) > 1 else ""
    message = f"key{plural} {names} (allowed: {', '.join(allowed)}){did_you_mean(unknown, allowed)}"
    return ConfigError(key, f"unknown {message}") if key else ConfigError("", f"unknown top-level {message}")


def schema_problem(error):
    """A jsonschema ValidationError as a ConfigError naming the key, without the schema dump."""
    key = checks.key_path(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        return unknown_keys(error, key)
    if error.validator == "required":
        missing = next(name for name in error.validator_value if name not in error.instance)
        return ConfigError(key, f"missing required key '{missing}'") if key else ConfigError(
            "", f"missing required top-level key '{missing}'"
        )
    if error.validator in ("anyOf", "oneOf") and error.context and all(
        sub.validator == "required" for sub in error.context
    ):
        needed = " or ".join(f"'{name}'" for sub in error.context for name in sub.validator_value)
        return ConfigError(key, f"needs {needed}")
    return ConfigError(key, error.message.replace(repr(error.instance), SHORT.repr(error.instance), 1))


def validate_config(config, schema=CONFIG_SCHEMA):
    """Snakemake's validation (it fills in the schema's defaults), with a one-line ConfigError;
    then what the schema lets through but every job would refuse (scalesweep/plan/checks.py)."""
    # Here, not at the top: the analysis imports this module for the schema's defaults alone
    # (section_defaults), and jsonschema with Snakemake's utils cost a command 0.2 s to import.
    import jsonschema
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    checks.check_names_and_nul_bytes(config)
    checks.check_finite_numbers(config)
    try:
        validate(config, str(schema))
    except WorkflowError as error:
        cause = error.__context__
        if not hasattr(cause, "absolute_path"):
            raise
        raise schema_problem(cause) from None
    problem = jsonschema.exceptions.best_match(strict_validator(schema).iter_errors(config))
    if problem is not None:
        raise whole_number_problem(problem) from None
    checks.check_frameworks(config)
    checks.check_matrix_size(config["matrix"])
    checks.check_dataset_path_shapes(config)
    checks.check_unexpanded_paths(config)
    checks.check_bind_length(config)
    checks.check_prediction_settings(config)


@functools.lru_cache(maxsize=4)
def strict_validator(schema):
    """The schema's validator, with 32.0 no integer (checks.strict_integer)."""
    import jsonschema

    document = schema_document(schema)
    base = jsonschema.validators.validator_for(document)
    checker = base.TYPE_CHECKER.redefine("integer", checks.strict_integer)
    return jsonschema.validators.extend(base, type_checker=checker)(document)


def training_defaults(schema=CONFIG_SCHEMA) -> dict:
    """The value of each `training:` setting when no config sets it, as the schema gives it."""
    return section_defaults("training", schema)


@functools.lru_cache(maxsize=4)
def schema_document(schema=CONFIG_SCHEMA) -> dict:
    """The schema as read (shared: not to be changed). libyaml's loader where PyYAML has it,
    the same document as the pure-Python one in 1/30 of the time (0.25 s of a command's start)."""
    return yaml.load(Path(schema).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.lru_cache(maxsize=8)
def section_defaults(section: str, schema=CONFIG_SCHEMA) -> dict:
    """The value of each setting of a config section when no config sets it: the schema is
    every default's one owner."""
    properties = schema_document(schema)["properties"][section]["properties"]
    # copies: the validator reads the same document
    return {key: copy.deepcopy(spec["default"]) for key, spec in properties.items() if "default" in spec}


def whole_number_problem(error):
    problem = schema_problem(error)
    if error.validator == "type" and isinstance(error.instance, float):
        return ConfigError(problem.key, f"{error.instance!r} is not a whole number as a job reads it: "
                                        f"write {int(error.instance) if error.instance.is_integer() else 'an integer'} "
                                        "without a decimal point")
    return problem


def sources(files, cli_config=None):
    """'(config files: a.yaml, b.yaml; --config: matrix)': where a config's keys came from."""
    text = f"config files: {', '.join(map(str, files)) or 'none'}"
    if cli_config:
        text += f"; --config: {', '.join(cli_config)}"
    return f"({text})"


def check_sweep(paths, site=None):
    """Config files merged in order (then `site`, as a profile's `config:` entry gives it),
    validated and planned: what the workflow checks when parsed, except that no path is looked up
    (site.path_problems does that). Returns (config, runs, their settings, warnings)."""
    from snakemake.utils import update_config

    config = {}
    for path in paths:
        update_config(config, load_strict(path))
    if site is not None:
        config["site"] = site
    validate_config(config)
    runs, excluded = matrix.plan(config, check_paths=False)
    check_images(config, runs)
    settings = [matrix.run_settings(run, config) for run in runs]
    checks.check_planned(config, settings, check_paths=False, training_defaults=training_defaults())
    return config, runs, settings, matrix.config_warnings(config, excluded, settings)


def check_files(paths):
    """(runs, warnings) of check_sweep."""
    _, runs, _, warnings = check_sweep(paths)
    return runs, warnings


# ------------------------------------------------------------------ config/README.md
# Every config key with its type, default and description, written from the schema: the schema is
# the one owner of what a key means, so the reference is generated from it and a test fails when
# the committed file differs (`python -m scalesweep config-doc > config/README.md`).
REFERENCE_HEADER = """# Config keys

Every key of a sweep config (`config/config.yaml`, `config/mn5.yaml`, a `--configfile`), generated
from `workflow/schemas/config.schema.yaml` by `python -m scalesweep config-doc > config/README.md`;
edit the schema, not this file. How a config is checked and which combinations run:
[docs/config.md](../docs/config.md). `<name>` stands for a key you choose (a dataset's name, a
model's, a QoS's); `[]` for each entry of a list.

| key | type | default | description |
| --- | --- | --- | --- |
"""


def resolve_ref(node: dict, schema: dict) -> dict:
    """`node` with a local `$ref` (#/definitions/x) replaced by what it names, its own keys kept."""
    if "$ref" not in node:
        return node
    target = schema
    for part in node["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return {**resolve_ref(target, schema), **{k: v for k, v in node.items() if k != "$ref"}}


def schema_type_text(node: dict, schema: dict) -> str:
    """A key's type in words: `integer >= 1`, `one of fp32, bf16, fp16`, `list of string`, ..."""
    node = resolve_ref(node, schema)
    if "enum" in node:
        return "one of " + ", ".join(str(value) for value in node["enum"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in node and "type" not in node:
            return " or ".join(schema_type_text(option, schema) for option in node[combinator])
    types = node.get("type", "any")
    text = " or ".join(types) if isinstance(types, list) else types
    if text == "array" and "items" in node:
        text = "list of " + schema_type_text(node["items"], schema)
    elif "array" in str(types) and "items" in node:
        text = text.replace("array", "list of " + schema_type_text(node["items"], schema))
    bounds = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "minLength": "length >="}
    limits = [f"{sign} {node[key]}" for key, sign in bounds.items() if key in node]
    return " ".join([text, *limits]) if limits else text


def table_cell(text: str) -> str:
    """One table cell: whitespace folded, pipes escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def reference_rows(node: dict, schema: dict, prefix: str = "", required: tuple = ()):
    """(key, type, default, description) for every key under `node`, depth first in schema order."""
    node = resolve_ref(node, schema)
    for name, child in node.get("properties", {}).items():
        yield from key_reference_rows(f"{prefix}{name}", resolve_ref(child, schema), schema, name in required)
    named = node.get("additionalProperties")
    if isinstance(named, dict):
        # the schema's title of a chosen key ("framework", "model") says what it names
        placeholder = f"<{named.get('title', 'name')}>"
        yield from key_reference_rows(f"{prefix}{placeholder}", resolve_ref(named, schema), schema, False)


def key_reference_rows(key: str, node: dict, schema: dict, required: bool):
    if "default" in node:
        default = f"`{json.dumps(node['default'])}`"
    else:
        default = "required" if required else "—"
    yield key, schema_type_text(node, schema), default, node.get("description", "")
    yield from reference_rows(node, schema, f"{key}.", tuple(node.get("required", ())))
    items = node.get("items")
    if isinstance(items, dict) and "properties" in resolve_ref(items, schema):
        yield from reference_rows(items, schema, f"{key}[].")


def config_reference(schema_path: Path = CONFIG_SCHEMA) -> str:
    """The text of config/README.md for the schema at `schema_path`."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    table = "".join(f"| `{key}` | {table_cell(kind)} | {table_cell(default)} | {table_cell(text)} |\n"
                    for key, kind, default, text in reference_rows(schema, schema, required=tuple(schema.get("required", ()))))
    return REFERENCE_HEADER + table
