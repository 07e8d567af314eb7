"""How far a schedule is from the exact recurrence, what it costs to get there, and what LRT learned.

Training schedules approximate the exact token-by-token recurrence (``schedules.sequential``) in
parallel. Two questions decide which one to train with, and this module answers both on a real
model and batch:

- *agreement*: how far each schedule's logits are from the exact ones, overall and per position,
  as its own knob grows (``multipass``'s K passes, ``interleaved``'s S subsets, ``blockwise``'s
  block B) — ``compare_schedules``, ``schedule_sweep``, ``position_distance``;
- *cost*: how many forwards it makes (its sequential depth: latency) and how many positions it
  pushes through the stack (its work), counted live by ``count_work`` from the model's
  ``hook_positions``, next to the training FLOPs the trainer charges (``schedules.schedule_flops``);
  ``final_estimate_history`` puts training histories of different schedules on one loss scale.

The LRT mechanism's learned state is read here too: per layer, the residual scales
``alpha_l``/``gamma_l`` and the mean local / feedback gates on a batch (``lrt_gates``,
``lrt_layer_stats``), which is what the source-layer and injection ablations change.

Distances are relative Frobenius norms, ``||L - L*|| / ||L*||`` over the batch and vocabulary,
so 0 is exact and ~1e-7 is float32 round-off.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from .. import schedules
from ..hooks import hooks as attach_hooks
from ..metrics import mean_token_loss
from ..model import GPT, eval_mode
from ..train_config import TrainConfig
from ..validation import check_tokens
from .cache import run_with_cache

# The knob of each approximation of the exact recurrence the papers train with, and the letter the papers and
# notebooks give it: the values' own (``fixed_point`` trains at the fixed point; it is no approximation to sweep).
PARAMETERS = {name: schedules.KNOBS[name] for name in ("multipass", "interleaved", "blockwise")}
SYMBOLS = {schedules.VALUES[name].knob_name: schedules.VALUES[name].symbol for name in PARAMETERS}
AGREEMENT_COLUMNS = ["schedule", "parameter", "value", "label", "distance", "max_abs", "agreement", "loss",
                     "forwards", "token_forwards", "pass_equivalents", "train_flops"]


@dataclass
class WorkCount:
    """What a computation cost the model: forwards (calls of ``model.step``) and positions computed."""

    forwards: int = 0
    token_forwards: int = 0  # positions pushed through the whole stack, summed over forwards


@contextmanager
def count_work(model: GPT) -> Iterator[WorkCount]:
    """Count the forwards and positions ``model`` computes inside the ``with`` block.

    Reads ``hook_positions`` (every forward announces the positions it computes), so it counts what
    really ran — a KV-cache decode, a schedule, a hand-written loop — not what a formula predicts.
    """
    count = WorkCount()

    def record(positions: torch.Tensor, hook) -> None:
        count.forwards += 1
        count.token_forwards += int(positions.numel())

    with attach_hooks(model, {"hook_positions": record}):
        yield count


Setting = Mapping[str, Any] | str | schedules.Schedule


def _setting(setting: Setting) -> schedules.Schedule:
    """One setting as a ``Schedule`` value (``schedules.parse``, which refuses another schedule's knob); a
    name or dict must also give its own knob, so that a row never shows a default nobody chose."""
    value = schedules.parse(setting)
    spec = {"schedule": setting} if isinstance(setting, str) else setting
    if isinstance(spec, Mapping) and value.knob_name is not None and value.knob_name not in spec:
        raise ValueError(f"setting {setting!r}: {value.name} needs {value.knob_name}")
    return value


def _distances(logits: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per-position relative distance (T,) over batch and vocabulary, in float64."""
    diff = (logits - reference).double()
    ref = reference.double()
    return diff.pow(2).sum(dim=(0, 2)).sqrt() / ref.pow(2).sum(dim=(0, 2)).sqrt().clamp(min=1e-300)


def exact_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """The reference every distance is measured against: the exact sequential recurrence."""
    check_tokens(model.config.vocab_size, idx)
    with torch.no_grad(), eval_mode(model):
        return schedules.sequential(model, idx).logits


@torch.no_grad()
def compare_schedules(model: GPT, idx: torch.Tensor, settings: Sequence[Setting],
                      targets: torch.Tensor | None = None, reference: torch.Tensor | None = None) -> pd.DataFrame:
    """One row per setting: its distance to the exact logits and what it cost.

    ``settings``: ``Schedule`` values, schedule names (``"single"``, ``"sequential"``) or dicts such as
    ``{"schedule": "multipass", "passes": 3}``. Columns: ``distance`` (relative, overall),
    ``max_abs`` (largest logit difference), ``agreement`` (fraction of target positions — every
    position without ``targets`` — whose argmax matches the exact one), ``loss`` (mean next-token
    loss of its logits; NaN without ``targets``), ``forwards`` and ``token_forwards`` (counted
    while it ran), ``pass_equivalents`` and ``train_flops`` (the trainer's accounting for this
    batch shape). ``reference``: exact logits already computed (else computed here).
    """
    check_tokens(model.config.vocab_size, idx)
    if not settings:
        raise ValueError("settings is empty: give at least one schedule setting")
    if targets is not None and targets.shape != idx.shape:
        raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
    parsed = [_setting(s) for s in settings]
    reference = exact_logits(model, idx) if reference is None else reference
    if reference.shape[:2] != idx.shape:
        raise ValueError(f"reference must be (B, T, V) logits for idx {tuple(idx.shape)}, got {tuple(reference.shape)}")
    B, T = idx.shape
    scored = torch.ones_like(idx, dtype=torch.bool) if targets is None else targets >= 0
    exact_top = reference.argmax(-1)
    rows = []
    with eval_mode(model):
        for value in parsed:
            with count_work(model) as work:
                logits = value.run(model, idx).logits
            diff = (logits - reference).double()
            hits = (logits.argmax(-1) == exact_top) & scored
            rows.append({
                "schedule": value.name, "parameter": value.knob_name or "", "value": value.knob,
                "label": value.label,
                "distance": float(diff.norm() / reference.double().norm().clamp(min=1e-300)),
                "max_abs": float(diff.abs().max()),
                "agreement": float(hits.sum() / scored.sum().clamp(min=1)),
                "loss": float("nan") if targets is None else float(mean_token_loss(logits, targets)),
                "forwards": work.forwards, "token_forwards": work.token_forwards,
                "pass_equivalents": value.pass_equivalents(),
                "train_flops": value.flops(model, B, T),
            })
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS).astype({"value": "Int64"})


