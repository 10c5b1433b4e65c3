"""The figures stage drawn in several processes: the same files as in one, laid out so no text
runs into another; and the group lookup the findings use."""

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from scalesweep import pipeline
from scalesweep.analysis import tables
from scalesweep.analysis.scaling import format_value, records_by_group, scaling_table
from scalesweep.tidy.table import group_positions, group_records, iter_groups
from scalesweep.plan.analysis_settings import AnalysisSettings
from scalesweep.report import figures


def many_series_runs() -> pd.DataFrame:
    """Two models x 13 batch sizes (more series than colours: the marginal gain draws points per
    series) at 1, 2 and 4 GPUs, throughput growing as N^0.9."""
    return pd.DataFrame([
        {"framework": "pytorch", "model": model, "dataset": "d", "per_gpu_batch": batch,
         "gpus": gpus, "nodes": 1, "repeat": 0, "status": "ok", "epochs": 3,
         "steady_epoch_time_s": 100.0 / gpus ** 0.9 / batch,
         "throughput_img_s": 500.0 * batch * gpus ** 0.9 * (1.0 + 0.01 * (batch % 3)),
         "total_time_s": 300.0 / gpus ** 0.8 / batch}
        for model in ("a", "b") for batch in range(1, 14) for gpus in (1, 2, 4)])


@pytest.fixture(scope="module")
def table_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    outputs = tables.outputs_in(folder)
    runs_csv = folder / "runs.csv"
    many_series_runs().to_csv(runs_csv, index=False)
    tables.write_tables(runs_csv, outputs, AnalysisSettings.from_config())
    return outputs


def drawn(table_files, folder, processes):
    figures.write_figures(*(table_files[name] for name in pipeline.FIGURE_TABLES), folder,
                          processes=processes)
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.suffix == ".png"}


@pytest.fixture(scope="module")
def one_process(table_files, tmp_path_factory):
    """(folder, {PNG name: bytes}) of every figure drawn in this process from the finished tables:
    what every other drawing of them is compared with (again here, in two processes, while the
    tables are computed), drawn once for the module's tests."""
    folder = tmp_path_factory.mktemp("one")
    return folder, drawn(table_files, folder, 1)


@pytest.mark.slow  # two fresh interpreters import pandas, matplotlib and seaborn
def test_two_processes_draw_the_files_one_process_draws_byte_for_byte(table_files, one_process, tmp_path):
    one, alone = one_process
    again = drawn(table_files, tmp_path / "again", 1)
    apart = drawn(table_files, tmp_path / "two", 2)
    assert sorted(alone) == sorted(f"{name}.png" for name in figures.FIGURE_NAMES)
    # Drawn twice alike (no random jitter), and alike whichever process drew each.
    assert [name for name in alone if alone[name] != again[name]] == []
    assert [name for name in alone if alone[name] != apart[name]] == []
    assert {p.name for p in (tmp_path / "two").iterdir()} == {p.name for p in one.iterdir()}


def test_a_missing_table_fails_the_stage_naming_it_before_any_process_starts(table_files, tmp_path):
    broken = dict(table_files, scaling=tmp_path / "missing.csv")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        drawn(broken, tmp_path / "out", 2)


@pytest.mark.slow  # fresh interpreters
def test_a_figure_that_fails_in_a_drawing_process_fails_the_stage(table_files, tmp_path):
    occupied = tmp_path / "figures"
    occupied.write_text("a file where the figures folder goes")
    with pytest.raises(FileExistsError):
        drawn(table_files, occupied, 2)
    assert occupied.read_text() == "a file where the figures folder goes"


def bbox_y(artists, renderer):
    boxes = [artist.get_window_extent(renderer) for artist in artists if artist.get_text()]
    return min(box.y0 for box in boxes), max(box.y1 for box in boxes)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["time_by_model", "speedup_by_model", "efficiency_by_model"])
