"""Shared fixtures: the tiny sweep run once through Snakemake for every test that needs results
(once per pytest run, whatever the number of xdist workers)."""

import functools
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TINY = REPO / "tests" / "configs" / "tiny.yaml"


# What `make sweep` / `make preview` give a local run (Makefile: LOCAL_ENV): Snakemake imports the
# slurm executor plugin at every start, and the plugin's `scontrol show config` waits up to 10 s
# where a SLURM client is installed but no controller answers; an empty SLURM_CONF ends it at once.
LOCAL_ENV = {"SLURM_CONF": os.devnull}


def snakemake(workdir, *args, configfile=TINY, timeout=900):
    """A local Snakemake run on the project's Snakefile from `workdir`, with only `configfile`
    as config."""
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--configfile", str(configfile),
         "--replace-workflow-config", *args],
        cwd=workdir, capture_output=True, text=True, timeout=timeout, env={**os.environ, **LOCAL_ENV},
    )


def run_tiny_sweep(workdir: Path) -> Path:
    result = snakemake(workdir, "--cores", "2")
    assert result.returncode == 0, result.stderr[-4000:]
    # Printed once, with no flag: Snakemake builds rule all's job once (workflow/rules/preview.smk).
    assert result.stderr.count(" configurations to run (") == 1, result.stderr[-4000:]
    return workdir


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory):
    """A working directory where tests/configs/tiny.yaml ran to completion with the real trainers,
    made once per pytest run. Each xdist worker has a session of its own and the modules that read
    the sweep land on both, so the first worker to need it makes it in the run's folder (the parent
    of the workers' own) while the other waits on the lock, then reads the same folder. Tests only
    read it: sweep_copy is the copy a test may change."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process: its session is the run
        return run_tiny_sweep(tmp_path_factory.mktemp("sweep"))
    run_folder = tmp_path_factory.getbasetemp().parent
    workdir, finished = run_folder / "tiny-sweep", run_folder / "tiny-sweep.finished"
    with FileLock(run_folder / "tiny-sweep.lock"):
        if not finished.exists():
            # a sweep that failed in the other worker is made again here, from nothing, and fails
            # this worker's tests by its own error rather than by what the other left half-done
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir()
            run_tiny_sweep(workdir)
            finished.touch()
    return workdir


@pytest.fixture
def sweep_copy(tiny_sweep, tmp_path):
    """A copy of the finished sweep (times and Snakemake's metadata kept) that a test may damage."""
    copy = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, copy, symlinks=True)
    return copy


# ------------------------------------------------------------------ the `workflow` and `command` marks
# A test that starts Snakemake in a subprocess takes seconds (the workflow parses, checks the
# config, builds the DAG); one that starts `python -m scalesweep` pays a fresh interpreter's
# import of pandas, matplotlib, scipy and DuckDB before it draws. `make test-fast` leaves both
# out. The marks are found, not typed: a test is one when it, a fixture it uses or a function of
# tests/ it calls names SNAKEMAKE or the program "snakemake" (a path to it, or `python -m
# snakemake`), or runs "-m" "scalesweep".
TESTS = Path(__file__).resolve().parent
# the name a code object is given when it starts the program, by the mark it earns
STARTS = {"SNAKEMAKE": "workflow", "SCALESWEEP_COMMAND": "command"}


def _code_names(code) -> set:
    names = set(code.co_names)
    for constant in code.co_consts:
        if hasattr(constant, "co_names"):
            names |= _code_names(constant)
        elif constant == "snakemake":
            names.add("SNAKEMAKE")
        elif constant == "scalesweep" and "-m" in code.co_consts:
            names.add("SCALESWEEP_COMMAND")
    return names


def _starts(function, program: str, seen: set) -> bool:
    code = getattr(function, "__code__", None)
    if code is None or code in seen or not code.co_filename.startswith(str(TESTS)):
        return False
    seen.add(code)
    names = _code_names(code)
    if program in names:
        return True
    module_globals = getattr(function, "__globals__", {})
    helpers = [module for module in map(_test_module, names) if module is not None]
    return any(_starts(found, program, seen) for name in names for found in _named(name, module_globals, helpers))


