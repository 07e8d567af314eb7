"""Evaluation on a fixed batch, per example so that two models can be compared *paired*, with an interval."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from . import schedules
from .metrics import token_losses
from .model import GPT, eval_mode
from .stats import bootstrap
from .tasks.base import Batch


@torch.no_grad()
def per_example_metrics(model: GPT, batch: Batch, schedule: str | schedules.Schedule = "single",
                        batch_size: int = 64, plain_prefix: int = 0) -> pd.DataFrame:
    """One row per example (``answer_correct``: every target right); eval mode (no FBT jitter), mode restored."""
    value = schedules.parse(schedule)
    rows = []
    device = next(model.parameters()).device
    with eval_mode(model):
        for start in range(0, batch.tokens.size(0), batch_size):
            tokens = batch.tokens[start:start + batch_size].to(device)
            targets = batch.targets[start:start + batch_size].to(device)
            logits = value.run(model, tokens, plain_prefix).logits
            valid = targets >= 0
            nats = token_losses(logits, targets).double().sum(1)
            hits = ((logits.argmax(-1) == targets) & valid).sum(1)
            count = valid.sum(1)
            rows.append(pd.DataFrame({"nats": nats.cpu().numpy(), "targets": count.cpu().numpy(),
                                      "correct": hits.cpu().numpy()}))
    frame = pd.concat(rows, ignore_index=True)
    frame.insert(0, "example", np.arange(len(frame)))
    frame["loss"] = frame["nats"] / frame["targets"].clip(lower=1)
    frame["accuracy"] = frame["correct"] / frame["targets"].clip(lower=1)
    frame["answer_correct"] = frame["correct"] == frame["targets"]
    return frame


def summarize(per_example: pd.DataFrame, bytes_per_token: float | None = None) -> dict[str, float]:
    """Totals over examples; with ``bytes_per_token`` (text: no answer) ``bpb`` is per byte, else per token."""
    targets = float(per_example["targets"].sum())
    loss = float(per_example["nats"].sum()) / max(targets, 1.0)
    summary = {"loss": loss, "bpb": loss / math.log(2) / (1.0 if bytes_per_token is None else bytes_per_token),
               "accuracy": float(per_example["correct"].sum()) / max(targets, 1.0)}
    if bytes_per_token is None:
        summary["answer_accuracy"] = float(per_example["answer_correct"].mean())
    return summary


def paired_difference(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0,
                      level: float = 0.95) -> dict[str, float]:
    """Mean of ``b - a`` over paired examples with a bootstrap interval."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"a and b must be non-empty 1-D of one length, got {a.shape} and {b.shape}")
    return bootstrap(b, a, n_boot=n_boot, seed=seed, level=level)


def hierarchical_difference(reference: Sequence[np.ndarray], arm: Sequence[np.ndarray], n_boot: int = 2000,
                            seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Mean of ``arm - reference`` (one array per seed), the interval carrying seed variance too."""
    return bootstrap(arm, reference, unit="seeds", n_boot=n_boot, seed=seed, level=level)
