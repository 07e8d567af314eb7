"""A given text scored the way each decoding regime of ``decode.generate`` computes it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from .. import schedules
from ..metrics import per_position_loss
from ..model import GPT
from ..validation import check_tokens
from .interventions import run_logits


def regime_logits(model: GPT, tokens: torch.Tensor, prompt_len: int, regime: str = "standard",
                  prefill_passes: int = 1) -> torch.Tensor:
    """Logits (B, T, V) teacher-forced as ``generate`` computes them; position ``prompt_len - 1 + i`` chooses
    continuation token ``i``."""
    return run_logits(model, tokens, regime=regime, prompt_len=prompt_len, prefill_passes=prefill_passes)


def regime_losses(model: GPT, tokens: torch.Tensor, prompt_len: int, regimes: Sequence[str] = schedules.REGIMES,
                  prefill_passes: int = 1, targets: torch.Tensor | None = None) -> pd.DataFrame:
    """Per-position loss (nats, batch mean) of the continuation under each regime."""
    if not regimes or any(r not in schedules.REGIMES for r in regimes):
        raise ValueError(f"regimes={tuple(regimes)!r}: each must be one of {schedules.REGIMES}")
    check_tokens(model.config.vocab_size, tokens)
    if targets is None:
        targets = F.pad(tokens[:, 1:], (0, 1), value=-1)
    if tuple(targets.shape) != tuple(tokens.shape):
        raise ValueError(f"targets shape {tuple(targets.shape)} != tokens {tuple(tokens.shape)}")
    scored = targets.clone()
    scored[:, : max(prompt_len - 1, 0)] = -1
    rows = []
    for regime in regimes:
        loss = per_position_loss(regime_logits(model, tokens, prompt_len, regime, prefill_passes), scored)
        rows += [{"regime": regime, "position": t, "loss": float(v)} for t, v in enumerate(loss.tolist())
                 if not math.isnan(v)]
    return pd.DataFrame(rows, columns=["regime", "position", "loss"])
