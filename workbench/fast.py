"""Measured CPU twins of ``functional``, with hand-derived backwards (autograd's buffer per op costs more than the
arithmetic). Off: ``fast.disabled()`` or ``WORKBENCH_FAST=0``."""

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
    """``functional``'s plain path inside the block."""
    global ENABLED
    before, ENABLED = ENABLED, False
    try:
        yield
    finally:
        ENABLED = before


def ops() -> ModuleType:
    """This module while ``ENABLED``, else ``functional``."""
    return _THIS if ENABLED else functional


def _wants_grad(x: torch.Tensor) -> bool:
    return x.requires_grad and torch.is_grad_enabled()


class _RMSNorm(torch.autograd.Function):
    """``rstd`` is an output so the backward is itself differentiable."""

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
    """``functional.norm`` in five ops where ``F.rms_norm`` runs ~ten (float32/64 only)."""
    if x.dtype not in (torch.float32, torch.float64):
        return F.rms_norm(x, (x.size(-1),))
    return _RMSNorm.apply(x)[0] if _wants_grad(x) else _RMSNorm.forward(x)[0]


class _ReluSquared(torch.autograd.Function):
    """``y = relu(h)^2``; backward ``2 relu(h) g`` (zero where ``h <= 0``: no mask)."""

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
    """``relu(h)^2``, in place without a gradient (no second (B, T, 4D) buffer)."""
    return _ReluSquared.apply(h) if _wants_grad(h) else F.relu(h, inplace=True).square()


def stored_once(table: torch.Tensor) -> torch.Tensor:
    """``table``, holding an ``exp`` so inductor stores it once instead of inlining cos/sin into each query and key."""
    return torch.where(table.isnan(), table.exp(), table)


def rotary(positions: torch.Tensor, head_dim: int, base: float,
           dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``functional.rotary``, ``stored_once`` when compiled."""
    cos, sin = functional.rotary(positions, head_dim, base, dtype)
    if torch.compiler.is_compiling():
        cos, sin = stored_once(cos), stored_once(sin)
    return cos, sin


def per_head(table: torch.Tensor, heads: int) -> torch.Tensor:
    """Contiguous (T, heads, hd): a broadcast over heads runs ~3x slower on a CPU."""
    return table[:, None, :].expand(table.size(0), heads, table.size(1)).contiguous()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``functional.apply_rotary``, summed in place into buffers no backward reads."""
    if cos.dim() == 2:
        cos, sin = cos[:, None, :], sin[:, None, :]
    swapped = x.roll(x.size(-1) // 2, dims=-1)
    return (x * cos).add_(swapped.mul_(sin))


_THIS = sys.modules[__name__]
