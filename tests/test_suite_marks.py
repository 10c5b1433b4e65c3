"""The `workflow` and `command` marks are found, not typed (tests/conftest.py: _starts): by what a
test, its fixtures and the functions of tests/ they call start, also through a helper module of
tests/ imported inside a function."""

import conftest

PROGRAMS = ("SNAKEMAKE", "SCALESWEEP_COMMAND")


def _imports_a_helper_that_starts_snakemake(workdir):
    from mn5site import run_with_profile

    return run_with_profile(workdir)


def _starts_the_command():
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "scalesweep", "--help"])


def _starts_nothing(values):
    return sorted(values)


# Every function is looked up by its name: a test that named one (or the scan itself, whose code
# holds the word it looks for) would be marked as starting that program, and `make test-fast`
# would leave these tests out.
def starts(function_name: str, program: str) -> bool:
    function = getattr(conftest, function_name, None) or globals()[function_name]
    return getattr(conftest, "_starts")(function, program, set())


def test_a_function_of_tests_that_calls_snakemake_starts_it():
    assert starts("run_tiny_sweep", "SNAKEMAKE")


def test_a_helper_module_imported_inside_a_function_is_followed():
    assert starts("_imports_a_helper_that_starts_snakemake", "SNAKEMAKE")
    assert not starts("_imports_a_helper_that_starts_snakemake", "SCALESWEEP_COMMAND")


def test_python_m_scalesweep_is_the_command_and_nothing_is_neither():
    assert starts("_starts_the_command", "SCALESWEEP_COMMAND")
    assert not starts("_starts_the_command", "SNAKEMAKE")
    assert not any(starts("_starts_nothing", program) for program in PROGRAMS)
