"""User filters (`--where`) over the runs, evaluated so that no text can do more than filter.

A filter comes from a command line or a CI script: it must select runs, never run a statement,
read or write a file, or hold the machine. Three layers, each DuckDB's own machinery:

1. DuckDB parses the text as one expression (`duckdb.SQLExpression`): a second statement after
   `;`, a FROM, UNION or modifier is a parser error before anything runs.
2. Its syntax tree (`json_serialize_sql`, DuckDB's parser again) may hold only what a condition
   on the runs' columns needs: columns, constants, comparisons, AND/OR/NOT, IN, BETWEEN, IS NULL,
   CASE, CAST and the functions of FILTER_FUNCTIONS (text matching, arithmetic, dates, JSON
   fields). A subquery, a parameter, a window or aggregate, or any other function is refused with
   its name: table functions (read_text, glob, read_csv_auto, range) can only appear in a
   subquery, and scalar generators (range(), repeat(), lpad()) run outside DuckDB's memory limit
   and interrupt checks (`len(range(1e8))` took 50 s and 7 GB here), so they are not let in.
3. What runs is the SQL DuckDB writes back from the checked tree (`condition_sql`, by
   `json_deserialize_sql`), never the text as typed, on a connection that can read only the
   folders of the query's archive files (`allowed_directories`) with external access off and
   its configuration locked (`confined_connection`): whatever passed the first two layers reads
   no other file, writes none, and loads no extension.
"""

from __future__ import annotations

import json
import os
import sys

# Functions (DuckDB's names in the parsed tree, operators included) whose result is at most
# about as large as their arguments: none generates rows, lists or text beyond its input.
FILTER_FUNCTIONS = frozenset({
    # arithmetic and comparison operators that parse as functions
    "+", "-", "*", "/", "//", "%", "^", "**",
    # text: concatenation, LIKE / ILIKE / GLOB / SIMILAR TO / ~ (with ESCAPE), matching, case
    "||", "~~", "!~~", "~~*", "!~~*", "~~~", "like_escape", "not_like_escape", "ilike_escape",
    "not_ilike_escape", "regexp_matches", "regexp_full_match", "lower", "upper", "lcase", "ucase",
    "length", "strlen", "trim", "ltrim", "rtrim", "substr", "substring", "left", "right",
    "starts_with", "ends_with", "prefix", "suffix", "contains", "instr", "strpos", "position",
    # numbers
    "abs", "round", "floor", "ceil", "ceiling", "sign", "sqrt", "ln", "log", "log2", "log10",
    "greatest", "least", "nullif",
    # dates (sweep_date, start_time) and intervals
    "now", "today", "current_date", "date_part", "datepart", "date_trunc", "year", "month", "day",
    "hour", "to_years", "to_months", "to_days", "to_hours", "to_minutes", "to_seconds", "trunc",
    # a field of the archived config (sweep_config is JSON text) and IN [...] lists
    "->", "->>", "json_extract", "json_extract_string", "list_value", "list_contains",
})
# Parsed-tree node classes a condition on columns is made of (FUNCTION: checked by name).
FILTER_CLASSES = frozenset({"COLUMN_REF", "CONSTANT", "COMPARISON", "CONJUNCTION", "BETWEEN",
                            "CASE", "CAST", "TYPE", "OPERATOR", "FUNCTION"})
# OPERATOR nodes: NOT, IS [NOT] NULL, [NOT] IN (list), COALESCE/IFNULL; no list slicing or
# construction beyond the text's own literals.
FILTER_OPERATORS = frozenset({"OPERATOR_NOT", "OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL",
                              "COMPARE_IN", "COMPARE_NOT_IN", "OPERATOR_COALESCE"})
