"""Two sweeps side by side: what changed per configuration, how sure we are, and what differed.

A configuration is identified by its axes (the group keys of runs.csv plus the GPU count), never
by provenance: the same configuration on another driver, image or cluster is what a comparison
is for. For each configuration present in both sides, over the runs that finished ok with a
throughput:

- `ratio` = candidate / baseline throughput, the ratio of the geometric means of the repeats
  (one run a side: the ratio of the two runs), and its interval, computed on the log scale:
  - `bootstrap`: at least MIN_BOOTSTRAP_REPEATS repeats on both sides (pooled sweeps, say):
    percentile interval of BOOTSTRAP_RESAMPLES resamples of each side's repeats, each side's
    resampled means spread by sqrt(n / (n - 1)) around its mean (a resample's variance is the
    plug-in one, (n - 1) / n of the sample variance). No assumption on the noise's shape.
  - `repeats`: 2 or more repeats on both sides (fewer than for the bootstrap on one): Welch's t
    interval of the difference of mean log throughputs (Satterthwaite degrees of freedom). The
    percentile bootstrap is too narrow with few repeats: under no change at all, with normal
    noise, a 95 % percentile interval excludes 1.0 in 32 % of comparisons with 2 repeats a side,
    20 % with 3 and 10 % with 10 (Welch's t: 2-4 %; tests/test_compare.py measures it).
  - `pooled spread`: where repeats of the same settings on the same hardware exist (in the
    history, the compared runs left out, or within a side), every run's log throughput varies
    by their pooled variance (repeat_spread): the mean of n runs by that / n, with the pooled
    degrees of freedom (t interval). This is what a single run a side needs: its own step-time
    interval (+-1 %) says nothing of how far the next run lands (several % on a shared node),
    and taken as the spread it called 8 of 12 unchanged configurations changed.
  - `none`: one run a side and no repeats to tell the spread: no interval, the verdict is
    `unknown (no repeats)` and the ratio is still given; `unknown` where a side has no ok run.
- The verdict is taken at the family-wise level CONFIDENCE over all m configurations with an
  interval (Bonferroni): each configuration's interval at level 1 - (1 - CONFIDENCE) / m
  (`ratio_ci_adj_*`); `faster` when it lies above 1, `slower` when below, else `no detectable
  difference`. `ratio_ci_low/high` are the plain per-configuration 95 % intervals; `p_value` the
  configuration's two-sided p-value and `p_adjusted` = min(1, m x p_value).
- `efficiency_*`: parallel efficiency of each side (scaling.csv's efficiency_pct, medians of the
  repeats), their difference in percentage points and its 95 % interval by the delta method on
  the log epoch times of the two GPU counts involved (same variance sources as above, Welch t).
- `provenance_diff`: the provenance fields whose values differ between the two sides' runs of
  the configuration.

This module matches the configurations and builds the table; the statistics above are
scalesweep/analysis/intervals.py's, the summary's words scalesweep/report/compare_text.py's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.analysis import scaling
from scalesweep.analysis.intervals import CONFIDENCE, MIN_BOOTSTRAP_REPEATS, Cell, efficiency_interval, estimate
from scalesweep.contract import atomic
from scalesweep.history import query, sides
from scalesweep.report.compare_figure import (
    FASTER,
    SAME,
    SLOWER,
    UNKNOWN,
    UNKNOWN_NO_REPEATS,
    plot_ratios,
)
from scalesweep.report.compare_text import DIFF_FIELDS, comparison_summary, nothing_in_common
from scalesweep.tidy import provenance
from scalesweep.tidy.table import group_keys

CI_LOW, CI_HIGH = "throughput_ci_low_img_s", "throughput_ci_high_img_s"
METRIC_INPUTS = ("gpus", "nodes", "status", "steady_epoch_time_s", "throughput_img_s",
                 "total_time_s", CI_LOW, CI_HIGH)
COMPARE_COLUMNS = (
    "n_baseline", "n_candidate", "throughput_baseline_img_s", "throughput_candidate_img_s",
    "ratio", "ratio_ci_low", "ratio_ci_high", "ratio_ci_adj_low", "ratio_ci_adj_high",
    "change_pct", "ci_method", "p_value", "p_adjusted", "verdict",
    "efficiency_baseline_pct", "efficiency_candidate_pct", "efficiency_diff_pp",
    "efficiency_diff_ci_low", "efficiency_diff_ci_high", "provenance_diff", "note",
)


# ----------------------------------------------------------------------------- configurations

def configuration_keys(baseline: pd.DataFrame, candidate: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The axes that identify a configuration in both sides (GPU count last), and notes.

    An axis only one side has is dropped when it holds one value there (the other sweep ran
    that value without naming the axis); with several values it stays a key, and the other
    side, which lacks it, then has none of those configurations.
    """
    # The metrics a comparison reads are never axes (whatever table.NON_KEY_COLUMNS lists).
    keys_b, keys_c = ([k for k in group_keys(frame) if k not in METRIC_INPUTS]
                      for frame in (baseline, candidate))
    keys, notes = [k for k in keys_b if k in keys_c], []
    for side, own, frame in (("baseline", keys_b, baseline), ("candidate", keys_c, candidate)):
        for key in own:
            if key in keys:
                continue
            values = frame[key].dropna().unique()
            if len(values) <= 1:
                shown = scaling.format_value(values[0]) if len(values) else "empty"
                notes.append(f"axis {key} only in the {side} ({shown}): ignored")
            else:
                keys.append(key)
    return [*keys, "gpus"], notes


