"""`--where` only filters (issue 28, point 1): whatever the text, `history` and `compare` run no
second statement, read no file but the archive's, write none and cannot hold the machine; each
refusal is one line naming what was refused; an ordinary filter still works."""

import os
import subprocess
import sys

import pytest

from scalesweep import cli
from scalesweep.history import archive, query, sqlfilter
from test_history import REPO, sweep_runs

SECRET = "TOP-SECRET-7f3a"


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """Two archived sweeps and a secret file beside them, archived once for the module (about a
    second a time): the filters only read them."""
    folder = tmp_path_factory.mktemp("archived")
    store = folder / "history"
    ids = [archive.archive(sweep_runs(), store).sweep_id,
           archive.archive(sweep_runs(driver="550.54.15"), store).sweep_id]
    secret = folder / "secret.txt"
    secret.write_text(SECRET + "\n")
    return {"store": store, "ids": ids, "secret": secret}


@pytest.fixture
def hostile(archived, tmp_path):
    """The archived sweeps, and this test's own places a write would land."""
    return {**archived, "written": tmp_path / "written", "out": tmp_path / "cmp", "tmp": tmp_path}


# (case, text with {written} / {secret} / {folder} filled in, what the one-line refusal says)
HOSTILE = [
    ("statement-after-semicolon", "1=1; COPY (SELECT 42) TO '{written}'", "holds more than one statement"),
    ("comment-then-statement", "1=1 /* hidden */ ; COPY (SELECT 42) TO '{written}'", "more than one statement"),
    ("line-comment-newline-statement", "1=1 --\n; COPY (SELECT 42) TO '{written}'", "more than one statement"),
    ("break-out-of-the-where", "1=1) GROUP BY sweep_id; COPY (SELECT 42) TO '{written}'; SELECT (1",
     "not one SQL condition"),
    ("union", "1=1 UNION SELECT 1", "set operation"),
    ("from-clause", "1=1 FROM read_text('{secret}')", "FROM clause"),
    ("scalar-subquery-reads-a-file", "(SELECT content FROM read_text('{secret}'))::INT = 1", "a subquery"),
    ("exists-glob", "EXISTS (SELECT * FROM glob('{folder}/*'))", "a subquery"),
    ("in-read-csv", "gpus IN (SELECT column0 FROM read_csv_auto('{secret}'))", "a subquery"),
    ("table-function-as-scalar", "read_text('{secret}') IS NOT NULL", "the function 'read_text'"),
    ("attach", "ATTACH '{written}' AS other", "an alias (AS other)"),
    ("attach-plain", "ATTACH '{written}'", "Type with name ATTACH does not exist"),
    ("install-load", "1=1; INSTALL httpfs; LOAD httpfs", "more than one statement"),
    ("export", "1=1; EXPORT DATABASE '{written}'", "more than one statement"),
    ("pragma", "1=1; PRAGMA enable_profiling", "more than one statement"),
    ("set-external-access", "1=1; SET enable_external_access = true", "more than one statement"),
    ("getenv", "getenv('HOME') = 'x'", "the function 'getenv'"),
    ("range-list-generator", "len(range(1000000000000)) > 0", "the function 'len'"),
    ("range-in-a-subquery", "(SELECT count(*) FROM range(1000000000000)) > 0", "a subquery"),
    ("repeat-generator", "length(repeat('x', 1000000000)) > 0", "the function 'repeat'"),
    ("parameter", "gpus = ?", "a parameter"),
    ("window", "row_number() OVER () > 1", "a window function"),
    ("aggregate", "count(*) > 1", "the function 'count_star'"),
    ("two-expressions", "1=1, 2=2", "not one SQL condition"),
    ("nesting-bomb", "(" * 5000 + "gpus" + ")" * 5000, "expression depth"),
    # SQLExpression accepts 999 nested NOTs; DuckDB's serializer, parsing again, does not
    ("not-at-the-serializers-depth", "NOT " * 999 + "gpus > 1", "expression depth"),
    ("refused-function-deep-inside", "NOT " * 500 + "read_text('{secret}') IS NULL", "the function 'read_text'"),
    ("blank", "   ", "--where is blank"),
]


