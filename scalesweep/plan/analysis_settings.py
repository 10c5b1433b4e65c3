"""The analysis's settings as one object: the sweet spot's intents (efficiency floor, GPU-hour
budget, greenest time bound, whether superlinear counts may be chosen) and the epoch budget the
projected times, GPU-hours and energy stand for.

Their defaults are the config schema's (workflow/schemas/config.schema.yaml, section `analysis`),
written nowhere else: the workflow builds the object once from the config's `analysis:` and
`cluster:` sections (`from_config`, workflow/rules/common.smk), `python -m scalesweep analyze` from
its options (`from_options`), and the tables, the pipeline and the failure path pass it on whole.
It sits in plan/, below both its readers: the plan (the preview's GPU-hours the prediction saves,
whether the sweep runs the network probe) and the analysis (the tables, the predictions).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from scalesweep.plan.checks import link_problem, uneven_counts
from scalesweep.plan.config import section_defaults

# The config's name of a setting where it differs from the field's (the tables rule's params,
# which the report's captions read, are the fields).
CONFIG_KEYS = {"efficiency_floor": "efficiency_floor_pct"}

@dataclasses.dataclass(frozen=True)
class AnalysisSettings:
    efficiency_floor: float  # %: sweet spot 'efficient'
    gpu_hour_budget: float | None  # sweet spot 'budget'; None: no budget
    epoch_budget: float  # training epochs the projections stand for
    greenest_time_bound_s: float | None  # sweet spot 'greenest'; None: no bound
    allow_superlinear: bool
    # The prediction (analysis/predict.py): the GPU counts to predict (None: predicted_counts) and
    # a node's GPUs, the analysis section's else the cluster section's (None: node_gpus).
    predict_gpus: tuple | None
    gpus_per_node: int | None
    # The share of a step's compute its communication can hide behind (the backward pass's).
    backward_share: float
    # A what-if network across nodes (analysis.network, --network-busbw): GB/s and s, or None
    # (the network probe's, if any).
    network_busbw_gb_s: float | None
    network_latency_s: float | None

    def __post_init__(self):
        if self.predict_gpus is not None:
            object.__setattr__(self, "predict_gpus", tuple(self.predict_gpus))
            if not self.predict_gpus or not all(isinstance(n, int) and n >= 1 for n in self.predict_gpus):
                raise ValueError(f"predict_gpus must be GPU counts >= 1, got {self.predict_gpus!r}")
        if self.gpus_per_node is not None and not (isinstance(self.gpus_per_node, int) and self.gpus_per_node >= 1):
            raise ValueError(f"gpus_per_node must be a count >= 1 or None, got {self.gpus_per_node!r}")
        self._check_prediction_inputs()
        for name, unit in (("gpu_hour_budget", "GPU-hours or None"), ("epoch_budget", "epochs"),
                           ("greenest_time_bound_s", "seconds or None")):
            value = getattr(self, name)
            if not (value is None and "None" in unit) and not (value is not None and value > 0):
                raise ValueError(f"{name} must be > 0 {unit}, got {value!r}")

    def _check_prediction_inputs(self):
        """The prediction's own settings, each refused with its value (analysis.<key>)."""
        share = self.backward_share
        if not (isinstance(share, (int, float)) and math.isfinite(share) and 0 <= share <= 1):
            raise ValueError(f"backward_share must be a share in [0, 1], got {share!r}")
        uneven = uneven_counts(self.predict_gpus or (), self.gpus_per_node)
        if uneven:
            raise ValueError(f"predict_gpus {uneven[0]} spans nodes but is not a multiple of "
                             f"gpus_per_node={self.gpus_per_node}")
        if self.network_busbw_gb_s is None:
            if self.network_latency_s is not None:
                raise ValueError("network latency given without a bus bandwidth (network busbw_gb_s)")
            return
        problem = link_problem(self.network_busbw_gb_s, self.network_latency_s or 0.0)
        if problem:
            raise ValueError(f"network {problem}")

    @classmethod
    def from_config(cls, analysis: Mapping | None = None, cluster: Mapping | None = None) -> AnalysisSettings:
        """From a config's `analysis:` section; a setting it leaves out takes the schema's default.
        A node's GPUs, unless the section says, are the `cluster:` section's."""
        given = {**section_defaults("analysis"), **(analysis or {})}
        if given.get("gpus_per_node") is None and cluster:
            given["gpus_per_node"] = cluster.get("gpus_per_node")
        network = given.pop("network", None) or {}
        given["network_busbw_gb_s"] = network.get("busbw_gb_s")
        latency_us = network.get("latency_us")
        given["network_latency_s"] = None if latency_us is None else latency_us / 1e6
        return cls(**{field.name: given[CONFIG_KEYS.get(field.name, field.name)]
                      for field in dataclasses.fields(cls)})

    @classmethod
    def from_options(cls, **options) -> AnalysisSettings:
        """From command-line options by field name; one not given (None) takes the schema's default."""
        return dataclasses.replace(cls.from_config(), **{name: value for name, value in options.items()
                                                         if value is not None})

    def predicted_counts(self, largest_measured: int) -> tuple:
        """The GPU counts to predict: the config's (predict_gpus), else the next two doublings
        beyond the largest measured count."""
        return self.predict_gpus or (2 * largest_measured, 4 * largest_measured)

    def node_gpus(self, largest_measured: int | None = None) -> int | None:
        """A node's GPUs, where a prediction starts to pay for the network: the analysis
        section's, else the cluster section's (from_config), else the largest measured count
        (None before anything is measured)."""
        return self.gpus_per_node or largest_measured

    def as_params(self) -> dict:
        """The settings by field name: a rule's params (a changed setting reruns the rule)."""
        return dataclasses.asdict(self)


DEFAULTS = AnalysisSettings.from_config()
