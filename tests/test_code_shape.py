"""The shape the team's guide asks of the code: small functions in scripts/ and scalesweep/ (the
trainers' package, scalesweep/train/, included)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`name:line (n lines)` of every function or method in `path` longer than `limit` lines,
    its decorators included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            lines = node.end_lineno - first + 1
            if lines > limit:
                found.append(f"{path.name}:{first} {node.name} ({lines} lines)")
    return found


def test_long_functions_are_found(tmp_path):
    body, method_body = "    x = 1\n" * 59, "        x = 1\n" * 60
    path = tmp_path / "probe.py"
    # 60 lines pass; 61, counting the decorator, and a 61-line method do not.
    path.write_text(f"def short():\n{body}@property\ndef long():\n{body}class A:\n    def method(self):\n{method_body}")
    assert long_functions(path) == ["probe.py:61 long (61 lines)", "probe.py:123 method (61 lines)"]


@pytest.mark.parametrize("folder", ["scripts", "scalesweep"])
def test_no_function_is_over_sixty_lines(folder):
    assert [found for path in sorted((ROOT / folder).rglob("*.py")) for found in long_functions(path)] == []


# A backend's trainer holds only what its framework knows (scalesweep/train/common/harness.py does
# the rest); past this bound it holds a second subject, which goes into a module of its own in the
# backend's folder (tf_backend/model.py, torch_backend/facts.py).
MAX_BACKEND_LINES = 550
# Each backend's trainer: a backend folder's trainer.py, or a backend of one module.
TRAINERS = sorted([*(ROOT / "scalesweep" / "train").glob("*_backend/trainer.py"),
                   *(ROOT / "scalesweep" / "train").glob("*_backend.py")])


def test_the_backends_trainers_are_found():
    assert {"tf_backend", "torch_backend"} <= {path.parent.name for path in TRAINERS}


@pytest.mark.parametrize("trainer", TRAINERS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_each_backend_stays_within_its_bound(trainer):
    lines = len(trainer.read_text().splitlines())
    assert lines <= MAX_BACKEND_LINES, f"{trainer.relative_to(ROOT)}: {lines} lines"