def filled(text, case):
    return text.format(written=case["written"], secret=case["secret"], folder=case["tmp"])


def run_cli(capsys, *argv):
    status = cli.main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize(("name", "text", "said"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_a_hostile_filter_is_refused_in_one_line_and_does_nothing(hostile, capsys, name, text, said):
    where = filled(text, hostile)
    listing = run_cli(capsys, "history", "--history", hostile["store"], "--where", where)
    comparison = run_cli(capsys, "compare", *hostile["ids"], "--history", hostile["store"],
                         "--out", hostile["out"], "--where", where)
    for command, (status, out, err) in (("history", listing), ("compare", comparison)):
        assert status == 2 and out == ""
        (line,) = err.splitlines()
        assert line.startswith(f"scalesweep {command}: --where") and said in line
        assert SECRET not in err
    assert not hostile["written"].exists()
    assert not hostile["out"].exists() or not any(hostile["out"].iterdir())


def test_a_file_read_that_passed_the_filter_check_is_powerless_on_the_connection():
    # The third layer on its own: the connection user filters run on reads no other file, even
    # for SQL that never went through the filter check.
    import duckdb

    connection = sqlfilter.confined_connection()
    with pytest.raises(duckdb.PermissionException, match="disabled by configuration"):
        connection.execute("SELECT * FROM read_text('/etc/hostname')")
    with pytest.raises(duckdb.Error, match="lock"):
        connection.execute("SET enable_external_access = true")


def test_what_runs_is_duckdbs_own_sql_of_the_checked_tree_never_the_typed_text():
    assert sqlfilter.condition_sql("gpu_model LIKE '%H100%' AND gpus >= 8 -- a note") == (
        "((gpu_model ~~ '%H100%') AND (gpus >= 8))")
    assert sqlfilter.condition_sql('"odd name" = 1 /* c */') == '("odd name" = 1)'


def test_an_ordinary_filter_still_selects_runs(hostile, capsys):
    where = "gpu_model LIKE '%H100%' AND gpus >= 2 AND gpu_driver <> '535.104.05'"
    status, out, err = run_cli(capsys, "history", "--history", hostile["store"], "--where", where, "--csv")
    assert status == 0 and err == ""
    assert out.splitlines()[1].startswith(hostile["ids"][1]) and len(out.splitlines()) == 2
    # sweep_config is JSON text; a date compares as ISO text
    runs = query.archived_runs(hostile["store"], where="sweep_config->>'$.x' IS NULL AND sweep_date >= '2026'")
    assert len(runs) == 8
    status, out, err = run_cli(capsys, "compare", *hostile["ids"], "--history", hostile["store"],
                               "--out", hostile["out"], "--where", "gpus IN (1, 2) AND status = 'ok'")
    assert status == 0, err
    assert "baseline: " in out and "(3 runs;" in out


def test_the_refusal_comes_through_the_installed_command_too(hostile):
    where = filled(HOSTILE[0][1], hostile)
    result = subprocess.run([sys.executable, "-m", "scalesweep", "history", "--history", str(hostile["store"]),
                             "--where", where], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not hostile["written"].exists()


def test_a_filter_nested_as_deep_as_duckdb_parses_is_checked_and_runs(hostile):
    # Round 4: 300 nested NOTs (or calls) are a condition DuckDB parses, and its tree is deeper
    # than Python's recursion limit: json.loads of it was a RecursionError traceback.
    for where in ("NOT " * 300 + "NOT gpus < 2", "abs(" * 900 + "gpus" + ")" * 900 + " >= 2"):
        result = subprocess.run([sys.executable, "-m", "scalesweep", "history", "--history", str(hostile["store"]),
                                 "--where", where, "--csv"], cwd=hostile["tmp"], capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
        assert result.stdout.splitlines()[0].startswith("sweep_id") and len(result.stdout.splitlines()) == 3
