"""Dynamics of the token recurrence: is the exact recurrence stable, and is its fixed point readable?

A Jacobi pass map over a causal sequence is nilpotent (its Jacobian is strictly lower triangular
in position), so its spectral norm or radius certifies nothing about whether fused prefill or
SOFT decoding works. What decides it is the token recurrence itself, ``m_{t-1} -> m_t``, and the
*quality* of the fixed point the passes converge to. This module measures both, on any model and
any schedule value, and returns tidy data (plots only draw):

- ``tangent_map`` / ``lyapunov``: the exact tangent of the recurrence, a perturbation of the
  memory read at ``t0 + 1`` carried through everything that follows (the memory chain *and* the
  keys/values later positions attend to), and the finite-time Lyapunov exponents it implies, per
  example and horizon; ``path="memory"`` chains the one-step Jacobians instead (keys/values held
  at the trajectory), renormalised by QR at every step (Benettin).
- ``recurrence_jacobians`` / ``jacobian_spectra``: the one-step Jacobian ``dm_t / dm_{t-1}``
  (keys/values of earlier positions held), with its spectral norm *and* spectral radius per
  position: a norm above 1 with a radius below 1 is a transient, not an instability.
- ``fixed_point_quality``: the exact recurrence's loss and accuracy against each pass k's, and
  the distance between the two, per example and per position.
- ``fed_back_lens``: logit lens (and an affine tuned lens fitted on held-out data) of the
  residual stream at every pass and depth at the answer position, and of the memory fed back
  there; the answer's rank per pass, answer flips between passes, and how much of the token the
  fused input keeps (cosine with the plain pass's input).
- ``iterate_geometry`` / ``adaptive_prefill``: step norm, angle between consecutive steps and
  acceleration of the pass iterates, a stopping rule (relative residual and KL between
  consecutive passes' outputs), the passes each position needs, and quality against passes.
- ``readability_table``: the five quantities the fixed-point study reports for one model.

Everything runs in eval mode (FBT's jitter would blur a fixed point). The Lyapunov and Jacobian
functions run on a float64 copy of the model: exponents are logarithms of products of many
factors, which float32 would round away.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .. import schedules, tasks
from ..fast import ops
from ..kv_cache import KVCache
from ..metrics import token_losses
from ..model import GPT, eval_mode
from ..validation import MAX_COUNT, check_int, check_tokens
from .cache import run_with_cache

LYAPUNOV_COLUMNS = ["example", "horizon", "position", "index", "exponent", "path"]
SPECTRA_COLUMNS = ["example", "position", "spectral_norm", "spectral_radius"]
QUALITY_COLUMNS = ["example", "pass", "schedule", "loss", "correct", "distance"]
LENS_COLUMNS = ["pass", "depth", "lens", "answer_rank", "answer_prob", "top1_is_answer"]
GEOMETRY_COLUMNS = ["pass", "residual", "cosine", "acceleration", "kl", "loss", "stopped_share"]
BEHAVIOURS = ("decays to zero", "decays to a plateau", "oscillates", "grows")


def _float64(model: GPT) -> GPT:
    """A float64 copy in eval mode (the caller's model is left as it is)."""
    return copy.deepcopy(model).double().eval()


def _check_window(T: int, t0: int, horizon: int) -> None:
    if T < 2:
        raise ValueError(f"idx must hold at least 2 positions, got T={T}")
    check_int("t0", t0, 0, T - 2)
    check_int("horizon", horizon, 1, T - 1 - t0)


# ---------------------------------------------------------------------------------------------- pure prefix
def _exact_prefix(model: GPT, idx: torch.Tensor, t: int) -> tuple[KVCache, torch.Tensor]:
    """The exact recurrence over positions ``< t``: its cache and the memory position ``t`` reads."""
    cache = model.new_kv_cache(idx.size(0), t)
    schedules.sequential(model, idx[:, :t], cache=cache)
    return cache, cache.state


def _pushforward(fn, point: torch.Tensor):
    """``v -> J v`` of ``fn`` at ``point`` by reverse over reverse (no forward-mode rules needed)."""
    value, pullback = torch.func.vjp(fn, point)
    _, push = torch.func.vjp(pullback, torch.zeros_like(value))
    return lambda v: push((v,))[0]


def _orthonormal(B: int, D: int, k: int, seed: int, like: torch.Tensor) -> torch.Tensor:
    """(B, D, k) random orthonormal columns per example, reproducible from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(B, D, k, generator=g, dtype=torch.float64))
    return q.to(like)


# ---------------------------------------------------------------------------------------------- tangents
@torch.no_grad()
def tangent_map(model: GPT, idx: torch.Tensor, t0: int, horizon: int, directions: torch.Tensor) -> torch.Tensor:
    """The exact tangent of the recurrence: how a perturbation of ``m_t0`` moves ``m_{t0+1..t0+horizon}``.

    ``directions`` (B, D, k): k tangent vectors per example, added to the memory position ``t0 + 1``
    reads. Returns (B, horizon, D, k): ``d m_{t0+n} / d m_t0 @ directions`` for n = 1..horizon,
    through the memory chain and the keys/values of positions ``t0 + 1 ..`` that later positions
    attend to (the keys/values of positions ``<= t0`` do not depend on ``m_t0``). Float64.
    """
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    _check_window(T, t0, horizon)
    D = model.config.n_embd
    if directions.ndim != 3 or directions.shape[:2] != (B, D):
        raise ValueError(f"directions must have shape ({B}, {D}, k), got {tuple(directions.shape)}")
    model64 = _float64(model)
    cache, point = _exact_prefix(model64, idx, t0 + 1)
    fn = schedules.continuation(model64, idx, cache, t0 + 1, t0 + 1 + horizon)
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):  # the fused kernels have no second derivative
        push = _pushforward(fn, point)
        columns = [push(directions[..., i].to(point)) for i in range(directions.size(-1))]
    return torch.stack(columns, dim=-1).detach()


def lyapunov_from_jacobians(jacobians: torch.Tensor, k: int, start: torch.Tensor | None = None) -> torch.Tensor:
    """Finite-time Lyapunov exponents of the product ``J_n ... J_1`` by QR at every step (Benettin).

    ``jacobians`` (B, n, D, D), applied in order along dimension 1; ``start`` (B, D, k) orthonormal
    directions to follow (default: the first k axes). Returns (B, n, k): after each step, the top
    ``k`` exponents ``(1/n) sum log |R_ii|``. A zero factor gives ``-inf``.
    """
    if jacobians.ndim != 4 or jacobians.size(-1) != jacobians.size(-2):
        raise ValueError(f"jacobians must have shape (B, n, D, D), got {tuple(jacobians.shape)}")
    B, n, D, _ = jacobians.shape
    check_int("k", k, 1, D)
    q = torch.eye(D, k, dtype=torch.float64).expand(B, D, k) if start is None else start.double()
    logs = torch.zeros(B, k, dtype=torch.float64)
    out = []
    for step in range(n):
        q, r = torch.linalg.qr(jacobians[:, step].double() @ q)
        logs = logs + torch.log(torch.diagonal(r, dim1=-2, dim2=-1).abs())
        out.append(logs / (step + 1))
    return torch.stack(out, dim=1)


def lyapunov(model: GPT, idx: torch.Tensor, t0: int, horizon: int | None = None, k: int = 1, path: str = "full",
             seed: int = 0) -> pd.DataFrame:
    """Finite-time Lyapunov exponents of the exact recurrence from position ``t0``, per example and horizon.

    ``path="full"``: the exact tangent (``tangent_map``) of k random orthonormal directions, its
    QR after each horizon n giving ``(1/n) log |R_ii|``: the top exponent is exact; lower ones hold
    while their gap to it times n stays within float64's ~36 nats. ``path="memory"``: the one-step
    Jacobians (keys/values held at the trajectory) chained with QR at every step. Exponent < 0: a
    perturbation of the carried state dies out (the recurrence forgets); > 0: it grows.
    One row per (example, horizon, index).
    """
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    horizon = T - 1 - t0 if horizon is None else horizon
    _check_window(T, t0, horizon)
    D = model.config.n_embd
    check_int("k", k, 1, D)
    directions = _orthonormal(B, D, k, seed, torch.zeros((), dtype=torch.float64))
    if path == "full":
        tangents = tangent_map(model, idx, t0, horizon, directions)
        r = torch.linalg.qr(tangents.double())[1]
        exps = torch.log(torch.diagonal(r, dim1=-2, dim2=-1).abs()) / torch.arange(1, horizon + 1)[None, :, None]
    elif path == "memory":
        jacobians = recurrence_jacobians(model, idx, list(range(t0 + 1, t0 + 1 + horizon)))
        exps = lyapunov_from_jacobians(jacobians, k, directions)
    else:
        raise ValueError(f"path={path!r} is invalid: must be 'full' or 'memory'")
    b, n, i = np.meshgrid(np.arange(B), np.arange(1, horizon + 1), np.arange(1, k + 1), indexing="ij")
    return pd.DataFrame({"example": b.ravel(), "horizon": n.ravel(), "position": (t0 + n).ravel(),
                         "index": i.ravel(), "exponent": exps.reshape(-1).cpu().numpy(), "path": path},
                        columns=LYAPUNOV_COLUMNS)


@torch.no_grad()
def recurrence_jacobians(model: GPT, idx: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """(B, len(positions), D, D): the one-step Jacobian ``d m_t / d m_{t-1}`` at each position t.

    Everything but the memory position t reads is held at the exact sequential values (the
    keys/values of positions < t, the token at t). Built row by row from D vector-Jacobian products;
    examples are independent, so one product gives the same row of every example's Jacobian. Float64.
    """
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    positions = [int(t) for t in positions]
    if not positions or min(positions) < 1 or max(positions) > T - 1:
        raise ValueError(f"positions must be a non-empty list of positions in [1, {T - 1}], got {positions}")
    model64 = _float64(model)
    cache = model64.new_kv_cache(B, T)
    memory = schedules.sequential(model64, idx, cache=cache).memory
    D = model.config.n_embd
    out = []
    for t in positions:
        one_step = schedules.continuation(model64, idx, cache, t, t + 1)
        with torch.enable_grad():
            _, pullback = torch.func.vjp(one_step, memory[:, t - 1])
            rows = [pullback(torch.eye(D, dtype=torch.float64)[i].expand(B, 1, D))[0] for i in range(D)]
        out.append(torch.stack(rows, dim=1))  # row i: d m_t[i] / d m_{t-1}
    return torch.stack(out, dim=1).detach()


def jacobian_spectra(model: GPT, idx: torch.Tensor, positions: Sequence[int]) -> pd.DataFrame:
    """Spectral norm and spectral radius of the one-step Jacobian per (example, position).

    Norm < 1: this step shrinks every perturbation of the carried state. Radius < 1 with a norm
    above 1: the step stretches some directions, but repeated it would shrink them.
    """
    jac = recurrence_jacobians(model, idx, positions)
    norms = torch.linalg.matrix_norm(jac, ord=2)
    radii = torch.linalg.eigvals(jac).abs().amax(-1)
    b, p = np.meshgrid(np.arange(idx.size(0)), np.asarray(list(positions)), indexing="ij")
    return pd.DataFrame({"example": b.ravel(), "position": p.ravel(), "spectral_norm": norms.reshape(-1).numpy(),
                         "spectral_radius": radii.reshape(-1).numpy()}, columns=SPECTRA_COLUMNS)


# ---------------------------------------------------------------------------------------------- fixed point
@dataclass
class FixedPointQuality:
    """Per example and per position: each pass against the exact recurrence, and the exact one itself."""

    per_example: pd.DataFrame  # QUALITY_COLUMNS; schedule "multipass" rows per pass, one "sequential" row
    per_position: pd.DataFrame  # pass, position, distance (RMS over examples, relative to the exact memory)


def _example_scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(B,) mean loss over each example's targets and whether every one is argmax-right."""
    scored = targets >= 0
    losses = (token_losses(logits.float(), targets) * scored).sum(1) / scored.sum(1).clamp(min=1)
    right = ((logits.argmax(-1) == targets) | ~scored).all(1)
    return losses.double().cpu().numpy(), right.cpu().numpy()


@torch.no_grad()
def fixed_point_quality(model: GPT, idx: torch.Tensor, targets: torch.Tensor, passes: int,
                        plain_prefix: int | torch.Tensor = 0) -> FixedPointQuality:
    """Loss and accuracy of passes 1..``passes`` and of the exact recurrence, with their distance.

    ``distance`` is ``||H^k - H*|| / ||H*||`` per example over all positions (per position in
    ``per_position``): convergence. The exact row says whether what the passes converge to is
    any good: a fixed point can be reached and still be unreadable.
    """
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1, MAX_COUNT)
    if targets.shape != idx.shape:
        raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
    B, T = idx.shape
    with eval_mode(model):
        exact = schedules.sequential(model, idx, plain_prefix)
        star = exact.memory.double()
        scale = torch.linalg.vector_norm(star, dim=-1).clamp_min(1e-300)
        rows, per_position = [], []
        for k, out in enumerate(schedules.iterate_passes(model, idx, plain_prefix, passes), start=1):
            gap = torch.linalg.vector_norm(out.memory.double() - star, dim=-1)  # (B, T)
            loss, right = _example_scores(out.logits, targets)
            dist = (torch.linalg.vector_norm(gap, dim=1) / torch.linalg.vector_norm(scale, dim=1)).numpy()
            rows += [{"example": b, "pass": k, "schedule": "multipass", "loss": loss[b], "correct": bool(right[b]),
                      "distance": dist[b]} for b in range(B)]
            per_position.append(pd.DataFrame({"pass": k, "position": np.arange(T),
                                              "distance": (gap / scale).pow(2).mean(0).sqrt().numpy()}))
        loss, right = _example_scores(exact.logits, targets)
        rows += [{"example": b, "pass": np.nan, "schedule": "sequential", "loss": loss[b], "correct": bool(right[b]),
                  "distance": 0.0} for b in range(B)]
    return FixedPointQuality(pd.DataFrame(rows, columns=QUALITY_COLUMNS), pd.concat(per_position, ignore_index=True))


