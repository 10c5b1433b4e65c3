"""Predict before you spend: a group's epoch time, throughput and efficiency at GPU counts it has
not measured, from the counts it has (docs/prediction.md, issue 26).

An epoch is T(N) = t0 + S(N) x tau(N): t0 the epoch overhead (runs.csv `epoch_overhead_s`, the
median over the measured counts: it does not shrink with N), S(N) the steps of an epoch (both trainers
drop the last partial batch: `steps_per_epoch`), tau(N) the time per step. tau is measured up to the
largest count; beyond it three growth rules bound it:

- flat: no growth (optimistic, the band's high end);
- log: the growth per doubling measured (least squares of tau over log2 N), continued (the point
  estimate);
- network: the step's parts (runs.csv's breakdown) with the all-reduce of the gradient bytes
  (alpha-beta ring model) hidden behind the backward pass up to `backward_share` of compute, the
  last bucket never hidden, over the probe's (or a what-if) bandwidth across nodes and the
  measured one inside a node, and the sync wait grown by its own growth per doubling;
- no overlap: the same with nothing hidden (pessimistic, the band's low end). Without a
  breakdown, the all-reduce with no overlap less the in-node one inside tau; without
  bandwidths, twice the measured growth per doubling.

The point estimate is the larger of the log and network rules. The band is then widened by the run-to-run noise of the measured points (repeats, else the runs'
own step-time intervals). Without step times, or with one GPU count, the prediction falls back to
the Amdahl fit of the measured speedups (labelled) or says why there is none. Every function here
is pure: the tables stage hands it the runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.analysis.scaling import flagged_gpus
from scalesweep.contract import frameworks
from scalesweep.plan.analysis_settings import DEFAULTS, AnalysisSettings
from scalesweep.plan.checks import link_problem, uneven_counts
from scalesweep.tidy.table import group_keys, group_positions, iter_groups, key_tuple

METHOD_MODEL = "step model (t0 + S x tau, log growth)"
METHOD_NETWORK = "step model (t0 + S x tau, network rule)"
STEP_METHODS = (METHOD_MODEL, METHOD_NETWORK)
METHOD_AMDAHL = "amdahl fit (no step times): speedups only, no communication term"
METHOD_NONE = "none"
MIB = 1024 * 1024
STEEP_FACTOR = 2.0  # the comm rule without bandwidths: this many times the measured growth per doubling
# Points of overlap by which the runs' measured overlap in the node may differ from the one
# backward_share gives before `inputs` says the share contradicts them.
OVERLAP_AGREEMENT_PTS = 25.0
NCCL_TESTS_AGREEMENT = 0.10  # relative difference of the two probes' bus bandwidths said in `inputs`

PREDICTION_COLUMNS = (
    "gpus", "nodes", "measured_gpus", "steps_per_epoch", "step_time_s", "epoch_overhead_s",
    "epoch_time_s", "epoch_time_low_s", "epoch_time_high_s",
    "throughput_img_s", "throughput_low_img_s", "throughput_high_img_s",
    "efficiency_pct", "efficiency_low_pct", "efficiency_high_pct",
    "time_to_solution_s", "measured_efficiency_pct", "error_pts", "method", "limited_by", "inputs",
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
    # The step breakdown (runs.csv, docs/records.md): compute, the exposed communication and the
    # in-node all-reduce probe's time at the largest count, the sync wait per count.
    compute_s: float = math.nan
    sync_comm_s: float = math.nan
    allreduce_s: float = math.nan
    sync_wait_s: tuple = ()
    bucket_bytes: float = frameworks.DDP_BUCKET_CAP_MB * MIB


@dataclass(frozen=True)
class Network:
    """The all-reduce across nodes: the network probe's (results/tables/network.csv) or a
    what-if's (`--network-busbw`, `analysis.network`), which `source` names."""

    busbw_gb_s: float
    latency_s: float = 0.0
    source: str = "the network probe"
    # nccl-tests' bus bandwidth beside torch's where the image has all_reduce_perf
    nccl_busbw_gb_s: float = math.nan