def test_a_panel_title_clears_the_tick_labels_of_the_panel_above(name):
    """Every panel shows its own GPU counts: laid out before they were shown (seaborn hides them
    on a panel with one below), a wrapped grid put its second row's titles over them."""
    runs = pd.concat([many_series_runs().assign(model=model) for model in "abcdef"])
    built = figures.build_figure(figures.figure_makers(scaling_table(runs[runs["per_gpu_batch"] <= 2]))[name])
    try:
        built.figure.draw_without_rendering()
        renderer = built.figure.canvas.get_renderer()
        axes = list(built.grid.axes.flat)
        assert len(axes) == 6  # two rows of three
        upper, lower = axes[0], axes[3]
        assert upper.get_position().x0 == pytest.approx(lower.get_position().x0)
        ticks_low, _ = bbox_y(upper.get_xticklabels(), renderer)
        _, title_high = bbox_y([lower.title], renderer)
        assert title_high < ticks_low, (name, title_high, ticks_low)
    finally:
        plt.close(built.figure)


def test_stage_processes_follow_the_cpus_up_to_the_cap():
    assert [pipeline.capped_figure_processes(cpus) for cpus in (0, 1, 2, 64)] == [1, 1, 2, pipeline.FIGURE_PROCESSES]


# ------------------------------------------------------------------ records_by_group

def test_a_small_sweep_draws_in_this_process_a_large_one_in_processes(tmp_path, monkeypatch):
    """Each drawing process imports the analysis libraries again: for a sweep of a few dozen runs
    that costs more than the figures. Counted in rows of the table given, header aside."""
    monkeypatch.setattr(pipeline, "usable_cpu_count", lambda: 8)
    table = tmp_path / "runs.csv"
    table.write_text("gpus,note\n" + "1,x\n" * (pipeline.FIGURE_PROCESS_MIN_ROWS - 1))
    assert pipeline.csv_rows(table) == pipeline.FIGURE_PROCESS_MIN_ROWS - 1
    assert [pipeline.drawing_processes(wanted, table) for wanted in (None, 1, 3)] == [1, 1, 1]
    # Forks of this process start with its imports: worth it at a tenth of that size, not for the
    # default sweep's 12 runs (each process still pays its own first drawing).
    assert [pipeline.drawing_processes(wanted, table, forked=True) for wanted in (None, 1, 3)] == [
        pipeline.FIGURE_PROCESSES, 1, 3]
    small = tmp_path / "small.csv"
    small.write_text("gpus,note\n" + "1,x\n" * (pipeline.FORKED_PROCESS_MIN_ROWS - 1))
    assert [pipeline.drawing_processes(wanted, small, forked=True) for wanted in (None, 1, 3)] == [1, 1, 1]
    with small.open("a") as stream:
        stream.write("2,y\n")
    assert pipeline.drawing_processes(None, small, forked=True) == pipeline.FIGURE_PROCESSES
    with table.open("a") as stream:
        stream.write("2,y\n")
    assert [pipeline.drawing_processes(wanted, table) for wanted in (None, 1, 3)] == [pipeline.FIGURE_PROCESSES, 1, 3]


def test_a_group_is_found_by_its_values_as_printed_missing_ones_alike():
    fits = pd.DataFrame({"model": ["a", "a", "b"], "per_gpu_batch": [64.0, math.nan, 64.0],
                         "p": [0.9, 0.8, 0.7]})
    fit_of = records_by_group(fits, ["model", "per_gpu_batch", "dataset"])  # no dataset column: ignored
    assert [row["p"] for row in fit_of({"model": "a", "per_gpu_batch": 64, "dataset": "x"})] == [0.9]
    assert [row["p"] for row in fit_of({"model": "a", "per_gpu_batch": np.nan, "dataset": "x"})] == [0.8]
    assert fit_of({"model": "c", "per_gpu_batch": 64, "dataset": "x"}) == []
    (row,) = fit_of({"model": "b", "per_gpu_batch": 64.0, "dataset": "x"})
    assert row == {"model": "b", "per_gpu_batch": 64.0, "p": 0.7}


