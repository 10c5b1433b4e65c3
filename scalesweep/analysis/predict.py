"""Predict before you spend: a group's epoch time, throughput and efficiency at GPU counts it has
not measured, from the counts it has (docs/prediction.md, issue 26).

An epoch is T(N) = t0 + S(N) x tau(N): t0 the epoch overhead (runs.csv `epoch_overhead_s`, the
median over the measured counts: it does not shrink with N), S(N) the steps of an epoch (both trainers
drop the last partial batch: `steps_per_epoch`), tau(N) the time per step. tau is measured up to the
largest count; beyond it three growth rules bound it:

- flat: no growth (optimistic, the band's high end);
- log: the growth per doubling measured (least squares of tau over log2 N), continued (the point
  estimate);
- comm: the all-reduce of the gradient bytes with no overlap, alpha-beta ring model, over the
  inter-node bus bandwidth the network probe measured (or the intra-node one inside a node);
  without bandwidths, twice the measured growth per doubling (pessimistic, the band's low end).

The band is then widened by the run-to-run noise of the measured points (repeats, else the runs'
own step-time intervals). Without step times, or with one GPU count, the prediction falls back to
the Amdahl fit of the measured speedups (labelled) or says why there is none. Every function here
is pure: the tables stage hands it the runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scalesweep.analysis.scaling import flagged_gpus
from scalesweep.contract import frameworks
from scalesweep.plan.analysis_settings import AnalysisSettings
from scalesweep.tidy.table import group_keys, iter_groups, key_tuple

METHOD_MODEL = "step model (t0 + S x tau, log growth)"
METHOD_AMDAHL = "amdahl fit (no step times): speedups only, no communication term"
METHOD_NONE = "none"
STEEP_FACTOR = 2.0  # the comm rule without bandwidths: this many times the measured growth per doubling

PREDICTION_COLUMNS = (
    "gpus", "nodes", "measured_gpus", "steps_per_epoch", "step_time_s", "epoch_overhead_s",
    "epoch_time_s", "epoch_time_low_s", "epoch_time_high_s",
    "throughput_img_s", "throughput_low_img_s", "throughput_high_img_s",
    "efficiency_pct", "efficiency_low_pct", "efficiency_high_pct",
    "time_to_solution_s", "measured_efficiency_pct", "error_pts", "method", "inputs",
)  # fmt: skip


@dataclass(frozen=True)
class Measured:
    """One group's measured counts, per count (ascending): what the prediction rests on."""

    gpus: tuple
    step_time_s: tuple  # tau(N), s; NaN where unknown
    epoch_overhead_s: tuple  # t0 per count, s; NaN where unknown
    throughput_img_s: tuple
    noise: float  # relative run-to-run spread of the throughput (0.01 = 1 %)
    train_images: float
    per_gpu_batch: float
    epochs: float
    allreduce_bytes: float = math.nan
    intra_busbw_gb_s: float = math.nan  # at the largest measured count


@dataclass(frozen=True)
class Network:
    """The inter-node all-reduce the network probe measured (results/tables/network.csv)."""

    busbw_gb_s: float
    latency_s: float = 0.0


