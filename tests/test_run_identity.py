"""Repeats that are repeats (issue 16, item 6): every run is archived once, whatever reruns and
copies happen; its code version is the one it ran with.

A sweep, a rerun that adds a configuration and a rerun that fixes a failed one go through the real
tidy, archive, listing and comparison functions on logs written here.
"""

import json
import shutil
import subprocess

import pandas as pd

from scalesweep.history import archive, compare, query, sides
from scalesweep.plan import code_version
from scalesweep.tidy.rows import runs_table

VERSION = "3ec7d5d1a2b3"


def record(kind, **keys):
    return ":::SCALESWEEP " + json.dumps({"record": kind, "schema": 1, **keys})


def write_log(path, gpus, start, seconds, version=VERSION, finished=True):
    """A run of our trainer: header, two epochs of 1,024 images (epoch 2 takes `seconds`), summary."""
    header = record("header", framework="pytorch", model="resnet18", dataset="synth", gpus=gpus,
                    world_size=gpus, nodes=1, per_gpu_batch=64, global_batch=64 * gpus, epochs=2,
                    images_per_epoch=1024, protocol="epochs", hostname="laptop", start_time=start,
                    scalesweep_version=version, load_avg_1m=0.4, node_cpus=2)
    lines = [header, record("epoch", epoch=1, images=1024, seconds=9.0, throughput_img_s=1024 / 9.0),
             record("epoch", epoch=2, images=1024, seconds=seconds, throughput_img_s=1024 / seconds)]
    if finished:
        lines.append(record("summary", status="ok", epochs=2))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def tidy(logs):
    """runs.csv as the tidy stage writes it, read back as the history stage reads it."""
    _, runs = runs_table([(str(log), {"gpus": gpus}) for log, gpus in logs])
    return runs


def test_sweep_rerun_after_failure_and_added_configuration_archive_each_run_once(tmp_path):
    logs, store = tmp_path / "logs", tmp_path / "history"
    first = [(write_log(logs / f"g{n}.log", n, f"2026-11-20T08:0{n}:00+00:00", 4.0 / n), n) for n in (1, 2)]
    broken = (write_log(logs / "g4.attempt-1.log", 4, "2026-11-20T08:04:00+00:00", 1.2, finished=False), 4)
    sweep1 = archive.archive(tidy(first + [broken]), store)
    assert sweep1.runs == 3  # archived with its failure (the workflow waits; archiving may not)
    # rerun 1: the failed configuration fixed; rerun 2: a configuration added. runs.csv holds
    # every run each time, as the workflow's tidy rewrites it.
    fixed = (write_log(logs / "g4.attempt-2.log", 4, "2026-11-20T09:00:00+00:00", 1.1), 4)
    sweep2 = archive.archive(tidy(first + [fixed]), store)
    added = (write_log(logs / "g8.log", 8, "2026-11-20T09:30:00+00:00", 0.6), 8)
    sweep3 = archive.archive(tidy(first + [fixed, added]), store)
    assert (sweep2.runs, sweep3.runs) == (1, 1)  # only what is new
    assert sweep2.sweep_id.startswith("20261120T090000Z") and sweep3.sweep_id.startswith("20261120T093000Z")
    # archiving the same runs.csv again writes nothing
    assert archive.archive(tidy(first + [fixed, added]), store).runs == 0
    assert len(query.sweep_files(store)) == 3

    listing = query.sweeps_table(store)
    assert listing["runs"].tolist() == [3, 1, 1] and listing["ok"].tolist() == [2, 1, 1]
    # a copied archive file doubles nothing
    shutil.copy(sweep1.path, store / f"sweep-{sweep1.sweep_id}-copy.parquet")
    runs = query.archived_runs(store)
    assert len(runs) == 5 and runs["run_id"].is_unique
    assert query.sweeps_table(store)["runs"].tolist() == [3, 1, 1]
    # compare pools the 4 ok runs of one per configuration, never a copy
    side = sides.load_side("cluster=laptop", store)
    assert len(side.runs) == 5
    table, facts = compare.compare_runs(side.runs, side.runs)
    assert table["n_baseline"].tolist() == [1, 1, 1, 1]
    assert facts["provenance"] == {}


def test_the_code_version_is_the_runs_own_and_survives_a_later_tidy(tmp_path):
    log = write_log(tmp_path / "g1.log", 1, "2026-11-20T08:00:00+00:00", 4.0)
    old = write_log(tmp_path / "old.log", 1, "2026-11-19T08:00:00+00:00", 4.0, version=None)
    runs = tidy([(log, 1), (old, 1)])
    # whatever the tidying checkout's state, the header's version; unknown where it had none
    assert runs["scalesweep_version"].tolist()[0] == VERSION
    assert pd.isna(runs["scalesweep_version"].tolist()[1])


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_code_version_is_dirty_for_code_edits_only(tmp_path):
    (tmp_path / "scalesweep").mkdir()
    (tmp_path / "config").mkdir()
    (tmp_path / "scalesweep" / "x.py").write_text("A = 1\n")
    (tmp_path / "config" / "config.yaml").write_text("a: 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    clean = code_version.code_version(tmp_path)
    assert len(clean) == 12 and "dirty" not in clean
    (tmp_path / "config" / "config.yaml").write_text("a: 2\n")  # a config edit: no code change
    assert code_version.code_version(tmp_path) == clean
    (tmp_path / "scalesweep" / "x.py").write_text("A = 2\n")
    assert code_version.code_version(tmp_path) == clean + "-dirty"


def test_provenance_diff_covers_only_configurations_on_both_sides(tmp_path):
    base = tidy([(write_log(tmp_path / "a1.log", 1, "2026-11-20T08:00:00+00:00", 4.0), 1)])
    cand = tidy([(write_log(tmp_path / "b1.log", 1, "2026-11-21T08:00:00+00:00", 4.0), 1),
                 (write_log(tmp_path / "b2.log", 2, "2026-11-21T08:10:00+00:00", 2.0, version="other"), 2)])
    # the 2-GPU run (another code version) is only in the candidate: no provenance change
    _, facts = compare.compare_runs(base, cand)
    assert facts["provenance"] == {}
    assert len(facts["only_candidate"]) == 1