# ---------------------------------------------------------------------------------------------- lens
@dataclass
class TunedLens:
    """One affine map per depth, fitted by least squares to carry that depth's stream to the final one."""

    weights: list[torch.Tensor]  # (D + 1, D) per depth: [h, 1] @ W ~ final stream

    def apply(self, depth: int, resid: torch.Tensor) -> torch.Tensor:
        w = self.weights[depth].to(resid)
        return torch.cat([resid, torch.ones_like(resid[..., :1])], dim=-1) @ w


def _readout(model: GPT, stream: torch.Tensor) -> torch.Tensor:
    """Logits of a residual stream (pre-norm) as the model reads its final one: norm, readout, softcap."""
    logits = F.linear(ops().norm(stream), model.readout_weight.to(stream))
    cap = model.config.logit_softcap
    return cap * torch.tanh(logits / cap) if cap > 0 else logits


def _answer_streams(model: GPT, idx: torch.Tensor, where: torch.Tensor, passes: int) -> tuple[torch.Tensor, ...]:
    """Per pass, at each example's position ``where``: the stream at every depth (passes, L+1, B, D), the
    memory read there (passes, B, D) and the depth-0 input (passes, B, D)."""
    _, cache = run_with_cache(model, idx, schedules.Multipass(passes), example_positions=where,
                              names_filter=lambda n: n in ("hook_input", "hook_memory_in")
                              or n.endswith("hook_resid_post"))
    resid = torch.stack([cache.pass_(k).accumulated_resid() for k in range(cache.n_passes)])
    memory = torch.stack([cache.pass_(k)["hook_memory_in"] if k > 0 else torch.zeros_like(resid[0, 0])
                          for k in range(cache.n_passes)])
    return resid, memory, cache.stack_passes("hook_input")


