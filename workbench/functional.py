"""The backbone's parameter-free building blocks, shared by the model and the mechanisms.

- ``norm``: RMSNorm without learnable parameters (every normed state: block inputs, QK-norm, the
  memory, the readout's input);
- ``relu_squared``: the MLP's activation;
- ``rotary`` / ``apply_rotary``: rotary position embeddings at absolute positions;
- ``uniform_init_``: nanochat's matrix init.

They live below both ``model`` and ``mechanisms`` so that neither borrows the other's helpers.

Written as nanochat writes them, for reading, and nothing else: the model runs them through ``fast.ops()``, which
hands out this module, or (the default) ``workbench.fast``'s measured CPU twins of the same values.
"""

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
    """Tables for ``apply_rotary`` at absolute positions: ``cos`` (T, hd) and ``sin`` (T, hd) with the
    sign of the rotation folded into its first half."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=work) / head_dim)
    angles = positions.to(work)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    cos, sin = torch.cat([cos, cos], dim=-1).to(dtype), torch.cat([sin, -sin], dim=-1).to(dtype)
    return cos, sin


def per_head(table: torch.Tensor, heads: int) -> torch.Tensor:
    """A (T, hd) rotary table shaped to multiply queries or keys (B, T, heads, hd): (T, 1, hd), broadcast
    over the heads."""
    return table[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x1, x2) formed by the two halves of the head dimension; x is (B, T, H, hd).

    ``(x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin)``, written as ``x * cos + swap(x) * sin`` with the
    halves swapped and the sign folded into ``sin`` (``rotary``'s tables). The tables are (T, hd) or
    shaped per head by ``per_head``.
    """
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
    """FBT's GLU value path, ``(W_U m) * sigmoid(W_G g)``: the carried state, gated channel-wise by the token.
    The one written both FBT fusions (``mechanisms.FBT`` and the Hugging Face wrapper's) use."""
    return W_U(memory) * torch.sigmoid(W_G(gate_input))


def residual_inject(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor,
                    memory: torch.Tensor | None) -> torch.Tensor:
    """LRT's residual injection ``alpha_l * x + gamma_l * m`` (``memory`` None: a plain position, ``alpha_l * x``),
    shared by ``mechanisms.LRT`` and the Hugging Face wrapper."""
    x = x * alpha
    return x if memory is None else x + gamma * memory
