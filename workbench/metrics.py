"""Metrics over logits and ``-1``-masked targets: bits per byte, per-position loss, answer accuracy.

Losses are summed in float64 before dividing, so a metric over many batches does not depend on how the data was batched.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _flat_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(N, V) logits in float32 (float64 kept, for the exactness tests); never bf16."""
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match targets {tuple(targets.shape)}")
    flat = logits.reshape(-1, logits.shape[-1])
    return flat if flat.dtype == torch.float64 else flat.float()


def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, T) cross-entropy in nats at every position; 0 where the target is -1."""
    losses = F.cross_entropy(_flat_logits(logits, targets), targets.reshape(-1), ignore_index=-1, reduction="none")
    return losses.view(targets.shape)


def mean_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the targets that are not -1: the differentiable training loss."""
    return F.cross_entropy(_flat_logits(logits, targets), targets.reshape(-1), ignore_index=-1)


def bits_per_byte(logits: torch.Tensor, targets: torch.Tensor,
                  token_bytes: torch.Tensor | None = None) -> float:
    """Total loss in bits divided by the bytes the targets stand for.

    ``token_bytes`` (vocab,) gives each token's byte length; zero-byte targets (special tokens) count in neither sum.
    Without it every target is one byte."""
    mask = targets >= 0
    losses = token_losses(logits, targets).double()
    if token_bytes is None:
        n_bytes = int(mask.sum())
    else:
        per_target = token_bytes.to(targets.device)[targets.clamp(min=0)] * mask
        mask = per_target > 0
        n_bytes = int(per_target.sum())
    if n_bytes == 0:
        raise ValueError("bits_per_byte: no target carries a byte (every target is -1 or a special token)")
    return float(losses[mask].sum()) / (math.log(2) * n_bytes)


def per_position_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(T,) mean loss in nats at each position over the examples with a target there; NaN where none."""
    mask = (targets >= 0).double()
    total = (token_losses(logits, targets).double() * mask).sum(0)
    count = mask.sum(0)
    return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))


def answer_accuracy(logits: torch.Tensor, targets: torch.Tensor, start: torch.Tensor | None = None) -> float:
    """Fraction of examples whose every target from ``start`` on is the argmax: teacher-forced exact match of the answer
    span. Examples with no target there are skipped."""
    mask = targets >= 0
    if start is not None:
        positions = torch.arange(targets.shape[1], device=targets.device)
        mask = mask & (positions[None, :] >= start.to(targets.device)[:, None])
    wrong = ((logits.argmax(-1) != targets) & mask).any(1)
    scored = mask.any(1)
    if not scored.any():
        raise ValueError("answer_accuracy: no example has an answer target")
    return float((~wrong & scored).sum() / scored.sum())
