"""The Jacobi pass map H^(k) = F(shift(H^(k-1))) on the memory and its fixed point H* (the exact recurrence): does
it converge, and can the model read H*? Eval mode throughout: training jitter would blur a fixed point."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .. import schedules
from ..metrics import token_losses
from ..model import GPT, eval_mode
from ..validation import MAX_COUNT, check_int, check_tokens, fail

PASS_COLUMNS = ["pass", "delta", "fixed_point_distance", "contraction_rate", "loss", "exact_by_causality"]
QUALITY_COLUMNS = ["example", "pass", "schedule", "loss", "correct", "distance"]
GEOMETRY_COLUMNS = ["pass", "residual", "cosine", "acceleration", "kl", "loss", "stopped_share"]
BEHAVIOURS = ("decays to zero", "decays to a plateau", "oscillates", "grows")


def check_prefix(plain_prefix: int | torch.Tensor, T: int) -> None:
    if not isinstance(plain_prefix, torch.Tensor):
        check_int("plain_prefix", plain_prefix, 0, T)


def _norm(x: torch.Tensor) -> float:
    """Frobenius norm in float64, so residuals near float32's resolution stay visible."""
    return float(torch.linalg.vector_norm(x.double()))


# ---------------------------------------------------------------------------------------------- passes
def exact_by_causality(B: int, T: int, k: int, plain_prefix: int | torch.Tensor = 0,
                       device: torch.device | str = "cpu") -> torch.Tensor:
    """(B, T) bool: the positions pass k (from 1) has made exact by causality."""
    first_read = torch.as_tensor(plain_prefix, device=device).clamp(min=1).expand(B)
    return torch.arange(T, device=device)[None, :] < (first_read[:, None] + k - 1)


def window_loss(logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, list[float]]:
    """Mean loss over targets != -1, and each example's (NaN where it has none)."""
    losses = token_losses(logits, targets).double()
    valid = (targets >= 0).double()
    per_example = (losses * valid).sum(1) / valid.sum(1)
    total = float((losses * valid).sum() / valid.sum()) if valid.sum() > 0 else math.nan
    return total, per_example.tolist()


@torch.no_grad()
def pass_dynamics(model: GPT, idx: torch.Tensor, passes: int = 1000, targets: torch.Tensor | None = None,
                  plain_prefix: int | torch.Tensor = 0, reference: torch.Tensor | None = None,
                  progress: bool = False, from_position: int = 0, keep_examples: bool = False) -> pd.DataFrame:
    """Per pass, how the iteration approaches H* (relative norms). Position t is exact after t + 1 passes, so the
    claim lives at ``from_position >= passes``."""
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1)
    B, T = idx.shape
    check_prefix(plain_prefix, T)
    check_int("from_position", from_position, 0, T - 1)
    if targets is not None and tuple(targets.shape) != tuple(idx.shape):
        raise ValueError(f"targets shape {tuple(targets.shape)} != idx {tuple(idx.shape)}")
    if keep_examples and targets is None:
        raise ValueError("keep_examples=True needs targets")
    window = slice(from_position, None)
    with eval_mode(model):
        exact = reference if reference is not None else schedules.Sequential().run(model, idx, plain_prefix).memory
        expected = (*idx.shape, model.config.n_embd)
        if tuple(exact.shape) != expected:
            raise ValueError(f"reference must have shape {expected}, got {tuple(exact.shape)}")
        exact = exact[:, window]
        exact_norm = _norm(exact)
        scored = None if targets is None else targets[:, window]
        rows = []
        previous: torch.Tensor | None = None
        previous_delta = math.nan
        stream = schedules.iterate_passes(model, idx, plain_prefix, passes)
        for k, out in enumerate(tqdm(stream, total=passes, desc="passes", disable=not progress), start=1):
            memory = out.memory[:, window]
            delta = math.nan if previous is None else _norm(memory - previous) / _norm(memory)
            rate = delta / previous_delta if previous_delta > 0 else math.nan
            settled = exact_by_causality(B, T, k, plain_prefix, idx.device)[:, window]
            row = {"pass": k, "delta": delta, "fixed_point_distance": _norm(memory - exact) / exact_norm,
                   "contraction_rate": rate, "loss": math.nan, "exact_by_causality": float(settled.double().mean())}
            if scored is not None:
                row["loss"], per_example = window_loss(out.logits[:, window], scored)
                if keep_examples:
                    row["example_loss"] = per_example
            rows.append(row)
            previous, previous_delta = memory, delta
    return pd.DataFrame(rows, columns=PASS_COLUMNS + (["example_loss"] if keep_examples else []))


