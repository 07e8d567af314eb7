"""The backbone's measured CPU speed-ups, in one place behind one switch.

``functional`` is the learner's path: RMSNorm, ReLU^2 and rotary embeddings written as nanochat writes them.
The model and the mechanisms take their primitives from ``ops()``, the one place the switch is read: this
module's twins when ``ENABLED`` (the default), ``functional`` otherwise. The twins:

- ``norm`` / ``relu_squared``: hand-derived backwards (autograd ``Function``s). Autograd through the
  composite ops allocates a fresh activation-sized buffer per elementwise op, and on a CPU a fresh
  large buffer costs more than the arithmetic (page faults); these allocate once and work in place.
  Their forwards are the very ops PyTorch runs (bitwise the same values); without a gradient ``norm``
  runs five ops where ``F.rms_norm`` runs about ten (dtype round trips), which is the cost of a
  decoded token's many small norms.
- ``per_head``: the rotary tables laid out per head once per forward, so the products with the
  queries and keys run one long inner loop instead of a broadcast over heads.
- ``apply_rotary``: the rotation summed in place into buffers no backward reads.
- ``rotary``: under ``torch.compile``, the tables marked as costly (``stored_once``) so inductor stores them
  once instead of recomputing a cos and a sin per element of every query and key.

Equal to the plain path: ``tests/invariants/test_fast_path.py`` holds every function here to its plain
twin (bit for bit where the op sequence is the same, float64 gradients otherwise) and whole models to
theirs; ``make bench`` times the plain path beside this one ("... plain path" rows: what it buys).
Turn it off for a block with ``with fast.disabled():``, for a process with ``WORKBENCH_FAST=0``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import torch
import torch.nn.functional as F

from . import functional

ENABLED = os.environ.get("WORKBENCH_FAST", "1") != "0"


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the plain path (``functional``'s own code) inside the block; the switch is restored after."""
    global ENABLED
    before, ENABLED = ENABLED, False
    try:
        yield
    finally:
        ENABLED = before


def ops() -> ModuleType:
    """The primitives the model runs (``norm``, ``relu_squared``, ``rotary``, ``per_head``, ``apply_rotary``):
    this module while ``ENABLED``, ``functional``'s plain forms otherwise. The one place the switch is read."""
    return _THIS if ENABLED else functional


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
    """``functional.norm``'s values through ``_RMSNorm``'s five ops (float32/float64; other dtypes: PyTorch's)."""
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
    """``relu(h)^2``; without a gradient in place (no second (B, T, 4D) buffer)."""
    return _ReluSquared.apply(h) if _wants_grad(h) else F.relu(h, inplace=True).square()


def stored_once(table: torch.Tensor) -> torch.Tensor:
    """``table`` itself (exactly: ``exp(NaN)`` is NaN), marked as costly for the compiler.

    Inductor inlines a cheap pointwise producer into each of its consumers; for the rotary tables that
    means a cos and a sin per element of every query and key (B * heads times per angle), forward and
    backward (about 5 % of a compiled 4x128 training step on a CPU, in inductor's kernel profile). Its
    CPU heuristic stores a reused buffer once when the buffer's expression contains ``exp`` (one of its
    "heavy" ops), so this one does. Only under ``torch.compile``: eager code computes the tables once anyway.
    """
    return torch.where(table.isnan(), table.exp(), table)


def rotary(positions: torch.Tensor, head_dim: int, base: float,
           dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``functional.rotary``'s tables, each ``stored_once`` under ``torch.compile``."""
    cos, sin = functional.rotary(positions, head_dim, base, dtype)
    if torch.compiler.is_compiling():
        cos, sin = stored_once(cos), stored_once(sin)
    return cos, sin


def per_head(table: torch.Tensor, heads: int) -> torch.Tensor:
    """A (T, hd) rotary table laid out as (T, heads, hd), contiguous: done once per forward.

    Broadcast over the heads, a product with x (B, T, H, hd) runs its inner loop over hd elements only
    (about three times slower at hd = 32 on a CPU); laid out per head it runs over T * H * hd.
    """
    return table[:, None, :].expand(table.size(0), heads, table.size(1)).contiguous()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``functional.apply_rotary``'s ops, the products summed in place into buffers no backward reads."""
    if cos.dim() == 2:
        cos, sin = cos[:, None, :], sin[:, None, :]
    swapped = x.roll(x.size(-1) // 2, dims=-1)
    return (x * cos).add_(swapped.mul_(sin))


_THIS = sys.modules[__name__]