def test_a_missing_or_empty_table_has_no_rows_for_any_group_and_no_shared_key_gives_all():
    assert records_by_group(None, ["model"])({"model": "a"}) == []
    assert records_by_group(pd.DataFrame(), ["model"])({"model": "a"}) == []
    table = pd.DataFrame({"p": [1, 2]})
    assert [row["p"] for row in records_by_group(table, ["model"])({"model": "a"})] == [1, 2]


def test_group_records_are_iter_groups_groups_in_its_order_as_plain_rows():
    """The findings' groups: the same groups, rows and order as iter_groups (missing key values
    a group of their own), each row a dict of the table's values."""
    table = pd.DataFrame({"model": ["b", "a", "b", None, "a"], "batch": [2.0, 1.0, 2.0, 1.0, math.nan],
                          "gpus": [1, 1, 2, 4, 8]})
    expected = [(values, rows.to_dict("records")) for values, rows in iter_groups(table, ["model", "batch"])]
    found = group_records(table, ["model", "batch"])
    assert [str(rows) for _, rows in found] == [str(rows) for _, rows in expected]  # NaN != NaN
    assert [[row["gpus"] for row in rows] for _, rows in found] == [[1], [8], [1, 2], [4]]
    # the keys as the findings print them (group_title, records_by_group): numpy's 1.0 or Python's
    printed = [[format_value(value) for value in values.values()] for values, _ in found]
    assert printed == [[format_value(value) for value in values.values()] for values, _ in expected]
    assert printed == [["a", "1"], ["a", "nan"], ["b", "2"], ["nan", "1"]]
    assert str(group_records(table, [])) == str([({}, table.to_dict("records"))])
    assert group_records(table.iloc[:0], ["model"]) == [] and group_records(table.iloc[:0], []) == []


def test_group_positions_are_iter_groups_groups_in_its_order_as_row_positions():
    """The predictions' groups: the same key values, rows and order as iter_groups, also with a
    missing key value, one key or none."""
    table = pd.DataFrame({"model": ["b", "a", "b", None, "a"], "batch": [2.0, 1.0, 2.0, 1.0, math.nan],
                          "gpus": [1, 1, 2, 4, 8]}, index=[10, 11, 12, 13, 14])
    for keys in (["model", "batch"], ["model"], []):
        expected = [(values, [table.index.get_loc(label) for label in rows.index])
                    for values, rows in iter_groups(table, keys)]
        found = [(values, positions.tolist()) for values, positions in group_positions(table, keys)]
        assert str(found) == str(expected)  # NaN != NaN
    assert [positions.tolist() for _, positions in group_positions(table, ["model", "batch"])] == [
        [1], [4], [0, 2], [3]]
    assert group_positions(table.iloc[:0], ["model"]) == [] and group_positions(table.iloc[:0], []) == []


def test_the_figures_drawn_before_the_fits_are_those_that_do_not_draw_them():
    assert {name for name in figures.FIGURE_NAMES if figures.tables_of(name) == ("scaling",)} == {
        "time_by_model", "time_all", "throughput_by_model", "throughput_all", "marginal_gain",
        "karp_flatt", "throughput_efficiency", "step_breakdown", "comm_compute_ratio",
        "bus_bandwidth", "energy_per_image"}
    assert figures.FIGURE_TABLES == pipeline.FIGURE_TABLES