def pass_milestones(runs: Mapping[str, pd.DataFrame], seq_len: int, tol: float = 1e-4,
                    training_passes: Sequence[int] = (1, 2, 3)) -> pd.DataFrame:
    """Per ``pass_dynamics`` table: losses that matter, where it settled; ``rate_before_T`` < 1: it shrank before
    exactness forced it."""
    if not runs:
        raise ValueError("runs is empty")
    check_int("seq_len", seq_len, 1)
    if not tol > 0:
        fail("tol", tol, "must be > 0")
    rows = []
    for name, frame in runs.items():
        missing = sorted({"pass", "fixed_point_distance", "contraction_rate", "loss", "delta"} - set(frame.columns))
        if missing or frame.empty:
            raise ValueError(f"runs[{name!r}] is not a pass_dynamics table (missing {missing})")
        by_pass = frame.set_index("pass")
        settled = by_pass.index[by_pass["fixed_point_distance"] < tol]
        last = int(by_pass.index.max())
        row = {"run": name, "passes": last, "seq_len": seq_len,
               "settled_at": float(settled.min()) if len(settled) else math.nan,
               "rate_before_T": float(by_pass.loc[by_pass.index < seq_len, "contraction_rate"].median())}
        row.update({f"loss_pass{k}": float(by_pass["loss"].get(k, math.nan)) for k in training_passes})
        row.update({"loss_at_T": float(by_pass["loss"].get(seq_len, math.nan)),
                    "loss_last": float(by_pass.loc[last, "loss"]), "delta_last": float(by_pass.loc[last, "delta"])})
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- quality
@dataclass
class FixedPointQuality:
    """Each pass against the exact recurrence, per example and per position."""

    per_example: pd.DataFrame  # QUALITY_COLUMNS; schedule "multipass" rows per pass, one "sequential" row
    per_position: pd.DataFrame  # pass, position, distance (RMS over examples, relative to the exact memory)


def example_scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(B,) mean loss and whether every target is argmax-right."""
    scored = targets >= 0
    losses = (token_losses(logits.float(), targets) * scored).sum(1) / scored.sum(1).clamp(min=1)
    right = ((logits.argmax(-1) == targets) | ~scored).all(1)
    return losses.double().cpu().numpy(), right.cpu().numpy()


@torch.no_grad()
def fixed_point_quality(model: GPT, idx: torch.Tensor, targets: torch.Tensor, passes: int,
                        plain_prefix: int | torch.Tensor = 0) -> FixedPointQuality:
    """Loss, accuracy and distance to H* of each pass and of H*: a fixed point can be reached and be unreadable."""
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1, MAX_COUNT)
    if targets.shape != idx.shape:
        raise ValueError(f"targets shape {tuple(targets.shape)} != idx {tuple(idx.shape)}")
    B, T = idx.shape
    with eval_mode(model):
        exact = schedules.Sequential().run(model, idx, plain_prefix)
        star = exact.memory.double()
        scale = torch.linalg.vector_norm(star, dim=-1).clamp_min(1e-300)
        rows, per_position = [], []
        for k, out in enumerate(schedules.iterate_passes(model, idx, plain_prefix, passes), start=1):
            gap = torch.linalg.vector_norm(out.memory.double() - star, dim=-1)  # (B, T)
            loss, right = example_scores(out.logits, targets)
            dist = (torch.linalg.vector_norm(gap, dim=1) / torch.linalg.vector_norm(scale, dim=1)).numpy()
            rows += [{"example": b, "pass": k, "schedule": "multipass", "loss": loss[b], "correct": bool(right[b]),
                      "distance": dist[b]} for b in range(B)]
            per_position.append(pd.DataFrame({"pass": k, "position": np.arange(T),
                                              "distance": (gap / scale).pow(2).mean(0).sqrt().numpy()}))
        loss, right = example_scores(exact.logits, targets)
        rows += [{"example": b, "pass": np.nan, "schedule": "sequential", "loss": loss[b], "correct": bool(right[b]),
                  "distance": 0.0} for b in range(B)]
    return FixedPointQuality(pd.DataFrame(rows, columns=QUALITY_COLUMNS), pd.concat(per_position, ignore_index=True))


# ---------------------------------------------------------------------------------------------- geometry
@dataclass
class Geometry:
    per_pass: pd.DataFrame  # GEOMETRY_COLUMNS
    passes_needed: np.ndarray  # (B, T) the first pass at which a position met the stopping rule (0: never)


def _step_stats(previous: torch.Tensor, previous_logp: torch.Tensor, memory: torch.Tensor,
                logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) relative residual and KL from pass k-1's next-token distribution to pass k's."""
    residual = torch.linalg.vector_norm(memory - previous, dim=-1) / torch.linalg.vector_norm(memory, dim=-1)
    return residual, (previous_logp.exp() * (previous_logp - logp)).sum(-1)