def key_text(value) -> str:
    """One spelling of an axis value across CSV, Parquet and DuckDB: 4, 4.0 and '4' -> '4';
    True and 'true' -> 'true'; missing -> ''."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered
        try:
            number = float(value)
        except ValueError:
            return value.strip()
        return scaling.format_value(number) if math.isfinite(number) else value.strip()
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return scaling.format_value(float(value))
    return str(value)


# The GPU count as a configuration key (text, like the other keys); `gpus` stays a number.
GPUS_KEY = "_gpus_key"


def config_columns(keys: list[str]) -> list[str]:
    return [*keys[:-1], GPUS_KEY]


def prepared(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The columns a comparison needs: keys as key_text (a missing key column is empty), the
    metrics as numbers, `_log_thr` = log throughput of the usable ok runs (NaN elsewhere)."""
    frame = pd.DataFrame(index=runs.index)
    for key in keys[:-1]:
        frame[key] = texts(runs[key]) if key in runs else ""
    frame[GPUS_KEY] = texts(runs["gpus"])
    for column in METRIC_INPUTS:
        frame[column] = runs[column] if column in runs else np.nan
    for column in METRIC_INPUTS:
        if column != "status":
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    throughput = frame["throughput_img_s"]
    usable = (frame["status"] == "ok") & np.isfinite(throughput) & (throughput > 0)
    frame["_log_thr"] = np.log(throughput.where(usable))
    for column in DIFF_FIELDS:
        frame[column] = texts(runs[column]) if column in runs else ""
    frame["_hardware"] = hardware(runs)
    return frame


def texts(column: pd.Series) -> np.ndarray:
    """key_text of every value, computed once per distinct value (a history has few)."""
    codes, uniques = pd.factorize(column)
    return np.array([*(key_text(value) for value in uniques), ""], dtype=object)[codes]


# ----------------------------------------------------------------------------- one side's cell


def hardware(runs: pd.DataFrame) -> np.ndarray:
    """What a run ran on, for pooling its repeats: its GPU model, else its CPU model."""
    gpu = texts(runs["gpu_model"]) if "gpu_model" in runs else np.full(len(runs), "", object)
    cpu = texts(runs["cpu_model"]) if "cpu_model" in runs else np.full(len(runs), "", object)
    return np.where(gpu != "", gpu, cpu)