@torch.no_grad()
def fit_tuned_lens(model: GPT, idx: torch.Tensor, where: torch.Tensor, passes: int = 1,
                   ridge: float = 1e-3) -> TunedLens:
    """An affine tuned lens fitted on held-out prompts ``idx``: per depth, ridge least squares from the
    stream at ``where`` to the final stream there, pooled over passes 1..``passes`` (the final depth
    maps to itself)."""
    with eval_mode(model):
        resid, _, _ = _answer_streams(model, idx, where, passes)
    final = resid[:, -1].reshape(-1, resid.size(-1)).double()
    weights = []
    D = resid.size(-1)
    for depth in range(resid.size(1) - 1):
        x = resid[:, depth].reshape(-1, resid.size(-1)).double()
        x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
        gram = x.T @ x + ridge * x.size(0) * torch.eye(x.size(1), dtype=torch.float64)
        weights.append(torch.linalg.solve(gram, x.T @ final))
    weights.append(torch.cat([torch.eye(D, dtype=torch.float64), torch.zeros(1, D, dtype=torch.float64)]))
    return TunedLens(weights)


def _rank_rows(model: GPT, logits: torch.Tensor, answer: torch.Tensor, **labels) -> dict:
    probs = logits.float().softmax(-1)
    answer_logit = logits.gather(-1, answer[:, None])
    rank = (logits > answer_logit).sum(-1).float()
    return {**labels, "answer_rank": float(rank.mean()), "answer_prob": float(probs.gather(-1, answer[:, None]).mean()),
            "top1_is_answer": float((logits.argmax(-1) == answer).float().mean())}


