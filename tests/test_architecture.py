"""The package's architecture (docs/layout.md): layers in import order, each importing only itself
and the layers before it; the layers the workflow imports when it is parsed stay light; the
trainers (scalesweep/train/) beside the layers, importing only the contract, imported by none of
them, their harness apart from every backend and each backend apart from the others; no import
cycle; no folder a reader cannot take in at a glance.

The checks read the source (AST), so they see the imports inside functions too: a lazy import of
a later layer is as much a dependency as one at the top of a module. Each check is a function of a
folder, tried below on a small package made to break it, so a check that cannot fail would fail.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalesweep.contract import frameworks

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "scalesweep"
# The layers in import order: each may import itself and those before it.
LAYERS = ("contract", "plan", "logs", "tidy", "analysis", "report", "history")
# What the workflow imports when it is parsed (every Snakemake start, cluster jobs included) and
# what the trainers import in their containers must not load these.
HEAVY = ("matplotlib", "scipy", "duckdb", "torch", "tensorflow")
LIGHT_LAYERS = ("contract", "plan")
MAX_MODULES_PER_FOLDER = 12
# The trainers: beside the layers, not one of them. They run inside the training containers and
# import only the contract of the package; none of the layers or the top modules imports them.
TRAIN = "train"
# The trainers' parts (the folder or module under scalesweep/train/) and what each may import of
# the trainers besides itself: the harness (common) and the datasets only themselves; a backend
# (a part named *_backend) common and the datasets, never another backend; the rest (attempt.py)
# common and the datasets.
TRAIN_PARTS_ONLY_THEMSELVES = ("common", "datasets")
SHARED_TRAIN_PARTS = ("common", "datasets")
BACKEND_SUFFIX = "_backend"
# What the trainers' harness may never load (it runs in every framework's container, standard
# library only), and what no backend adds to what its framework loads itself.
ANALYSIS_LIBRARIES = ("pandas", "scipy", "matplotlib", "duckdb")
FRAMEWORK_LIBRARIES = ("torch", "tensorflow", "keras", "numpy")


# ----------------------------------------------------------------------------- reading the package

def module_name(path: Path, root: Path) -> str:
    """'scalesweep.history.query' for root/scalesweep/history/query.py; a package is its folder."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """{module name: file} of every module of `package` under `root`."""
    return {module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}


def imported_modules(path: Path, name: str, known) -> list[tuple[str, int]]:
    """(module, line) of every import in the file, at any depth (inside functions too). `from a
    import b` imports a.b where that is a module of `known`, else a; relative imports are resolved
    against the module's own package."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((candidate if candidate in known else base, node.lineno))
    return found


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, list[tuple[str, int]]]:
    """{module: [(module of the package it imports, line)]}."""
    modules = package_modules(root, package)
    return {name: [(target, line) for target, line in imported_modules(path, name, modules)
                   if target == package or target.startswith(package + ".")]
            for name, path in modules.items()}


def layer_of(module: str, package: str = PACKAGE):
    """The layer's position in LAYERS; TRAIN for the trainers; 'top' for the package's own
    modules (cli, pipeline, ...), None for the package itself (its __init__, which every layer
    may import)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    if parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    if parts[1] == TRAIN:
        return TRAIN
    return "top"


def train_part(module: str):
    """The trainers' part a module of scalesweep.train belongs to: 'common', 'datasets', a
    backend's name, 'attempt'; None for scalesweep.train itself (its __init__)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def is_backend(part) -> bool:
    return part is not None and part.endswith(BACKEND_SUFFIX)


# ----------------------------------------------------------------------------- the checks

def layer_violations(root: Path, package: str = PACKAGE) -> list[str]:
    """Every import of a later layer, or of a top-level module, by a module of a layer; every
    import of the trainers by a layer or a top-level module."""
    problems = []
    for module, imports in import_graph(root, package).items():
        own = layer_of(module, package)
        if own is None or own == TRAIN:
            continue
        for target, line in imports:
            theirs = layer_of(target, package)
            if theirs == TRAIN:
                problems.append(f"{module}:{line} imports {target} (only the trainers import {package}.{TRAIN})")
            elif own != "top" and (theirs == "top" or (theirs is not None and theirs > own)):
                problems.append(f"{module}:{line} imports {target} ({LAYERS[own]} may import only "
                                f"{', '.join(LAYERS[:own + 1])})")
    return problems


