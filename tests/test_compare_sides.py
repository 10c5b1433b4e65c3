"""A comparison needs two sides (issue 28, point 4): an empty or blank side (a CI script's unset
variable) is an error naming it, not the working folder; a side compared with itself is refused
unless asked for (`--allow-same`, an A/A check), so a regression gate never passes by comparing
the candidate with itself."""

import os
import subprocess
import sys

import yaml

from conftest import snakemake
from scalesweep.history import archive
from test_feasibility import edited
from test_history import REPO, sweep_runs


def compare(*args, cwd):
    return subprocess.run([sys.executable, "-m", "scalesweep", "compare", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def results_folder(tmp_path):
    """A results folder (tidy/runs.csv) and a history holding the same runs and another sweep."""
    results = tmp_path / "results"
    (results / "tidy").mkdir(parents=True)
    runs = sweep_runs().assign(run_id=[f"{n:016x}" for n in range(4)])
    runs.to_csv(results / "tidy" / "runs.csv", index=False)
    store = tmp_path / "history"
    same = archive.archive(runs, store)
    other = archive.archive(sweep_runs(driver="550.54.15").assign(run_id=[f"{n:016x}" for n in range(4, 8)]), store)
    return results, store, same.sweep_id, other.sweep_id


def test_an_empty_baseline_is_an_error_not_the_working_folder(tmp_path):
    results, store, _, _ = results_folder(tmp_path)
    for blank in ("", "  "):
        result = compare(blank, ".", "--fail-above", "5", "--history", store, "--out", tmp_path / "cmp", cwd=results)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.splitlines() == [
            f"scalesweep compare: the baseline is blank ({blank!r}): name a sweep id, a results folder, a "
            "runs.csv or column=value selectors (is a variable of a script unset?)"]
    result = compare(".", "", "--history", store, "--out", tmp_path / "cmp", cwd=results)
    assert result.returncode == 2 and "the candidate is blank ('')" in result.stderr
    assert not (tmp_path / "cmp").exists()


def test_a_side_compared_with_itself_is_refused_unless_asked_for(tmp_path):
    results, store, same, other = results_folder(tmp_path)
    # the same folder twice, and the folder against the sweep that archived its very runs
    for baseline, candidate in ((".", "."), (same, ".")):
        result = compare(baseline, candidate, "--fail-above", "5", "--history", store, "--out", tmp_path / "cmp",
                         cwd=results)
        assert result.returncode == 2, result.stdout
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"scalesweep compare: the baseline ({baseline}) and the candidate ({candidate}) "
                               "hold the same 4 runs: a side compared with itself shows no change")
        assert line.endswith("`scalesweep compare --allow-same` runs such an A/A check on purpose")
    assert not (tmp_path / "cmp" / "compare.csv").exists()
    checked = compare(".", ".", "--allow-same", "--history", store, "--out", tmp_path / "cmp", cwd=results)
    assert checked.returncode == 0, checked.stderr
    assert "verdicts: 0 slower, 0 faster" in checked.stdout
    # two different sweeps compare as before; sides that share some runs say so
    assert compare(same, other, "--history", store, "--out", tmp_path / "cmp", cwd=results).returncode == 0
    shared = compare(same, "cluster=mn5", "--history", store, "--out", tmp_path / "cmp", cwd=results)
    assert shared.returncode == 0, shared.stderr
    assert "note: 4 runs are on both sides: each of them is compared with itself" in shared.stdout


def test_a_blank_compare_with_is_refused_when_the_workflow_is_parsed(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(edited(lambda c: c.update(compare_with=" "))))
    result = snakemake(tmp_path, "-n", configfile=config)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "config key 'compare_with': the sweep to compare with is blank (' ')" in result.stdout + result.stderr
