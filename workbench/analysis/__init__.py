"""Measurements: activation caches, probes, interventions on the memory, contraction, reasoning traces.

Every function returns plain data (tensors, pandas DataFrames); ``workbench.plots`` draws them.
"""

from .cache import ActivationCache, run_with_cache
from .contraction import jacobian_norm, jacobian_power_iteration, memory_trajectory, pass_dynamics, sensitivity
from .interventions import Intervention, feedback_hooks, intervention_effects
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
from .traces import (
    compare_regimes,
    first_decisions,
    line_distribution,
    summarize_traces,
    trace_lengths,
    training_traces,
)

__all__ = ["DEFAULT_CONDITIONS", "ActivationCache", "Intervention", "condition_features", "feedback_hooks", "fit_probe",
           "fold_assignment", "intervention_effects",
           "jacobian_norm", "jacobian_power_iteration", "memory_trajectory", "parse_condition", "pass_dynamics",
           "probe_features", "probe_layers", "random_init_model", "run_with_cache", "sensitivity",
           "summarize_traces", "trace_lengths", "compare_regimes", "line_distribution", "training_traces",
           "first_decisions"]
