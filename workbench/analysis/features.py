"""Residual features at each label position under prefill conditions, and the answers (FBT paper, appendix F).

Conditions share forwards: the plain pass fills a KV cache each recurrent suffix rewinds."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from .. import schedules
from ..evaluation import per_example_metrics
from ..hooks import with_hooks
from ..model import GPT, eval_mode
from ..tasks.base import Batch
from ..validation import check_int, fail

DEFAULT_CONDITIONS = ("standard", "suffix1", "suffix2", "suffix4", "sequential")
Condition = str | schedules.Schedule  # a name (the tables' label) or any schedule value


# ------------------------------------------------------------------------------------------ checks
def named_conditions(conditions: Sequence[Condition]) -> dict[str, schedules.Schedule]:
    """``{table label: value}``, validated before any forward so a typo in a sweep fails at once."""
    if isinstance(conditions, str) or not isinstance(conditions, Sequence) or not conditions:  # one bare condition
        fail("conditions", conditions, "must be a non-empty sequence of conditions")
    return {schedules.condition_name(c): schedules.condition(c) for c in conditions}


def check_batch(batch: Batch) -> None:
    """A ``Batch`` with ``label_positions`` inside its examples' real tokens."""
    if not isinstance(batch, Batch):
        raise ValueError(f"task_or_batch must be a workbench Task or Batch, got {type(batch).__name__}")
    if batch.label_positions is None:
        raise ValueError("task_or_batch has no label_positions (use e.g. a probe task or arith_cot)")
    if bool((batch.label_positions >= batch.lengths).any()) or bool((batch.label_positions < 0).any()):
        raise ValueError("task_or_batch has label_positions outside the examples' real tokens")


def by_label_position(batch: Batch, batch_size: int | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """``(label position, rows)`` chunks: cut there, a causal forward ends where the label is read."""
    positions = batch.label_positions.cpu()
    for pos in positions.unique().tolist():
        rows = (positions == pos).nonzero().squeeze(1)
        for chunk in (rows,) if batch_size is None else rows.split(batch_size):
            yield pos, chunk


def subset(batch: Batch, rows: torch.Tensor) -> Batch:
    """The examples ``rows`` of ``batch``, every per-example field."""
    tensors = {name: value[rows] for name, value in vars(batch).items() if isinstance(value, torch.Tensor)}
    lists = {name: [value[i] for i in rows.tolist()] for name, value in vars(batch).items()
             if isinstance(value, list) and name != "label_names"}
    return dataclasses.replace(batch, **tensors, **lists)


# ------------------------------------------------------------------------------------------ features
def residual_names(n_layer: int) -> list[str]:
    """Hook names of depths 0..L: the fused input, then every block's output."""
    return ["hook_input"] + [f"blocks.{layer}.hook_resid_post" for layer in range(n_layer)]


def _group_features(model: GPT, idx: torch.Tensor, values: dict[str, schedules.Schedule]) -> dict[str, torch.Tensor]:
    """Features (L + 1, B, D) at the last position of ``idx`` (every row's label position) per condition."""
    names = residual_names(model.config.n_layer)
    last: dict[str, torch.Tensor] = {}

    def keep_last(tensor: torch.Tensor, *, hook) -> None:  # every forward ends at the label position
        last[hook.name] = tensor[:, -1]

    def snapshot() -> torch.Tensor:
        return torch.stack([last[name] for name in names]).cpu()

    B, T = idx.shape
    if getattr(model.config, "mechanism", None) == "none":  # no memory to read: every condition is the plain pass
        with with_hooks(model, [(name, keep_last) for name in names]):
            model.step(idx)
        return dict.fromkeys(values, snapshot())
    # First recurrent position of each "plain, then the exact recurrence" condition (T: none recurs); any other
    # value is run whole, and its last forward ends at the label position. Each row ends at its label, so a value
    # given relative to the position read (a suffix) is anchored there by running on the whole row.
    starts = {c: value.recurs_from(T) for c, value in values.items()}
    recurrent = {c: start for c, start in starts.items() if start is not None}
    result: dict[str, torch.Tensor] = {}
    with with_hooks(model, [(name, keep_last) for name in names]):
        cache = model.new_kv_cache(B, T) if any(start < T for start in recurrent.values()) else None
        plain = model.step(idx, kv=cache)
        standard = snapshot()
        # Latest start first: each rewind then only overwrites cache entries that the later, longer
        # suffixes recompute before reading them.
        for condition in sorted(recurrent, key=recurrent.get, reverse=True):
            start = recurrent[condition]
            if start >= T:  # nothing recurs (standard, or the label at position 0)
                result[condition] = standard
                continue
            # start..T-1 as the exact recurrence over the plain pass's cache; the entries beyond the rewind are
            # overwritten before anything can read them
            cache.rewind(start)
            cache.state = plain.memory[:, start - 1]
            schedules.recur(model, idx, cache, start)
            result[condition] = snapshot()
        for condition in values.keys() - recurrent.keys():
            values[condition].run(model, idx)
            result[condition] = snapshot()
    return result


@torch.no_grad()
def condition_features(model: GPT, batch: Batch, conditions: Sequence[Condition] = DEFAULT_CONDITIONS, *,
                       batch_size: int = 1024) -> dict[str, torch.Tensor]:
    """Residual features ``{label: (L + 1, n, D)}`` at every example's label position, per condition."""
    parsed = named_conditions(conditions)
    check_batch(batch)
    check_int("batch_size", batch_size, 1)
    weight = model.readout_weight
    L, D, n = model.config.n_layer, model.config.n_embd, len(batch)
    dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32  # numpy has no bfloat16
    out = {c: torch.empty(L + 1, n, D, dtype=dtype) for c in parsed}
    with eval_mode(model):
        for pos, chunk in by_label_position(batch, batch_size):
            idx = batch.tokens[chunk, : pos + 1].to(weight.device)
            for condition, feats in _group_features(model, idx, parsed).items():
                out[condition][:, chunk] = feats.to(dtype)
    return out


def probe_features(model: GPT, batch: Batch, condition: Condition = "standard", *,
                   batch_size: int = 1024) -> torch.Tensor:
    """Residual features (L + 1, n, D) at every label position under one condition (depth 0: the fused input)."""
    return condition_features(model, batch, (condition,), batch_size=batch_size)[schedules.condition_name(condition)]


# ------------------------------------------------------------------------------------------ answers
def answer_correct(model: GPT, batch: Batch, condition: Condition = "standard", *,
                   batch_size: int = 256) -> np.ndarray:
    """Per example: is every answer right under ``condition`` anchored at the label? (An unanswerable probe says
    nothing.)"""
    check_batch(batch)
    check_int("batch_size", batch_size, 1)
    value = schedules.condition(condition)
    correct = np.zeros(len(batch), dtype=bool)
    for pos, chunk in by_label_position(batch, batch_size):
        part = subset(batch, chunk)
        T = int(part.lengths.max())
        part = dataclasses.replace(part, tokens=part.tokens[:, :T], targets=part.targets[:, :T])
        scores = per_example_metrics(model, part, value.anchored(pos), batch_size=len(chunk))
        correct[chunk.numpy()] = scores["answer_correct"].to_numpy()
    return correct
