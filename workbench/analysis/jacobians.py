"""Derivatives of the token recurrence ``m_{t-1} -> m_t`` (a causal pass map's Jacobian is nilpotent: its norm
certifies nothing). Exponents use a float64 copy: float32 would round away products of many factors."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from .. import schedules
from ..kv_cache import KVCache
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens, fail
from .fixed_point import check_prefix

LYAPUNOV_COLUMNS = ["example", "horizon", "position", "index", "exponent", "path"]
SPECTRA_COLUMNS = ["example", "position", "spectral_norm", "spectral_radius"]
SENSITIVITY_COLUMNS = ["distance", "position", "effect", "logit_effect"]


def _float64(model: GPT) -> GPT:
    """A float64 copy in eval mode."""
    return copy.deepcopy(model).double().eval()


def _check_window(T: int, t0: int, horizon: int, name: str = "horizon") -> None:
    if T < 2:
        raise ValueError(f"idx must hold at least 2 positions, got T={T}")
    check_int("t0", t0, 0, T - 2)
    check_int(name, horizon, 1, T - 1 - t0)


def _exact_prefix(model: GPT, idx: torch.Tensor, t: int, size: int | None = None) -> tuple[KVCache, torch.Tensor]:
    """The exact recurrence over positions < ``t``: the cache and the memory ``t`` reads."""
    cache = model.new_kv_cache(idx.size(0), t if size is None else size)
    schedules.Sequential().prefill(model, idx[:, :t], cache)
    return cache, cache.state


def _linearised(fn: Callable[[torch.Tensor], torch.Tensor], point: torch.Tensor):
    """``(w -> J^T w, v -> J v)`` of ``fn`` at ``point``, reverse over reverse: no forward-mode rules needed."""
    value, pullback = torch.func.vjp(fn, point)
    _, push = torch.func.vjp(pullback, torch.zeros_like(value))
    return (lambda w: pullback(w)[0]), (lambda v: push((v,))[0])


def _unit_directions(shape: tuple[int, int], seed: int, like: torch.Tensor) -> torch.Tensor:
    """One random unit vector per example, reproducible on any device."""
    direction = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True)
    return direction.to(device=like.device, dtype=like.dtype)


def _orthonormal(B: int, D: int, k: int, seed: int) -> torch.Tensor:
    """(B, D, k) float64 random orthonormal columns per example."""
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(B, D, k, generator=g, dtype=torch.float64))[0]


# ---------------------------------------------------------------------------------------------- one step
@torch.no_grad()
def recurrence_jacobians(model: GPT, idx: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """(B, len(positions), D, D) float64 ``d m_t / d m_{t-1}``, all else held at the exact sequential values."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    positions = [int(t) for t in positions]
    if not positions or min(positions) < 1 or max(positions) > T - 1:
        raise ValueError(f"positions must be non-empty, in [1, {T - 1}], got {positions}")
    model64 = _float64(model)
    cache = model64.new_kv_cache(B, T)
    memory = schedules.Sequential().prefill(model64, idx, cache).memory
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
    """Spectral norm and radius of the one-step Jacobian: norm > 1 with radius < 1 is a transient."""
    jac = recurrence_jacobians(model, idx, positions)
    norms = torch.linalg.matrix_norm(jac, ord=2)
    radii = torch.linalg.eigvals(jac).abs().amax(-1)
    b, p = np.meshgrid(np.arange(idx.size(0)), np.asarray(list(positions)), indexing="ij")
    return pd.DataFrame({"example": b.ravel(), "position": p.ravel(), "spectral_norm": norms.reshape(-1).numpy(),
                         "spectral_radius": radii.reshape(-1).numpy()}, columns=SPECTRA_COLUMNS)


def _power_iteration(fn: Callable[[torch.Tensor], torch.Tensor], point: torch.Tensor, v: torch.Tensor,
                     iters: int) -> dict[str, object]:
    """Largest singular value of ``fn``'s Jacobian per example, from ``v``."""
    pullback, pushforward = _linearised(fn, point)
    estimates: list[float] = []
    for _ in range(iters):
        u = pushforward(v)
        sigma = torch.linalg.vector_norm(u.flatten(1), dim=-1)
        estimates.append(float(sigma.max()))
        w = pullback(u)
        scale = torch.linalg.vector_norm(w.flatten(1), dim=-1).clamp_min(torch.finfo(w.dtype).tiny)
        v = w / scale.view(-1, *[1] * (w.ndim - 1))
    return {"norm": estimates[-1], "per_example": sigma.detach().cpu(), "estimates": estimates}