def repeat_spread(sources) -> dict[str, tuple[float, float]]:
    """{hardware: (variance of one run's log throughput between runs, degrees of freedom)}.

    Repeats are ok runs of one source (a history, one comparison side) with the same
    settings_hash and hardware; their variances are pooled per hardware, sum (n_g - 1) s_g^2 /
    sum (n_g - 1). A run's own step-time interval says how well its steps were timed, not how
    far the next run lands: on a shared machine runs differ by several % where each one's
    interval is +-1 %. Pass no run as its own repeat: a baseline and a candidate run of the
    same settings would make their difference the spread.
    """
    groups = []
    for number, runs in enumerate(source for source in sources if source is not None and len(source)):
        if "settings_hash" not in runs:
            continue
        throughput = pd.to_numeric(runs["throughput_img_s"], errors="coerce")
        usable = (runs["status"] == "ok") & (throughput > 0) & runs["settings_hash"].notna()
        frame = pd.DataFrame({"hardware": hardware(runs), "hash": runs["settings_hash"].astype(str),
                              "log": np.log(throughput.where(usable))})[usable.to_numpy()]
        stats = frame.groupby(["hardware", "hash"])["log"].agg(["count", "var"]).reset_index()
        groups.append(stats[stats["count"] >= 2].assign(source=number))
    if not groups:
        return {}
    stats = pd.concat(groups)
    stats = stats.assign(ss=stats["var"] * (stats["count"] - 1), df=stats["count"] - 1)
    pooled = stats.groupby("hardware")[["ss", "df"]].sum()
    return {name: (row.ss / row.df, float(row.df)) for name, row in pooled.iterrows() if row.df > 0}


def cell_of(rows: pd.DataFrame, spread: dict | None = None) -> Cell:
    """The cell of one configuration's rows, with the run-to-run spread of its hardware
    (repeat_spread; a single run without it has no variance). Its values and statuses are in
    one order whatever order the rows were read in (DuckDB's order of the history's rows is
    not fixed), so a seed gives the same bootstrap interval every time."""
    usable = rows[rows["_log_thr"].notna()]
    run_var, run_df = math.nan, math.nan
    if len(usable) and usable["_hardware"].nunique() == 1:
        run_var, run_df = (spread or {}).get(usable["_hardware"].iloc[0], (math.nan, math.nan))
    statuses = rows["status"].fillna("failed").value_counts().sort_index()
    return Cell(np.sort(usable["_log_thr"].to_numpy(float)), run_var,
                statuses.sort_values(ascending=False, kind="stable").to_dict(), run_df)


# ----------------------------------------------------------------------------- the ratio


def verdict(adjusted: tuple[float, float]) -> str:
    low, high = adjusted
    if not (math.isfinite(low) and math.isfinite(high)):
        return UNKNOWN
    if low > 1:
        return FASTER
    if high < 1:
        return SLOWER
    return SAME


# ----------------------------------------------------------------------------- efficiency

def efficiency_lookup(frame: pd.DataFrame, keys: list[str]) -> dict:
    """{configuration: (efficiency_pct, baseline_gpus)} from scaling_table of one side."""
    table = scaling.scaling_table(frame[[*keys[:-1], *METRIC_INPUTS[:-2]]])
    if table.empty:
        return {}
    configs = zip(*(table[key].map(key_text) for key in keys))
    return dict(zip(configs, zip(table["efficiency_pct"], table["baseline_gpus"])))


def efficiency_terms(config: tuple, efficiency: tuple, cells: dict) -> list[tuple[float, float]]:
    """(variance of efficiency_pct, df) terms of one side's efficiency at `config`: the mean log
    epoch time at the GPU count and at the baseline count (delta method: Var E = E^2 Var log E).
    Per-run epoch times and throughputs share their log variance (same images per epoch)."""
    value, baseline_gpus = efficiency
    if not np.isfinite(value) or not np.isfinite(baseline_gpus):
        return [(math.nan, math.nan)]
    base_config = (*config[:-1], key_text(baseline_gpus))
    if base_config == config:
        return []  # the baseline count itself: 100 % by definition
    terms = []
    for cell in (cells.get(config), cells.get(base_config)):
        variance, df = cell.variance() if cell is not None else (math.nan, math.nan)
        terms.append((value * value * variance, df))
    return terms


# ----------------------------------------------------------------------------- provenance

