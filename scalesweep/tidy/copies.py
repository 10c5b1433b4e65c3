"""One run read twice is one run: copies are found by run id and left out, each named.

A run is read twice when the same log is named twice, when a sweep's `results/runs` (copies of
the logs that succeeded) and `logs/train` are analysed together, when a logs folder was copied
with `cp -rL` or `scp -r` (links became files), or when a runs table and the logs it came from
are both given. Counted twice, one run would be two repeats: `n_runs 2` and an interval from two
identical values. provenance.run_id names a run by its content (header, epochs, summary), so
every copy has its id wherever it was read from; the first reading is kept.
"""

from __future__ import annotations

import pandas as pd


def later_readings(run_ids) -> dict[int, int]:
    """{position of a later reading: position of the first reading of the same run} over
    `run_ids` in order; a missing id (an older runs table) is never a copy."""
    first, later = {}, {}
    for position, run_id in enumerate(run_ids):
        if run_id is None or (isinstance(run_id, float) and run_id != run_id) or run_id is pd.NA or run_id == "":
            continue
        if run_id in first:
            later[position] = first[run_id]
        else:
            first[run_id] = position
    return later


def copy_lines(sources: list, run_ids: list, later: dict[int, int]) -> list[str]:
    """A line per left-out copy (later_readings): where it was read, and where its run was read
    first."""
    return [f"{sources[copy]}: the same run as {sources[first]} (run_id {run_ids[copy]}): counted once"
            for copy, first in later.items()]


def without_copies(runs: pd.DataFrame, sources: list) -> tuple[pd.DataFrame, list[str]]:
    """`runs` with every later reading of a run left out (by run_id), and a copy line each
    naming where each row was read (`sources`, in row order)."""
    if "run_id" not in runs or runs.empty:
        return runs, []
    ids = runs["run_id"].tolist()
    later = later_readings(ids)
    kept = [position not in later for position in range(len(runs))]
    return runs[kept].reset_index(drop=True), copy_lines(sources, ids, later)


def copies_report(lines: list[str]) -> list[str]:
    """The analysis output's lines about copies left out (none when there were none)."""
    if not lines:
        return []
    counted = "1 duplicate copy of a run" if len(lines) == 1 else f"{len(lines)} duplicate copies of runs"
    return [f"{counted} left out (a run read twice is counted once, by run_id):", *(f"  {line}" for line in lines)]


# What names one configuration within a log: a requeued SLURM job appends its next attempt to
# the same --output file, and the two attempts are one configuration, not two repeats.
ATTEMPT_KEY = ("framework", "model", "dataset", "gpus", "nodes", "repeat", "per_gpu_batch", "precision",
               "protocol")


def earlier_attempts(rows: list) -> dict[int, int]:
    """{position of an earlier attempt: position of the last attempt} over run rows in reading
    order: an unfinished run (status not ok) followed, in the same log, by another run of the same
    configuration (ATTEMPT_KEY) is a requeued job's killed attempt; the last one counts. Two runs
    that both finished are two runs (one after the other: logs/invariants.py judges that)."""
    keys = [(row.get("log"), *(str(row.get(key)) for key in ATTEMPT_KEY)) for row in rows]
    last = {key: position for position, key in enumerate(keys)}
    return {position: last[key] for position, key in enumerate(keys)
            if last[key] != position and rows[position].get("status") != "ok"}


def attempt_lines(rows: list, earlier: dict[int, int]) -> list[str]:
    return [f"{rows[old]['log']}: run {old_rank} of the log is an earlier attempt of the same configuration as run "
            f"{new_rank} (a requeued job appends to its log): only the last attempt counts"
            for old, new in earlier.items()
            for old_rank, new_rank in [(_rank_in_log(rows, old), _rank_in_log(rows, new))]]


def _rank_in_log(rows: list, position: int) -> int:
    """1 for the first run read from that row's log."""
    return sum(1 for row in rows[: position + 1] if row.get("log") == rows[position].get("log"))