def read_network_csv(path) -> Network:
    """The network probe's row (scripts/probe_network.py,
    scalesweep/train/torch_backend/network_probe.py); ValueError naming the file and the value
    when it holds not exactly one row, or a bandwidth or latency no network has (a prediction must
    not rest on a broken probe)."""
    try:
        table = pd.read_csv(path)
        busbw = pd.to_numeric(table["busbw_gb_s"], errors="coerce")
        latency = pd.to_numeric(table["latency_s"], errors="coerce") if "latency_s" in table else pd.Series([0.0])
        nccl = pd.to_numeric(table["nccl_busbw_gb_s"], errors="coerce") if "nccl_busbw_gb_s" in table else None
    except (OSError, KeyError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise ValueError(f"{path}: cannot read the network probe's row: {error}") from error
    if len(table) != 1:
        raise ValueError(f"{path}: the network probe writes one row, this file holds {len(table)}")
    problem = link_problem(float(busbw.iloc[0]), float(latency.iloc[0]))
    if problem:
        raise ValueError(f"{path}: {problem}")
    return Network(float(busbw.iloc[0]), float(latency.iloc[0]), source=f"the network probe, {Path(path).name}",
                   nccl_busbw_gb_s=math.nan if nccl is None else float(nccl.iloc[0]))


def network_of(settings: AnalysisSettings, probed: Network | None) -> Network | None:
    """The network across nodes a prediction uses: the settings' what-if (analysis.network,
    --network-busbw) before the probe's, labelled as such."""
    if settings.network_busbw_gb_s is None:
        return probed
    latency = settings.network_latency_s or 0.0
    return Network(settings.network_busbw_gb_s, latency,
                   source=f"what-if: given, not measured here, {1e6 * latency:g} us per hop")


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


def exposed_comm_s(ranks: int, nbytes: float, bucket_bytes: float, busbw_gb_s: float, latency_s: float,
                   hidden_s: float) -> float:
    """The communication a step cannot hide: the all-reduce of all its bytes less what the
    backward pass hides (`hidden_s`), never less than the last bucket's, which DDP reduces only
    once the backward pass has ended."""
    last_bucket = ring_allreduce_s(ranks, min(bucket_bytes, nbytes), busbw_gb_s, latency_s)
    return max(last_bucket, ring_allreduce_s(ranks, nbytes, busbw_gb_s, latency_s) - hidden_s)


def has_breakdown(measured: Measured) -> bool:
    """Whether the runs give the network rule its inputs: the gradient bytes, compute and the
    sync wait at every count."""
    waits = measured.sync_wait_s
    return (measured.allreduce_bytes > 0 and measured.compute_s > 0 and len(waits) == len(measured.gpus)
            and all(math.isfinite(wait) for wait in waits))


def link_at(n: int, measured: Measured, gpus_per_node: int, network: Network | None):
    """(bus bandwidth GB/s, latency s, words) of an all-reduce over `n` GPUs: in the node the
    bandwidth the runs measured, across nodes the probe's or the what-if's; None when unknown."""
    if n <= gpus_per_node:
        if measured.intra_busbw_gb_s > 0:
            return measured.intra_busbw_gb_s, 0.0, f"{measured.intra_busbw_gb_s:.3g} GB/s in the node (measured)"
        return None
    if network is None:
        return None
    return network.busbw_gb_s, network.latency_s, f"{network.busbw_gb_s:.3g} GB/s across nodes ({network.source})"


def exposed_in_tau(measured: Measured, backward_share: float) -> float:
    """The exposed communication already inside the largest count's tau: the breakdown's sync
    comm, else the network rule's own at the in-node bandwidth (0 without one: one process)."""
    if math.isfinite(measured.sync_comm_s):
        return max(0.0, measured.sync_comm_s)
    if measured.intra_busbw_gb_s > 0:
        return exposed_comm_s(measured.gpus[-1], measured.allreduce_bytes, measured.bucket_bytes,
                              measured.intra_busbw_gb_s, 0.0, backward_share * measured.compute_s)
    return 0.0


def network_rules(n: int, measured: Measured, gpus_per_node: int, network: Network | None,
                  backward_share: float) -> dict | None:
    """tau(n) by the network rule and with no overlap at all, from the group's own breakdown:
    tau(last) less the communication exposed in it, plus the sync wait's growth per doubling
    continued, plus the communication exposed at n. None without a breakdown or a bandwidth."""
    link = link_at(n, measured, gpus_per_node, network) if has_breakdown(measured) else None
    if link is None:
        return None
    busbw, latency, words = link
    wait_growth = growth_per_doubling(measured.gpus, measured.sync_wait_s)
    base = (measured.step_time_s[-1] - exposed_in_tau(measured, backward_share)
            + wait_growth * math.log2(n / measured.gpus[-1]))
    exposed = exposed_comm_s(n, measured.allreduce_bytes, measured.bucket_bytes, busbw, latency,
                             backward_share * measured.compute_s)
    whole = ring_allreduce_s(n, measured.allreduce_bytes, busbw, latency)
    return {"network": base + exposed, "no_overlap": base + whole, "exposed_s": exposed, "link": words,
            "wait_growth_s": wait_growth}


def step_time_rules(n: int, measured: Measured, gpus_per_node: int, network: Network | None,
                    backward_share: float = DEFAULTS.backward_share) -> dict:
    """tau(n) under each growth rule: {"flat", "log", "comm"} (s), "network" where the runs give
    its inputs, the point estimate ("point", the larger of log and network, named in
    "point_rule") and what "comm", the band's low end, rests on."""
    share = backward_share
    last_n, last_tau = measured.gpus[-1], measured.step_time_s[-1]
    growth = growth_per_doubling(measured.gpus, measured.step_time_s)
    doublings = math.log2(n / last_n)
    rules = {"flat": last_tau, "log": last_tau + growth * doublings}
    net = network_rules(n, measured, gpus_per_node, network, share)
    if net is not None:
        rules["network"] = net["network"]
        comm, basis = net["no_overlap"], f"all-reduce at {net['link']}, no overlap"
    else:
        comm, basis = no_overlap_without_breakdown(n, measured, gpus_per_node, network)
    if comm is None:
        comm, basis = last_tau + STEEP_FACTOR * growth * doublings, f"{STEEP_FACTOR:g} x the growth per doubling"
    point_rule = "network" if net is not None and net["network"] > rules["log"] else "log"
    point = rules[point_rule]
    rules["comm"] = max(comm, point)
    return {**rules, "point": point, "point_rule": point_rule, "net": net, "comm_basis": basis, "growth_s": growth}


def no_overlap_without_breakdown(n: int, measured: Measured, gpus_per_node: int, network: Network | None):
    """(tau, basis) of the all-reduce with no overlap from the gradient bytes and the in-node bus
    bandwidth alone, less the in-node all-reduce inside tau; (None, None) without them."""
    last_n, last_tau = measured.gpus[-1], measured.step_time_s[-1]
    if not (measured.allreduce_bytes > 0 and measured.intra_busbw_gb_s > 0):
        return None, None
    inside = ring_allreduce_s(last_n, measured.allreduce_bytes, measured.intra_busbw_gb_s)
    if n <= gpus_per_node:
        within = ring_allreduce_s(n, measured.allreduce_bytes, measured.intra_busbw_gb_s)
        return last_tau + within - inside, f"all-reduce at {measured.intra_busbw_gb_s:.3g} GB/s in the node"
    if network is None:
        return None, None
    across = ring_allreduce_s(n, measured.allreduce_bytes, network.busbw_gb_s, network.latency_s)
    return (last_tau + across - inside,
            f"all-reduce at {network.busbw_gb_s:.3g} GB/s across nodes ({network.source}), no overlap")


def overlap_note(measured: Measured, backward_share: float) -> str:
    """What the node's runs say of `backward_share`: '' when the overlap they measured at the
    largest count (1 - sync comm / the all-reduce probe's time) is within OVERLAP_AGREEMENT_PTS of
    the one the share gives there, else the contradiction in words."""
    pure, comm = measured.allreduce_s, measured.sync_comm_s
    if not (pure > 0 and math.isfinite(comm) and measured.compute_s > 0 and measured.allreduce_bytes > 0):
        return ""
    per_bucket = pure / math.ceil(measured.allreduce_bytes / measured.bucket_bytes)
    modelled = max(per_bucket, pure - backward_share * measured.compute_s)
    seen, expected = 100.0 * max(0.0, 1.0 - comm / pure), 100.0 * (1.0 - modelled / pure)
    if abs(seen - expected) <= OVERLAP_AGREEMENT_PTS:
        return ""
    return (f"the runs overlapped {seen:.0f} % of the all-reduce at {measured.gpus[-1]} GPUs where backward_share "
            f"{backward_share:.3g} gives {expected:.0f} %: the measured overlap contradicts the share")


def epoch_time(t0: float, steps: int, tau: float) -> float:
    return t0 + steps * tau


def efficiency_pct(throughput: float, gpus: int, base_throughput: float, base_gpus: int) -> float:
    """Throughput over the baseline's, per GPU added (scaling.csv's definition)."""
    return 100.0 * (throughput / base_throughput) / (gpus / base_gpus)


def predict_model(n: int, measured: Measured, steps_of, gpus_per_node: int, network: Network | None,
                  backward_share: float = DEFAULTS.backward_share) -> dict:
    """The step model's prediction at `n` GPUs; `steps_of(n)` is S(n)."""
    share = backward_share
    t0_values = [v for v in measured.epoch_overhead_s if not math.isnan(v)]
    t0 = float(np.median(t0_values)) if t0_values else 0.0
    steps = steps_of(n)
    if steps < 1:
        return no_prediction(f"{measured.train_images:.0f} images give no full step at {n} GPUs")
    rules = step_time_rules(n, measured, gpus_per_node, network, share)
    batch = n * measured.per_gpu_batch
    times = {rule: epoch_time(t0, steps, rules[rule]) for rule in ("flat", "point", "comm")}
    rates = {rule: batch * steps / seconds for rule, seconds in times.items()}
    base_gpus, base_rate = measured.gpus[0], measured.throughput_img_s[0]
    eff = {rule: efficiency_pct(rate, n, base_rate, base_gpus) for rule, rate in rates.items()}
    low, high = 1.0 - measured.noise, 1.0 + measured.noise
    return {
        "steps_per_epoch": steps, "step_time_s": rules["point"], "epoch_overhead_s": t0,
        "epoch_time_s": times["point"], "epoch_time_low_s": times["flat"] / high, "epoch_time_high_s": times["comm"] / low,
        "throughput_img_s": rates["point"], "throughput_low_img_s": rates["comm"] * low,
        "throughput_high_img_s": rates["flat"] * high,
        "efficiency_pct": eff["point"], "efficiency_low_pct": eff["comm"] * low, "efficiency_high_pct": eff["flat"] * high,
        "time_to_solution_s": measured.epochs * times["point"] if measured.epochs > 0 else math.nan,
        "method": METHOD_NETWORK if rules["point_rule"] == "network" else METHOD_MODEL,
        "limited_by": limit_words(rules, measured),
        "inputs": model_inputs(n, measured, t0, t0_values, steps, rules, gpus_per_node, share, network),
    }


def limit_words(rules: dict, measured: Measured) -> str:
    """What sets the point estimate, in words for findings.md."""
    net = rules["net"]
    if rules["point_rule"] == "network":
        return (f"the network: {net['link'].split(' (')[0]} exposes {1000 * net['exposed_s']:.0f} ms "
                f"of a {1000 * rules['point']:.0f} ms step")
    return (f"the step time's growth: +{1000 * rules['growth_s']:.2f} ms per doubling measured over "
            f"{'/'.join(map(str, measured.gpus))} GPUs")


def model_inputs(n, measured, t0, t0_values, steps, rules, gpus_per_node, share, network) -> str:
    """`inputs` of a step-model row: every number it rests on and which rule set the estimate."""
    taus = "/".join(f"{1000 * tau:.1f}" for tau in measured.step_time_s)
    counts = "/".join(str(g) for g in measured.gpus)
    t0_note = f"t0 {t0:.3f} s (median over {counts} GPUs)" if t0_values else "t0 not measured: taken as 0"
    net = rules["net"]
    if net is None:
        reason = "no step breakdown in the runs" if not has_breakdown(measured) else "no bandwidth across nodes"
        estimate = f"log rule (no network rule: {reason})"
    else:
        other = "network" if rules["point_rule"] == "log" else "log"
        estimate = (f"{rules['point_rule']} rule ({other} rule {1000 * rules[other]:.1f} ms); network rule: "
                    f"{1000 * net['exposed_s']:.1f} ms exposed at {net['link']}, all-reduce of "
                    f"{measured.allreduce_bytes:.0f} bytes in {measured.bucket_bytes / MIB:g} MiB buckets hidden up to "
                    f"backward_share {share:.3g} x compute {1000 * measured.compute_s:.1f} ms, sync wait "
                    f"+{1000 * net['wait_growth_s']:.2f} ms per doubling")
    notes = [note for note in (overlap_note(measured, share), bandwidth_note(network)) if note]
    return (f"point estimate: {estimate}; {t0_note}; tau {taus} ms at {counts} GPUs, "
            f"+{1000 * rules['growth_s']:.2f} ms per doubling; S({n}) = {steps} of {measured.train_images:.0f} images; "
            f"low end: {rules['comm_basis']}; noise +/-{100 * measured.noise:.1f} %; node of {gpus_per_node} GPUs"
            + "".join(f"; {note}" for note in notes))


def bandwidth_note(network: Network | None) -> str:
    """The probe's two bus bandwidths (torch's, used, and nccl-tests') where they differ by more
    than NCCL_TESTS_AGREEMENT."""
    if network is None or not network.nccl_busbw_gb_s > 0:
        return ""
    if abs(network.nccl_busbw_gb_s / network.busbw_gb_s - 1.0) <= NCCL_TESTS_AGREEMENT:
        return ""
    return (f"nccl-tests' all_reduce_perf measured {network.nccl_busbw_gb_s:.3g} GB/s where torch measured "
            f"{network.busbw_gb_s:.3g} GB/s (torch's used)")


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


def predict_count(n: int, measured: Measured, steps_of, gpus_per_node: int, network: Network | None,
                  backward_share: float = DEFAULTS.backward_share) -> dict:
    """The prediction at `n` GPUs by the best method the inputs allow. One measured count gives
    no growth to continue: the step model then needs the network rule's inputs, or its band
    would be the flat rule alone, zero wide."""
    if not all(tau > 0 for tau in measured.step_time_s):
        return predict_amdahl(n, measured)
    share = backward_share
    if len(measured.gpus) < 2 and network_rules(n, measured, gpus_per_node, network, share) is None:
        return no_prediction(f"one measured GPU count ({measured.gpus[0]}) and no network rule: no growth to "
                             "continue, the band would be zero wide")
    return predict_model(n, measured, steps_of, gpus_per_node, network, share)


# ---------------------------------------------------------------------------------------------
# The table


PER_COUNT_COLUMNS = ("step_time_s", "epoch_overhead_s", "throughput_img_s", "allreduce_bytes", "busbw_gb_s",
                     "compute_s", "sync_wait_s", "sync_comm_s", "allreduce_s")
GROUP_COLUMNS = ("dataset_train_images", "train_images", "per_gpu_batch", "epochs", "bucket_cap_mb")
CI_COLUMNS = ("throughput_ci_low_img_s", "throughput_ci_high_img_s")


def _median(values: np.ndarray) -> float:
    """The median of the finite-or-infinite values, NaN when there are none (pandas' skipna median)."""
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else math.nan


def _numeric(rows: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats, NaN where missing or not a number (and all NaN when the table lacks it)."""
    if column not in rows:
        return np.full(len(rows), math.nan)
    values = rows[column]
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "fiu":  # numbers already: as they are
        return values.to_numpy(dtype=float)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)


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
    spreads are computed here once, and each `measured(below)` takes a prefix of them.
    `columns`: run_columns of the group's rows."""

    def __init__(self, columns: dict):
        ok = columns["ok"] & (columns["gpus"] >= 1) & (columns["throughput_img_s"] > 0)
        kept = {column: values[ok] for column, values in columns.items()}
        self.gpus = kept["gpus"]
        self.values = {column: kept[column] for column in GROUP_COLUMNS}
        self.counts = tuple(sorted({int(g) for g in self.gpus}))
        at = [self.gpus == count for count in self.counts]
        self.per_count = {column: tuple(_median(kept[column][mask]) for mask in at) for column in PER_COUNT_COLUMNS}
        low, high = (kept[column] for column in CI_COLUMNS)  # all NaN where runs.csv has no interval
        rates = kept["throughput_img_s"]
        self.problem = out_of_range(kept, self.gpus)
        self.spreads = tuple(count_spread(rates[mask], low[mask], high[mask]) for mask in at)

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
            compute_s=at["compute_s"][-1], sync_comm_s=at["sync_comm_s"][-1], allreduce_s=at["allreduce_s"][-1],
            sync_wait_s=at["sync_wait_s"],
            bucket_bytes=MIB * (group["bucket_cap_mb"] if group["bucket_cap_mb"] > 0 else frameworks.DDP_BUCKET_CAP_MB),
        )


# runs.csv's numbers the prediction reads and what each must be where given (empty is unknown).
RANGES = {"step_time_s": ("a step time > 0 s", lambda v: v > 0),
          "epoch_overhead_s": ("a duration >= 0 s", lambda v: v >= 0),
          "compute_s": ("a duration >= 0 s", lambda v: v >= 0),
          "sync_wait_s": ("a duration >= 0 s", lambda v: v >= 0),
          "sync_comm_s": ("a duration >= 0 s", lambda v: v >= 0),
          "allreduce_s": ("a duration >= 0 s", lambda v: v >= 0),
          "allreduce_bytes": ("a byte count >= 0", lambda v: v >= 0),
          "busbw_gb_s": ("a bus bandwidth > 0 GB/s", lambda v: v > 0)}


# Every column of runs.csv the predictions read.
RUN_COLUMNS = tuple(dict.fromkeys(("gpus", *PER_COUNT_COLUMNS, *GROUP_COLUMNS, *CI_COLUMNS, *RANGES)))


def run_columns(rows: pd.DataFrame) -> dict:
    """The runs' numbers the predictions read, each column as floats once (_numeric), and `ok`:
    which rows are ok runs."""
    columns = {column: _numeric(rows, column) for column in RUN_COLUMNS}
    columns["ok"] = (rows["status"] == "ok").to_numpy()
    return columns


def out_of_range(columns, gpus: np.ndarray) -> str:
    """'' when every number of RANGES the ok runs give ({column: floats}, or their rows) is finite
    and in range, else the first that is not, with its column, value and GPU count: the group is
    then not predicted."""
    for column, (meaning, fits) in RANGES.items():
        if column not in columns:
            continue
        values = np.asarray(columns[column], dtype=float)
        given = ~np.isnan(values)
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(given & ~(np.isfinite(values) & fits(values)))
        if len(bad):
            at = bad[0]
            return (f"runs.csv: {column} = {float(values[at])!r} at {gpus[at]:.0f} GPUs is not {meaning}: "
                    f"no prediction for this group")
    return ""


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
    network = network_of(settings, network)
    columns = run_columns(runs)
    rows = []
    for values, positions in group_positions(runs, keys):
        positions = positions[~np.isin(columns["gpus"][positions], flagged.get(key_tuple(values, keys), []))]
        inputs = GroupInputs({column: array[positions] for column, array in columns.items()})
        everything = inputs.measured()
        if everything is None:
            continue
        node = settings.node_gpus(everything.gpus[-1])
        uneven = uneven_counts(everything.gpus, node)
        if uneven:
            raise ValueError(f"runs.csv: {uneven[0]} GPUs ({group_name(values)}) span nodes but are not a multiple "
                             f"of gpus_per_node={node}")
        asked = settings.predicted_counts(everything.gpus[-1])
        held_out = list(everything.gpus[2:])
        for n in sorted(set(asked) | set(held_out)):
            row = {"gpus": n, "nodes": math.ceil(n / node), **no_prediction(inputs.problem)} if inputs.problem else \
                _row(n, inputs, everything, node, network, values.get("framework"), settings.backward_share)
            rows.append({**values, **row})
    return pd.DataFrame(rows, columns=[*keys, *PREDICTION_COLUMNS])


def group_name(values: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in values.items())


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


def _row(n: int, inputs: GroupInputs, everything: Measured, node: int, network, framework, backward_share) -> dict:
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
    row.update(predict_count(n, measured, _steps_function(measured), node, network, backward_share))
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
