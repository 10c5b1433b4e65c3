"""Records that contradict each other (scalesweep/logs/invariants.py): each invariant the trainers
guarantee, broken in a hand-made log, gives a failed row that says why; the base log it is made
from is an ok row with hand-checked numbers; and a fuzz of record values and counts through parse
and tidy never crashes, hangs or runs out of memory."""

import json
import math
import re
import resource
import time
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalesweep.contract import records
from scalesweep.logs import invariants
from scalesweep.logs.read import LogFormatError, parse_log
from scalesweep.tidy import rows, table
from scalesweep.train.common import stepparts

START = "2025-11-14T10:00:00+00:00"
# Steady epochs 2 and 3: 18 s for 8 steps, so the breakdown's step is 2.25 s; the throughput is
# 1024 images / the median steady epoch of 9 s = 113.78 img/s; on 2 H100s in bf16 (989 TFLOP/s
# peak) with 1e12 FLOPs per image that is 56.89 TFLOP/s per GPU, an MFU of 5.752 %.
STEP_S = 2.25
FLOPS_OK = 1e12
MFU_OK = 100 * (1024 / 9 / 2) / 989
# 1e15 FLOPs per image (the record contract's largest): 56,889 TFLOP/s per GPU, 5,752 % of the peak.
FLOPS_ABSURD = 1e15


def base_parts() -> dict:
    """Parts of the 2.25 s step that add up to it, over whatever parts stepparts.PART_KEYS names
    (the synchronisation may be one part or split in several)."""
    sync = [key for key in invariants.PART_KEYS if key.startswith("sync")]
    parts = {"data_wait_s": 0.25, "compute_s": 1.5, "other_s": 0.25}
    parts.update({key: 0.25 / len(sync) for key in sync})
    assert set(parts) == set(invariants.PART_KEYS)
    return parts


def base_records() -> tuple[dict, list[dict], dict]:
    header = {"record": "header", "schema": 1, "framework": "pytorch", "model": "resnet18",
              "dataset": "synth", "gpus": 2, "device_kind": "gpu", "world_size": 2,
              "per_gpu_batch": 128, "global_batch": 256, "precision": "bf16", "epochs": 3,
              "images_per_epoch": 1024, "protocol": "epochs", "flops_per_image": FLOPS_OK,
              "gpu_models": ["NVIDIA H100 80GB HBM3"] * 2, "start_time": START}
    epochs = [{"record": "epoch", "schema": 1, "epoch": number, "images": 1024, "seconds": seconds,
               "throughput_img_s": 1024 / seconds, "steps": 4}
              for number, seconds in ((1, 24.0), (2, 8.0), (3, 10.0))]
    summary = {"record": "summary", "schema": 1, "status": "ok", "reason": None, "epochs": 3,
               "train_time_s": 42.0, "timed_steps": 8, STEP_KEY: STEP_S, **base_parts(),
               "breakdown_steps": 8}
    return header, epochs, summary


STEP_KEY = invariants.STEP_KEY


def log_text(header, epochs, summary, prefixes=None) -> str:
    lines = [":::SCALESWEEP " + json.dumps(record) for record in (header, *epochs, summary) if record]
    if prefixes:
        lines = [prefix + line for prefix, line in zip(prefixes, lines)]
    return "\n".join(lines) + "\n"


def tidy_row(tmp_path, text, name="run.log"):
    path = tmp_path / name
    path.write_text(text)
    result = rows.tidy_tables([(path, {})])
    return path, result


def test_the_base_log_is_an_ok_run_with_hand_checked_numbers(tmp_path):
    path, result = tidy_row(tmp_path, log_text(*base_records()))
    row = result.runs.iloc[0]
    assert row["status"] == "ok" and result.refused == []
    assert row["throughput_img_s"] == pytest.approx(1024 / 9)
    assert row["breakdown_step_s"] == STEP_S
    assert row["mfu_pct"] == pytest.approx(MFU_OK)
    assert invariants.run_problems(*base_records()) == []


def scaled_parts(factor: float) -> dict:
    return {key: value * factor for key, value in base_parts().items()}


