"""Reading the config files strictly, and schema problems in one line naming the key.

Snakemake reads config files with a YAML loader that keeps the last of two equal keys without a
word and reports a syntax error naming no file, line or column; its schema validation prints the
whole schema and config after the problem. The workflow reads every config file it uses once more
through `load_strict` and rephrases schema errors with `schema_problem`.

`python -m scalesweep check-config FILE...` runs the same checks outside Snakemake: Snakemake reads
--configfile files before the workflow's code runs, so a syntax error in one of them is reported by
Snakemake alone ("Config file is not valid JSON or YAML"), and this names its file, line and column.
"""

import json
import reprlib
from collections import Counter
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config, validate

from scalesweep import matrix
from scalesweep.matrix import ConfigError, did_you_mean

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"

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
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text, object_pairs_hook=refuse_duplicate_pairs(path))
    except json.JSONDecodeError:
        try:
            data = yaml.load(text, Loader=StrictLoader)
        except yaml.MarkedYAMLError as error:
            raise ConfigFileError(yaml_error_message(path, error)) from None
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"{path}: the top level must be keys (matrix:, datasets:, ...), not {matrix.value_kind(data)}"
        )
    return data


def files_used(default, cli_files, replaced):
    """The config files the workflow's config is made of, in the order they apply: the
    Snakefile's default (if it exists) unless the command line replaced it, then --configfile files."""
    cli_files = [str(f) for f in cli_files]
    if replaced or not Path(default).exists():
        return cli_files
    return [str(default), *cli_files]


def key_of(path):
    """'matrix.gpus[1]' from the path ['matrix', 'gpus', 1] of a schema error."""
    key = ""
    for part in path:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def unknown_keys(error, key):
    allowed = list(error.schema.get("properties", {}))
    unknown = [name for name in error.instance if name not in allowed]
    names = ", ".join(f"'{name}'" for name in unknown)
    plural = "s" if len(unknown) > 1 else ""
    message = f"key{plural} {names} (allowed: {', '.join(allowed)}){did_you_mean(unknown, allowed)}"
    return ConfigError(key, f"unknown {message}") if key else ConfigError("", f"unknown top-level {message}")


def schema_problem(error):
    """A jsonschema ValidationError as a ConfigError naming the key, without the schema dump."""
    key = key_of(error.absolute_path)
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


def validate_config(config, schema=SCHEMA):
    """Snakemake's validation (it fills in the schema's defaults), with a one-line ConfigError."""
    try:
        validate(config, str(schema))
    except WorkflowError as error:
        cause = error.__context__
        if not hasattr(cause, "absolute_path"):
            raise
        raise schema_problem(cause) from None


def sources(files, cli_config=None):
    """'(config files: a.yaml, b.yaml; --config: matrix)': where a config's keys came from."""
    text = f"config files: {', '.join(map(str, files)) or 'none'}"
    if cli_config:
        text += f"; --config: {', '.join(cli_config)}"
    return f"({text})"


def check_files(paths):
    """Config files merged in order, validated and planned: what the workflow checks when parsed,
    except that dataset paths are not looked up (they need the cluster's file system)."""
    config = {}
    for path in paths:
        update_config(config, load_strict(path))
    validate_config(config)
    runs, excluded = matrix.plan(config, check_paths=False)
    settings = [matrix.run_settings(run, config) for run in runs]
    return runs, matrix.config_warnings(config, excluded, settings)