def provenance_values(frame: pd.DataFrame, fields=DIFF_FIELDS) -> dict[str, tuple]:
    """{field: sorted distinct values} of a side's runs (fields absent or empty: ())."""
    return {name: distinct_texts(frame[name].unique() if name in frame else ()) for name in fields}


def distinct_texts(values) -> tuple:
    """The key_text spellings of `values`, sorted, each once; missing and empty ones left out."""
    return tuple(sorted({key_text(v) for v in values if not pd.isna(v)} - {""}))


def provenance_diff(baseline: pd.DataFrame, candidate: pd.DataFrame, fields=DIFF_FIELDS) -> dict:
    """{field: (baseline values, candidate values)} for every field whose values differ."""
    return differing_values(provenance_values(baseline, fields), provenance_values(candidate, fields))


def differing_values(base: dict, cand: dict) -> dict:
    return {name: (base[name], cand[name]) for name in base if base[name] != cand[name]}


def provenance_by_config(frame: pd.DataFrame, columns: list[str], fields=DIFF_FIELDS) -> dict:
    """{configuration: {field: set of its raw values}} of one side (distinct_texts spells them):
    each distinct row of configuration and provenance read once, instead of every
    configuration's rows field by field (0.2 s of a comparison of 25 configurations)."""
    present = [name for name in fields if name in frame]
    by_config: dict = {}
    for row in frame[[*columns, *present]].drop_duplicates().itertuples(index=False):
        values = by_config.setdefault(tuple(row[:len(columns)]), {name: set() for name in fields})
        for name, value in zip(present, row[len(columns):]):
            values[name].add(value)
    return by_config


def provenance_of(by_config: dict, configs) -> dict[str, tuple]:
    """provenance_values of the runs of `configs`, from provenance_by_config."""
    chosen = [by_config[config] for config in configs]
    return {name: distinct_texts(set().union(*(values[name] for values in chosen))) for name in DIFF_FIELDS}


# ----------------------------------------------------------------------------- the table

def compare_runs(baseline: pd.DataFrame, candidate: pd.DataFrame, confidence: float = CONFIDENCE,
                 seed: int = 0, history_runs=None) -> tuple[pd.DataFrame, dict]:
    """compare.csv's table (keys, then COMPARE_COLUMNS; one row per configuration in both) and
    facts for the summary: keys, notes, configurations only on one side, m, the run-to-run
    spread. A run's variance comes from repeats (repeat_spread) in `history_runs` (the compared
    runs left out; a DataFrame, or a function giving one, called only when some configuration
    has fewer repeats than the bootstrap takes) and within each side."""
    keys, notes = configuration_keys(baseline, candidate)
    base, cand = prepared(baseline, keys), prepared(candidate, keys)
    columns = config_columns(keys)
    groups = {side: {config: rows for config, rows in frame.groupby(columns, sort=True)}
              for side, frame in (("baseline", base), ("candidate", cand))}
    common = sorted(set(groups["baseline"]) & set(groups["candidate"]), key=_config_order)
    if callable(history_runs):
        few = any(groups[side][config]["_log_thr"].notna().sum() < MIN_BOOTSTRAP_REPEATS
                  for config in common for side in groups)
        history_runs = history_runs() if few else None
    spread = repeat_spread([_without(history_runs, baseline, candidate), baseline, candidate])
    cells = {side: {config: cell_of(rows, spread) for config, rows in groups[side].items()}
             for side in groups}
    rng = np.random.default_rng(seed)
    estimates = [estimate(cells["baseline"][c], cells["candidate"][c], rng) for c in common]
    m = sum(1 for e in estimates if e is not None and e.method != "none")
    adjusted_level = 1 - (1 - confidence) / max(m, 1)
    efficiency = {"baseline": efficiency_lookup(base, keys), "candidate": efficiency_lookup(cand, keys)}
    provenance = {"baseline": provenance_by_config(base, columns), "candidate": provenance_by_config(cand, columns)}
    rows = [
        _row(config, est, cells, efficiency, provenance, confidence, adjusted_level, m)
        for config, est in zip(common, estimates)
    ]
    table = pd.DataFrame([{**dict(zip(keys, config)), **row} for config, row in zip(common, rows)],
                         columns=[*keys, *COMPARE_COLUMNS])
    facts = {
        "keys": keys, "notes": notes, "m": m, "confidence": confidence,
        "adjusted_level": adjusted_level,
        "only_baseline": sorted(set(groups["baseline"]) - set(common), key=_config_order),
        "only_candidate": sorted(set(groups["candidate"]) - set(common), key=_config_order),
        # Only configurations on both sides: a configuration added on one side is no change.
        "provenance": differing_values(*(provenance_of(provenance[side], common) for side in provenance)),
        "spread": spread,
    }
    return table, facts


