"""How far a training schedule is from the exact recurrence, which decides which to train with.

Distances are relative Frobenius norms ``||L - L*|| / ||L*||``: 0 is exact, ~1e-7 float32 round-off."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from .. import schedules
from ..metrics import mean_token_loss
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens, fail
from .fixed_point import check_prefix
from .work import count_work

# The knob of each approximation the papers train with, and its letter (``fixed_point`` is no approximation).
PARAMETERS = {name: schedules.KNOBS[name] for name in ("multipass", "interleaved", "blockwise")}
SYMBOLS = {schedules.VALUES[name].knob_name: schedules.VALUES[name].symbol for name in PARAMETERS}
AGREEMENT_COLUMNS = ["schedule", "parameter", "value", "label", "distance", "max_abs", "agreement", "loss",
                     "forwards", "token_forwards", "pass_equivalents", "train_flops"]


Setting = Mapping[str, Any] | str | schedules.Schedule


def _setting(setting: Setting) -> schedules.Schedule:
    """``setting`` as a ``Schedule``; a name or dict must give its knob, so no row shows a default nobody chose."""
    value = schedules.parse(setting)
    spec = {"schedule": setting} if isinstance(setting, str) else setting
    if isinstance(spec, Mapping) and value.knob_name is not None and value.knob_name not in spec:
        raise ValueError(f"setting {setting!r}: {value.name} needs {value.knob_name}")
    return value


def _distances(logits: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """(T,) relative distance over batch and vocabulary."""
    diff = (logits - reference).double()
    ref = reference.double()
    return diff.pow(2).sum(dim=(0, 2)).sqrt() / ref.pow(2).sum(dim=(0, 2)).sqrt().clamp(min=1e-300)


def exact_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """The logits of the exact sequential recurrence, the reference."""
    check_tokens(model.config.vocab_size, idx)
    with torch.no_grad(), eval_mode(model):
        return schedules.Sequential().run(model, idx).logits


@torch.no_grad()
def compare_schedules(model: GPT, idx: torch.Tensor, settings: Sequence[Setting],
                      targets: torch.Tensor | None = None, reference: torch.Tensor | None = None) -> pd.DataFrame:
    """One row per setting: its distance to the exact logits and what it cost."""
    check_tokens(model.config.vocab_size, idx)
    if not settings:
        raise ValueError("settings is empty")
    if targets is not None and targets.shape != idx.shape:
        raise ValueError(f"targets shape {tuple(targets.shape)} != idx {tuple(idx.shape)}")
    parsed = [_setting(s) for s in settings]
    reference = exact_logits(model, idx) if reference is None else reference
    if reference.shape[:2] != idx.shape:
        raise ValueError(f"reference must be (B, T, V) for idx {tuple(idx.shape)}, got {tuple(reference.shape)}")
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
    """``compare_schedules`` over one schedule's knob (default 1..T)."""
    if schedule not in PARAMETERS:
        fail("schedule", schedule, f"must be one of {tuple(PARAMETERS)}")
    T = idx.size(1) if isinstance(idx, torch.Tensor) and idx.ndim == 2 else 0
    values = list(range(1, T + 1)) if values is None else list(values)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= T]
    if not values or bad:
        fail("values", values, f"must be non-empty ints in [1, T={T}]")
    value_of, knob = schedules.VALUES[schedule], PARAMETERS[schedule]
    return compare_schedules(model, idx, [value_of(**{knob: int(v)}) for v in values], targets, reference)


@torch.no_grad()
def position_distance(model: GPT, idx: torch.Tensor, setting: Setting,
                      reference: torch.Tensor | None = None) -> pd.DataFrame:
    """Per position: *where* an approximation is wrong (distance to the exact logits, argmax agreement)."""
    check_tokens(model.config.vocab_size, idx)
    value = _setting(setting)
    reference = exact_logits(model, idx) if reference is None else reference
    with eval_mode(model):
        logits = value.run(model, idx).logits
    agreement = (logits.argmax(-1) == reference.argmax(-1)).double().mean(0)
    return pd.DataFrame({"position": np.arange(idx.size(1)), "distance": _distances(logits, reference).cpu().numpy(),
                         "agreement": agreement.cpu().numpy(), "label": value.label})


# ---------------------------------------------------------------------------------------------- jacobi
JACOBI_COLUMNS = ["pass", "position", "error"]


@torch.no_grad()
def jacobi_errors(model: GPT, idx: torch.Tensor, passes: int | None = None, plain_prefix: int = 0) -> pd.DataFrame:
    """Per pass and position, max over the batch of ``||H^k_t - H*_t|| / ||H*_t||``; exact at t < k."""
    check_tokens(model.config.vocab_size, idx)
    T = idx.size(1)
    passes = T if passes is None else passes
    check_int("passes", passes, 1)
    check_prefix(plain_prefix, T)
    rows = []
    with eval_mode(model):
        exact = schedules.Sequential().run(model, idx, plain_prefix).memory.double()
        scale = torch.linalg.vector_norm(exact, dim=-1)
        for k, out in enumerate(schedules.iterate_passes(model, idx, plain_prefix, passes), start=1):
            error = (torch.linalg.vector_norm(out.memory.double() - exact, dim=-1) / scale).amax(0)
            rows += [{"pass": k, "position": t, "error": float(e)} for t, e in enumerate(error.tolist())]
    return pd.DataFrame(rows, columns=JACOBI_COLUMNS)