def trainer_violations(root: Path, package: str = PACKAGE) -> list[str]:
    """Every import by a module of the trainers of the package beyond the contract and the
    trainers, of a backend by anything but itself, and of any other part of the trainers by the
    harness (common) or the datasets."""
    problems = []
    for module, imports in import_graph(root, package).items():
        if layer_of(module, package) != TRAIN:
            continue
        own = train_part(module)
        for target, line in imports:
            theirs = layer_of(target, package)
            if theirs != TRAIN:
                if theirs not in (None, LAYERS.index("contract")):
                    problems.append(f"{module}:{line} imports {target} (the trainers import only "
                                    f"{package}.contract of the package)")
                continue
            part = train_part(target)
            allowed = {own} if own in TRAIN_PARTS_ONLY_THEMSELVES else {own, *SHARED_TRAIN_PARTS}
            if part is not None and part not in allowed:
                problems.append(f"{module}:{line} imports {target} ({own} may import only "
                                f"{', '.join(sorted(allowed))} of the trainers)")
    return problems


def non_standard_imports(root: Path, layer: str = "contract", package: str = PACKAGE, allowed=()) -> list[str]:
    """Imports of a layer's modules (or a part's: "train.common") beyond the standard library,
    the layer itself and `allowed` (modules, with what is below them: "numpy",
    "scalesweep.contract")."""
    modules = package_modules(root, package)
    problems = []
    for name, path in modules.items():
        if not name.startswith(f"{package}.{layer}"):
            continue
        for target, line in imported_modules(path, name, modules):
            top = target.split(".")[0]
            own = target == package or any(target == prefix or target.startswith(prefix + ".")
                                           for prefix in (f"{package}.{layer}", *allowed))
            if not own and top not in sys.stdlib_module_names and top not in allowed:
                problems.append(f"{name}:{line} imports {target}")
    return problems


def third_party_imports(root: Path, modules, package: str = PACKAGE) -> list[str]:
    """The top-level names of what `modules` import beyond the standard library and the package."""
    files = package_modules(root, package)
    found = {target.split(".")[0] for name in modules for target, _ in imported_modules(files[name], name, files)}
    return sorted(name for name in found if name != package and name not in sys.stdlib_module_names)


def import_cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself)
    of {module: [(module, line)]}: each is an import cycle."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target, _ in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or any(target == node for target, _ in graph[node]):
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def crowded_folders(root: Path, package: str = PACKAGE, limit: int = MAX_MODULES_PER_FOLDER) -> list[str]:
    """Folders of the package holding more than `limit` modules (__init__.py counted)."""
    folders = [root / package, *(path for path in (root / package).rglob("*") if path.is_dir())]
    counts = {folder: len(list(folder.glob("*.py"))) for folder in folders if folder.name != "__pycache__"}
    return [f"{folder.relative_to(root)}: {count} modules" for folder, count in sorted(counts.items())
            if count > limit]


# What importing `modules` loaded of `watched`, in a fresh interpreter: its answer, not this
# process's, whose sys.modules holds whatever other tests imported.
LOADED_PROBE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
watched = json.loads(sys.argv[2])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules} & set(watched))))
"""


def heavy_imports(modules, root: Path = ROOT, watched=HEAVY) -> list[str]:
    done = subprocess.run([sys.executable, "-c", LOADED_PROBE, json.dumps(list(modules)), json.dumps(list(watched))],
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def trainer_modules(root: Path, part: str, package: str = PACKAGE) -> list[str]:
    """The modules of one part of the trainers ("common", "tf_backend"), its __main__ left out
    (importing it would run it)."""
    prefix = f"{package}.{TRAIN}.{part}"
    return [name for name in package_modules(root, package)
            if (name == prefix or name.startswith(prefix + ".")) and not name.endswith(".__main__")]


def backend_heavy_imports(root: Path, part: str, watched=ANALYSIS_LIBRARIES) -> list[str]:
    """What importing a backend's modules loads of `watched` beyond what its framework (every
    library the backend imports) loads by itself: TensorFlow's Keras loads pandas, scipy and
    matplotlib where they are installed, which no backend can help; its own code must not."""
    modules = trainer_modules(root, part)
    framework = third_party_imports(root, modules)
    return sorted(set(heavy_imports(modules, root, watched)) - set(heavy_imports(framework, root, watched)))


def backends(root: Path, package: str = PACKAGE) -> list[str]:
    """The trainers' backends: the parts named *_backend, a folder or one module."""
    return sorted({train_part(name) for name in package_modules(root, package)
                   if layer_of(name, package) == TRAIN and is_backend(train_part(name))})


# ----------------------------------------------------------------------------- the package

def test_no_module_imports_a_later_layer():
    assert layer_violations(ROOT) == []


def test_the_contract_imports_only_the_standard_library():
    assert non_standard_imports(ROOT, "contract") == []


