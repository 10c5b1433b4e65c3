"""`scalesweep show`: the scaling table printed is scaling.csv's (read back from the CSV and the
Markdown it prints), the text form fits 100 columns, and a folder without results says so."""

import io
import os
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.analysis import tables
from scalesweep.plan.analysis_settings import DEFAULTS
from scalesweep.report import terminal_table
from scalesweep.tidy import rows

LOGS = Path(__file__).resolve().parent / "data" / "logs"
SCALESWEEP_COMMAND = [sys.executable, "-m", "scalesweep"]
# scaling.csv's columns that show prints as they are
COPIED = [c for c in terminal_table.SHOWN_COLUMNS
          if c not in (*terminal_table.INTERVAL_COLUMNS, "sweet_spot")]


@pytest.fixture
def results(tmp_path):
    """A results folder analysed from the book's ResNet50/ResNet152 logs at 1, 2 and 4 GPUs."""
    runs_csv = tmp_path / "tidy" / "runs.csv"
    rows.write_tidy_tables([(LOGS / "tf_keras2_book_resnet50-152_1-2-4gpus.log", {})],
                           tmp_path / "tidy" / "epochs.csv", runs_csv)
    tables.write_tables(runs_csv, tables.outputs_in(tmp_path / "tables"), DEFAULTS)
    return tmp_path


def shown(results_dir, fmt):
    scaling, sweet_spot = terminal_table.results_tables(results_dir)
    table, keys = terminal_table.show_table(scaling, sweet_spot)
    return terminal_table.render(table, keys, fmt, sweet_spot)


def markdown_frame(text):
    """A Markdown table as printed -> a frame (numbers parsed, empty cells NaN)."""
    lines = [line.strip().strip("|") for line in text.strip().splitlines()]
    header = [cell.strip() for cell in lines[0].split("|")]
    cells = [[cell.strip() for cell in line.split("|")] for line in lines[2:]]
    frame = pd.DataFrame(cells, columns=header)
    return frame.apply(numbers_where_all_are)


def numbers_where_all_are(column):
    try:
        return pd.to_numeric(column.replace("", None))
    except ValueError:
        return column.where(column != "")


def assert_same_values(printed, scaling, relative):
    assert len(printed) == len(scaling)
    for column in [*terminal_table.table_group_keys(scaling, terminal_table.SCALING_COLUMNS), *COPIED]:
        expected, got = scaling[column], printed[column]
        if pd.api.types.is_numeric_dtype(expected):
            assert got.to_numpy(float) == pytest.approx(expected.to_numpy(float), rel=relative, nan_ok=True), column
        else:
            assert got.fillna("").astype(str).tolist() == expected.fillna("").astype(str).tolist(), column


@pytest.mark.parametrize("fmt, parse, relative", [
    ("csv", lambda text: pd.read_csv(io.StringIO(text)), 1e-12),
    ("markdown", markdown_frame, 1e-5),  # printed to 6 significant digits
])
def test_the_printed_table_is_scaling_csv(results, fmt, parse, relative):
    scaling = pd.read_csv(results / "tables" / "scaling.csv")
    printed = parse(shown(results, fmt))
    assert_same_values(printed, scaling, relative)
    assert set(scaling["model"]) == {"resnet50v2", "resnet152v2"} and set(scaling["gpus"]) == {1, 2, 4}


def test_the_sweet_spot_marks_the_chosen_gpu_counts(results):
    sweet = pd.read_csv(results / "tables" / "sweet_spot.csv").dropna(subset=["gpus"])
    printed = pd.read_csv(io.StringIO(shown(results, "csv")))
    for _, choice in sweet.iterrows():
        row = printed[(printed["model"] == choice["model"]) & (printed["gpus"] == choice["gpus"])]
        assert choice["intent"] in row["sweet_spot"].iloc[0].split(", ")
    marked = printed["sweet_spot"].fillna("").str.split(", ").explode()
    assert len(marked[marked != ""]) == len(sweet)


def test_the_text_fits_100_columns_and_names_every_group_and_count(results):
    text = shown(results, "text")
    assert max(map(len, text.splitlines())) <= terminal_table.WIDTH
    for model in ("resnet50v2", "resnet152v2"):
        assert f"model={model}" in text
    assert "sweet spot: fastest 4 GPUs" in text