@pytest.mark.slow  # every figure drawn twice
def test_a_figure_of_the_scaling_table_alone_is_drawn_alike_with_every_table(table_files, tmp_path):
    """FigureProcesses draws these before the fits and predictions exist."""
    everything = figures.figure_tables([table_files[name] for name in figures.FIGURE_TABLES])
    alone = figures.figure_makers(everything[0])
    together = figures.figure_makers(*everything)
    for name in (name for name in figures.FIGURE_NAMES if figures.tables_of(name) == ("scaling",)):
        first = figures.save_figures({name: figures.build_figure(alone[name])}, tmp_path / "alone")
        second = figures.save_figures({name: figures.build_figure(together[name])}, tmp_path / "together")
        assert first[0].read_bytes() == second[0].read_bytes(), name


@pytest.mark.slow  # fresh interpreters, or forks of this one
@pytest.mark.parametrize("forked", [False, True], ids=["spawned", "forked"])
def test_figures_drawn_while_the_tables_are_computed_are_the_files_drawn_after(table_files, one_process, tmp_path,
                                                                              monkeypatch, forked):
    # processes even for these 78 runs
    monkeypatch.setattr(pipeline, "FORKED_PROCESS_MIN_ROWS" if forked else "FIGURE_PROCESS_MIN_ROWS", 0)
    runs_csv = table_files["scaling"].parent / "runs.csv"
    outputs = tables.outputs_in(tmp_path / "tables")
    lines = list(pipeline.tables_figures_findings(runs_csv, outputs, AnalysisSettings.from_config(),
                                                  tmp_path / "figures", tmp_path / "findings.md",
                                                  figure_processes=2, forked=forked))
    assert lines[1].startswith(f"{2 * len(figures.FIGURE_NAMES)} figure files: ")
    for name in tables.TABLES:
        assert outputs[name].read_bytes() == table_files[name].read_bytes(), name
    # The findings, written by this process while the others drew, are the one-process findings.
    assert lines[2].startswith("findings for ") and lines[2].endswith(str(tmp_path / "findings.md"))
    pipeline.write_findings(table_files, tmp_path / "one-process.md")
    assert (tmp_path / "findings.md").read_bytes() == (tmp_path / "one-process.md").read_bytes()
    assert one_process[1] == {
        path.name: path.read_bytes() for path in sorted((tmp_path / "figures").iterdir()) if path.suffix == ".png"}


@pytest.mark.slow  # fresh interpreters
def test_a_tables_stage_failing_after_figures_started_fails_with_its_error_and_no_findings(table_files, tmp_path, monkeypatch):
    """The figures of the scaling table are handed out before the fits fail: the chain still
    fails with the fits' error (once the figures already drawing have ended), and writes neither
    the fits nor the findings."""
    from scalesweep.analysis import fits

    def failing_fit_table(*args, **kwargs):
        raise ValueError("the fits failed")

    monkeypatch.setattr(fits, "fit_table", failing_fit_table)
    monkeypatch.setattr(pipeline, "FIGURE_PROCESS_MIN_ROWS", 0)  # processes even for these 78 runs
    runs_csv = table_files["scaling"].parent / "runs.csv"
    outputs = tables.outputs_in(tmp_path / "tables")
    with pytest.raises(ValueError, match="the fits failed"):
        list(pipeline.tables_figures_findings(runs_csv, outputs, AnalysisSettings.from_config(),
                                              tmp_path / "figures", tmp_path / "findings.md",
                                              figure_processes=2))
    assert not (tmp_path / "findings.md").exists()
    assert not outputs["fits"].exists()


def test_helpers_are_forked_only_by_a_process_with_no_other_thread(monkeypatch):
    """A fork copies the locks other threads hold (a test runner's, a library's): with a second
    thread alive, analyze starts its drawing processes fresh instead."""
    import threading

    from scalesweep.contract import hardware

    monkeypatch.setattr(hardware, "FORKS_SAFELY", True)
    alone = threading.active_count() == 1
    assert hardware.may_fork_helpers() is alone
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert hardware.may_fork_helpers() is False
    finally:
        release.set()
        other.join()
    monkeypatch.setattr(hardware, "FORKS_SAFELY", False)
    assert hardware.may_fork_helpers() is False