def _without(history_runs, *sides) -> pd.DataFrame | None:
    """The history's runs but those of the sides (by run_id; older tables have none)."""
    if history_runs is None or "run_id" not in history_runs:
        return history_runs
    compared = set().union(*(set(side["run_id"].dropna()) for side in sides if "run_id" in side))
    return history_runs[~history_runs["run_id"].isin(compared)]


def _config_order(config: tuple):
    """Configurations sorted by their text keys, the GPU count (last) as a number."""
    gpus = config[-1]
    return (*config[:-1], float(gpus) if gpus.replace(".", "", 1).isdigit() else math.inf)


def _row(config, est, cells, efficiency, provenance, confidence, adjusted_level, m) -> dict:
    base, cand = cells["baseline"][config], cells["candidate"][config]
    row = {"n_baseline": base.n, "n_candidate": cand.n, "note": _cell_note(base, cand)}
    row["throughput_baseline_img_s"] = math.exp(base.logs.mean()) if base.n else math.nan
    row["throughput_candidate_img_s"] = math.exp(cand.logs.mean()) if cand.n else math.nan
    if est is None:
        row.update(ratio=math.nan, ci_method="none", verdict=UNKNOWN)
    elif est.method == "none" and min(base.n, cand.n) == 1:
        # one run a side says nothing of the run-to-run spread: the ratio, but no verdict
        row.update(ratio=math.exp(est.log_ratio), change_pct=(math.exp(est.log_ratio) - 1) * 100,
                   ci_method="none", verdict=UNKNOWN_NO_REPEATS)
    else:
        low, high = est.interval(confidence)
        adj_low, adj_high = est.interval(adjusted_level)
        p = est.p_value()
        row.update(
            ratio=math.exp(est.log_ratio), ratio_ci_low=low, ratio_ci_high=high,
            ratio_ci_adj_low=adj_low, ratio_ci_adj_high=adj_high,
            change_pct=(math.exp(est.log_ratio) - 1) * 100, ci_method=est.method,
            p_value=p, p_adjusted=min(1.0, p * m) if np.isfinite(p) else math.nan,
            verdict=verdict((adj_low, adj_high)),
        )
    row.update(_efficiency_columns(config, cells, efficiency))
    differing = differing_values(*(provenance_of(provenance[side], [config]) for side in provenance))
    row["provenance_diff"] = ", ".join(differing)
    return row


def _efficiency_columns(config, cells, efficiency) -> dict:
    sides = {}
    for side in ("baseline", "candidate"):
        value = efficiency[side].get(config, (math.nan, math.nan))
        sides[side] = (float(value[0]), value, efficiency_terms(config, value, cells[side]))
    diff = sides["candidate"][0] - sides["baseline"][0]
    low, high = efficiency_interval(diff, sides["baseline"][2] + sides["candidate"][2])
    return {"efficiency_baseline_pct": sides["baseline"][0],
            "efficiency_candidate_pct": sides["candidate"][0],
            "efficiency_diff_pp": diff, "efficiency_diff_ci_low": low, "efficiency_diff_ci_high": high}


def _cell_note(base: Cell, cand: Cell) -> str:
    notes = []
    for side, cell in (("baseline", base), ("candidate", cand)):
        not_ok = {s: n for s, n in cell.statuses.items() if s != "ok"}
        if cell.n == 0:
            notes.append(f"{side}: no ok run with a throughput"
                         + (f" ({', '.join(f'{s} x{n}' for s, n in not_ok.items())})" if not_ok else ""))
        elif cell.n == 1 and not math.isfinite(cell.run_var):
            notes.append(f"{side}: one run, and no repeats of its settings on its hardware to "
                         "tell the run-to-run spread")
    return "; ".join(notes)


