"""The framework registry (scalesweep/contract/frameworks.py) is the one home of a framework: its
entries agree with what the trainers run, a lookup names the known frameworks, and no code outside
the registry, the backends and the schema names a framework in a string (so it cannot branch on one).
"""

import ast
import dataclasses
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

from scalesweep.contract import frameworks, hardware
from scalesweep.plan import launch
from stacks import trainer_python

ROOT = Path(__file__).resolve().parents[1]
# Where a framework's name may stand in a string: its registry entry and its backend (a folder or
# one module named *_backend in the trainers' package). The schema (YAML) names none either, but
# its descriptions may.
ALLOWED = ("scalesweep/contract/frameworks.py",)
BACKEND_FILE = re.compile(r"scalesweep/train/(\w+_backend/\w+|\w+_backend)\.py$")


def name_pattern(names=frameworks.NAMES):
    """A framework's name as a word of its own, `_` a boundary too: `train_pytorch_multinode`."""
    return re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9])")


def python_strings(source: str):
    """(line, text) of every string constant of a Python file but its docstrings."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def snakefile_strings(source: str):
    """(line, text) of every string token of a Snakefile but the docstrings of its functions:
    Snakemake's grammar is Python's tokens, not its syntax, so a docstring is the string that
    opens the indented block of a `def` or `class` line."""
    found, line_words, previous_line, after_indent = [], [], [], False
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING:
            opens_body = after_indent and not line_words and previous_line[:1] in (["def"], ["class"])
            if not opens_body:
                found.append((token.start[0], token.string))
        if token.type == tokenize.NEWLINE:
            previous_line, line_words = line_words, []
        elif token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            line_words.append(token.string)
        after_indent = token.type == tokenize.INDENT or (after_indent and token.type in (tokenize.NL, tokenize.COMMENT))
    return found


def framework_names_in(path: Path, pattern=None):
    """`file:line: text` of each string naming a framework in a Python or Snakemake file."""
    pattern = pattern or name_pattern()
    source = path.read_text()
    strings = python_strings(source) if path.suffix == ".py" else snakefile_strings(source)
    return [f"{path.name}:{line}: {text!r}" for line, text in strings if pattern.search(text)]


def checked_files(root: Path):
    files = [*root.glob("scalesweep/**/*.py"), *root.glob("scripts/*.py"), *root.glob("workflow/**/*.smk"),
             root / "Snakefile"]
    return [path for path in sorted(files)
            if path.relative_to(root).as_posix() not in ALLOWED and not BACKEND_FILE.search(path.as_posix())]


def test_no_framework_is_named_in_a_string_outside_the_registry_and_the_backends():
    files = checked_files(ROOT)
    assert any(path.name == "launch.py" for path in files) and any(path.suffix == ".smk" for path in files)
    assert any(path.name == "harness.py" for path in files) and not any("_backend" in path.as_posix() for path in files)
    found = [hit for path in files for hit in framework_names_in(path)]
    assert found == [], "branch on the registry entry instead:\n" + "\n".join(found)


def test_the_name_check_finds_comparisons_keys_and_rule_strings_but_not_prose(tmp_path):
    module = tmp_path / "module.py"
    module.write_text('"""Runs pytorch and tensorflow."""\n'
                      'def f(settings):\n    """Only for pytorch."""\n'
                      '    # tensorflow is single-node\n'
                      '    if settings["framework"] == "pytorch":\n        return {"tensorflow": 1}\n'
                      '    return f"train_{settings}" + "pytorch_multinode"\n')
    rules = tmp_path / "rules.smk"
    rules.write_text('def g():\n    """tensorflow"""\n    return 1\n\n\n'
                     'rule train:\n    output:\n        "results/runs/tensorflow/x.log",\n'
                     '    log:\n        "logs/tensorflower.log",\n')
    assert sorted(hit.split(":")[1] for hit in framework_names_in(module)) == ["5", "6", "7"]
    assert framework_names_in(rules) == ["rules.smk:8: '\"results/runs/tensorflow/x.log\"'"]


# ------------------------------------------------------------------ the entries


@pytest.mark.slow
@pytest.mark.parametrize("framework", frameworks.FRAMEWORKS, ids=frameworks.NAMES)
def test_model_list_is_the_registry(framework):
    """The trainer builds exactly the models its entry lists, in the entry's order."""
    done = subprocess.run([trainer_python(framework.name), *launch.trainer_script(framework.name, ROOT),
                           "--list-models"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == list(framework.model_names)
    assert all(set(defaults) == {"per_gpu_batch", "base_lr"} for defaults in framework.models.values())


def test_a_framework_without_a_program_of_its_own_runs_through_the_generic_one():
    """TensorFlow and PyTorch keep their programs (the measured runs' commands name them); an entry
    that names only its backend runs as `scripts/train.py <name>`, which runs that backend."""
    entry = dataclasses.replace(frameworks.get("pytorch"), trainer_script=None)
    assert entry.trainer_argv == (frameworks.GENERIC_TRAINER_SCRIPT, "pytorch")
    assert launch.trainer_script("pytorch", "/repo") == ["/repo/scripts/train_torch.py"]
    assert all((ROOT / "scripts" / framework.trainer_argv[0]).is_file() for framework in frameworks.FRAMEWORKS)
    assert (ROOT / "scripts" / frameworks.GENERIC_TRAINER_SCRIPT).is_file()


def test_a_lookup_of_an_unknown_framework_names_the_known_ones():
    with pytest.raises(frameworks.UnknownFramework) as error:
        frameworks.get("jax")
    assert str(error.value) == "unknown framework 'jax' (known: tensorflow, pytorch)"
    assert frameworks.find("jax") is None and frameworks.find(None) is None


def test_entries_are_read_only():
    entry = frameworks.get("pytorch")
    with pytest.raises(AttributeError):
        entry.multinode = False
    with pytest.raises(TypeError):
        entry.models["vit_tiny"]["per_gpu_batch"] = 1


@pytest.mark.parametrize("change, message", [
    ({"launcher": "mpirun"}, "launcher 'mpirun' is not one of"),
    ({"launcher": frameworks.SINGLE_PROCESS, "multinode": True}, "only a process-per-GPU launcher runs across nodes"),
    ({"multinode": False}, "say why it stops at one node"),
    ({"name": "py-torch"}, "the name must be an identifier"),
])
def test_an_entry_that_cannot_run_is_refused_when_made(change, message):
    entry = frameworks.get("pytorch")
    fields = {name: getattr(entry, name) for name in entry.__dataclass_fields__}
    with pytest.raises(ValueError, match=message):
        frameworks.Framework(**{**fields, **change})


def test_the_entries_say_what_the_launcher_and_the_mfu_used_to_branch_on():
    settings = {"framework": "pytorch", "gpus": 2, "gpus_per_node": 2, "nodes": 1, "num_workers": 3,
                "channels_last": True}
    assert launch.processes_per_node(settings) == 2
    assert launch.processes_per_node({**settings, "gpus": 0}) == 1
    assert launch.processes_per_node({**settings, "framework": "tensorflow"}) == 1
    own = [option.words(settings) for option in frameworks.get("pytorch").trainer_options]
    assert own == [["--nodes", "1"], ["--num-workers", "3"], ["--channels-last"], [], [], []]
    assert [hardware.compute_dtype(name, "fp32") for name in ("tensorflow", "pytorch", "unknown", None)] == [
        "tf32", "fp32", "fp32", "fp32"]