BROKEN = [
    # (id, header changes, epochs change, summary changes, reason after "<log>: ")
    ("gpus_8_world_size_2", {"gpus": 8}, None, {},
     r"header record: 'gpus' 8 but 'world_size' 2: a run trains one replica or process per GPU"),
    ("more_epochs_than_asked", {"epochs": 2}, None, {},
     r"epoch record 3 \(3 epoch records\) but the header asks for 'epochs' 2"),
    ("summary_counts_5_epochs", {}, None, {"epochs": 5},
     r"summary record: 'epochs' 5 but the log holds 3 epoch records"),
    ("train_time_10x", {}, None, {"train_time_s": 420.0},
     r"summary record: 'train_time_s' 420\.0 but the epoch records' seconds add up to 42\.0"),
    ("parts_10x_the_step", {}, None, scaled_parts(10.0),
     "summary record: the parts " + re.escape(" + ".join(invariants.PART_KEYS)) + r" add up to 22\.5, not "
     rf"'breakdown_step_s' 2\.25"),
    ("data_wait_1e300", {}, None, {"data_wait_s": 1e300, "other_s": 0.25 - 1e300},
     r"summary record: 'data_wait_s' 1e\+300 is more than 10 x 'breakdown_step_s' 2\.25"),
    ("step_not_the_window", {}, None, {STEP_KEY: 4.5, **scaled_parts(2.0)},
     r"summary record: 'breakdown_step_s' 4\.5 but the steady epochs' seconds / steps = 18\.0 / 8 = 2\.25"),
    ("breakdown_steps_disagree", {}, None, {"breakdown_steps": 7},
     r"summary record: 'breakdown_steps' 7 but 'timed_steps' 8"),
]


@pytest.mark.parametrize("case", BROKEN, ids=[case[0] for case in BROKEN])
def test_each_broken_invariant_is_a_refused_row_naming_it(tmp_path, case):
    _, header_changes, _, summary_changes, reason = case
    header, epochs, summary = base_records()
    path, result = tidy_row(tmp_path, log_text({**header, **header_changes}, epochs,
                                               {**summary, **summary_changes}))
    row = result.runs.iloc[0]
    assert row["status"] == "failed"
    assert row["reason"].startswith(f"{path}: ")
    assert "\n" not in row["reason"]
    assert re.match(reason, row["reason"][len(f"{path}: "):]), row["reason"]
    assert result.refused == [row["reason"]]
    assert all(math.isnan(row[column]) for column in table.METRIC_COLUMNS)
    assert result.epochs.empty


def test_noise_within_the_tolerances_is_no_contradiction(tmp_path):
    """other_s negative (median noise), parts 0.05 % off the step, a part 9 steps long: ok."""
    header, epochs, summary = base_records()
    parts = base_parts()
    parts.update(compute_s=2.0, other_s=-0.25)  # still 2.25 in all
    for changes in (parts, {"other_s": 0.25 + 0.0005 * STEP_S},
                    {"compute_s": 9 * STEP_S, "other_s": 0.25 + 1.5 - 9 * STEP_S}):
        assert invariants.run_problems(header, epochs, {**summary, **changes}) == [], changes
    path, result = tidy_row(tmp_path, log_text(header, epochs, {**summary, **parts}))
    assert result.runs.iloc[0]["status"] == "ok"


def test_an_mfu_above_100_percent_is_refused_by_tidy(tmp_path):
    header, epochs, summary = base_records()
    path, result = tidy_row(tmp_path, log_text({**header, "flops_per_image": FLOPS_ABSURD}, epochs, summary))
    row = result.runs.iloc[0]
    assert row["status"] == "failed"
    assert row["reason"] == (f"{path}: MFU 5752 % (5.689e+04 TFLOP/s per GPU) is above 100 % of "
                             "the GPU's peak: 'flops_per_image', the GPU count or the throughput is wrong")
    assert result.refused == [row["reason"]]
    assert math.isnan(row["throughput_img_s"]) and pd_isna(row["mfu_pct"])