REFUSED_CLASSES = {
    "SUBQUERY": "a subquery (SELECT ...)",
    "PARAMETER": "a parameter ($1, ?)",
    "WINDOW": "a window function",
    "LAMBDA": "a lambda (x -> ...)",
    "STAR": "* (all columns)",
}
EXAMPLE = "gpu_model LIKE '%H100%' AND gpus >= 8"


class FilterError(ValueError):
    """A --where text that is not one condition a filter may hold; the message names the text
    and what in it was refused."""


def parsed_filter(text: str) -> str:
    """DuckDB's parsed tree of `text` (the JSON of json_serialize_sql of `SELECT <text>`) once
    checked to be one condition that only filters; FilterError naming what else it holds."""
    if not str(text).strip():
        raise FilterError(f"--where is blank: give a condition (e.g. \"{EXAMPLE}\") or leave --where out")
    if "\0" in text:
        raise FilterError(f"--where {shown(text)}: holds a NUL byte")
    import duckdb  # here: the workflow imports the history module at every parse, and needs no DuckDB

    try:
        # DuckDB's word on "one expression"; its message names what else there is. (Not
        # duckdb.sql_expr: in DuckDB 2.0 that keeps the text unparsed until a query uses it.)
        duckdb.SQLExpression(text)
        # DuckDB's serializer parses again, with a tighter depth budget than SQLExpression (999
        # nested NOTs pass the one and not the other): its refusal is the filter's refusal too.
        tree = _serialized("SELECT " + text)
    except duckdb.Error as error:
        raise _not_one_condition(text, error) from None
    loaded = _loaded(tree)
    problem = _shape_problem(loaded) or refused_part(loaded["statements"][0]["node"]["select_list"])
    if problem:
        raise FilterError(f"--where {shown(text)}: {problem} is not allowed: a filter is one condition on "
                          f"the runs' columns (e.g. \"{EXAMPLE}\"; docs/hostile-cases.md lists what it may use)")
    return tree


def condition_sql(text: str) -> str:
    """The filter as a WHERE clause holds it: DuckDB's SQL for the very tree that was checked
    (json_deserialize_sql: identifiers quoted, every operation in parentheses, comments gone),
    which must parse back to itself. The text the user typed never reaches a statement. (A
    relation's filter() would do the same at 0.3 s a listing: it binds the view of the 1,000
    files three more times.)"""
    import duckdb

    tree = parsed_filter(text)
    try:
        rendered = _rendered(tree)
        again = _rendered(_serialized(rendered))
    except duckdb.Error as error:
        raise _not_one_condition(text, error) from None
    if not rendered.startswith(SELECT) or again != rendered:
        raise FilterError(f"--where {shown(text)}: DuckDB writes it back as {shown(rendered)}, which reads "
                          "otherwise: write the condition in plainer terms")
    return rendered[len(SELECT):]


SELECT = "SELECT "


def _not_one_condition(text: str, error: Exception) -> FilterError:
    said = str(error).replace(text, "<the filter>")  # quoted once, at the start
    return FilterError(f"--where {shown(text)}: not one SQL condition: {_first_line(said)}")


def _serialized(sql: str) -> str:
    return _one_value("SELECT json_serialize_sql(?)", sql)


def _rendered(tree: str) -> str:
    return _one_value("SELECT json_deserialize_sql(?::JSON)", tree)


def _one_value(query: str, argument: str) -> str:
    """DuckDB's parser as a function. The text is a bound parameter (data, never SQL), on one
    confined in-memory database kept for the process: a new one costs 20 ms, and a listing
    parses its filter five times."""
    if "parser" not in _parser:
        _parser["parser"] = confined_connection()
    return _parser["parser"].execute(query, [argument]).fetchone()[0]


_parser: dict = {}


# JSON levels DuckDB's tree spends on one level of expression at most (a function: its object,
# its list of children, the child's object), measured on nested NOT, abs(), +, coalesce, CAST.
JSON_LEVELS_PER_EXPRESSION = 3