# ----------------------------------------------------------------------------- outputs

def write_comparison(baseline, candidate, outdir, confidence: float = CONFIDENCE,
                     seed: int = 0, history_runs=None, allow_same: bool = False) -> tuple[pd.DataFrame, str]:
    """Compare two sides.Side objects into outdir/compare.csv, compare.png and summary.txt;
    returns the table and the summary text. `history_runs`: where single runs' spread comes from.
    Sides that hold the same runs are a ValueError unless `allow_same` (self_comparison)."""
    shared, same = self_comparison(baseline.runs, candidate.runs)
    if same and not allow_same:
        raise ValueError(f"the baseline ({baseline.label}) and the candidate ({candidate.label}) hold the same "
                         f"{shared} runs: a side compared with itself shows no change whatever happened (is a "
                         "variable of a script unset, or the same sweep named twice?); `scalesweep compare "
                         "--allow-same` runs such an A/A check on purpose")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    table, facts = compare_runs(baseline.runs, candidate.runs, confidence, seed, history_runs)
    if table.empty:
        raise ValueError(nothing_in_common(facts, baseline.label, candidate.label))
    if shared and not same:
        facts["notes"].append(f"{shared} runs are on both sides: each of them is compared with itself")
    text = comparison_summary(table, facts, baseline, candidate)
    table_csv, figure_png, summary_txt = (outdir / name for name in sides.COMPARE_OUTPUTS)
    atomic.write_csv(table, table_csv)
    plot_ratios(table, facts, figure_png)
    atomic.write_text(text, summary_txt)
    return table, text


def write_compare(baseline_spec: str, archived_json, history_dir, outdir) -> str:
    """The compare stage (rule `compare`): the sweep archived in `archived_json` (the candidate) against
    `baseline_spec` (config key compare_with); returns the verdict counts for the rule's log."""
    archived = json.loads(Path(archived_json).read_text())
    baseline = sides.load_side(str(baseline_spec), history_dir, role="sweep to compare with")
    candidate = sides.load_side(archived.get("runs_csv", archived["file"]), history_dir)
    candidate.label = f"this sweep ({archived['sweep_id']})"
    table, _ = write_comparison(baseline, candidate, outdir,
                                history_runs=lambda: query.spread_runs(history_dir))
    counts = table["verdict"].value_counts()
    return f"{len(table)} configurations compared with {baseline_spec}: " + ", ".join(
        f"{n} {verdict}" for verdict, n in counts.items())


def self_comparison(baseline: pd.DataFrame, candidate: pd.DataFrame) -> tuple[int, bool]:
    """(runs on both sides, whether both sides hold exactly the same runs). A run is its run_id
    (provenance.run_id: the same run read from a results folder, a runs.csv or the history);
    a row without one (older tables) is its values, the sweep's own columns left out."""
    base, cand = run_identities(baseline), run_identities(candidate)
    return len(base & cand), bool(base) and base == cand


def run_identities(runs: pd.DataFrame) -> set:
    """Each run's run_id, or (without one) a hash of its row over the runs' own columns."""
    ids = runs["run_id"] if "run_id" in runs else pd.Series(np.nan, index=runs.index, dtype=object)
    without = ids.isna()
    identities = set(ids[~without])
    if without.any():
        columns = sorted(c for c in runs.columns if c not in provenance.SWEEP_COLUMNS and c != "run_id")
        identities |= set(pd.util.hash_pandas_object(runs.loc[without, columns].astype(str), index=False))
    return identities


def regressions(table: pd.DataFrame, fail_above_pct: float) -> pd.DataFrame:
    """Configurations significantly slower (verdict slower, family-wise) whose estimated slowdown
    exceeds `fail_above_pct` % of the baseline throughput."""
    slowdown = -table["change_pct"]
    return table[(table["verdict"] == SLOWER) & (slowdown > fail_above_pct)]