@torch.no_grad()
def iterate_geometry(model: GPT, idx: torch.Tensor, passes: int, targets: torch.Tensor | None = None,
                     rel_tol: float = 1e-3, kl_tol: float = 1e-4, plain_prefix: int | torch.Tensor = 0) -> Geometry:
    """The iteration's shape per pass: ``cosine`` of successive steps near -1 is oscillating, near 1 creeping.
    Stopping rule: residual < ``rel_tol`` and KL < ``kl_tol``."""
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 2, MAX_COUNT)
    for name, tol in (("rel_tol", rel_tol), ("kl_tol", kl_tol)):
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < math.inf:
            raise ValueError(f"{name}={tol!r} is invalid: must be finite and > 0")
    B, T = idx.shape
    needed = np.zeros((B, T), dtype=np.int64)
    rows, prev, prev_step, prev_logp = [], None, None, None
    with eval_mode(model):
        for k, out in enumerate(schedules.iterate_passes(model, idx, plain_prefix, passes), start=1):
            memory, logp = out.memory.double(), out.logits.double().log_softmax(-1)
            loss = float(token_losses(out.logits.float(), targets).sum() / (targets >= 0).sum().clamp(min=1)) \
                if targets is not None else math.nan
            if prev is None:
                rows.append({"pass": 1, "residual": math.nan, "cosine": math.nan, "acceleration": math.nan,
                             "kl": math.nan, "loss": loss, "stopped_share": 0.0})
            else:
                step = memory - prev
                rel_pos, kl_pos = _step_stats(prev, prev_logp, memory, logp)
                met = ((rel_pos < rel_tol) & (kl_pos < kl_tol)).numpy() & (needed == 0)
                needed[met] = k
                cosine = acceleration = math.nan
                if prev_step is not None:
                    cosine = float(F.cosine_similarity(step.flatten(), prev_step.flatten(), dim=0))
                    acceleration = float(torch.linalg.vector_norm(step - prev_step)
                                         / torch.linalg.vector_norm(prev_step).clamp_min(1e-300))
                rows.append({"pass": k, "residual": float(torch.linalg.vector_norm(step)
                                                          / torch.linalg.vector_norm(memory)),
                             "cosine": cosine, "acceleration": acceleration, "kl": float(kl_pos.mean()),
                             "loss": loss, "stopped_share": float((needed > 0).mean())})
                prev_step = step
            prev, prev_logp = memory, logp
    return Geometry(pd.DataFrame(rows, columns=GEOMETRY_COLUMNS), needed)


@torch.no_grad()
def adaptive_prefill(model: GPT, idx: torch.Tensor, max_passes: int, rel_tol: float = 1e-3, kl_tol: float = 1e-4,
                     plain_prefix: int | torch.Tensor = 0) -> tuple[schedules.ScheduleOutput, int]:
    """Fused prefill stopped by ``iterate_geometry``'s rule (whole batch) or ``max_passes``; returns passes run."""
    check_tokens(model.config.vocab_size, idx)
    check_int("max_passes", max_passes, 1, MAX_COUNT)
    prev = prev_logp = None
    with eval_mode(model):
        for k, out in enumerate(schedules.iterate_passes(model, idx, plain_prefix, max_passes), start=1):  # noqa: B007
            logp = out.logits.double().log_softmax(-1)
            if prev is not None:
                rel, kl = _step_stats(prev, prev_logp, out.memory.double(), logp)
                if bool((rel < rel_tol).all() and (kl < kl_tol).all()):
                    break
            prev, prev_logp = out.memory.double(), logp
    return schedules.ScheduleOutput(out.logits, [out.logits], out.memory, [None], [1.0], f"adaptive({k})"), k


def residual_behaviour(residuals: Sequence[float], zero: float = 1e-6) -> str:
    """One of ``BEHAVIOURS`` for a residual series ("oscillates": does not halve, changes mostly alternate sign)."""
    values = np.asarray([r for r in residuals if np.isfinite(r)], dtype=np.float64)
    if len(values) < 4:
        raise ValueError(f"residuals must hold >= 4 finite values, got {len(values)}")
    if values[-1] < zero:
        return "decays to zero"
    half = len(values) // 2
    early, late = float(np.median(values[:half])), float(np.median(values[half:]))
    if late > 2 * early:
        return "grows"
    signs = np.sign(np.diff(values[half:]))
    alternating = float(np.mean(signs[1:] * signs[:-1] < 0)) if len(signs) > 1 else 0.0
    if late > 0.5 * early and alternating > 0.5:
        return "oscillates"
    return "decays to a plateau"