def test_the_trainers_import_only_the_contract_and_keep_their_parts_apart():
    assert trainer_violations(ROOT) == []


def test_every_registered_backend_is_a_backend_part_of_the_trainers():
    """So the boundaries above hold for each: a registry entry's backend is scalesweep.train.<name>_backend."""
    registered = sorted(framework.backend for framework in frameworks.FRAMEWORKS)
    assert [f"{PACKAGE}.{TRAIN}.{backend}" for backend in backends(ROOT)] == registered


def test_the_trainers_harness_imports_only_the_standard_library_and_the_contract():
    assert non_standard_imports(ROOT, "train.common", allowed=("scalesweep.contract",)) == []
    assert non_standard_imports(ROOT, "train.attempt", allowed=("scalesweep.contract",)) == []


def test_the_datasets_import_only_numpy_and_pil():
    assert non_standard_imports(ROOT, "train.datasets", allowed=("scalesweep.contract", "numpy", "PIL")) == []


def test_no_backend_imports_an_analysis_library():
    for backend in backends(ROOT):
        assert set(third_party_imports(ROOT, trainer_modules(ROOT, backend))).isdisjoint(ANALYSIS_LIBRARIES), backend


def test_the_workflow_and_the_trainers_load_no_heavy_library():
    light = [name for name in package_modules(ROOT)
             if any(name.startswith(f"{PACKAGE}.{layer}") for layer in LIGHT_LAYERS)]
    assert len(light) > 10 and heavy_imports(light) == []


def test_the_trainers_harness_loads_no_framework_and_no_analysis_library():
    common = trainer_modules(ROOT, "common")
    assert len(common) >= 10
    assert heavy_imports(common, watched=ANALYSIS_LIBRARIES + FRAMEWORK_LIBRARIES) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", backends(ROOT))
def test_a_backend_loads_no_analysis_library_of_its_own(backend):
    assert len(trainer_modules(ROOT, backend)) >= 5
    assert backend_heavy_imports(ROOT, backend) == []


def test_no_module_of_the_package_is_part_of_an_import_cycle():
    assert import_cycles(import_graph(ROOT)) == []


def test_no_folder_holds_more_than_twelve_modules():
    assert crowded_folders(ROOT) == []


def test_every_module_of_the_package_sits_in_a_layer_or_at_the_top():
    """A new folder is a new layer: it needs its place in LAYERS (and docs/layout.md)."""
    folders = {name.split(".")[1] for name in package_modules(ROOT) if name.count(".") >= 2}
    assert folders <= {*LAYERS, TRAIN}


# ----------------------------------------------------------------------------- each check can fail

def write_package(root: Path, files: dict) -> Path:
    for name, text in {"__init__.py": "", **files}.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("text", [
    "from scalesweep.report import figures\n",
    "def later():\n    from scalesweep.report.figures import plot\n",
    "import scalesweep.report.figures\n",
    "from scalesweep import cli\n",
    "from ..report import figures\n",
])
def test_an_import_of_a_later_layer_or_the_top_is_found(tmp_path, text):
    root = write_package(tmp_path, {"tidy/__init__.py": "", "tidy/rows.py": text, "report/__init__.py": "",
                                    "report/figures.py": "", "cli.py": ""})
    assert len(layer_violations(root)) == 1


def test_imports_of_earlier_layers_and_by_the_top_pass(tmp_path):
    root = write_package(tmp_path, {
        "contract/__init__.py": "", "contract/records.py": "import json\n",
        "tidy/__init__.py": "", "tidy/rows.py": "from scalesweep.contract import records\nimport scalesweep\n",
        "cli.py": "from scalesweep.tidy import rows\n"})
    assert layer_violations(root) == [] and non_standard_imports(root) == []


TRAINERS = {"train/__init__.py": "", "train/common/__init__.py": "", "train/common/harness.py": "",
            "train/datasets/__init__.py": "", "train/datasets/cifar.py": "", "train/attempt.py": "",
            "train/tf_backend/__init__.py": "", "train/tf_backend/trainer.py": "",
            "train/torch_backend/__init__.py": "", "train/torch_backend/trainer.py": "",
            "contract/__init__.py": "", "contract/records.py": "", "plan/__init__.py": "", "plan/launch.py": "",
            "cli.py": ""}