@torch.no_grad()
def jacobian_power_iteration(model: GPT, idx: torch.Tensor, t: int, iters: int = 50,
                             seed: int = 0) -> dict[str, object]:
    """Power iteration for the spectral norm of ``m_{t-1} -> m_t``; ``estimates`` per iteration judge convergence."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    check_int("t", t, 1, T - 1)
    check_int("iters", iters, 1)
    with eval_mode(model):
        cache, point = _exact_prefix(model, idx, t)
        step = schedules.continuation(model, idx, cache, t, t + 1)
        # the fused attention kernels have no second derivative; the math kernel (matmuls, softmax) has
        with sdpa_kernel(SDPBackend.MATH):
            return _power_iteration(lambda memory: step(memory)[:, 0], point,
                                    _unit_directions((B, point.size(-1)), seed, point), iters)


def jacobian_norm(model: GPT, idx: torch.Tensor, t: int, iters: int = 50, seed: int = 0) -> float:
    """Spectral norm of ``m_{t-1} -> m_t`` at ``t``: below 1, a small error in the memory shrinks there."""
    return float(jacobian_power_iteration(model, idx, t, iters, seed)["norm"])


@torch.no_grad()
def pass_map_jacobian(model: GPT, idx: torch.Tensor, iters: int = 30, seed: int = 0,
                      plain_prefix: int | torch.Tensor = 0) -> dict[str, object]:
    """Spectral norm of the pass map at H*: above 1 is no divergence (T passes reach H*) but transient growth."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    check_int("iters", iters, 1)
    check_prefix(plain_prefix, T)
    with eval_mode(model):
        point = schedules.Sequential().run(model, idx, plain_prefix).memory
        reads = schedules.feedback_mask(B, T, plain_prefix, idx.device)
        start = _unit_directions((B, T * point.size(-1)), seed, point).view_as(point)
        with sdpa_kernel(SDPBackend.MATH):  # the fused kernels have no second derivative
            return _power_iteration(lambda memory: schedules.jacobi_pass(model, idx, memory, reads).memory, point,
                                    start, iters)


# ---------------------------------------------------------------------------------------------- tangents
@torch.no_grad()
def tangent_map(model: GPT, idx: torch.Tensor, t0: int, horizon: int, directions: torch.Tensor) -> torch.Tensor:
    """(B, horizon, D, k) float64 ``d m_{t0+n} / d m_t0 @ directions``, through the memory chain and the later
    keys/values."""
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
        push = _linearised(fn, point)[1]
        columns = [push(directions[..., i].to(point)) for i in range(directions.size(-1))]
    return torch.stack(columns, dim=-1).detach()


def lyapunov_from_jacobians(jacobians: torch.Tensor, k: int, start: torch.Tensor | None = None) -> torch.Tensor:
    """(B, n, k) finite-time Lyapunov exponents of ``J_n ... J_1`` by QR at every step (Benettin); a zero factor
    gives ``-inf``."""
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
    """Finite-time Lyapunov exponents from ``t0`` (below 0 a perturbation dies out); ``path="memory"`` holds
    keys/values. Lower exponents hold while their gap to the top times n stays within float64's ~36 nats."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    horizon = T - 1 - t0 if horizon is None else horizon
    _check_window(T, t0, horizon)
    D = model.config.n_embd
    check_int("k", k, 1, D)
    directions = _orthonormal(B, D, k, seed)
    if path == "full":
        tangents = tangent_map(model, idx, t0, horizon, directions)
        r = torch.linalg.qr(tangents.double())[1]
        exps = torch.log(torch.diagonal(r, dim1=-2, dim2=-1).abs()) / torch.arange(1, horizon + 1)[None, :, None]
    elif path == "memory":
        jacobians = recurrence_jacobians(model, idx, list(range(t0 + 1, t0 + 1 + horizon)))
        exps = lyapunov_from_jacobians(jacobians, k, directions)
    else:
        fail("path", path, "must be 'full' or 'memory'")
    b, n, i = np.meshgrid(np.arange(B), np.arange(1, horizon + 1), np.arange(1, k + 1), indexing="ij")
    return pd.DataFrame({"example": b.ravel(), "horizon": n.ravel(), "position": (t0 + n).ravel(),
                         "index": i.ravel(), "exponent": exps.reshape(-1).cpu().numpy(), "path": path},
                        columns=LYAPUNOV_COLUMNS)


@torch.no_grad()
def sensitivity(model: GPT, idx: torch.Tensor, t0: int, max_distance: int | None = None, eps: float = 1e-3,
                seed: int = 0) -> pd.DataFrame:
    """How a nudge ``eps * u`` to ``m_t0`` spreads (changes over ``eps``, RMS over the batch); float64 for tiny
    ``eps``."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    max_distance = T - 1 - t0 if max_distance is None else max_distance
    _check_window(T, t0, max_distance, "max_distance")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or math.isinf(eps):
        fail("eps", eps, "must be finite and > 0")
    stop = t0 + 1 + max_distance
    with eval_mode(model):
        clean, _ = _exact_prefix(model, idx, t0 + 1, stop)
        nudged = copy.deepcopy(clean)
        nudged.state = nudged.state + eps * _unit_directions(tuple(nudged.state.shape), seed, nudged.state)
        logits, memory = schedules.recur(model, idx, clean, t0 + 1, stop)
        logits_p, memory_p = schedules.recur(model, idx, nudged, t0 + 1, stop)
    scale = eps * math.sqrt(B)

    def effect(a: torch.Tensor, b: torch.Tensor) -> list[float]:
        return (torch.linalg.vector_norm((b - a).double(), dim=(0, 2)) / scale).tolist()

    distance = list(range(1, max_distance + 1))
    return pd.DataFrame({"distance": distance, "position": [t0 + d for d in distance],
                         "effect": effect(memory, memory_p), "logit_effect": effect(logits, logits_p)},
                        columns=SENSITIVITY_COLUMNS)