def pd_isna(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def test_a_run_the_trainer_failed_keeps_its_reason():
    header, epochs, summary = base_records()
    failed = {**summary, "status": "failed", "reason": "boom"}
    run, = parse_log(log_text({**header, "gpus": 8}, epochs, failed), source="x.log")
    assert (run.summary["status"], run.summary["reason"], run.problems) == ("failed", "boom", [])


def test_the_reference_formats_are_checked_too():
    text = " Model ResNet50 4 GPUs\nBatch_size: 512\nNum_replicas: 2\nEpoch 1/1\n13/13 - 9s - loss: 2.3\n"
    run, = parse_log(text, source="ref.log")
    assert run.summary["status"] == "failed"
    assert run.summary["reason"] == ("ref.log: header record: 'gpus' 4 but 'world_size' 2: a run trains "
                                     "one replica or process per GPU")


# ---------------------------------------------------------------------------------------------
# One writer per log


def test_two_ranks_labelled_by_srun_are_one_refused_run(tmp_path):
    header, epochs, summary = base_records()
    records_once = [header, *epochs, summary]
    lines = []
    for record in records_once:  # interleaved, as two processes print at once
        lines += ["0: :::SCALESWEEP " + json.dumps(record), "1: :::SCALESWEEP " + json.dumps(record)]
    path, result = tidy_row(tmp_path, "\n".join(lines) + "\n")
    assert len(result.runs) == 1
    row = result.runs.iloc[0]
    assert row["status"] == "failed"
    assert row["reason"] == (f"{path}: records written by 2 processes (ranks 0, 1 by their line prefixes): "
                             "only rank 0 writes records, one writer per log")
    assert result.refused == [row["reason"]]


def test_two_full_record_sets_of_one_start_are_one_refused_run(tmp_path):
    """Two ranks that each printed a whole record set, one after the other, without prefixes:
    two runs started in the same second cannot have run one after another."""
    text = log_text(*base_records()) * 2
    path, result = tidy_row(tmp_path, text)
    assert len(result.runs) == 1
    row = result.runs.iloc[0]
    assert row["status"] == "failed"
    assert row["reason"].startswith(f"{path}:6: the runs of the header records on lines 1 and 6 ran at "
                                    f"the same time (start_time '{START}' and '{START}')")
    assert result.refused == [row["reason"]]


@pytest.mark.parametrize("later_s, runs", [(60, 2), (42, 2), (30, 1), (-30, 1)])
def test_runs_one_after_another_stay_two_runs(tmp_path, later_s, runs):
    """The first run's epochs took 42 s: a run started 42 s or more later can follow it; one
    started 30 s later, or 30 s before it (whose own epochs took 42 s), overlapped it."""
    header, epochs, summary = base_records()
    start = datetime.fromisoformat(START) + timedelta(seconds=later_s)
    second = {**header, "start_time": start.isoformat()}
    _, result = tidy_row(tmp_path, log_text(header, epochs, summary) + log_text(second, epochs, summary))
    assert len(result.runs) == runs
    assert set(result.runs["status"]) == ({"ok"} if runs == 2 else {"failed"})


def test_one_writer_whatever_the_label_form():
    assert invariants.writer_ranks(["0: ", "[rank0]: ", "", "x "]) == [0]
    assert invariants.writer_ranks(["[rank1]: ", "0: "]) == [0, 1]


# ---------------------------------------------------------------------------------------------
# The checks follow the writers


def test_the_parts_are_the_writers():
    assert (invariants.STEP_KEY, *invariants.PART_KEYS) == tuple(stepparts.PART_KEYS)


def test_what_the_writer_computes_passes():
    """stepparts.step_parts' own numbers, with a negative other part, add up within tolerance."""
    parts = stepparts.step_parts(18.0, 8, [2.4] * 8, [0.3] * 8, [2.3] * 5, ranks=2)
    header, epochs, summary = base_records()
    assert parts["other_s"] < 0
    assert invariants.run_problems(header, epochs, {**summary, **parts}) == []


# ---------------------------------------------------------------------------------------------
# Fuzz: values and counts of valid records mutated

HOSTILE_VALUES = st.sampled_from([
    0, -1, -1e300, 1e300, 1e15, 2**53, 2**53 + 1, 10**400, float("nan"), float("inf"), float("-inf"),
    None, True, "8", "", [], {}, [1, 2], 0.5, 1e-300, -0.0,
]) | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**60), 2**60)
MUTABLE = {
    "header": ["gpus", "world_size", "per_gpu_batch", "global_batch", "epochs", "flops_per_image",
               "start_time", "images_per_epoch"],
    "epoch": ["epoch", "images", "seconds", "throughput_img_s", "steps"],
    "summary": ["epochs", "train_time_s", "timed_steps", STEP_KEY, *invariants.PART_KEYS,
                "breakdown_steps", "status"],
}