def read_network_csv(path) -> Network:
    """The network probe's row (scripts/probe_network.py,
    scalesweep/train/torch_backend/network_probe.py); ValueError naming the file when it holds no
    positive bus bandwidth (a prediction must not rest on a broken probe)."""
    try:
        row = pd.read_csv(path).iloc[0]
        busbw, latency = float(row["busbw_gb_s"]), float(row.get("latency_s", 0.0) or 0.0)
    except (OSError, IndexError, KeyError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise ValueError(f"{path}: cannot read the network probe's row: {error}") from error
    if not busbw > 0:
        raise ValueError(f"{path}: busbw_gb_s must be > 0, got {busbw}")
    return Network(busbw, latency if math.isfinite(latency) else 0.0)


def ring_allreduce_s(ranks: int, nbytes: float, busbw_gb_s: float, latency_s: float = 0.0) -> float:
    """Seconds of a ring all-reduce of `nbytes` over `ranks`: nccl-tests' bus bandwidth is
    algbw x 2(n-1)/n, so t = 2(n-1)/n x bytes / busbw, plus 2(n-1) latencies (alpha-beta)."""
    if ranks <= 1:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * nbytes / (busbw_gb_s * 1e9) + 2 * (ranks - 1) * latency_s


def growth_per_doubling(gpus, step_times) -> float:
    """Least-squares slope of tau over log2 N (s per doubling), never below 0 (a faster step at
    more GPUs is noise, not a trend); 0 with one count."""
    x, y = np.log2(np.asarray(gpus, float)), np.asarray(step_times, float)
    if len(x) < 2:
        return 0.0
    return max(0.0, float(np.polyfit(x, y, 1)[0]))


def step_time_rules(n: int, measured: Measured, gpus_per_node: int, network: Network | None) -> dict:
    """tau(n) under each growth rule: {"flat", "log", "comm"} (s) and what "comm" rests on."""
    last_n, last_tau = measured.gpus[-1], measured.step_time_s[-1]
    growth = growth_per_doubling(measured.gpus, measured.step_time_s)
    doublings = math.log2(n / last_n)
    rules = {"flat": last_tau, "log": last_tau + growth * doublings}
    comm, basis = None, None
    has_bytes = measured.allreduce_bytes > 0 and measured.intra_busbw_gb_s > 0
    if has_bytes and n <= gpus_per_node:
        inside = [ring_allreduce_s(k, measured.allreduce_bytes, measured.intra_busbw_gb_s) for k in (n, last_n)]
        comm, basis = last_tau + inside[0] - inside[1], f"all-reduce at {measured.intra_busbw_gb_s:.3g} GB/s in the node"
    elif has_bytes and network is not None:
        across = ring_allreduce_s(n, measured.allreduce_bytes, network.busbw_gb_s, network.latency_s)
        inside = ring_allreduce_s(last_n, measured.allreduce_bytes, measured.intra_busbw_gb_s)
        comm, basis = last_tau + across - inside, f"all-reduce at {network.busbw_gb_s:.3g} GB/s across nodes, no overlap"
    if comm is None:
        comm, basis = last_tau + STEEP_FACTOR * growth * doublings, f"{STEEP_FACTOR:g} x the growth per doubling"
    rules["comm"] = max(comm, rules["log"])
    return {**rules, "comm_basis": basis, "growth_s": growth}


def epoch_time(t0: float, steps: int, tau: float) -> float:
    return t0 + steps * tau


def efficiency_pct(throughput: float, gpus: int, base_throughput: float, base_gpus: int) -> float:
    """Throughput over the baseline's, per GPU added (scaling.csv's definition)."""
    return 100.0 * (throughput / base_throughput) / (gpus / base_gpus)


def predict_model(n: int, measured: Measured, steps_of, gpus_per_node: int, network: Network | None) -> dict:
    """The step model's prediction at `n` GPUs; `steps_of(n)` is S(n)."""
    t0_values = [v for v in measured.epoch_overhead_s if not math.isnan(v)]
    t0 = float(np.median(t0_values)) if t0_values else 0.0
    steps = steps_of(n)
    if steps < 1:
        return no_prediction(f"{measured.train_images:.0f} images give no full step at {n} GPUs")
    rules = step_time_rules(n, measured, gpus_per_node, network)
    batch = n * measured.per_gpu_batch
    times = {rule: epoch_time(t0, steps, rules[rule]) for rule in ("flat", "log", "comm")}
    rates = {rule: batch * steps / seconds for rule, seconds in times.items()}
    base_gpus, base_rate = measured.gpus[0], measured.throughput_img_s[0]
    eff = {rule: efficiency_pct(rate, n, base_rate, base_gpus) for rule, rate in rates.items()}
    low, high = 1.0 - measured.noise, 1.0 + measured.noise
    taus = "/".join(f"{1000 * tau:.1f}" for tau in measured.step_time_s)
    counts = "/".join(str(g) for g in measured.gpus)
    t0_note = f"t0 {t0:.3f} s (median over {counts} GPUs)" if t0_values else "t0 not measured: taken as 0"
    inputs = (f"{t0_note}; tau {taus} ms at {counts} GPUs, +{1000 * rules['growth_s']:.2f} ms per doubling; "
              f"S({n}) = {steps} of {measured.train_images:.0f} images; low end: {rules['comm_basis']}; "
              f"noise +/-{100 * measured.noise:.1f} %; node of {gpus_per_node} GPUs")
    return {
        "steps_per_epoch": steps, "step_time_s": rules["log"], "epoch_overhead_s": t0,
        "epoch_time_s": times["log"], "epoch_time_low_s": times["flat"] / high, "epoch_time_high_s": times["comm"] / low,
        "throughput_img_s": rates["log"], "throughput_low_img_s": rates["comm"] * low,
        "throughput_high_img_s": rates["flat"] * high,
        "efficiency_pct": eff["log"], "efficiency_low_pct": eff["comm"] * low, "efficiency_high_pct": eff["flat"] * high,
        "time_to_solution_s": measured.epochs * times["log"] if measured.epochs > 0 else math.nan,
        "method": METHOD_MODEL, "inputs": inputs,
    }


def predict_amdahl(n: int, measured: Measured) -> dict:
    """The fallback: the Amdahl fit of the measured speedups, projected (labelled as such);
    Gustafson's projection is the band's high end, Amdahl's lower bound at p's low stderr its low."""
    from scalesweep.analysis import fits

    if len(measured.gpus) < 2:
        return no_prediction("one measured GPU count: nothing to fit a growth to")
    base_gpus, base_rate = measured.gpus[0], measured.throughput_img_s[0]
    amdahl, gustafson = law_fits(measured.gpus, measured.throughput_img_s)
    speedup = float(fits.predicted_speedup("amdahl", amdahl.p, n, base_gpus))
    high = float(fits.predicted_speedup("gustafson", gustafson.p, n, base_gpus))
    low_p = max(0.0, amdahl.p - (amdahl.p_stderr if math.isfinite(amdahl.p_stderr) else 0.0))
    low = float(fits.predicted_speedup("amdahl", low_p, n, base_gpus))
    noise_low, noise_high = 1.0 - measured.noise, 1.0 + measured.noise
    per_gpu = 100.0 * base_gpus / n
    return {
        "throughput_img_s": speedup * base_rate, "throughput_low_img_s": low * base_rate * noise_low,
        "throughput_high_img_s": max(high, speedup) * base_rate * noise_high,
        "efficiency_pct": speedup * per_gpu, "efficiency_low_pct": low * per_gpu * noise_low,
        "efficiency_high_pct": max(high, speedup) * per_gpu * noise_high,
        "method": METHOD_AMDAHL,
        "inputs": f"Amdahl p {amdahl.p:.4f} over {'/'.join(map(str, measured.gpus))} GPUs; high end Gustafson p {gustafson.p:.4f}",
    }


def law_fits(gpus: tuple, throughputs: tuple) -> tuple:
    """The Amdahl and Gustafson fits of the speedups over the first count, from the fits' one
    cache (fits.fit_law): every count asked beyond a sweep is predicted from the same measured
    points, and the fit table has fitted most of them already."""
    from scalesweep.analysis import fits

    scale = np.asarray(gpus, float) / gpus[0]
    speedups = np.asarray(throughputs, float) / throughputs[0]
    return fits.fit_law("amdahl", scale, speedups), fits.fit_law("gustafson", scale, speedups)


def no_prediction(reason: str) -> dict:
    return {"method": METHOD_NONE, "inputs": reason}


def predict_count(n: int, measured: Measured, steps_of, gpus_per_node: int, network: Network | None) -> dict:
    """The prediction at `n` GPUs by the best method the inputs allow."""
    if not all(tau > 0 for tau in measured.step_time_s):
        return predict_amdahl(n, measured)
    return predict_model(n, measured, steps_of, gpus_per_node, network)


# ---------------------------------------------------------------------------------------------
# The table


PER_COUNT_COLUMNS = ("step_time_s", "epoch_overhead_s", "throughput_img_s", "allreduce_bytes", "busbw_gb_s")
GROUP_COLUMNS = ("dataset_train_images", "train_images", "per_gpu_batch", "epochs")
CI_COLUMNS = ("throughput_ci_low_img_s", "throughput_ci_high_img_s")


def _median(values: np.ndarray) -> float:
    """The median of the finite-or-infinite values, NaN when there are none (pandas' skipna median)."""
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else math.nan


def _numeric(rows: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats, NaN where missing or not a number (and all NaN when the table lacks it)."""
    if column not in rows:
        return np.full(len(rows), math.nan)
    return pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)


def count_spread(rates: np.ndarray, ci_low: np.ndarray | None, ci_high: np.ndarray | None) -> float:
    """Relative run-to-run noise at one GPU count: the half-range of its repeats' throughputs over
    their median, else (one run) of the run's own throughput interval; NaN when neither is known."""
    rates = rates[~np.isnan(rates)]
    if len(rates) >= 2:
        return (rates.max() - rates.min()) / 2 / np.median(rates)
    if ci_low is not None and len(rates):
        low, high = _median(ci_low), _median(ci_high)
        if math.isfinite(low) and math.isfinite(high):
            return (high - low) / 2 / np.median(rates)
    return math.nan


class GroupInputs:
    """One group's ok runs, read once. The prediction table asks for the inputs below every count
    it checks (1,448 times on the analysis benchmark's 10,000 logs): the per-count medians and
    spreads are computed here once, and each `measured(below)` takes a prefix of them."""

    def __init__(self, rows: pd.DataFrame):
        gpus = _numeric(rows, "gpus")
        ok = (rows["status"] == "ok").to_numpy() & (gpus >= 1) & (_numeric(rows, "throughput_img_s") > 0)
        rows, self.gpus = rows[ok], gpus[ok]
        self.values = {column: _numeric(rows, column) for column in GROUP_COLUMNS}
        self.counts = tuple(sorted({int(g) for g in self.gpus}))
        at = [self.gpus == count for count in self.counts]
        per_count = {column: _numeric(rows, column) for column in PER_COUNT_COLUMNS}
        self.per_count = {column: tuple(_median(values[mask]) for mask in at) for column, values in per_count.items()}
        has_ci = set(CI_COLUMNS) <= set(rows.columns)
        low, high = (_numeric(rows, column) for column in CI_COLUMNS)
        rates = per_count["throughput_img_s"]
        self.spreads = tuple(count_spread(rates[mask], low[mask] if has_ci else None, high[mask] if has_ci else None)
                             for mask in at)

    def measured(self, below: int | None = None) -> Measured | None:
        """The Measured of the ok runs at fewer than `below` GPUs (all of them without it)."""
        kept = len(self.counts) if below is None else sum(count < below for count in self.counts)
        if not kept:
            return None
        rows = slice(None) if below is None else self.gpus < below
        group = {column: _median(values[rows]) for column, values in self.values.items()}
        images = group["dataset_train_images"]
        spreads = [spread for spread in self.spreads[:kept] if not math.isnan(spread)]
        at = {column: values[:kept] for column, values in self.per_count.items()}
        return Measured(
            gpus=self.counts[:kept], step_time_s=at["step_time_s"], epoch_overhead_s=at["epoch_overhead_s"],
            throughput_img_s=at["throughput_img_s"], noise=float(max(spreads)) if spreads else 0.0,
            train_images=group["train_images"] if math.isnan(images) else images,
            per_gpu_batch=group["per_gpu_batch"], epochs=group["epochs"],
            allreduce_bytes=at["allreduce_bytes"][-1], intra_busbw_gb_s=at["busbw_gb_s"][-1],
        )


def steps_per_epoch(train_images: int, gpus: int, per_gpu_batch: int) -> int:
    """S(N): both trainers drop the last partial batch (DDP's sampler drops the tail that does not
    split over the ranks, each rank's loader its partial batch; Keras' dataset batches globally),
    and floor(floor(D / N) / b) = floor(D / (N b)): one formula for both."""
    return int(train_images) // (gpus * int(per_gpu_batch))


def prediction_table(runs: pd.DataFrame, settings: AnalysisSettings, network: Network | None = None,
                     scaling: pd.DataFrame | None = None) -> pd.DataFrame:
    """results/tables/predictions.csv: per group x GPU count, the prediction with its band,
    method and inputs. The counts are the settings' (`predicted_counts`, a node's GPUs `node_gpus`,
    of the group's largest measured count) and every measured count above the second, each
    predicted from the counts below it only: `measured_efficiency_pct` and `error_pts` then say
    how well the method did.
    The counts the scaling table flags (superlinear: a measurement suspected wrong) are neither
    inputs nor checks."""
    keys = group_keys(runs)
    flagged = flagged_by_group(scaling, keys)
    rows = []
    for values, group in iter_groups(runs, keys):
        group = group[~group["gpus"].isin(flagged.get(key_tuple(values, keys), []))]
        inputs = GroupInputs(group)
        everything = inputs.measured()
        if everything is None:
            continue
        node = settings.node_gpus(everything.gpus[-1])
        asked = settings.predicted_counts(everything.gpus[-1])
        held_out = list(everything.gpus[2:])
        for n in sorted(set(asked) | set(held_out)):
            rows.append({**values, **_row(n, inputs, everything, node, network, values.get("framework"))})
    return pd.DataFrame(rows, columns=[*keys, *PREDICTION_COLUMNS])


def flagged_by_group(scaling: pd.DataFrame | None, keys: list[str]) -> dict:
    """{group key: its flagged GPU counts} of a scaling table (none without one)."""
    if scaling is None or scaling.empty or not set(keys) <= set(scaling.columns):
        return {}
    return {key_tuple(values, keys): flagged_gpus(rows) for values, rows in iter_groups(scaling, keys)}


def _steps_function(measured: Measured):
    """S(n) from the training-set size; without it (steps-protocol logs of older trainers) one
    step per 'epoch', so T = tau and the throughput N b / tau still follow."""
    if measured.train_images > 0:
        return lambda count: steps_per_epoch(measured.train_images, count, measured.per_gpu_batch)
    return lambda count: 1


def _row(n: int, inputs: GroupInputs, everything: Measured, node: int, network, framework) -> dict:
    # Every count measured lies below n for the counts asked beyond the sweep: the same inputs.
    measured = everything if max(everything.gpus) < n else inputs.measured(below=n)
    row = {"gpus": n, "nodes": math.ceil(n / node)}
    entry = frameworks.get(framework) if framework in frameworks.NAMES else None
    if entry is not None and n > node and not entry.multinode:
        return {**row, **no_prediction(f"{framework}: {entry.single_node_reason}")}
    if measured is None:
        return {**row, **no_prediction(f"no measured count below {n} GPUs")}
    row["measured_gpus"] = "/".join(map(str, measured.gpus))
    if not measured.per_gpu_batch > 0:
        return {**row, **no_prediction("the runs give no per-GPU batch")}
    per_step = not measured.train_images > 0
    if per_step:  # an overhead per epoch means nothing without epochs
        measured = dataclasses.replace(measured, epoch_overhead_s=(math.nan,) * len(measured.gpus))
    row.update(predict_count(n, measured, _steps_function(measured), node, network))
    if per_step and "epoch_time_s" in row:
        # One step stands for the epoch: throughput and efficiency hold, epoch times do not.
        row.update(dict.fromkeys(("steps_per_epoch", "epoch_time_s", "epoch_time_low_s", "epoch_time_high_s",
                                  "time_to_solution_s")))
        row["inputs"] += "; training-set size unknown: per step, no epoch time"
    if n in everything.gpus and "efficiency_pct" in row:
        at = everything.gpus.index(n)
        row["measured_efficiency_pct"] = efficiency_pct(everything.throughput_img_s[at], n, measured.throughput_img_s[0],
                                                        measured.gpus[0])
        row["error_pts"] = row["efficiency_pct"] - row["measured_efficiency_pct"]
    return row