@torch.no_grad()
def fed_back_lens(model: GPT, idx: torch.Tensor, where: torch.Tensor, answer: torch.Tensor, passes: int,
                  tuned: TunedLens | None = None) -> dict[str, pd.DataFrame]:
    """What the stream at each example's answer position ``where`` says about ``answer`` (B,), per pass.

    ``lens``: one row per (pass, depth, lens) for the residual stream ("logit", and "tuned" when a
    ``TunedLens`` is given), plus depth -1 rows for the memory read there ("memory": the fed-back
    state read out as if it were the final stream). ``flips``: per pass k >= 2, the share of
    examples whose final answer changes from pass k-1. ``input``: per pass, the cosine between
    the depth-0 input and the plain pass's (how much of the token the fused input keeps) and the
    memory's RMS relative to the plain input's.
    """
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1, 100_000)
    B = idx.size(0)
    if where.shape != (B,) or answer.shape != (B,):
        raise ValueError(f"where and answer must have shape ({B},)")
    with eval_mode(model):
        resid, memory, inputs = _answer_streams(model, idx, where, passes)
        rows, finals = [], []
        for k in range(passes):
            for depth in range(resid.size(1)):
                rows.append(_rank_rows(model, _readout(model, resid[k, depth]), answer, **{
                    "pass": k + 1, "depth": depth, "lens": "logit"}))
                if tuned is not None:
                    rows.append(_rank_rows(model, _readout(model, tuned.apply(depth, resid[k, depth])), answer, **{
                        "pass": k + 1, "depth": depth, "lens": "tuned"}))
            if k > 0:
                rows.append(_rank_rows(model, _readout(model, memory[k]), answer, **{"pass": k + 1, "depth": -1,
                                                                                     "lens": "memory"}))
            finals.append(_readout(model, resid[k, -1]).argmax(-1))
    flips = pd.DataFrame({"pass": np.arange(2, passes + 1),
                          "flip_share": [float((finals[k] != finals[k - 1]).float().mean()) for k in range(1, passes)]})
    plain = inputs[0]
    rms = lambda x: x.pow(2).mean(-1).sqrt()  # noqa: E731
    inp = pd.DataFrame({"pass": np.arange(1, passes + 1),
                        "input_cosine": [float(F.cosine_similarity(inputs[k], plain, dim=-1).mean())
                                         for k in range(passes)],
                        "memory_rms_ratio": [float((rms(memory[k]) / rms(plain)).mean()) for k in range(passes)]})
    return {"lens": pd.DataFrame(rows, columns=LENS_COLUMNS), "flips": flips, "input": inp}