@pytest.mark.parametrize("module, text", [
    ("plan/launch.py", "from scalesweep.train.common import harness\n"),
    ("cli.py", "def later():\n    import scalesweep.train.attempt\n"),
    ("train/common/harness.py", "from scalesweep.train.tf_backend import trainer\n"),
    ("train/common/harness.py", "from scalesweep.train.datasets import cifar\n"),
    ("train/common/harness.py", "from scalesweep.plan import launch\n"),
    ("train/datasets/cifar.py", "from ..common import harness\n"),
    ("train/tf_backend/trainer.py", "from scalesweep.train.torch_backend import trainer\n"),
    ("train/torch_backend/trainer.py", "def later():\n    from scalesweep.train.tf_backend.trainer import main\n"),
    ("train/attempt.py", "from scalesweep.train import torch_backend\n"),
    ("train/tf_backend/trainer.py", "from scalesweep import cli\n"),
])
def test_an_import_across_the_trainers_boundaries_is_found(tmp_path, module, text):
    root = write_package(tmp_path, {**TRAINERS, module: text})
    assert len(layer_violations(root) + trainer_violations(root)) == 1


def test_the_trainers_imports_that_keep_the_boundaries_pass(tmp_path):
    root = write_package(tmp_path, {
        **TRAINERS,
        "train/common/harness.py": "from scalesweep.contract import records\nfrom . import stepclock\n",
        "train/common/stepclock.py": "import time\n",
        "train/tf_backend/trainer.py": "import numpy\nfrom scalesweep.train.common import harness\n"
                                       "from scalesweep.train.datasets import cifar\nfrom . import model\n",
        "train/tf_backend/model.py": "",
        "train/numpy_backend.py": "import scalesweep.train.common.harness\nimport scalesweep.train\n",
        "train/attempt.py": "from scalesweep.contract import records\n"})
    assert layer_violations(root) == [] and trainer_violations(root) == []
    assert backends(root) == ["numpy_backend", "tf_backend", "torch_backend"]
    assert non_standard_imports(root, "train.common", allowed=("scalesweep.contract",)) == []
    assert non_standard_imports(root, "train.tf_backend", allowed=("scalesweep.contract",)) == [
        "scalesweep.train.tf_backend.trainer:1 imports numpy", "scalesweep.train.tf_backend.trainer:2 imports "
        "scalesweep.train.common.harness", "scalesweep.train.tf_backend.trainer:3 imports scalesweep.train.datasets.cifar"]
    assert third_party_imports(root, trainer_modules(root, "tf_backend")) == ["numpy"]


def test_a_library_a_trainer_module_loads_is_found_and_the_framework_s_own_are_not(tmp_path):
    """The fresh interpreter's answer, on stand-ins: `pandas` here is an empty module beside the
    package (first on the path), `framework` a library that loads it by itself."""
    root = write_package(tmp_path, {
        **TRAINERS,
        "train/common/harness.py": "import json\n", "train/common/stepclock.py": "__import__('pandas')\n",
        "train/common/__main__.py": "raise SystemExit('never imported')\n",
        "train/tf_backend/trainer.py": "import framework\n",
        "train/torch_backend/trainer.py": "import framework\n__import__('scipy')\n"})
    (root / "pandas.py").write_text("")
    (root / "scipy.py").write_text("")
    (root / "framework.py").write_text("import pandas\n")
    assert "scalesweep.train.common.__main__" not in trainer_modules(root, "common")
    assert heavy_imports(trainer_modules(root, "common"), root, ANALYSIS_LIBRARIES) == ["pandas"]
    assert backend_heavy_imports(root, "tf_backend") == []
    assert backend_heavy_imports(root, "torch_backend") == ["scipy"]


def test_a_contract_module_importing_a_third_party_library_is_found(tmp_path):
    root = write_package(tmp_path, {"contract/__init__.py": "", "contract/atomic.py": "import pandas as pd\n"})
    assert non_standard_imports(root) == ["scalesweep.contract.atomic:1 imports pandas"]


def test_an_import_cycle_through_a_function_is_found(tmp_path):
    root = write_package(tmp_path, {
        "history/__init__.py": "", "history/query.py": "from scalesweep.history import archive\n",
        "history/archive.py": "def write():\n    from scalesweep.history.query import files\n"})
    assert import_cycles(import_graph(root)) == [["scalesweep.history.archive", "scalesweep.history.query"]]


def test_a_crowded_folder_is_found(tmp_path):
    modules = {f"plan/m{number}.py": "" for number in range(MAX_MODULES_PER_FOLDER)}
    assert crowded_folders(write_package(tmp_path / "full", modules)) == []
    root = write_package(tmp_path / "over", {"plan/__init__.py": "", **modules})
    assert crowded_folders(root) == [f"scalesweep/plan: {MAX_MODULES_PER_FOLDER + 1} modules"]


@pytest.mark.slow
def test_the_probe_sees_a_heavy_library_a_module_loads():
    assert "matplotlib" in heavy_imports(["scalesweep.report.plotkit"])
