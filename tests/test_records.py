"""The record contract on read (scalesweep/contract/records.py): its table matches docs/records.md,
the writer's records (scalesweep/train/common/runlog.py) pass it, and no hostile log gets past
parse + tidy + check_runs as anything but a row (fuzzed with hypothesis)."""

import json
import math
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalesweep.contract import records
from scalesweep.logs.read import parse_log
from scalesweep.logs.run import LogFormatError
from scalesweep.tidy import rows, table

ROOT = Path(__file__).resolve().parents[1]
from scalesweep.train.common import harness, measure, node, runlog  # noqa: E402

# ---------------------------------------------------------------------------------------------
# The table and docs/records.md


def documented_keys(section: str) -> set[str]:
    """Keys in the first column of the table under `## <section>` of docs/records.md."""
    text = (ROOT / "docs" / "records.md").read_text()
    body = text.split(f"\n## {section}", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for line in body.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and not set(cells[1].strip()) <= {"-"} and cells[1].strip() != "key":
            keys.update(key.strip() for key in cells[1].split(","))
    return keys


@pytest.mark.parametrize("kind", ["header", "epoch", "summary"])
def test_every_documented_key_has_a_rule_and_every_rule_a_documented_key(kind):
    documented = documented_keys(kind)
    # Named in the prose of docs/records.md rather than in the header table.
    documented |= {"channels_last", "num_workers"} if kind == "header" else set()
    assert set(records.RULES[kind]) - {"record", "schema"} == documented


@pytest.mark.parametrize(
    "kind, record, message",
    [
        ("epoch", {"seconds": -8.0}, "'seconds' must be a finite number > 0 and <= 1e+15 or null, got -8.0"),
        ("epoch", {"images": True}, "'images' must be a whole number from 1 to 2**53 or null, got True"),
        ("header", {"gpus": 0}, None),
        ("header", {"gpus": 2**53 + 1}, "'gpus' must be a whole number from 0 to 2**53, got 9007199254740993"),
        ("header", {"timed_steps": "auto"}, None),
        ("header", {"timed_steps": "all"}, "'timed_steps' must be a whole number from 1 to 2**53, 'auto' or null"),
        ("header", {"device_kind": "tpu"}, "'device_kind' must be one of 'gpu', 'cpu' or null, got 'tpu'"),
        ("header", {"versions": {"torch": "2.1", "cudnn": 90100, "nccl": None}}, None),
        ("header", {"omp_num_threads": 0}, "'omp_num_threads' must be a whole number from 1 to 2**53 or null, got 0"),
        ("header", {"omp_num_threads_env": 4}, "'omp_num_threads_env' must be a one-line string or null, got 4"),
        ("header", {"devices": ["cuda:0", 1]}, "'devices' must be a list of one-line strings, got ['cuda:0', 1]"),
        ("summary", {"memory_gb": float("inf")}, "'memory_gb' must be a finite number >= 0 or null, got inf"),
        ("summary", {"reason": "a\rb"}, "'reason' must be a one-line string or null, got 'a\\rb'"),
        ("summary", {"unknown_key": object()}, None),
    ],
)
def test_rule_messages_name_the_key_and_the_value(kind, record, message):
    found = records.problems(kind, record)
    assert [text for _, text in found] == ([] if message is None else [found[0][1]])
    if message:
        assert found[0][1].startswith(message)


def test_required_keys_and_consistency():
    assert records.problems("epoch", {"epoch": 1, "images": 64, "seconds": None}, required=True) == [
        ("seconds", "'seconds' is required, got null")]
    # 1024 / 8 = 128: within 0.1 %, 128.2 is not.
    assert records.problems("epoch", {"images": 1024, "seconds": 8.0, "throughput_img_s": 128.1}) == []
    assert records.problems("epoch", {"images": 1024, "seconds": 8.0, "throughput_img_s": 128.2})[0][0] == (
        "throughput_img_s")
    assert records.problems("header", {"per_gpu_batch": 3, "world_size": 4, "global_batch": 12}) == []


# ---------------------------------------------------------------------------------------------
# The writer's records pass


def trainer_header(protocol: str = "epochs", **overrides) -> dict:
    """A header as the backends' trainers build it, from runlog's helpers."""
    args = SimpleNamespace(find_max_batch=protocol == "max_batch", protocol=protocol, epochs=3,
                           warmup_steps=5, timed_steps=7, max_batch_limit=64)
    environ = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "as01r1b[05-06]", "APPTAINER_CONTAINER": "/tf.sif"}
    header = {
        "record": "header", "framework": "pytorch", "model": "resnet50", "dataset": "synth-folder",
        "resolution": 32, "gpus": 4, "device_kind": "gpu", "world_size": 4, "nodes": 1,
        "per_gpu_batch": 32, "global_batch": 128, "requested_per_gpu_batch": 64, "oom_policy": "halve",
        "learning_rate": 0.04, "precision": "bf16", "compile": False, "channels_last": True,
        "num_workers": 2, **harness.protocol_fields(args, 128, 8, 1024),
        "versions": {"python": node.python_version(), "torch": "2.14.1", "cudnn": 90100, "nccl": None},
        "devices": ["cuda:0", "cuda:1", "cuda:2", "cuda:3"],
        "gpu_models": ["NVIDIA H100"] * 4, "gpu_driver": "550.54", "cpu_model": node.cpu_model(),
        **node.provenance(environ=environ),
    }  # fmt: skip
    return {**header, **overrides}


