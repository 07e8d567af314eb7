"""Decodability vs use: a probe shows a label is decodable from the memory, not that it is used (FBT paper,
appendix F); edit the memory and see whether the answer follows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from .. import schedules
from ..analysis.features import by_label_position
from ..analysis.interventions import Intervention, intervene, intervention_effects, record_site
from ..model import GPT
from ..tasks.base import Batch
from ..validation import check_int, fail


def _check_probe_batch(batch: Batch) -> None:
    if batch.labels is None or batch.label_positions is None:
        raise ValueError("batch must have labels and label_positions (a probe task's batch)")


def mate_rows(batch: Batch, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example, a swap row (an other-label group mate) and a same-label control row."""
    _check_probe_batch(batch)
    rng = np.random.default_rng(seed)
    labels, groups = batch.labels.cpu().numpy(), batch.groups.cpu().numpy()
    positions = batch.label_positions.cpu().numpy()
    order = list(dict.fromkeys(groups.tolist()))
    members = {g: np.flatnonzero(groups == g) for g in order}
    swap, control = np.empty(len(labels), dtype=np.int64), np.empty(len(labels), dtype=np.int64)
    for i, (label, group) in enumerate(zip(labels, groups)):
        mates = members[group]
        other = mates[labels[mates] != label]
        if len(other) == 0:
            raise ValueError(f"example {i}'s group holds no other label")
        swap[i] = rng.choice(other)
        same = mates[(labels[mates] == label) & (mates != i)]
        start = order.index(group)
        for step in range(1, len(order)):
            if len(same):
                break
            candidates = members[order[(start + step) % len(order)]]
            same = candidates[(labels[candidates] == label) & (positions[candidates] == positions[i])]
        if len(same) == 0:
            raise ValueError(f"example {i} has no other example with its label at its label position")
        control[i] = rng.choice(same)
    return torch.from_numpy(swap), torch.from_numpy(control)


def cross_rows(batch: Batch, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example, a cross-group swap row and its control."""
    _check_probe_batch(batch)
    rng = np.random.default_rng(seed)
    labels, groups = batch.labels.cpu().numpy(), batch.groups.cpu().numpy()
    positions = batch.label_positions.cpu().numpy()
    pairs = []
    for i in range(len(labels)):
        elsewhere = (groups != groups[i]) & (positions == positions[i])
        other = np.flatnonzero(elsewhere & (labels != labels[i]))
        same = np.flatnonzero(elsewhere & (labels == labels[i]))
        if len(other) == 0 or len(same) == 0:
            raise ValueError(f"example {i} has no other group's example of each label at its label position")
        pairs.append((rng.choice(other), rng.choice(same)))
    cross, control = zip(*pairs)
    return torch.tensor(cross, dtype=torch.long), torch.tensor(control, dtype=torch.long)


SWAP_KINDS = ("swap", "control", "cross", "cross_control", "mean", "zero")
SPANS = ("site", "stream")


def label_tokens(batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each example's answer token and, for a binary task, the other label's."""
    rows = torch.arange(len(batch))
    answers = batch.targets[rows, batch.label_positions]
    by_label = {int(label): int(token) for label, token in zip(batch.labels, answers)}
    if len(by_label) != 2:
        return answers, None
    (a, ta), (b, tb) = sorted(by_label.items())
    foils = torch.where(batch.labels == a, torch.tensor(tb), torch.tensor(ta))
    return answers, foils


def label_swap(model: GPT, batch: Batch, site: str = "memory", seed: int = 0,
               kinds: Sequence[str] = ("swap", "control", "mean", "zero"), *,
               schedule: schedules.Schedule | None = None, span: str = "site") -> pd.DataFrame:
    """Edit the memory and see whether the answer follows; ``span="stream"`` edits every read (more power)."""
    _check_probe_batch(batch)
    unknown = sorted(set(kinds) - set(SWAP_KINDS))
    if unknown or not kinds:
        fail("kinds", tuple(kinds), f"each must be one of {SWAP_KINDS}")
    if span not in SPANS:
        fail("span", span, f"must be one of {SPANS}")
    pairs = dict(zip(("swap", "control"), mate_rows(batch, seed)))  # kind -> the row each example copies from
    if {"cross", "cross_control"} & set(kinds):
        pairs.update(zip(("cross", "cross_control"), cross_rows(batch, seed)))
    answers, foils = label_tokens(batch)
    frames = []
    for p, rows in by_label_position(batch):  # mates share the label position: one run per position
        idx = batch.tokens[rows, : p + 1].to(model.readout_weight.device)
        local = torch.full((len(batch),), -1, dtype=torch.long)
        local[rows] = torch.arange(len(rows))
        named = {k: Intervention("patch", rows=local[source[rows]]) for k, source in pairs.items()}
        named.update(mean=Intervention("mean"), zero=Intervention("zero"))
        run = dict(regime="soft", prompt_len=p) if schedule is None else dict(schedule=schedule)
        frame = intervention_effects(model, idx, p if span == "site" else None, answers[rows],
                                     {k: named[k] for k in kinds}, foils=None if foils is None else foils[rows],
                                     answer_positions=p, site=site, per_example=True, **run)
        frame["example"] = rows.numpy()[frame["example"].to_numpy()]
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True).sort_values(["intervention", "example"], kind="stable")
    frame["group"] = batch.groups.cpu().numpy()[frame["example"].to_numpy()]
    frame["label"] = batch.labels.cpu().numpy()[frame["example"].to_numpy()]
    frame["span"] = span
    return frame.reset_index(drop=True)


def example_logits(model: GPT, batch: Batch, example: int, position: int | None = None, source: int | None = None,
                   site: str = "memory") -> pd.DataFrame:
    """One example's answer logits, clean and with the memory at ``position`` patched, mean-ablated, zeroed."""
    _check_probe_batch(batch)
    check_int("example", example, 0, len(batch) - 1)
    p = int(batch.label_positions[example])
    position = p if position is None else position
    check_int("position", position, 1, p)
    rows = (batch.label_positions == p).nonzero().squeeze(1)
    source = int(mate_rows(batch)[0][example]) if source is None else source
    check_int("source", source, 0, len(batch) - 1)
    if int(batch.label_positions[source]) != p:
        raise ValueError(f"source={source} has its label at position {int(batch.label_positions[source])}, not {p}")
    local = {int(r): i for i, r in enumerate(rows)}
    idx = batch.tokens[rows, : p + 1].to(model.readout_weight.device)
    run = dict(regime="soft", prompt_len=position)
    clean = record_site(model, idx, site, **run)
    patch = torch.full((len(rows),), local[source], dtype=torch.long)
    edits = {"clean": None, f"patch from #{source}": Intervention("patch", rows=patch), "mean": Intervention("mean"),
             "zero": Intervention("zero")}
    answers, _ = label_tokens(batch)
    tokens = {int(label): int(token) for label, token in zip(batch.labels, answers)}
    names = batch.label_names or [str(label) for label in sorted(tokens)]
    out = []
    for name, intervention in edits.items():
        logits = clean.logits if intervention is None else intervene(model, idx, intervention, position, site, clean,
                                                                      **run)
        at = logits[local[example], p].double().cpu()
        out += [{"intervention": name, "token": names[label], "logit": float(at[token]),
                 "true": label == int(batch.labels[example])} for label, token in sorted(tokens.items())]
    return pd.DataFrame(out)
