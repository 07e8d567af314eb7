"""Measurements: activation caches, probes, fixed-point contraction, reasoning-trace lengths.

Every function returns plain data (tensors, pandas DataFrames); ``workbench.plots`` draws them.
"""

from .cache import ActivationCache, run_with_cache
from .contraction import jacobian_norm, jacobian_power_iteration, memory_trajectory, pass_dynamics, sensitivity

__all__ = ["ActivationCache", "jacobian_norm", "jacobian_power_iteration", "memory_trajectory", "pass_dynamics",
           "run_with_cache", "sensitivity"]