def test_long_flags_and_notes_wrap_within_the_width(results):
    scaling, sweet_spot = terminal_table.results_tables(results)
    scaling["flags"] = "superlinear, flagged: steady state not reached, throughput above the interval"
    scaling["note"] = "a long note " * 20
    table, keys = terminal_table.show_table(scaling, sweet_spot)
    text = terminal_table.render(table, keys, "text", sweet_spot)
    assert max(map(len, text.splitlines())) <= terminal_table.WIDTH
    assert "flags at 4 GPUs: superlinear" in text and text.count("note at 4 GPUs") == 2


def test_the_efficiency_interval_combines_both_throughput_intervals():
    """Baseline 100 img/s in [90, 110]; 2 GPUs 180 img/s in [171, 189], efficiency 90 %:
    low 90 x (171/180) / (110/100) = 77.73 %, high 90 x (189/180) / (90/100) = 105 %."""
    group = pd.DataFrame({"gpus": [1, 2], "baseline_gpus": [1, 1], "throughput_img_s": [100.0, 180.0],
                          "throughput_ci_low_img_s": [90.0, 171.0], "throughput_ci_high_img_s": [110.0, 189.0],
                          "efficiency_pct": [100.0, 90.0]})
    interval = terminal_table.efficiency_interval(group)
    assert interval.iloc[1].tolist() == pytest.approx([90 * 0.95 / 1.1, 105.0])
    assert interval.iloc[0].isna().all()  # the baseline is 100 % by definition


def test_a_folder_without_results_is_named(tmp_path):
    with pytest.raises(terminal_table.ResultsMissing, match=str(tmp_path / "tables" / "scaling.csv")):
        terminal_table.results_tables(tmp_path)


@pytest.mark.slow
def test_show_after_a_sweep_prints_its_scaling_csv(tiny_sweep):
    """The acceptance: `scalesweep show results` in a finished sweep's folder."""
    scaling = pd.read_csv(tiny_sweep / "results" / "tables" / "scaling.csv")
    for fmt, parse, relative in (("csv", lambda text: pd.read_csv(io.StringIO(text)), 1e-12),
                                 ("markdown", markdown_frame, 1e-5)):
        done = subprocess.run([*SCALESWEEP_COMMAND, "show", "results", "--format", fmt], cwd=tiny_sweep,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert_same_values(parse(done.stdout), scaling, relative)
    text = subprocess.run([*SCALESWEEP_COMMAND, "show"], cwd=tiny_sweep, capture_output=True, text=True,
                          timeout=120)
    assert text.returncode == 0 and max(map(len, text.stdout.splitlines())) <= terminal_table.WIDTH


def scalesweep_show(results_dir, *options):
    return subprocess.run([*SCALESWEEP_COMMAND, "show", str(results_dir), *options], cwd=results_dir,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})


def test_round4_a_pipe_or_newline_in_a_name_stays_in_its_markdown_cell(results):
    # A dataset named 'a|b' split its row into one cell more: every number after it stood under
    # the wrong header, without a word.
    scaling_csv = results / "tables" / "scaling.csv"
    scaling = pd.read_csv(scaling_csv)
    key = terminal_table.table_group_keys(scaling, terminal_table.SCALING_COLUMNS)[0]
    scaling[key] = "cifar|x\\y\nz"
    scaling.to_csv(scaling_csv, index=False)

    result = scalesweep_show(results, "--format", "markdown")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    cells = [re.split(r"(?<!\\)\|", line.strip()[1:-1]) for line in lines]
    assert len(lines) == len(scaling) + 2 and {len(row) for row in cells} == {len(cells[0])}
    header = [cell.strip() for cell in cells[0]]
    for row, (_, expected) in zip(cells[2:], scaling.iterrows()):
        assert row[header.index(key)].strip() == "cifar\\|x\\\\y<br>z"
        assert float(row[header.index("gpus")]) == expected["gpus"]
        assert float(row[header.index("efficiency_pct")]) == pytest.approx(expected["efficiency_pct"], rel=1e-5)


@pytest.mark.parametrize("table", ["scaling", "sweet_spot"])
def test_round4_a_table_without_a_column_show_prints_is_named_not_a_keyerror(results, table):
    path = results / "tables" / f"{table}.csv"
    pd.read_csv(path).drop(columns=["efficiency_pct"]).to_csv(path, index=False)

    result = scalesweep_show(results)

    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"scalesweep show: {path}: has no column 'efficiency_pct', which show "
                                     "prints: write the tables again (scalesweep analyze, or the workflow's "
                                     "tables rule)")
