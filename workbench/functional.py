"""The backbone's parameter-free building blocks, shared by the model and the mechanisms.

- ``norm``: RMSNorm without learnable parameters (every normed state: block inputs, QK-norm, the
  memory, the readout's input);
- ``relu_squared``: the MLP's activation;
- ``rotary`` / ``apply_rotary``: rotary position embeddings at absolute positions;
- ``uniform_init_``: nanochat's matrix init.

They live below both ``model`` and ``mechanisms`` so that neither borrows the other's helpers.

``norm`` and ``relu_squared`` differentiate through hand-derived backwards (autograd
``Function``s) when a gradient is wanted: autograd through their composite ops allocates a fresh
activation-sized buffer per elementwise op, and on a CPU a fresh large buffer costs more than the
arithmetic (page faults). The hand-written ones allocate once and work in place. Their forwards are
the very ops PyTorch runs (bitwise the same values), and without a gradient they call PyTorch directly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _wants_grad(x: torch.Tensor) -> bool:
    """Whether autograd will differentiate through ``x`` here (only then is a hand-derived backward used)."""
    return x.requires_grad and torch.is_grad_enabled()


class _RMSNorm(torch.autograd.Function):
    """``y = x * rstd``, ``rstd = (mean(x^2) + eps)^-1/2``; backward ``rstd * (g - y * mean(g * y))``.

    The forward is ``F.rms_norm``'s own op sequence for float32/float64 (bitwise its result), keeping
    ``rstd``; it is an output, so the backward is itself differentiable (the analyses take vjps of vjps)."""

    @staticmethod
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rstd = x.pow(2).mean(-1, keepdim=True).add_(torch.finfo(x.dtype).eps).rsqrt()
        return x * rstd, rstd

    @staticmethod
    def setup_context(ctx, inputs: tuple[torch.Tensor], output: tuple[torch.Tensor, torch.Tensor]) -> None:
        ctx.save_for_backward(*output)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, g: torch.Tensor | None, g_rstd: torch.Tensor | None) -> torch.Tensor | None:
        y, rstd = ctx.saved_tensors
        dx = None
        if g is not None:
            along = (g * y).mean(-1, keepdim=True)
            if torch.is_grad_enabled():  # this backward is differentiated in turn: nothing in place
                dx = (g - y * along) * rstd
            else:  # the same values, one buffer
                dx = (y * along).neg_().add_(g).mul_(rstd)
        if g_rstd is not None:  # d rstd / dx = -rstd^2 y / D
            d_rstd = y * (g_rstd * rstd * rstd / -y.size(-1))
            dx = d_rstd if dx is None else dx + d_rstd
        return dx


def norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm without learnable parameters.

    float32/float64 run ``_RMSNorm``'s five ops with or without a gradient: ``F.rms_norm`` computes the
    same values (bitwise) through about twice as many ops on a CPU (dtype round trips), and a decoded
    token runs four norms per block, on tensors so small that the op count is the cost."""
    if x.dtype not in (torch.float32, torch.float64):
        return F.rms_norm(x, (x.size(-1),))
    return _RMSNorm.apply(x)[0] if _wants_grad(x) else _RMSNorm.forward(x)[0]


class _ReluSquared(torch.autograd.Function):
    """``y = relu(h)^2``; backward ``2 relu(h) g`` (zero where ``h <= 0``, so no separate mask)."""

    @staticmethod
    def forward(h: torch.Tensor) -> torch.Tensor:
        return torch.relu(h).square_()

    @staticmethod
    def setup_context(ctx, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        (h,) = inputs
        ctx.save_for_backward(h)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        (h,) = ctx.saved_tensors
        r = torch.relu(h)
        if torch.is_grad_enabled():  # this backward is differentiated in turn: nothing in place
            return 2.0 * r * g
        return r.mul_(g).mul_(2.0)


def relu_squared(h: torch.Tensor) -> torch.Tensor:
    """The MLP's activation ``relu(h)^2``; without a gradient, in place (no second (B, T, 4D) buffer)."""
    return _ReluSquared.apply(h) if _wants_grad(h) else F.relu(h, inplace=True).square()


def rotary(positions: torch.Tensor, head_dim: int, base: float,
           dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Tables for ``apply_rotary`` at absolute positions: ``cos`` (T, hd) and ``sin`` (T, hd) with the
    sign of the rotation folded into its first half."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=work) / head_dim)
    angles = positions.to(work)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    cos, sin = torch.cat([cos, cos], dim=-1).to(dtype), torch.cat([sin, -sin], dim=-1).to(dtype)
    if torch.compiler.is_compiling():
        cos, sin = _stored_once(cos), _stored_once(sin)
    return cos, sin


def _stored_once(table: torch.Tensor) -> torch.Tensor:
    """``table`` itself (exactly: ``exp(NaN)`` is NaN), marked as costly for the compiler.

    Inductor inlines a cheap pointwise producer into each of its consumers; for the rotary tables that
    means a cos and a sin per element of every query and key (B * heads times per angle), forward and
    backward (about 5 % of a compiled 4x128 training step on a CPU, in inductor's kernel profile). Its
    CPU heuristic stores a reused buffer once when the buffer's expression contains ``exp`` (one of its
    "heavy" ops), so this one does. Only under ``torch.compile``: eager code computes the tables once anyway.
    """
    return torch.where(table.isnan(), table.exp(), table)


def per_head(table: torch.Tensor, heads: int) -> torch.Tensor:
    """A (T, hd) rotary table laid out as (T, heads, hd), contiguous: done once per forward.

    Broadcast over the heads, a product with x (B, T, H, hd) runs its inner loop over hd elements only
    (about three times slower at hd = 32 on a CPU); laid out per head it runs over T * H * hd.
    """
    return table[:, None, :].expand(table.size(0), heads, table.size(1)).contiguous()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x1, x2) formed by the two halves of the head dimension; x is (B, T, H, hd).

    ``(x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin)``, written as ``x * cos + swap(x) * sin``; the
    halves are swapped by ``roll`` (one copy, and a roll back in the backward, where a ``cat`` of two
    slices costs two zero-filled buffers); the products are summed in place, into buffers no backward
    reads (a fresh activation-sized buffer costs more than the arithmetic on a CPU). The tables are
    ``rotary``'s (T, hd), or laid out per head (T, H, hd) by ``per_head`` (faster products).
    """
    if cos.dim() == 2:
        cos, sin = cos[:, None, :], sin[:, None, :]
    swapped = x.roll(x.size(-1) // 2, dims=-1)
    return (x * cos).add_(swapped.mul_(sin))


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