def written_log(*records_in_order) -> str:
    return "\n".join(runlog.format_record(record) for record in records_in_order)


def epochs_protocol_records():
    epochs = [runlog.epoch_record(n, 1024, seconds, loss=2.0, accuracy=0.1)
              for n, seconds in [(1, 24.0), (2, 8.0), (3, 10.0)]]
    return [trainer_header(), *epochs, runlog.summary_record("ok", epochs, 55.5, memory_gb=7.5)]


def steps_protocol_records():
    begins, ends, now = [], [], 0.0
    for duration in [3.0, 1.0, 0.9, 1.1, 0.2, 0.25, 0.21, 0.22, 0.2, 0.24, 0.23, 0.2]:
        begins.append(now)
        ends.append(now + duration)
        now += duration + 0.01
    warmup = runlog.epoch_record(1, 5 * 128, **_window(begins, ends, 0, 5, None), phase="warmup")
    timed = runlog.epoch_record(2, 7 * 128, **_window(begins, ends, 5, 7, ends[4]), phase="timed")
    return [trainer_header("steps"), warmup, timed, runlog.summary_record("ok", [warmup, timed], None)]


def _window(begins, ends, first, steps, started):
    timing = measure.window_timing(begins, ends, first, steps, warmup_steps=5, started=started)
    stats = {key: timing[key] for key in ("steps", "step_time_median_s", "step_time_p90_s")}
    return {"seconds": timing["seconds"], "step_stats": stats}


def max_batch_records():
    found = measure.search_max_batch(lambda batch: batch <= 40, 32, 64)
    return [trainer_header("max_batch"), {"record": "max_batch", **found},
            runlog.summary_record("ok", [], 12.0)]


def out_of_memory_records():
    retry = {"record": "oom_retry", "per_gpu_batch": 64, "next_per_gpu_batch": 32, "reason": "CUDA out of memory"}
    summary = runlog.summary_record("oom", [], 3.5, reason="CUDA out of memory.\nTried 2 GiB", oom_retries=1)
    return [retry, trainer_header(), summary]


WRITTEN = {
    "epochs": (epochs_protocol_records, "ok"),
    "steps": (steps_protocol_records, "ok"),
    "max_batch": (max_batch_records, "ok"),
    "oom": (out_of_memory_records, "oom"),
}


@pytest.mark.parametrize("protocol", WRITTEN)
def test_records_written_by_runlog_pass_the_contract(protocol):
    build, status = WRITTEN[protocol]
    (run,) = parse_log(written_log(*build()), source="written.log")
    assert run.problems == []
    assert run.summary["status"] == status
    written_header = {k: v for k, v in build()[0 if protocol != "oom" else 1].items() if k != "record"}
    assert run.header == json.loads(json.dumps(written_header))  # nothing dropped


def test_the_writers_run_log_sequence_passes_the_contract():
    lines = []
    log = runlog.RunLog(emit=lambda record: lines.append(runlog.format_record(record)))
    log.expect(trainer_header(epochs=2))
    for n, seconds in [(1, 20.0), (2, 5.0)]:
        log.epoch(runlog.epoch_record(n, 1000, seconds, loss=float("nan")))  # a diverged loss
    log.close("ok", 30.0)
    (run,) = parse_log("\n".join(lines))
    assert run.problems == [] and run.summary["status"] == "ok"
    assert [epoch["loss"] for epoch in run.epochs] == [None, None]