def dumps(record: dict) -> str:
    try:
        return json.dumps(record)
    except ValueError:  # an integer past Python's digit limit
        return json.dumps({k: (str(v) if isinstance(v, int) else v) for k, v in record.items()})


@st.composite
def mutated_logs(draw) -> str:
    header, epochs, summary = base_records()
    records_ = [header, *epochs, summary]
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(records_) - 1))
        record = dict(records_[index])
        key = draw(st.sampled_from(MUTABLE[record["record"]]))
        record[key] = draw(HOSTILE_VALUES)
        records_[index] = record
    count_change = draw(st.sampled_from(["none", "none", "drop_epoch", "extra_epoch", "second_writer",
                                         "second_run", "labels"]))
    if count_change == "drop_epoch":
        records_.pop(draw(st.integers(1, 3)))
    elif count_change == "extra_epoch":
        records_.insert(4, {**epochs[2], "epoch": draw(st.integers(4, 10))})
    elif count_change in ("second_writer", "second_run"):
        again = [dict(record) for record in records_]
        if count_change == "second_run":
            again[0] = {**again[0], "start_time": "2025-11-14T11:00:00+00:00"}
        records_ += again
    lines = [":::SCALESWEEP " + dumps(record) for record in records_]
    if count_change == "labels":
        lines = [f"{draw(st.sampled_from(['0: ', '1: ', '']))}{line}" for line in lines]
    return "\n".join(lines) + "\n"


FUZZ_EXAMPLES = 600
FUZZ_DEADLINE_S = 10
FUZZ_MEMORY_BYTES = 1 << 30


@pytest.mark.slow  # a fuzz of FUZZ_EXAMPLES logs through parse and tidy
def test_fuzzed_record_values_and_counts_become_rows(tmp_path):
    """Each mutated log: parse_log raises nothing but LogFormatError; tidy gives rows that are ok
    and consistent (every invariant holds, MFU <= 100 %) or failed with a one-line reason and no
    metric; each example within 10 s, the whole fuzz within 1 GB more memory."""
    seen = []
    kib_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()

    @settings(max_examples=FUZZ_EXAMPLES, deadline=FUZZ_DEADLINE_S * 1000, derandomize=True,
              database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(mutated_logs())
    def one_log(text):
        seen.append(text)
        try:
            runs = parse_log(text, source="fuzz.log")
        except LogFormatError as error:
            assert str(error).startswith("fuzz.log")
        else:
            for run in runs:
                if run.summary["status"] == "ok":
                    assert invariants.run_problems(run.header, run.epochs, run.summary) == []
        path = tmp_path / "fuzz.log"
        path.write_text(text)
        result = rows.tidy_tables([(path, {})])
        assert len(result.runs) >= 1
        for _, row in result.runs.iterrows():
            assert row["status"] in records.STATUSES
            if row["status"] == "ok":
                assert pd_isna(row["mfu_pct"]) or row["mfu_pct"] <= invariants.MFU_MAX_PCT
            else:
                assert isinstance(row["reason"], str) and row["reason"] and "\n" not in row["reason"]
                assert all(math.isnan(row[column]) for column in table.METRIC_COLUMNS)

    one_log()
    elapsed = time.perf_counter() - started
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - kib_before) * 1024
    assert len(seen) >= FUZZ_EXAMPLES
    assert grown < FUZZ_MEMORY_BYTES
    print(f"fuzz: {len(seen)} logs in {elapsed:.1f} s, peak memory grew {grown / 2**20:.0f} MiB")