def schedule_sweep(model: GPT, idx: torch.Tensor, schedule: str, values: Sequence[int] | None = None,
                   targets: torch.Tensor | None = None, reference: torch.Tensor | None = None) -> pd.DataFrame:
    """``compare_schedules`` over one schedule's knob (``values``; default every value 1..T).

    How the approximation approaches the exact recurrence as K, S grow (or B shrinks): multipass is
    exact on its first K positions, interleaved only once S = T, blockwise only once B = 1.
    """
    if schedule not in PARAMETERS:
        raise ValueError(f"schedule={schedule!r} is invalid: must be one of {tuple(PARAMETERS)}")
    T = idx.size(1) if isinstance(idx, torch.Tensor) and idx.ndim == 2 else 0
    values = list(range(1, T + 1)) if values is None else list(values)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= T]
    if not values or bad:
        raise ValueError(f"values={values!r} is invalid: must be non-empty ints in [1, T={T}]")
    value_of, knob = schedules.VALUES[schedule], PARAMETERS[schedule]
    return compare_schedules(model, idx, [value_of(**{knob: int(v)}) for v in values], targets, reference)


@torch.no_grad()
def position_distance(model: GPT, idx: torch.Tensor, setting: Setting,
                      reference: torch.Tensor | None = None) -> pd.DataFrame:
    """Per position: the relative distance of one setting's logits to the exact ones, and argmax agreement.

    Shows *where* an approximation is wrong: multipass(K) is exact on positions 0..K-1, blockwise
    is wrong inside blocks, interleaved(S) is exact only on the positions of its first cycle.
    """
    check_tokens(model.config.vocab_size, idx)
    value = _setting(setting)
    reference = exact_logits(model, idx) if reference is None else reference
    with eval_mode(model):
        logits = value.run(model, idx).logits
    agreement = (logits.argmax(-1) == reference.argmax(-1)).double().mean(0)
    return pd.DataFrame({"position": np.arange(idx.size(1)), "distance": _distances(logits, reference).cpu().numpy(),
                         "agreement": agreement.cpu().numpy(), "label": value.label})


