"""Every on-disk path of a sweep is spelled by scalesweep/contract/layout.py (docs/layout.md): no
results/, logs/ or resources/ path literal anywhere else in the package, the trainers' scripts or
the rules, and the writers and readers of a path (scalesweep/train/attempt.py and logs/discover.py,
matrix.run_path and logs/run.py) agree because both go through it.

tests/test_layout.py is the figures' layout check; this file is about where files go.
"""

import io
import re
import tokenize
from pathlib import Path

import yaml

from scalesweep.contract import frameworks, layout
from scalesweep.logs import discover
from scalesweep.logs.run import run_identity
from scalesweep.plan import history_place
from scalesweep.train import attempt as run_attempt

ROOT = Path(__file__).resolve().parents[1]
# A folder of the sweep's own, at the start of a literal or after a separator: "results/tidy",
# "../logs/x", not "my-results/" or a word ("the logs").
PATH_LITERAL = re.compile(r"(?<![\w.-])(results|logs|resources)/")
# Python 3.12 tokenizes an f-string's text apart from its fields.
TEXT_TOKENS = {tokenize.STRING} | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())
SKIPPED = {tokenize.NL, tokenize.COMMENT}
STATEMENT_START = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}


def expression_statement_strings(tokens) -> set[int]:
    """Indexes of the string tokens that are a statement on their own: docstrings (a Snakefile's
    too, whose rules Python's tokenizer reads as it reads Python), which describe paths."""
    skipped, index = set(), 0
    while index < len(tokens):
        before = next((t.type for t in reversed(tokens[:index]) if t.type not in SKIPPED), tokenize.ENCODING)
        if tokens[index].type == tokenize.STRING and before in STATEMENT_START:
            end = index
            while end + 1 < len(tokens) and tokens[end + 1].type in TEXT_TOKENS | SKIPPED:
                end += 1
            if end + 1 == len(tokens) or tokens[end + 1].type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                skipped.update(range(index, end + 1))
            index = end + 1
        else:
            index += 1
    return skipped


def path_literals(source: str) -> list[str]:
    """'line: text' of every string literal in `source` (Python or a Snakefile) that spells a
    results/, logs/ or resources/ path; comments and docstrings are not code."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    docstrings = expression_statement_strings(tokens)
    return [f"{token.start[0]}: {token.string}" for index, token in enumerate(tokens)
            if token.type in TEXT_TOKENS and index not in docstrings and PATH_LITERAL.search(token.string)]


SAMPLE = '''"""A module about results/tidy/runs.csv."""
# the logs/ folder
RUNS = "results/runs"


def f(x):
    """Reads logs/train/."""
    return f"logs/{x}.log", "the logs", "my-results/x"


rule tidy:
    """results/tidy in a rule's docstring."""
    output:
        "resources/datasets/x",
'''


def test_the_check_finds_literals_and_passes_comments_docstrings_and_words():
    assert [line.split(":")[0] for line in path_literals(SAMPLE)] == ["3", "8", "14"]


def checked_files():
    rules = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    python = sorted((ROOT / "scalesweep").rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    return rules + [path for path in python if path != ROOT / "scalesweep" / "contract" / "layout.py"]


def test_no_sweep_path_is_spelled_outside_the_layout_module():
    files = checked_files()
    assert ROOT / "scalesweep" / "train" / "attempt.py" in files and ROOT / "workflow" / "rules" / "common.smk" in files
    found = [f"{path.relative_to(ROOT)}:{hit}" for path in files for hit in path_literals(path.read_text())]
    assert found == [], "build these paths with scalesweep/contract/layout.py:\n" + "\n".join(found)


def test_the_paths_on_disk_are_the_ones_sweeps_already_hold():
    # Measured results are found by their paths: a changed spelling would measure them again.
    run = layout.run_path("pytorch", "resnet50", "synthetic", 4, layout.setting_segment("repeat", "1"))
    assert run == "pytorch/model~resnet50/dataset~synthetic/gpus~4/repeat~1"
    assert layout.run_result(run) == f"results/runs/{run}/train.log"
    assert layout.max_batch_result(run) == f"results/max_batch/{run}/max_batch.log"
    assert layout.attempt_log("train", run) == f"logs/train/{run}.log"
    assert layout.tidy_table("runs") == "results/tidy/runs.csv"
    assert layout.archived_marker() == "results/tables/archived.json"
    assert layout.dataset_dir("cifar10", "{dataset}") == "resources/datasets/cifar10/{dataset}"
    assert layout.rule_log("images", "{image}.digest") == "logs/images/{image}.digest.log"
    assert layout.pulled_image_digest("x") == "resources/containers/x.sif.sha256"
    assert layout.local_image_digest("x") == "resources/containers/local/x.sha256"


def test_an_attempt_the_runner_numbers_is_the_attempt_discovery_reads(tmp_path):
    log = str(tmp_path / "gpus~2.log")
    claimed = [run_attempt.claim_attempt(log) for _ in range(3)]
    assert claimed == [layout.numbered_attempt(log, number) for number in (1, 2, 3)]
    stems = [layout.ATTEMPT_STEM.match(Path(path).stem) for path in claimed]
    assert [(m["run"], int(m["number"])) for m in stems] == [("gpus~2", 1), ("gpus~2", 2), ("gpus~2", 3)]
    assert {layout.log_run_name(Path(path).name) for path in [log, *claimed]} == {"gpus~2"}
    assert discover.latest_attempts([Path(path) for path in claimed]) == [Path(claimed[-1])]


def test_a_run_path_layout_spells_is_the_run_the_log_reader_identifies():
    framework = frameworks.FRAMEWORKS[0].name
    run = layout.run_path(framework, "resnet50", "synthetic", 8, layout.setting_segment("precision", "fp16"))
    expected = {"framework": framework, "model": "resnet50", "dataset": "synthetic", "gpus": 8}
    for path in (layout.run_result(run), layout.attempt_log("train", run),
                 layout.numbered_attempt(layout.attempt_log("train", run), 3)):
        assert {key: run_identity(path).get(key) for key in expected} == expected, path


def test_under_and_in_results_move_a_path_to_another_folder():
    assert layout.under("", layout.TIDY) == layout.under(".", layout.TIDY) == "results/tidy"
    assert layout.under("/sweeps/a b", layout.tidy_table("runs")) == "/sweeps/a b/results/tidy/runs.csv"
    assert layout.in_results("out", layout.TIDY) == "out/tidy"
    assert layout.in_results("/x/$(y)", layout.archived_marker()) == "/x/$(y)/tables/archived.json"
    for results in ("results", "/sweeps/a b/results", "out"):
        assert layout.results_folder_of(layout.in_results(results, layout.tidy_table("runs"))) == results


def test_the_default_history_folder_is_one_value_in_the_schema_config_and_package():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert schema["properties"]["history_dir"]["default"] == layout.DEFAULT_HISTORY
    assert config["history_dir"] == layout.DEFAULT_HISTORY
    assert history_place.DEFAULT_HISTORY_DIR == layout.DEFAULT_HISTORY


def test_a_trace_folders_summaries_lie_inside_it_json_then_markdown():
    assert layout.trace_summaries("results/traces/p") == ["results/traces/p/summary.json",
                                                          "results/traces/p/summary.md"]
