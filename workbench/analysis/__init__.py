"""Measurements: activation caches, probes, interventions on the memory, contraction, reasoning traces.

Every function returns plain data (tensors, pandas DataFrames); ``workbench.plots`` draws them.
"""

from .cache import ActivationCache, run_with_cache
from .contraction import jacobian_norm, jacobian_power_iteration, memory_trajectory, pass_dynamics, sensitivity
from .interventions import Intervention, feedback_hooks, intervention_effects
from .probes import (
    DEFAULT_CONDITIONS,
    PROBE_CS,
    condition_features,
    fit_probe,
    fold_assignment,
    parse_condition,
    probe_features,
    probe_layers,
    random_init_model,
    regularisation_path,
)
from .traces import (
    compare_regimes,
    first_decisions,
    line_distribution,
    summarize_traces,
    trace_lengths,
    training_traces,
)

__all__ = ["DEFAULT_CONDITIONS", "PROBE_CS", "ActivationCache", "Intervention", "compare_regimes",
           "condition_features", "feedback_hooks", "first_decisions", "fit_probe", "fold_assignment",
           "intervention_effects", "jacobian_norm", "jacobian_power_iteration", "line_distribution",
           "memory_trajectory", "parse_condition", "pass_dynamics", "probe_features", "probe_layers",
           "random_init_model", "regularisation_path", "run_with_cache", "sensitivity", "summarize_traces",
           "trace_lengths", "training_traces"]