def final_estimate_history(history: pd.DataFrame, train_config: Mapping[str, Any]) -> pd.DataFrame:
    """A training history whose ``loss`` is the loss of the estimate the schedule outputs (the objective kept as
    ``objective``), so runs trained under different schedules share one y-axis.

    The objective is not comparable across schedules: multipass's is ``NTP_1 + lambda mean_{k>=2} NTP_k``
    (about twice a per-token loss), interleaved's the mean over its init pass and S subsets. The final
    estimate is pass K for multipass (each row's own ``passes``), the S refined subsets for interleaved
    (their mean: exact when the subsets carry equal numbers of targets), the one pass otherwise.
    ``train_config``: the run's ``TrainConfig`` as a dict (``metrics.json``'s ``train_config``).
    """
    needed = ["loss", "loss_pass1", "passes"]
    missing = [c for c in needed if c not in history.columns]
    if missing:
        raise ValueError(f"history needs columns {needed}; missing {missing}")
    name = train_config.get("schedule")
    if name not in schedules.SCHEDULES:
        raise ValueError(f"train_config['schedule']={name!r} is invalid: must be one of {schedules.SCHEDULES}")
    schedule = TrainConfig.from_dict(dict(train_config)).schedule_value()
    out = history.assign(objective=history["loss"])
    passes = history["passes"].astype(int)
    for k in passes.unique():  # the final estimate's pass losses differ with the batch's depth under a mix
        rows = passes == k
        columns = [f"loss_pass{p}" for p in schedule.final_passes(int(k))]
        present = [c for c in columns if c in history.columns]
        final = history.loc[rows, present].mean(axis=1) if present else history.loc[rows, "loss_pass1"] * np.nan
        out.loc[rows, "loss"] = final.fillna(history.loc[rows, "loss_pass1"])  # steps trained single (feedback_start)
    return out


# ---------------------------------------------------------------------------------------------- LRT state
def _check_lrt(model: GPT) -> None:
    if model.config.mechanism != "lrt":
        raise ValueError(f"model.config.mechanism={model.config.mechanism!r} is invalid: these statistics "
                         "read the LRT mechanism's gates and scales (mechanism='lrt')")


def lrt_gates(model: GPT, idx: torch.Tensor) -> pd.DataFrame:
    """Mean LRT gates per (layer, position) under the exact recurrence, over the batch and kv heads.

    ``gate_local`` scales the token's own key/value, ``gate_feedback`` the projected memory
    ``W^rec m_{t-1}``; both are ``2 sigmoid(W x[:C])``, 1 at init. Empty for a model without the
    KV injection (``lrt_inject=("residual",)``).
    """
    _check_lrt(model)
    check_tokens(model.config.vocab_size, idx)
    if "kv" not in model.config.lrt_inject:
        return pd.DataFrame(columns=["layer", "position", "gate_local", "gate_feedback"])
    _, cache = run_with_cache(model, idx, "sequential", names_filter=lambda name: name.endswith("hook_gate"))
    frames = []
    for layer in range(model.config.n_layer):
        gates = cache[f"blocks.{layer}.attn.hook_gate"].double().mean(dim=(0, 3, 4))  # (T, 2)
        frames.append(pd.DataFrame({"layer": layer, "position": np.arange(idx.size(1)),
                                    "gate_local": gates[:, 0].cpu().numpy(),
                                    "gate_feedback": gates[:, 1].cpu().numpy()}))
    return pd.concat(frames, ignore_index=True)


def lrt_layer_stats(model: GPT, idx: torch.Tensor) -> pd.DataFrame:
    """Per layer: ``alpha``, ``gamma`` (residual injection ``alpha x + gamma m``; NaN without it), the mean
    local and feedback gates on ``idx`` (NaN without the KV injection), and whether it is the source.

    Position 0 reads no memory, so its gates are left out of the means. ``source`` marks the block
    whose output becomes the memory (the top block when ``lrt_source_layer = -1``).
    """
    _check_lrt(model)
    L = model.config.n_layer
    mech = model.mechanism
    residual = "residual" in model.config.lrt_inject
    frame = pd.DataFrame({"layer": np.arange(L),
                          "alpha": mech.alpha.detach().double().cpu().numpy() if residual else np.nan,
                          "gamma": mech.gamma.detach().double().cpu().numpy() if residual else np.nan,
                          "source": np.arange(L) == mech.source_layer % L})
    gates = lrt_gates(model, idx)
    means = gates[gates["position"] > 0].groupby("layer")[["gate_local", "gate_feedback"]].mean()
    return frame.join(means.reindex(frame["layer"]).reset_index(drop=True))
