"""Measurements on a model, as plain data (tensors, DataFrames) for ``workbench.plots`` to draw."""

from .cache import ActivationCache, run_with_cache
from .features import DEFAULT_CONDITIONS, condition_features, probe_features
from .fixed_point import pass_dynamics
from .interventions import Intervention, feedback_hooks, intervention_effects
from .jacobians import jacobian_norm, jacobian_power_iteration, sensitivity
from .probes import PROBE_CS, fit_probe, fold_assignment, probe_layers, random_init_model, regularisation_path
from .traces import (
    compare_regimes,
    first_decisions,
    line_distribution,
    summarize_traces,
    trace_lengths,
    training_traces,
)
from .trajectory import memory_trajectory

__all__ = ["DEFAULT_CONDITIONS", "PROBE_CS", "ActivationCache", "Intervention", "compare_regimes",
           "condition_features", "feedback_hooks", "first_decisions", "fit_probe", "fold_assignment",
           "intervention_effects", "jacobian_norm", "jacobian_power_iteration", "line_distribution",
           "memory_trajectory", "pass_dynamics", "probe_features", "probe_layers",
           "random_init_model", "regularisation_path", "run_with_cache", "sensitivity", "summarize_traces",
           "trace_lengths", "training_traces"]