# ---------------------------------------------------------------------------------------------
# Fuzzing: mutations of valid record logs, then parse + tidy + check_runs

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([0, -1, 2**53, 2**53 + 1, 2**63, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["4", "four", "16", "a\nb", "\r", "\x00", "\ud800", "auto", "ok", "failed", "NaN"]),
)
# One level of containers: deeper nesting comes from the `nest` line mutation, far deeper.
VALUES = SCALARS | st.lists(SCALARS, max_size=3) | st.dictionaries(st.text(max_size=3), SCALARS, max_size=2)
EXTRA_KEYS = ["record", "schema", "epoch", "status", "repeat", "log", "steady_epoch_time_s", "x"]
NOISE = [
    "torch.OutOfMemoryError: CUDA out of memory.",
    "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-11-14T11:17:02 DUE TO TIME LIMIT ***",
    "Traceback (most recent call last):",
    "RuntimeError: NCCL error",
    ":::SCALESWEEP",
    ":::SCALESWEEP {}",
    ' Model ResNet50 2 GPUs',
    "Epoch 2/3",
    "[EPOCH: 2] Training throughput: 5 imgs/s",
]
BASES = [
    [json.loads(runlog.format_record(record)[len(runlog.PREFIX):]) for record in base]
    for base in (epochs_protocol_records(), steps_protocol_records(), max_batch_records(),
                 out_of_memory_records(), epochs_protocol_records() + steps_protocol_records())
]


def mutate_record(data, record: dict) -> dict:
    record = dict(record)
    kind = record.get("record")
    keys = list(records.RULES.get(kind, {}) if isinstance(kind, str) else {}) + EXTRA_KEYS
    key = data.draw(st.sampled_from(keys))
    action = data.draw(st.sampled_from(["set", "set", "set", "delete"]))
    if action == "delete":
        record.pop(key, None)
    else:
        record[key] = data.draw(VALUES)
    return record


def render(record: dict) -> str:
    try:
        return ":::SCALESWEEP " + json.dumps(record)
    except (TypeError, ValueError):  # a value json cannot write: the record as a trainer can't
        return ":::SCALESWEEP " + json.dumps({key: str(value) for key, value in record.items()})


def mutate_line(data, lines: list[str]) -> None:
    action = data.draw(st.sampled_from(["delete", "duplicate", "move", "truncate", "repeat_key",
                                        "nest", "noise", "prefix"]))
    if not lines:
        lines.append(data.draw(st.sampled_from(NOISE)))
        return
    index = data.draw(st.integers(0, len(lines) - 1))
    line = lines[index]
    if action == "delete":
        del lines[index]
    elif action == "duplicate":
        lines.insert(index, line)
    elif action == "move":
        lines.insert(data.draw(st.integers(0, len(lines) - 1)), lines.pop(index))
    elif action == "truncate":
        lines[index] = line[: data.draw(st.integers(0, max(0, len(line) - 1)))]
    elif action == "repeat_key":
        key = data.draw(st.sampled_from(["seconds", "world_size", "status", "epoch", "images"]))
        lines[index] = line.replace("{", f'{{"{key}": {json.dumps(data.draw(SCALARS))}, ', 1)
    elif action == "nest":
        depth = data.draw(st.sampled_from([3, 33, 200, 5000]))
        lines[index] = line.replace("{", '{"deep": ' + "[" * depth + "]" * depth + ", ", 1)
    elif action == "noise":
        lines.insert(index, data.draw(st.sampled_from(NOISE) | st.text(max_size=30)))
    else:
        lines[index] = data.draw(st.sampled_from(["[rank0]: ", "0: ", "x"])) + line


@st.composite
def mutated_record_logs(draw):
    data = SimpleNamespace(draw=draw)
    recs = [dict(record) for record in draw(st.sampled_from(BASES))]
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.integers(0, len(recs) - 1))
        recs[index] = mutate_record(data, recs[index])
    lines = [render(record) for record in recs]
    for _ in range(draw(st.integers(0 if recs else 1, 2))):
        mutate_line(data, lines)
    return "\n".join(lines)


def check_parsed(text: str) -> None:
    """parse_log gives runs that keep to the contract, or LogFormatError; nothing else."""
    try:
        runs = parse_log(text, source="fuzz.log")
    except LogFormatError as error:
        assert str(error).startswith("fuzz.log")
        return
    for run in runs:
        assert run.summary["status"] in records.STATUSES
        assert (run.summary["status"] == "failed") or not run.problems
        assert records.problems("header", run.header) == []
        assert all(records.problems("epoch", epoch) == [] for epoch in run.epochs)
        assert records.problems("summary", run.summary) == []


