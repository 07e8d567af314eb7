"""The backbone's parameter-free building blocks, shared by the model and the mechanisms.

- ``norm``: RMSNorm without learnable parameters (every normed state: block inputs, QK-norm, the
  memory, the readout's input);
- ``rotary`` / ``apply_rotary``: rotary position embeddings at absolute positions;
- ``uniform_init_``: nanochat's matrix init.

They live below both ``model`` and ``mechanisms`` so that neither borrows the other's helpers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm without learnable parameters."""
    return F.rms_norm(x, (x.size(-1),))


def rotary(positions: torch.Tensor, head_dim: int, base: float,
           dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Tables for ``apply_rotary`` at absolute positions: ``cos`` (T, hd) and ``sin`` (T, hd) with the
    sign of the rotation folded into its first half."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=work) / head_dim)
    angles = positions.to(work)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([cos, cos], dim=-1).to(dtype), torch.cat([sin, -sin], dim=-1).to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x1, x2) formed by the two halves of the head dimension; x is (B, T, H, hd).

    ``(x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin)``, written as ``x * cos + swap(x) * sin``; the
    halves are swapped by ``roll`` (one copy, and a roll back in the backward, where a ``cat`` of two
    slices costs two zero-filled buffers).
    """
    swapped = x.roll(x.size(-1) // 2, dims=-1)
    return x * cos[None, :, None, :] + swapped * sin[None, :, None, :]


def uniform_init_(weight: torch.Tensor) -> None:
    """nanochat's matrix init: uniform with the variance of N(0, 1/fan_in)."""
    bound = math.sqrt(3.0) / math.sqrt(weight.size(1))
    with torch.no_grad():
        weight.uniform_(-bound, bound)