# ---------------------------------------------------------------------------------------------- geometry
@dataclass
class Geometry:
    per_pass: pd.DataFrame  # GEOMETRY_COLUMNS
    passes_needed: np.ndarray  # (B, T) the first pass at which a position met the stopping rule (0: never)


def _step_stats(previous: torch.Tensor, previous_logp: torch.Tensor, memory: torch.Tensor,
                logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) per position: the relative residual ``||H^k - H^(k-1)|| / ||H^k||`` and the KL from pass k-1's
    next-token distribution to pass k's (float64 inputs): what the stopping rule reads."""
    residual = torch.linalg.vector_norm(memory - previous, dim=-1) / torch.linalg.vector_norm(memory, dim=-1)
    return residual, (previous_logp.exp() * (previous_logp - logp)).sum(-1)


@torch.no_grad()
def iterate_geometry(model: GPT, idx: torch.Tensor, passes: int, targets: torch.Tensor | None = None,
                     rel_tol: float = 1e-3, kl_tol: float = 1e-4, plain_prefix: int | torch.Tensor = 0) -> Geometry:
    """The shape of the fused-prefill iteration, pass by pass.

    Per pass k >= 2, with the step ``s_k = H^k - H^(k-1)``: ``residual`` ``||s_k|| / ||H^k||``,
    ``cosine`` between ``s_k`` and ``s_(k-1)`` (near -1: the iterates oscillate; near 1: they
    creep one way), ``acceleration`` ``||s_k - s_(k-1)|| / ||s_(k-1)||``, ``kl`` the mean KL from
    pass k-1's next-token distribution to pass k's, ``loss`` over ``targets`` and ``stopped_share``
    the share of positions that have met the stopping rule: relative residual below ``rel_tol``
    *and* KL below ``kl_tol`` at that position. ``passes_needed`` gives each position's first such pass.
    """
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 2, MAX_COUNT)
    for name, tol in (("rel_tol", rel_tol), ("kl_tol", kl_tol)):
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < math.inf:
            raise ValueError(f"{name}={tol!r} is invalid: must be a finite number > 0")
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
    """Fused prefill that stops when the whole batch meets the stopping rule (see ``iterate_geometry``), or
    at ``max_passes``. Returns the last pass as a ``ScheduleOutput`` and the passes it ran."""
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


