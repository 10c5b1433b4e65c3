"""The comparison of two sweeps in words (`summary.txt`, the lines `scalesweep compare` prints):
the sides, the verdict counts, the changed configurations, the run-to-run spread and the
provenance that differs (scalesweep/history/compare.py builds the table these lines tell).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalesweep.analysis.intervals import repeats_needed
from scalesweep.report.compare_figure import (
    FASTER,
    SAME,
    SLOWER,
    UNKNOWN,
    UNKNOWN_NO_REPEATS,
    config_label,
    level_text,
)
from scalesweep.tidy import provenance

# Provenance compared between the sides; a start time or load average always differs.
DIFF_FIELDS = tuple(c for c in provenance.PROVENANCE_COLUMNS if c not in provenance.UNCOMPARED)


def nothing_in_common(facts: dict, baseline: str, candidate: str) -> str:
    """Why two sides with no configuration in both cannot be compared, with one configuration
    of each (a table of nothing would read as 'no change')."""
    keys = facts["keys"]

    def side(name, configs):
        example = f", e.g. {config_label(dict(zip(keys, configs[0])), keys)}" if configs else ""
        return f"{name} {len(configs)}{example}"

    notes = "".join(f"; {note}" for note in facts["notes"])
    return (f"{baseline} and {candidate} have no configuration in common ("
            f"{side('baseline', facts['only_baseline'])}; {side('candidate', facts['only_candidate'])}"
            f"{notes}): a configuration is its axes ({', '.join(keys)}), compared only where both ran it")


def comparison_summary(table: pd.DataFrame, facts: dict, baseline, candidate) -> str:
    """The short text report: sides, verdict counts, the changed configurations, provenance."""
    keys = facts["keys"]
    lines = [_side_line("baseline", baseline), _side_line("candidate", candidate),
             f"configurations in both: {len(table)} (only in the baseline: "
             f"{len(facts['only_baseline'])}, only in the candidate: {len(facts['only_candidate'])})",
             *(f"note: {note}" for note in facts["notes"])]
    lines.append(
        f"throughput ratio = candidate / baseline; {level_text(facts['confidence'])} intervals per "
        f"configuration; verdicts at the family-wise {level_text(facts['confidence'])} level (Bonferroni "
        f"over {facts['m']} configurations with an interval: each at {level_text(facts['adjusted_level'])})")
    counts = table["verdict"].value_counts()
    unknown = counts.get(UNKNOWN, 0) + counts.get(UNKNOWN_NO_REPEATS, 0)
    lines.append("verdicts: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in (SLOWER, FASTER, SAME))
                 + f", {unknown} {UNKNOWN}" + (f" ({counts[UNKNOWN_NO_REPEATS]} for want of repeats)"
                                               if UNKNOWN_NO_REPEATS in counts else ""))
    methods = table["ci_method"].value_counts()
    lines.append("intervals from: " + ", ".join(f"{m} ({n})" for m, n in methods.items()))
    lines += spread_lines(facts["spread"], len(table))
    for name in (SLOWER, FASTER, UNKNOWN, UNKNOWN_NO_REPEATS):
        chosen = table[table["verdict"] == name]
        if len(chosen):
            lines.append(f"{name}:")
            lines += [f"  {_row_line(row, keys)}" for _, row in chosen.iterrows()]
    lines += provenance_lines(facts["provenance"])
    return "\n".join(lines) + "\n"


def spread_lines(spread: dict, m: int) -> list[str]:
    """The run-to-run spread behind single runs' intervals, and what it takes to see 5 %."""
    lines = []
    for name, (variance, df) in sorted(spread.items()):
        lines.append(f"run-to-run spread on {name or 'unknown hardware'}: {100 * math.sqrt(variance):.1f} % "
                     f"(sd of log throughput, pooled repeats, df {df:g}); a 5 % change needs about "
                     f"{repeats_needed(variance, m)} repeats a side to be found (80 % power, "
                     f"family-wise over {m})")
    return lines


def _side_line(name: str, side) -> str:
    sweeps = side.sweeps
    shown = ", ".join(sweeps[:3]) + (f" (+{len(sweeps) - 3} more)" if len(sweeps) > 3 else "")
    return f"{name}: {side.label} ({len(side.runs)} runs" + (f"; sweeps {shown})" if sweeps else ")")


def _row_line(row, keys) -> str:
    line = f"{config_label(row, keys)}: "
    if not np.isfinite(row["ratio"]):
        return line + (row["note"] or "no ratio")
    line += f"throughput x{row['ratio']:.3f}"
    if np.isfinite(row["ratio_ci_low"]):
        line += f" [{row['ratio_ci_low']:.3f}, {row['ratio_ci_high']:.3f}]"
    line += f" ({row['change_pct']:+.1f} %, {row['ci_method']}"
    line += f", n {row['n_baseline']}/{row['n_candidate']})"
    return line + (f"; {row['note']}" if row["note"] else "")


def provenance_lines(diff: dict, shown: int = 3) -> list[str]:
    if not diff:
        return [f"provenance: no field differs ({', '.join(DIFF_FIELDS)})"]
    lines = ["provenance that differs (baseline -> candidate):"]
    for name, (base, cand) in diff.items():
        lines.append(f"  {name}: {_values(base, shown)} -> {_values(cand, shown)}")
    return lines


def _values(values: tuple, shown: int) -> str:
    if not values:
        return "(none)"
    text = ", ".join(values[:shown])
    return text + (f" (+{len(values) - shown} more)" if len(values) > shown else "")