def _loaded(tree: str) -> dict:
    """The parsed tree as Python objects. CPython's JSON decoder recurses once per nested object
    or list, and a filter DuckDB accepts (300 nested NOTs, up to its max_expression_depth of
    1,000) is deeper than Python's default recursion limit: the limit is raised, for this call,
    to the deepest tree DuckDB's parser can give, so what DuckDB accepts is checked, never a
    RecursionError. (The check itself, refused_part, is a loop.)"""
    deepest = int(_one_value("SELECT current_setting(?)", "max_expression_depth")) * JSON_LEVELS_PER_EXPRESSION
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, limit + deepest))
    try:
        return json.loads(tree)
    finally:
        sys.setrecursionlimit(limit)


def _shape_problem(tree: dict) -> str | None:
    """Anything of `SELECT <text>` beyond one selected expression (SQLExpression refuses these
    too: checked again on the tree that is rendered)."""
    if tree.get("error") or len(tree.get("statements", [])) != 1:
        return "more than one statement"
    node = tree["statements"][0]["node"]
    extra = [key for key in ("where_clause", "having", "qualify", "sample") if node.get(key)]
    extra += [key for key in ("modifiers", "group_expressions") if node.get(key)]
    if node.get("type") != "SELECT_NODE" or node.get("from_table", {}).get("type") != "EMPTY" or extra:
        return "a clause of a query"
    return None if len(node.get("select_list", [])) == 1 else "more than one expression"


def refused_part(tree) -> str | None:
    """What in a parsed tree a filter may not hold (the first found), or None."""
    pending = [tree]
    while pending:  # a loop, not recursion: DuckDB's depth limit (1,000) exceeds Python's stack
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        problem = _node_problem(node)
        if problem:
            return problem
        pending.extend(node.values())
    return None


def _node_problem(node: dict) -> str | None:
    kind = node.get("class")
    if kind is None:
        return None
    if node.get("alias"):
        return f"an alias (AS {node['alias']})"
    if kind in REFUSED_CLASSES:
        return REFUSED_CLASSES[kind]
    if kind not in FILTER_CLASSES:
        return f"{kind.lower()} ({node.get('type', '')})"
    if kind == "OPERATOR" and node.get("type") not in FILTER_OPERATORS:
        return f"the operator {node.get('type')}"
    if kind == "FUNCTION":
        name = node.get("function_name", "")
        if name not in FILTER_FUNCTIONS or node.get("schema") or node.get("catalog"):
            return f"the function {name!r}"
    return None


def confined_connection(folders=(), settings=None):
    """An in-memory DuckDB connection that reads only files in `folders` (each spelled every way
    a query names it: query.duckdb_path escapes glob characters), writes no file, loads no
    extension, and keeps `settings` ({name: value}) and these for good: the one kind of
    connection user filters run on. (Folders, not the files: 2,000 allowed paths cost every
    listing 40-80 ms to set, and every file opened a search through them.)"""
    import duckdb

    connection = duckdb.connect()
    try:
        allowed = sorted({os.path.join(str(folder), "") for folder in folders})  # "h/" never admits "h2/"
        for name, value in {**(settings or {}), "autoinstall_known_extensions": False,
                            "autoload_known_extensions": False, "allowed_directories": allowed}.items():
            connection.execute(f"SET {name} = ?", [value])
        connection.execute("SET enable_external_access = false")
        connection.execute("SET lock_configuration = true")
    except BaseException:
        connection.close()
        raise
    return connection


def _first_line(message: str) -> str:
    return message.splitlines()[0][:SHOWN_CHARACTERS]


SHOWN_CHARACTERS = 200  # of a filter or DuckDB's message in ours: the line stays a line


def shown(text: str) -> str:
    """The filter as a message quotes it: repr (a newline stays on the line), cut short."""
    quoted = repr(text)
    return quoted if len(quoted) <= SHOWN_CHARACTERS else quoted[:SHOWN_CHARACTERS] + "..."
