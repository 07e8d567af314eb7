"""A given text scored the way each decoding regime of ``decode.generate`` computes it: teacher-forced logits
(``regime_logits``) and per-position losses on the same weights (``regime_losses``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from .. import schedules
from ..metrics import per_position_loss
from ..model import GPT, eval_mode
from ..validation import check_tokens
from .interventions import run_schedule


@torch.no_grad()
def regime_logits(model: GPT, tokens: torch.Tensor, prompt_len: int, regime: str = "standard",
                  prefill_passes: int = 1) -> torch.Tensor:
    """Logits (B, T, V) of ``tokens`` teacher-forced the way ``generate(prompt, regime=...)`` computes them.

    The first ``prompt_len`` tokens are the prompt, the rest a continuation fed in as if generated. Position
    ``prompt_len - 1 + i`` holds the logits that choose continuation token ``i``, so on a greedy continuation they
    equal ``generate(..., return_logits=True)``'s."""
    check_tokens(model.config.vocab_size, tokens)
    value = run_schedule(regime=regime, prompt_len=prompt_len, prefill_passes=prefill_passes, T=tokens.size(1))
    with eval_mode(model):
        return value.run(model, tokens).logits


def regime_losses(model: GPT, tokens: torch.Tensor, prompt_len: int, regimes: Sequence[str] = schedules.REGIMES,
                  prefill_passes: int = 1, targets: torch.Tensor | None = None) -> pd.DataFrame:
    """Per-position next-token loss (nats, batch mean) of a continuation under each regime, scored from
    ``prompt_len - 1`` on (the predictions of continuation tokens)."""
    if not regimes or any(r not in schedules.REGIMES for r in regimes):
        raise ValueError(f"regimes={tuple(regimes)!r} is invalid: each must be one of {schedules.REGIMES}")
    check_tokens(model.config.vocab_size, tokens)
    if targets is None:
        targets = F.pad(tokens[:, 1:], (0, 1), value=-1)
    if tuple(targets.shape) != tuple(tokens.shape):
        raise ValueError(f"targets must have the shape of tokens {tuple(tokens.shape)}, got {tuple(targets.shape)}")
    scored = targets.clone()
    scored[:, : max(prompt_len - 1, 0)] = -1
    rows = []
    for regime in regimes:
        loss = per_position_loss(regime_logits(model, tokens, prompt_len, regime, prefill_passes), scored)
        rows += [{"regime": regime, "position": t, "loss": float(v)} for t, v in enumerate(loss.tolist())
                 if not math.isnan(v)]
    return pd.DataFrame(rows, columns=["regime", "position", "loss"])
