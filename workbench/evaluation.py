"""Evaluation of a model on a fixed batch under any schedule, per example and in total.

Per-example numbers are what honest comparisons need: two models evaluated on the same held-out
sequences can be compared *paired*, example by example, with a bootstrap interval for the
difference (``paired_difference``), instead of eyeballing two means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from . import schedules
from .metrics import token_losses
from .model import GPT, eval_mode
from .tasks.base import Batch


@torch.no_grad()
def per_example_metrics(model: GPT, batch: Batch, schedule: str | schedules.Schedule = "single",
                        batch_size: int = 64, plain_prefix: int = 0, **schedule_kw: Any) -> pd.DataFrame:
    """One row per example: ``nats`` (summed loss over its targets), ``targets``, ``correct`` (argmax
    hits), ``loss`` (mean nats per target), ``accuracy``, ``answer_correct`` (every target right).

    ``schedule``: a ``Schedule`` value (what ``RunSpec.eval_schedule`` holds), or a name with its keyword
    arguments (the CLI form), parsed once. Runs in eval mode (no FBT jitter) and restores the caller's mode;
    ``batch_size`` bounds memory.
    """
    value = schedules.parse(schedule, **schedule_kw)
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


def summarize(per_example: pd.DataFrame, bytes_per_token: float = 1.0) -> dict[str, float]:
    """Totals over examples: ``loss`` (nats per target), ``bpb``, ``accuracy`` (per target),
    ``answer_accuracy`` (per example)."""
    targets = float(per_example["targets"].sum())
    loss = float(per_example["nats"].sum()) / max(targets, 1.0)
    return {"loss": loss, "bpb": loss / math.log(2) / bytes_per_token,
            "accuracy": float(per_example["correct"].sum()) / max(targets, 1.0),
            "answer_accuracy": float(per_example["answer_correct"].mean())}


def paired_difference(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0,
                      level: float = 0.95) -> dict[str, float]:
    """Mean of ``b - a`` over paired examples with a bootstrap interval (resampling examples)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"a and b must be 1-D arrays of the same non-zero length, got {a.shape} and {b.shape}")
    diff = b - a
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)
    tail = (1 - level) / 2
    return {"mean": float(diff.mean()), "low": float(np.quantile(means, tail)),
            "high": float(np.quantile(means, 1 - tail))}


def _per_seed(name: str, arrays: Sequence[np.ndarray], n: int | None) -> np.ndarray:
    stacked = [np.asarray(a, dtype=np.float64) for a in arrays]
    if not stacked or any(a.ndim != 1 or len(a) == 0 for a in stacked):
        raise ValueError(f"{name} must be a non-empty list of non-empty 1-D arrays (one per seed)")
    if len({len(a) for a in stacked}) != 1 or (n is not None and len(stacked[0]) != n):
        raise ValueError(f"{name}: every seed must hold the same examples (got lengths {[len(a) for a in stacked]}"
                         + (f", expected {n})" if n is not None else ")"))
    return np.stack(stacked)


def hierarchical_difference(reference: Sequence[np.ndarray], arm: Sequence[np.ndarray], n_boot: int = 2000,
                            seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Mean of ``arm - reference`` with an interval that carries seed variance as well as example noise.

    Each argument holds one per-example array per training seed, all on the same held-out examples.
    Each bootstrap replicate resamples the seeds of each arm (independently: two seeds of two arms
    are unrelated runs), then the examples (one draw shared by every seed and both arms, since the
    examples are paired). With one seed per arm it reduces to the paired example bootstrap; with
    constant examples, to a bootstrap of the seed means. Why: two seeds of one arm can differ by
    more than the effect between arms, and an example-only interval would hide that.
    """
    ref = _per_seed("reference", reference, None)
    other = _per_seed("arm", arm, ref.shape[1])
    rng = np.random.default_rng(seed)
    n = ref.shape[1]
    examples = rng.integers(0, n, size=(n_boot, n))
    ref_seeds = rng.integers(0, len(ref), size=(n_boot, len(ref)))
    arm_seeds = rng.integers(0, len(other), size=(n_boot, len(other)))
    # mean over resampled examples of each seed, then over resampled seeds
    ref_means = np.take_along_axis(ref[:, None, :], examples[None], axis=2).mean(2)  # (seeds, n_boot)
    arm_means = np.take_along_axis(other[:, None, :], examples[None], axis=2).mean(2)
    boot = (np.take_along_axis(arm_means.T, arm_seeds, axis=1).mean(1)
            - np.take_along_axis(ref_means.T, ref_seeds, axis=1).mean(1))
    tail = (1 - level) / 2
    return {"mean": float(other.mean() - ref.mean()), "low": float(np.quantile(boot, tail)),
            "high": float(np.quantile(boot, 1 - tail)), "seeds": int(min(len(ref), len(other)))}


MIN_SEEDS = 3  # a claim about a difference between arms rests on at least this many seeds per arm


def verdict(interval: dict[str, float], expected_sign: int) -> str:
    """'reproduces' when the interval excludes 0 on the paper's side, 'does not reproduce' when it
    excludes 0 on the other side, else 'inconclusive'; an interval from fewer than ``MIN_SEEDS`` seeds
    per arm (``hierarchical_difference`` records them) is 'not tested'."""
    if expected_sign not in (-1, 1):
        raise ValueError(f"expected_sign={expected_sign!r} is invalid: must be -1 or 1")
    if interval.get("seeds", MIN_SEEDS) < MIN_SEEDS:
        return f"not tested: seeds = {interval['seeds']} (needs >= {MIN_SEEDS})"
    if interval["low"] > 0:
        return "reproduces" if expected_sign > 0 else "does not reproduce"
    if interval["high"] < 0:
        return "reproduces" if expected_sign < 0 else "does not reproduce"
    return "inconclusive"
