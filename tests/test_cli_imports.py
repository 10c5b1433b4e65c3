"""A command's start is part of what its user waits for: the CLI's parser loads no data library,
and the analysis's settings (which `compare` imports through analysis/scaling.py) load neither
jsonschema nor Snakemake, which only validating a config needs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scalesweep.cli import main

REPO = Path(__file__).resolve().parents[1]


def loaded_after(statement: str, watched) -> list[str]:
    """The `watched` top-level packages a fresh interpreter has loaded after `statement`."""
    code = f"import sys, json; {statement}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return [name for name in watched if name in json.loads(done.stdout)]


def test_the_cli_parser_loads_no_data_library():
    heavy = ("pandas", "numpy", "matplotlib", "scipy", "duckdb", "jsonschema", "snakemake", "tabulate")
    assert loaded_after("import scalesweep.cli", heavy) == []


def test_the_analysis_settings_load_no_validator():
    assert loaded_after("import scalesweep.plan.analysis_settings", ("jsonschema", "snakemake")) == []


def test_shows_format_is_one_of_its_formats(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["show", "results", "--format", "html"])
    assert stopped.value.code == 2
    assert "argument --format: invalid choice: 'html' (choose from text, csv, markdown)" in capsys.readouterr().err
