"""Metrics over logits and ``-1``-masked targets, summed in float64 so that batching does not change them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _flat_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(N, V) float32 logits (float64 kept for exactness tests); never bf16."""
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match targets {tuple(targets.shape)}")
    flat = logits.reshape(-1, logits.shape[-1])
    return flat if flat.dtype == torch.float64 else flat.float()


def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, T) cross-entropy in nats at every position; 0 where the target is -1."""
    losses = F.cross_entropy(_flat_logits(logits, targets), targets.reshape(-1), ignore_index=-1, reduction="none")
    return losses.view(targets.shape)


def mean_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The differentiable training loss."""
    return F.cross_entropy(_flat_logits(logits, targets), targets.reshape(-1), ignore_index=-1)


def bits_per_byte(logits: torch.Tensor, targets: torch.Tensor,
                  token_bytes: torch.Tensor | None = None) -> float:
    """Loss per target byte in bits; ``token_bytes`` (vocab,): byte lengths, default 1 (zero-byte tokens skipped)."""
    mask = targets >= 0
    losses = token_losses(logits, targets).double()
    if token_bytes is None:
        n_bytes = int(mask.sum())
    else:
        per_target = token_bytes.to(targets.device)[targets.clamp(min=0)] * mask
        mask = per_target > 0
        n_bytes = int(per_target.sum())
    if n_bytes == 0:
        raise ValueError("bits_per_byte: no target carries a byte")
    return float(losses[mask].sum()) / (math.log(2) * n_bytes)


def per_position_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(T,) mean loss in nats per position over the examples with a target there; NaN where none."""
    mask = (targets >= 0).double()
    total = (token_losses(logits, targets).double() * mask).sum(0)
    count = mask.sum(0)
    return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))


def answer_accuracy(logits: torch.Tensor, targets: torch.Tensor, start: torch.Tensor | None = None) -> float:
    """Teacher-forced exact match of the answer span (targets from ``start`` on); examples without one skipped."""
    mask = targets >= 0
    if start is not None:
        positions = torch.arange(targets.shape[1], device=targets.device)
        mask = mask & (positions[None, :] >= start.to(targets.device)[:, None])
    wrong = ((logits.argmax(-1) != targets) & mask).any(1)
    scored = mask.any(1)
    if not scored.any():
        raise ValueError("answer_accuracy: no example has an answer target")
    return float((~wrong & scored).sum() / scored.sum())
