"""Measurements: activation caches, probes, fixed-point contraction, reasoning-trace lengths.

Every function returns plain data (tensors, pandas DataFrames); ``workbench.plots`` draws them.
"""

from .cache import ActivationCache, run_with_cache
from .contraction import jacobian_norm, jacobian_power_iteration, memory_trajectory, pass_dynamics, sensitivity
from .probes import (
    DEFAULT_CONDITIONS,
    condition_features,
    fit_probe,
    fold_assignment,
    parse_condition,
    probe_features,
    probe_layers,
    random_init_model,
)
from .traces import summarize_traces, trace_lengths

__all__ = ["DEFAULT_CONDITIONS", "ActivationCache", "condition_features", "fit_probe", "fold_assignment",
           "jacobian_norm", "jacobian_power_iteration", "memory_trajectory", "parse_condition", "pass_dynamics",
           "probe_features", "probe_layers", "random_init_model", "run_with_cache", "sensitivity",
           "summarize_traces", "trace_lengths"]
