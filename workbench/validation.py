"""Argument checks shared by the schedules, the decoder and the analysis functions.

Every failure is a ``ValueError`` that names the parameter and the allowed range, so bad input
fails at the call that made it rather than as a shape error deep inside a forward pass.
"""

from __future__ import annotations

import numpy as np
import torch


def check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    """``value`` must be an int (not a bool) in ``[lo, hi]`` (``hi`` None: unbounded)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo or (
            hi is not None and value > hi):
        raise ValueError(f"{name}={value!r} is invalid: must be an int in [{lo}, {'inf' if hi is None else hi}]")


def check_tokens(vocab_size: int, idx: object, name: str = "idx") -> None:
    """``idx`` must be a (B, T) integer tensor with T >= 1 and ids in ``[0, vocab_size)``."""
    if not isinstance(idx, torch.Tensor) or idx.ndim != 2 or idx.size(1) < 1 or idx.is_floating_point():
        shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise ValueError(f"{name} must be a (B, T) tensor of token ids with T >= 1, got {shape}")
    if int(idx.min()) < 0 or int(idx.max()) >= vocab_size:
        raise ValueError(f"{name} holds token ids outside [0, {vocab_size - 1}] (vocab_size={vocab_size})")