# ---------------------------------------------------------------------------------------------- study row
def residual_behaviour(residuals: Sequence[float], zero: float = 1e-6) -> str:
    """How the pass residual behaves after the first passes: one of ``BEHAVIOURS``.

    "decays to zero": the last residual below ``zero``; "grows": the median of the last half above
    twice the first half's; "oscillates": it does not fall by half from the first half to the last,
    and its successive changes alternate in sign more than half the time; otherwise "decays to a
    plateau".
    """
    values = np.asarray([r for r in residuals if np.isfinite(r)], dtype=np.float64)
    if len(values) < 4:
        raise ValueError(f"residuals must hold at least 4 finite values, got {len(values)}")
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


def _accuracy_interval(correct: np.ndarray, seed: int = 0, n: int = 2000) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = rng.choice(correct.astype(np.float64), size=(n, len(correct))).mean(1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def readability_table(model: GPT, batch: tasks.Batch, dynamics_examples: int = 64, readable: float = 0.95,
                      long_batch: tasks.Batch | None = None, long_passes: int = 1000,
                      lyapunov_examples: int = 8, window_passes: int | None = None,
                      lyapunov_from: int | None = None, long_fused_examples: int | None = None) -> pd.DataFrame:
    """One row of the fixed-point study for ``model`` on held-out ``batch``: label loss and accuracy at passes
    1-3 and under the exact recurrence, the distance from pass 3 to the fixed point, the top Lyapunov exponent
    (mean over examples, with its range), the residual's behaviour over the pass window, and, when the exact
    recurrence reads at least ``readable`` and ``long_batch`` is given, the same on those long prompts after
    ``long_passes`` fused passes (on the first ``long_fused_examples`` long prompts; default all) and under the exact
    recurrence. The long prompts' pass-1 and pass-2 accuracies are reported for every model given ``long_batch``
    (does it need its feedback there, and answer at its trained depth?), and the long columns are measured only
    where pass 2 reaches ``readable`` too: a model that cannot answer the long prompts at its trained depth would
    make them measure length generalisation, not the fixed point (NaN, not a number that reads as one).
    ``window_passes`` (default 3T/4) and ``lyapunov_from`` (default T/2) shorten the pass window and the Lyapunov
    horizon (a smoke run)."""
    idx, targets = batch.tokens, batch.targets
    T = idx.size(1)
    quality = fixed_point_quality(model, idx, targets, 3).per_example
    by = quality.groupby(["schedule", "pass"], dropna=False)[["loss", "correct"]].mean()
    row: dict[str, float | str] = {}
    for k in (1, 2, 3):
        row[f"loss_pass{k}"], row[f"accuracy_pass{k}"] = by.loc[("multipass", k)].tolist()
    exact = quality[quality["schedule"] == "sequential"]
    row["loss_exact"], row["accuracy_exact"] = float(exact["loss"].mean()), float(exact["correct"].mean())
    row["accuracy_exact_low"], row["accuracy_exact_high"] = _accuracy_interval(exact["correct"].to_numpy())
    row["distance_pass3"] = float(quality.loc[quality["pass"] == 3, "distance"].mean())
    window = (3 * T) // 4 if window_passes is None else window_passes
    geo = iterate_geometry(model, idx[:dynamics_examples], window, targets[:dynamics_examples])
    row["residual_last"] = float(geo.per_pass["residual"].iloc[-1])
    row["residual_behaviour"] = residual_behaviour(geo.per_pass["residual"].iloc[2:].tolist())
    exps = lyapunov(model, idx[:lyapunov_examples], t0=T // 2 if lyapunov_from is None else lyapunov_from)
    final = exps[exps["horizon"] == exps["horizon"].max()]["exponent"]
    row["lyapunov_top"], row["lyapunov_min"], row["lyapunov_max"] = (float(final.mean()), float(final.min()),
                                                                     float(final.max()))
    for column in ("long_accuracy_pass1", "long_accuracy_pass2", "long_accuracy_exact", "long_accuracy_fused"):
        row[column] = math.nan
    if long_batch is None:
        return pd.DataFrame([row])
    tokens, targets = long_batch.tokens, long_batch.targets
    with torch.no_grad(), eval_mode(model):  # the trained depth first: a model that cannot answer there is no test
        for k, out in enumerate(schedules.iterate_passes(model, tokens, 0, 2), start=1):
            row[f"long_accuracy_pass{k}"] = float(_example_scores(out.logits, targets)[1].mean())
    if min(row["accuracy_exact"], row["long_accuracy_pass2"]) >= readable:
        fused_tokens = tokens[:long_fused_examples]
        with torch.no_grad(), eval_mode(model):
            exact_long = schedules.sequential(model, tokens)
            fused = None
            for fused in schedules.iterate_passes(model, fused_tokens, 0, long_passes):  # noqa: B007
                pass  # only the last pass is kept: 1,000 passes of logits would not fit in memory
        row["long_accuracy_exact"] = float(_example_scores(exact_long.logits, targets)[1].mean())
        row["long_accuracy_fused"] = float(_example_scores(fused.logits, targets[:long_fused_examples])[1].mean())
    return pd.DataFrame([row])
