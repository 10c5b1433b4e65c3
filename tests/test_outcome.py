"""How a sweep ends: the closing lines name the runs ok and failed (each failure with its reason
and log) and where the outputs are; after a failure the tables and figures are rebuilt from the
same runs as runs.csv."""

import shutil

import pandas as pd
import pytest

from conftest import TINY, snakemake
from scalesweep.contract import layout
from scalesweep.history import query
from scalesweep.report import outcome


def write_runs(results, rows):
    (results / "tidy").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(results / "tidy" / "runs.csv", index=False)


def run_row(gpus, status, reason="", log="x.log"):
    return {"framework": "pytorch", "model": "vit_tiny", "dataset": "d", "gpus": gpus, "status": status,
            "reason": reason, "log": log}


def test_the_outcome_lists_failures_with_reason_and_log_and_what_exists(tmp_path):
    results = tmp_path / "results"
    write_runs(results, [run_row(1, "ok"), run_row(2, "oom", "out of memory at batch 64"),
                         run_row(4, "failed", "RuntimeError: boom", "logs/train/g4.log")])
    (results / "tables").mkdir()
    (results / "tables" / "scaling.csv").write_text("gpus\n1\n")
    (results / "figures").mkdir()
    for name in ("a.png", "b.png", "a.svg"):
        (results / "figures" / name).write_bytes(b"")
    lines = outcome.sweep_outcome(results).splitlines()
    assert lines[0] == f"scalesweep: 3 runs: 1 ok, 1 oom, 1 failed ({results / 'tidy' / 'runs.csv'})"
    assert "  oom: pytorch vit_tiny d gpus=2: out of memory at batch 64 (log: x.log)" in lines
    assert "  failed: pytorch vit_tiny d gpus=4: RuntimeError: boom (log: logs/train/g4.log)" in lines
    assert f"  tables:   {results / 'tables'}/ (scaling.csv)" in lines
    assert f"  figures:  {results / 'figures'}/ (2 PNG, 1 SVG)" in lines
    assert not any(line.strip().startswith("findings") for line in lines)  # none written
    assert lines[-1] == "  the same command again runs only the 1 configuration(s) without a result"


def test_without_a_runs_table_the_outcome_says_so(tmp_path):
    assert "no runs table" in outcome.sweep_outcome(tmp_path)


@pytest.mark.slow
def test_after_a_failed_rerun_tables_agree_with_runs_csv_and_the_outcome_is_printed(tiny_sweep, tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, sweep, symlinks=True)
    (sweep / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16/train.log").unlink()
    monkeypatch.setenv("SCALESWEEP_FAIL_INJECT", "crash")
    result = snakemake(sweep, "--cores", "2", "--keep-going")
    assert result.returncode != 0
    runs = pd.read_csv(sweep / "results/tidy/runs.csv")
    failed = runs[runs.status != "ok"]
    assert list(zip(failed.framework, failed.gpus)) == [("pytorch", 2)]
    assert "injected crash" in failed.reason.iloc[0]
    scaling = pd.read_csv(sweep / "results/tables/scaling.csv")
    measured = scaling[scaling.throughput_img_s.notna()]
    assert ("pytorch", 2) not in set(zip(measured.framework, measured.gpus))
    assert "scalesweep: tables, figures and findings rebuilt from the runs table" in result.stderr
    assert "scalesweep: 4 runs: 3 ok, 1 failed" in result.stderr
    assert "the same command again runs only the 1 configuration(s) without a result" in result.stderr


@pytest.mark.slow
def test_after_a_failure_a_rerun_with_the_failed_run_excluded_leaves_no_stale_row(tiny_sweep, tmp_path, monkeypatch):
    """Fail, exclude the failed configuration, run again with nothing to train: the tables, the
    findings and the archive are the current matrix's, and the closing lines say so. The folder
    first ran the excluding config to its end, so Snakemake's records alone see nothing changed
    for the tidy rule."""
    sweep = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, sweep, symlinks=True)
    excluded = tmp_path / "excluded.yaml"
    excluded.write_text(TINY.read_text().replace("exclude: []", "exclude: [{framework: pytorch, gpus: 2}]"))
    assert snakemake(sweep, "--cores", "2", configfile=excluded).returncode == 0
    (sweep / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16/train.log").unlink()
    monkeypatch.setenv("SCALESWEEP_FAIL_INJECT", "crash")
    failed = snakemake(sweep, "--cores", "2", "--keep-going")
    assert failed.returncode != 0
    assert (sweep / layout.WRITTEN_AFTER_FAILURE).exists()
    assert "failed" in set(pd.read_csv(sweep / "results/tidy/runs.csv").status)
    monkeypatch.delenv("SCALESWEEP_FAIL_INJECT")

    result = snakemake(sweep, "--cores", "2", configfile=excluded)

    assert result.returncode == 0, result.stderr[-3000:]
    runs = pd.read_csv(sweep / "results/tidy/runs.csv")
    assert sorted(zip(runs.framework, runs.gpus, runs.status)) == [
        ("pytorch", 1, "ok"), ("tensorflow", 1, "ok"), ("tensorflow", 2, "ok")]
    scaling = pd.read_csv(sweep / "results/tables/scaling.csv")
    assert ("pytorch", 2) not in set(zip(scaling.framework, scaling.gpus))
    findings = (sweep / "results/findings.md").read_text()
    assert "injected crash" not in findings and "failed" not in findings
    archived = query.archived_runs(sweep / "results/history")
    assert set(archived.status) == {"ok"}
    assert "scalesweep: 3 runs: 3 ok" in result.stderr
    assert "the same command again" not in result.stderr
