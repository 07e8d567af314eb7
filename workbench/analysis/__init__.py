"""Measurements: activation caches, probes, fixed-point contraction, reasoning-trace lengths.

Every function returns plain data (tensors, pandas DataFrames); ``workbench.plots`` draws them.
"""

from .cache import ActivationCache, run_with_cache

__all__ = ["ActivationCache", "run_with_cache"]
