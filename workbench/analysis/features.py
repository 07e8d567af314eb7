"""A probe batch run under a prefill condition: the residual features at each label position, and the answers.

The FBT paper (appendix F) asks at which depth a linear probe can read the label fixed before the final colon, and
whether recurrent prefill brings it down to shallow layers. A **prefill condition** is a schedule value
(``schedules.condition``) or its name: ``standard`` (one plain pass), ``sequential`` (the full recurrence),
``multipassK`` (K Jacobi passes), ``suffixK`` (only the last k tokens up to the label read memory: the exact
recurrence with ``plain_prefix = label_pos - k + 1``, the paper's "k + 1 forwards"). Conditions share their forwards:
the plain pass fills a KV cache that each recurrent suffix rewinds. A probe of a model that cannot answer under a
condition (``answer_correct``) measures nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from .. import schedules
from ..evaluation import per_example_metrics
from ..hooks import with_hooks
from ..kv_cache import KVCache
from ..model import GPT, eval_mode
from ..tasks.base import Batch
from ..validation import check_int, fail

DEFAULT_CONDITIONS = ("standard", "suffix1", "suffix2", "suffix4", "sequential")
Condition = str | schedules.Schedule  # a name (the tables' label) or any schedule value


# ------------------------------------------------------------------------------------------ checks
def named_conditions(conditions: Sequence[Condition]) -> dict[str, schedules.Schedule]:
    """``{table label: value}`` of the conditions, validated before any forward: a typo in a sweep fails before the
    first one runs."""
    if isinstance(conditions, str) or not isinstance(conditions, Sequence) or not conditions:  # one bare condition
        fail("conditions", conditions, "must be a non-empty sequence of conditions")
    return {schedules.condition_name(c): schedules.condition(c) for c in conditions}


def check_batch(batch: Batch) -> None:
    """A batch a probe can read: a ``Batch`` with ``label_positions`` inside its examples' real tokens."""
    if not isinstance(batch, Batch):
        raise ValueError(f"task_or_batch must be a workbench Task or Batch, got {type(batch).__name__}")
    if batch.label_positions is None:
        raise ValueError("task_or_batch has no label_positions: probes read the label at its position, "
                         "so use a task that defines one (e.g. a probe task or arith_cot)")
    if bool((batch.label_positions >= batch.lengths).any()) or bool((batch.label_positions < 0).any()):
        raise ValueError("task_or_batch has label_positions outside the examples' real tokens")


def by_label_position(batch: Batch, batch_size: int | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """``(label position, rows)`` per label position of ``batch``, rows in chunks of at most ``batch_size``. Cut to
    its label position, a group's causal forward ends where the label is read, whatever the padding."""
    positions = batch.label_positions.cpu()
    for pos in positions.unique().tolist():
        rows = (positions == pos).nonzero().squeeze(1)
        for chunk in (rows,) if batch_size is None else rows.split(batch_size):
            yield pos, chunk


def subset(batch: Batch, rows: torch.Tensor) -> Batch:
    """The examples ``rows`` (n,) of ``batch``, with every per-example field."""
    fields = {}
    for name, value in vars(batch).items():
        if isinstance(value, torch.Tensor):
            value = value[rows]
        elif isinstance(value, list) and name != "label_names":
            value = [value[i] for i in rows.tolist()]
        fields[name] = value
    return Batch(**fields)


# ------------------------------------------------------------------------------------------ features
def residual_names(n_layer: int) -> list[str]:
    """Hook names of depths 0..L: the fused input, then every block's output."""
    return ["hook_input"] + [f"blocks.{layer}.hook_resid_post" for layer in range(n_layer)]


def _recurrent_suffix(model: GPT, idx: torch.Tensor, cache: KVCache, plain_memory: torch.Tensor, start: int) -> None:
    """Recompute ``start..T-1`` as the exact recurrence with ``plain_prefix = start`` over the plain pass's cache."""
    cache.rewind(start)  # the entries beyond are overwritten before anything can read them
    cache.state = plain_memory[:, start - 1]
    schedules.recur(model, idx, cache, start)


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
            if recurrent[condition] >= T:  # nothing recurs (standard, or the label at position 0)
                result[condition] = standard
                continue
            _recurrent_suffix(model, idx, cache, plain.memory, recurrent[condition])
            result[condition] = snapshot()
        for condition in values.keys() - recurrent.keys():
            values[condition].run(model, idx)
            result[condition] = snapshot()
    return result


@torch.no_grad()
def condition_features(model: GPT, batch: Batch, conditions: Sequence[Condition] = DEFAULT_CONDITIONS, *,
                       batch_size: int = 1024) -> dict[str, torch.Tensor]:
    """Residual features ``{label: (L + 1, n, D)}`` at every example's label position, per condition.

    Examples are grouped by label position and cut there: the model is causal, so padding and the label token never
    matter. ``batch_size`` bounds memory, not results."""
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
    """Residual features (L + 1, n, D) at every example's label position under one prefill condition (depth 0: the
    input after fusion); ``condition_features`` shares the forwards of several."""
    return condition_features(model, batch, (condition,), batch_size=batch_size)[schedules.condition_name(condition)]


# ------------------------------------------------------------------------------------------ answers
def answer_correct(model: GPT, batch: Batch, condition: Condition = "standard", *,
                   batch_size: int = 256) -> np.ndarray:
    """Per example (n,) bool: is every answer target right under ``condition`` (its prefill, then the same recurrence
    through the answer)? The condition is ``anchored`` at each label position (``suffix1``: STANDARD prefill, SOFT
    decoding)."""
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