def check_row(row: pd.Series) -> None:
    """A tidy row is a measurement, or failed with a one-line reason and no number."""
    assert row["status"] in records.STATUSES
    time_s, rate = row["steady_epoch_time_s"], row["throughput_img_s"]
    if row["status"] != "ok":
        assert isinstance(row["reason"], str) and row["reason"] and "\n" not in row["reason"]
        assert all(math.isnan(row[column]) for column in table.METRIC_COLUMNS)
        return
    assert not pd.isna(row["gpus"]) and row["gpus"] >= 0
    for value in (time_s, rate, row["throughput_per_gpu_img_s"]):
        assert math.isnan(value) or 0 < value <= records.MAX_MEASURE
    if math.isnan(time_s) or math.isnan(rate):
        assert isinstance(row["reason"], str) and row["reason"]


def check_tables(texts: list[str], folder: Path) -> None:
    """tidy's tables of every log, in chunks, pass check_runs; each row is a row (check_row)."""
    paths = []
    for number, text in enumerate(texts):
        path = folder / f"fuzz{number}.log"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        paths.append(path)
    for start in range(0, len(paths), 1000):
        chunk = paths[start:start + 1000]
        tables = rows.tidy_tables([(path, {}) for path in chunk])
        epochs, runs, refused = tables.epochs, tables.runs, tables.refused
        checked = table.check_runs(runs, source=f"fuzz runs {start}")
        assert len(checked) == (runs["gpus"].notna() | (runs["status"] == "ok")).sum()
        for _, row in runs.iterrows():
            check_row(row)
        assert (epochs["seconds"].dropna() > 0).all() and (epochs["throughput_img_s"].dropna() > 0).all()
        assert set(refused) <= set(runs["reason"])
        # What analyze does next: the CSV written reads back whole, row for row.
        _, runs_csv = rows.write_tidy(epochs, runs, folder / f"tidy{start}")
        assert len(table.read_runs(runs_csv)) == len(checked)


FUZZ = settings(max_examples=10_000, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.slow  # a fuzz: 10,000 examples
def test_fuzzed_record_logs_become_rows_never_exceptions(tmp_path):
    """10,000 mutated record logs: parse_log raises nothing but LogFormatError (shrunk by
    hypothesis when it does), and tidy_tables + check_runs over all of them raise nothing."""
    texts = []

    @FUZZ
    @given(mutated_record_logs())
    def one_log(text):
        texts.append(text)
        check_parsed(text)

    started = time.perf_counter()
    one_log()
    check_tables(texts, tmp_path)
    assert len(texts) >= 10_000
    print(f"fuzz: {len(texts)} record logs in {time.perf_counter() - started:.1f} s")


REFERENCE_LOGS = [
    (ROOT / "tests" / "data" / "logs" / name).read_text().splitlines()
    for name in ("tf_keras2_resnet50_2gpus.log", "tf_keras3_resnet50_2gpus.log", "ddp_vit_4gpus.log")
]
NUMBER = re.compile(r"\d+(?:\.\d+)?")


@st.composite
def mutated_reference_logs(draw):
    lines = list(draw(st.sampled_from(REFERENCE_LOGS)))
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        numbers = list(NUMBER.finditer(lines[index]))
        if numbers and draw(st.booleans()):
            match = draw(st.sampled_from(numbers))
            new = draw(st.sampled_from(["0", "-5", "nan", "inf", "1.2.3", "9" * 40, "9" * 5000, "1e999"])
                       | st.from_regex(r"\A[0-9.e+-]{1,6}\Z"))
            lines[index] = lines[index][: match.start()] + new + lines[index][match.end():]
        else:
            mutate_line(SimpleNamespace(draw=draw), lines)
    return "\n".join(lines)


@pytest.mark.slow  # a fuzz
def test_fuzzed_reference_logs_become_rows_never_exceptions(tmp_path):
    """The Keras and DDP reference formats, with numbers replaced and lines moved: the same."""
    texts = []

    @settings(FUZZ, max_examples=2_000)
    @given(mutated_reference_logs())
    def one_log(text):
        texts.append(text)
        try:
            runs = parse_log(text, source="ref_4gpus.log")
        except LogFormatError:
            return
        for run in runs:
            assert records.problems("header", run.header) == []
            assert all(records.problems("epoch", epoch) == [] for epoch in run.epochs)

    one_log()
    check_tables(texts, tmp_path)


def test_a_share_in_percent_may_be_null_where_it_was_not_measured():
    """One process synchronises nothing: its summary's overlap_pct is null, not a broken record."""
    assert records.problems("summary", {"status": "ok", "overlap_pct": None, "probe_overhead_pct": None}) == []
    found = records.problems("summary", {"status": "ok", "overlap_pct": 100.5})
    assert [key for key, _ in found] == ["overlap_pct"]
