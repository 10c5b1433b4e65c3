"""The analysis settings (scalesweep/plan/analysis_settings.py): one object whose defaults are the config
schema's, written nowhere else."""

import ast
import dataclasses
from pathlib import Path

import pytest
import yaml

from scalesweep.plan.analysis_settings import CONFIG_KEYS, DEFAULTS, AnalysisSettings

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_ANALYSIS = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())[
    "properties"]["analysis"]["properties"]
FIELDS = [field.name for field in dataclasses.fields(AnalysisSettings)]
# Every name a setting goes by in the code: the field, the config key, the command-line option.
NAMES = {*FIELDS, *CONFIG_KEYS.values(), "floor"}
OPTIONS = {"--" + name.replace("_", "-") for name in FIELDS}


# The what-if network's two fields come from one config section, analysis.network (null: none).
NETWORK_FIELDS = {"network_busbw_gb_s": "network", "network_latency_s": "network"}


def config_key(name):
    return NETWORK_FIELDS.get(name) or CONFIG_KEYS.get(name, name)


def test_an_empty_config_gives_the_schemas_defaults():
    assert SCHEMA_ANALYSIS["network"]["default"] is None
    expected = {name: None if name in NETWORK_FIELDS else SCHEMA_ANALYSIS[config_key(name)]["default"]
                for name in FIELDS}
    assert dataclasses.asdict(AnalysisSettings.from_config({})) == expected
    assert AnalysisSettings.from_config(None) == DEFAULTS == AnalysisSettings.from_options()


def test_every_setting_of_the_schema_is_a_field():
    assert sorted({config_key(name) for name in FIELDS}) == sorted(SCHEMA_ANALYSIS)


def test_the_config_and_the_options_replace_only_what_they_give():
    from_config = AnalysisSettings.from_config({"efficiency_floor_pct": 90, "gpu_hour_budget": 2.5})
    assert (from_config.efficiency_floor, from_config.gpu_hour_budget) == (90, 2.5)
    assert from_config.epoch_budget == DEFAULTS.epoch_budget
    options = AnalysisSettings.from_options(efficiency_floor=None, epoch_budget=3.0, allow_superlinear=None)
    assert dataclasses.replace(DEFAULTS, epoch_budget=3.0) == options


def test_the_counts_to_predict_are_the_configs_else_the_next_two_doublings():
    assert DEFAULTS.predicted_counts(4) == (8, 16)
    assert DEFAULTS.predicted_counts(3) == (6, 12)
    assert AnalysisSettings.from_config({"predict_gpus": [12, 5]}).predicted_counts(4) == (12, 5)


def test_a_nodes_gpus_are_the_analysis_sections_else_the_clusters_else_the_largest_measured():
    both = AnalysisSettings.from_config({"gpus_per_node": 8}, {"gpus_per_node": 4})
    assert (both.gpus_per_node, both.node_gpus(2), both.node_gpus()) == (8, 8, 8)
    cluster = AnalysisSettings.from_config({}, {"gpus_per_node": 4})
    assert (cluster.node_gpus(16), cluster.node_gpus()) == (4, 4)
    assert (DEFAULTS.node_gpus(16), DEFAULTS.node_gpus()) == (16, None)


@pytest.mark.parametrize("change, message", [
    ({"gpu_hour_budget": 0}, "gpu_hour_budget must be > 0 GPU-hours or None, got 0"),
    ({"epoch_budget": -1.0}, "epoch_budget must be > 0 epochs, got -1.0"),
    ({"epoch_budget": None}, "epoch_budget must be > 0 epochs, got None"),
    ({"greenest_time_bound_s": 0.0}, "greenest_time_bound_s must be > 0 seconds or None, got 0.0"),
])
def test_a_bad_setting_is_refused_naming_it(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(DEFAULTS, **change)


def written_defaults(path: Path) -> list[str]:
    """`file:line name` of each default a setting gets in `path` other than the schema's: a
    function parameter named as a setting with a literal default, or a command-line option of
    one with a default other than None."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            pairs = [*zip(arguments.args[::-1], arguments.defaults[::-1]),
                     *zip(arguments.kwonlyargs, arguments.kw_defaults)]
            found += [f"{path.name}:{node.lineno} {argument.arg}" for argument, default in pairs
                      if argument.arg in NAMES and isinstance(default, ast.Constant)]
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags = {arg.value for arg in node.args if isinstance(arg, ast.Constant)} & OPTIONS
            keywords = {keyword.arg: keyword.value for keyword in node.keywords}
            # argparse's own default is None, but a flag (store_true) defaults to False.
            default = keywords.get("default", ast.Constant(False if "action" in keywords else None))
            if flags and not (isinstance(default, ast.Constant) and default.value is None):
                found.append(f"{path.name}:{node.lineno} {flags.pop()}")
    return sorted(found)


def test_written_defaults_are_found(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(runs, epoch_budget=1.0, floor=80):\n    pass\n"
                     "def g(settings=DEFAULTS, epoch_budget=DEFAULTS.epoch_budget):\n    pass\n"
                     "parser.add_argument('--epoch-budget', default=1.0)\n"
                     "parser.add_argument('--allow-superlinear', action='store_true')\n"
                     "parser.add_argument('--efficiency-floor', default=None)\n")
    assert written_defaults(probe) == ["probe.py:1 epoch_budget", "probe.py:1 floor",
                                       "probe.py:5 --epoch-budget", "probe.py:6 --allow-superlinear"]


def test_no_setting_has_a_default_outside_the_schema():
    assert [found for path in sorted((ROOT / "scalesweep").rglob("*.py")) for found in written_defaults(path)] == []
