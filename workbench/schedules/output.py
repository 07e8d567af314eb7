"""What a schedule returns, and which positions read memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..metrics import token_losses
from ..validation import fail


@dataclass
class ScheduleOutput:
    """The final estimate plus every pass a schedule made."""

    logits: torch.Tensor  # (B, T, V) final estimate at every position
    pass_logits: list[torch.Tensor]  # one per pass or refinement, over ``pass_positions[i]``
    memory: torch.Tensor  # (B, T, D) the memory each position produced (final estimate)
    pass_positions: list[torch.Tensor | None] = field(default_factory=list)  # None = every position
    loss_weights: list[float] = field(default_factory=list)  # how pass losses combine into the objective
    schedule: str = ""

    def pass_losses(self, targets: torch.Tensor, reduction: str = "mean",
                    normaliser: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each pass's cross-entropy; ``normaliser`` is the global batch's, so micro-batches sum to one objective."""
        if reduction not in ("mean", "sum"):
            fail("reduction", reduction, "must be 'mean' or 'sum'")
        normaliser = targets if normaliser is None else normaliser
        losses = []
        for logits, pos in zip(self.pass_logits, self.pass_positions):
            total = token_losses(logits, targets if pos is None else targets[:, pos]).sum()
            if reduction == "mean":
                counted = normaliser if pos is None else normaliser[:, pos.to(normaliser.device)]
                total = total / counted.ge(0).sum().clamp(min=1).to(total.device)
            losses.append(total)
        return losses

    def objective(self, pass_losses: list[torch.Tensor]) -> torch.Tensor:
        """The pass losses weighted by ``loss_weights``."""
        return sum(w * loss for w, loss in zip(self.loss_weights, pass_losses))

    def loss(self, targets: torch.Tensor, normaliser: torch.Tensor | None = None) -> torch.Tensor:
        """The training objective."""
        return self.objective(self.pass_losses(targets, normaliser=normaliser))


def shift_right(memory: torch.Tensor) -> torch.Tensor:
    """``m_{t-1}`` aligned with position t; position 0 reads zeros."""
    return F.pad(memory[:, :-1], (0, 0, 1, 0))


def _invalid_prefix(plain_prefix: object) -> str:
    """A bad ``plain_prefix``'s message, composed only on failure: an f-string breaks a compiled graph."""
    return (f"plain_prefix={plain_prefix!r} is invalid: must be an int >= 0 or a (B,) integer tensor of them "
            "(multipass: also (passes - 1, B))")


def feedback_mask(batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """(B, T) bool: positions that read memory; ``plain_prefix`` is checked without a device sync."""
    positions = torch.arange(seq_len, device=device).expand(batch, seq_len)
    if not isinstance(plain_prefix, torch.Tensor):
        if isinstance(plain_prefix, bool) or not isinstance(plain_prefix, (int, np.integer)) or plain_prefix < 0:
            raise ValueError(_invalid_prefix(plain_prefix))
        return positions >= max(int(plain_prefix), 1)
    if plain_prefix.is_floating_point() or plain_prefix.dtype == torch.bool or plain_prefix.ndim > 1:
        raise ValueError(_invalid_prefix(plain_prefix))
    prefix = plain_prefix.to(device=device)
    if not torch.compiler.is_compiling():
        if plain_prefix.device.type == "cpu" and bool((plain_prefix < 0).any()):
            raise ValueError(_invalid_prefix(plain_prefix))
        if prefix.device.type not in ("cpu", "meta"):
            # no values in this message: the repr of a device tensor would copy it to the host, a sync per call
            torch._assert_async((prefix >= 0).all(), "plain_prefix is invalid: must be >= 0")
    return positions >= prefix.clamp(min=1).reshape(-1, 1)


def pass_masks(batch: int, seq_len: int, plain_prefix: int | torch.Tensor, passes: int | None,
               device: torch.device | str | None = None) -> Callable[[int], torch.Tensor]:
    """Pass k's feedback mask (k = 0 for pass 1); a (passes - 1, B) ``plain_prefix`` gives each reading pass its own."""
    if not (isinstance(plain_prefix, torch.Tensor) and plain_prefix.ndim == 2):
        mask = feedback_mask(batch, seq_len, plain_prefix, device)
        return lambda k: mask
    rows = None if passes is None else max(passes - 1, 0)
    if rows is None or tuple(plain_prefix.shape) != (rows, batch):
        raise ValueError(f"plain_prefix of shape {tuple(plain_prefix.shape)} is invalid: must be "
                         f"({'passes - 1' if rows is None else rows}, {batch})"
                         + (" with finite passes" if rows is None else ""))
    masks = [feedback_mask(batch, seq_len, row, device) for row in plain_prefix]
    masks.insert(0, masks[0] if masks else feedback_mask(batch, seq_len, 0, device))
    return masks.__getitem__

