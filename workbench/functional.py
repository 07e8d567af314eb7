"""The backbone's parameter-free building blocks, as nanochat writes them, for reading (``fast`` has CPU twins)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm without learnable parameters: ``x / sqrt(mean(x^2) + eps)`` over the last dimension."""
    return F.rms_norm(x, (x.size(-1),))


def relu_squared(h: torch.Tensor) -> torch.Tensor:
    """The MLP's activation ``relu(h)^2``."""
    return F.relu(h).square()


def rotary(positions: torch.Tensor, head_dim: int, base: float,
           dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos``, ``sin`` (T, hd) at absolute positions, the rotation's sign folded into ``sin``'s first half."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=work) / head_dim)
    angles = positions.to(work)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    cos, sin = torch.cat([cos, cos], dim=-1).to(dtype), torch.cat([sin, -sin], dim=-1).to(dtype)
    return cos, sin


def per_head(table: torch.Tensor, heads: int) -> torch.Tensor:
    """(T, hd) -> (T, 1, hd), broadcast over the heads."""
    return table[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the halves of x (B, T, H, hd): ``(x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin)``."""
    if cos.dim() == 2:
        cos, sin = cos[:, None, :], sin[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([x2, x1], dim=-1) * sin


def uniform_init_(weight: torch.Tensor) -> None:
    """nanochat's matrix init: uniform with the variance of N(0, 1/fan_in)."""
    bound = math.sqrt(3.0) / math.sqrt(weight.size(1))
    with torch.no_grad():
        weight.uniform_(-bound, bound)


def glu_state(memory: torch.Tensor, gate_input: torch.Tensor, W_U: torch.nn.Module,
              W_G: torch.nn.Module) -> torch.Tensor:
    """FBT's GLU value path ``(W_U m) * sigmoid(W_G g)`` (also the HF wrapper's)."""
    return W_U(memory) * torch.sigmoid(W_G(gate_input))


def residual_inject(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor,
                    memory: torch.Tensor | None) -> torch.Tensor:
    """LRT's residual injection (no memory: ``alpha_l * x``); also the HF wrapper's."""
    x = x * alpha
    return x if memory is None else x + gamma * memory