def _named(name: str, module_globals: dict, helpers: list) -> list:
    """What `name` is in the function's module, or, imported inside the function (`from mn5site
    import run_with_profile` leaves both names in its code), in one of the `helpers`, the
    modules of tests/ the function names."""
    if name in module_globals:
        return [module_globals[name]]
    return [getattr(helper, name) for helper in helpers if hasattr(helper, name)]


# What `import <name>` finds in tests/ (a test's helper module): only these names are looked up,
# not every name a test's code holds (a lookup of one that is no module searches all of sys.path).
TEST_MODULE_NAMES = frozenset(path.stem if path.suffix == ".py" else path.name
                              for path in TESTS.iterdir()
                              if path.suffix == ".py" or (path / "__init__.py").is_file())


@functools.lru_cache(maxsize=None)
def _test_module(name: str):
    if name not in TEST_MODULE_NAMES:
        return None
    spec = importlib.util.find_spec(name)
    if spec is None or not str(spec.origin).startswith(str(TESTS)):
        return None
    return importlib.import_module(name)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        functions = [getattr(item, "function", None)]
        for definitions in getattr(item, "_fixtureinfo").name2fixturedefs.values():
            functions += [definition.func for definition in definitions]
        for program, mark in STARTS.items():
            seen = set()
            if any(_starts(function, program, seen) for function in functions):
                item.add_marker(getattr(pytest.mark, mark))
        item.add_marker(pytest.mark.xdist_group(_group_of(item)))
    items[:] = _longest_groups_first(items)


# ------------------------------------------------------------------ `make test`'s two workers
# The SLURM tests mostly wait (for the test cluster's controller, for the executor plugin's status
# checks) and share one cluster: `make test` (pytest-xdist, --dist loadgroup) runs them one after
# another in one group. Every other test module is a group of its own, so its module-scoped
# fixtures are built once, and a worker takes the next module whenever it runs dry: the worker
# that ran the cluster's tests goes on with the modules left, instead of idling while one worker
# runs every CPU-bound test in turn (the suite's critical path was that one worker).
#
# A module whose tests add up to a large part of the suite would be one worker's alone for that
# long: it names a parameter in XDIST_GROUP_BY and its tests form one group per value of it.
def _group_of(item) -> str:
    if item.get_closest_marker("slurm"):
        return "slurm"
    module = item.nodeid.split("::", 1)[0]
    parameter = getattr(getattr(item, "module", None), "XDIST_GROUP_BY", None)
    callspec = getattr(item, "callspec", None)
    if parameter and callspec is not None and parameter in callspec.params:
        # no "]" in a group's name: pytest-xdist takes a node id ending in one for a parameter's
        return f"{module}/{parameter}={callspec.params[parameter]}"
    return module


# A test's rough cost in seconds by its costliest mark (typical of `--durations` on the 2-core
# machine: a SLURM test waits on the cluster for minutes, a slow or workflow test trains or runs
# Snakemake for tens of seconds, a command test starts an interpreter), any other test a fraction
# of a second.
COST_BY_MARK = {"slurm": 60.0, "slow": 20.0, "workflow": 20.0, "command": 3.0}
COST_UNMARKED = 0.3


def _cost(item) -> float:
    return max([COST_BY_MARK[mark] for mark in COST_BY_MARK if item.get_closest_marker(mark)] or [COST_UNMARKED])


def _longest_groups_first(items: list) -> list:
    """The items with the costliest groups first. pytest-xdist hands groups out in this order
    (`make test` passes --no-loadscope-reorder, whose default order is by number of tests) to
    whichever worker runs dry, so a module of one four-minute test, which that order put last,
    no longer runs alone at the end while the other worker idles (longest first: the tail is
    at most one short group). A group's tests keep their order."""
    totals = {}
    for item in items:
        group = _group_of(item)
        totals[group] = totals.get(group, 0.0) + _cost(item)
    return sorted(items, key=lambda item: -totals[_group_of(item)])
