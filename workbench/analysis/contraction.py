"""Fixed-point dynamics of the feedback map: does iterating it converge, and what does it remember?

FBT's training (and any fused prefill) runs the *pass map* H^(k) = F(shift(H^(k-1))) — Jacobi on a
causal system whose fixed point H* is the exact sequential recurrence. The paper's stability claim
is that, trained with a small share of 3-pass batches, this map contracts toward its fixed point
even when iterated hundreds of passes past its training depth. This module measures that claim
and two related properties of the recurrence itself:

- ``pass_dynamics``: per pass, the residual ``||H^k - H^(k-1)|| / ||H^k||``, the distance to the
  exact fixed point, the empirical contraction rate and the loss — streamed, so 1,000 passes cost
  the memory of one — optionally only over positions the passes have not made exact by causality
  (``from_position``; ``exact_by_causality`` says which positions those are);
- ``sensitivity``: perturb the memory one position carries forward and follow its effect along
  the exact sequential recurrence (does the feedback forget, or amplify?);
- ``jacobian_norm``: the spectral norm of the one-step map ``m_{t-1} -> m_t`` by power iteration
  on autograd Jacobian-vector products (a local contraction certificate when below 1);
- ``pass_map_jacobian``: the same for one whole Jacobi pass ``H -> F(shift(H))`` at its fixed point;
- ``decoding_states``: the size of the state a model carries while it writes 1,000 tokens (SOFT);
- ``memory_trajectory``: what each token reads and produces under the exact recurrence (norms,
  cosine of consecutive memories, top next tokens), the table ``widgets.token_stepper`` steps.

H is always the *memory* (``StepOutput.memory``: the normed state at the mechanism's source depth,
the top for FBT): the thing fed back, hence the state of the iteration. Every function runs the
model in eval mode (FBT's training jitter would blur a fixed point) and restores its mode after.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm

from .. import schedules
from ..decode import generate
from ..hooks import with_hooks
from ..metrics import token_losses
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens
from .cache import run_with_cache

PASS_COLUMNS = ["pass", "delta", "fixed_point_distance", "contraction_rate", "loss", "exact_by_causality"]
SENSITIVITY_COLUMNS = ["distance", "position", "effect", "logit_effect"]
DECODING_COLUMNS = ["position", "generated", "state_norm_mean", "state_norm_max"]


# ---------------------------------------------------------------------------------------------- checks
def check_prefix(plain_prefix: int | torch.Tensor, T: int) -> None:
    if not isinstance(plain_prefix, torch.Tensor):
        check_int("plain_prefix", plain_prefix, 0, T)


def _norm(x: torch.Tensor) -> float:
    """Frobenius norm accumulated in float64, so residuals near float32's resolution stay visible."""
    return float(torch.linalg.vector_norm(x.double()))


# ---------------------------------------------------------------------------------------------- passes
def exact_by_causality(B: int, T: int, k: int, plain_prefix: int | torch.Tensor = 0,
                       device: torch.device | str = "cpu") -> torch.Tensor:
    """(B, T) bool: the positions pass k (1-based) of the Jacobi iteration has made exact by causality.

    Position t reads ``m_{t-1}``; positions below the plain prefix (and position 0) read nothing and
    are exact at pass 1, and each pass carries one more exact memory one position on. So with a
    prefix of p, pass k is exact at t < max(p, 1) + k - 1: whatever such a position shows is the
    sequential recurrence itself, not the iteration approaching it.
    """
    first_read = torch.as_tensor(plain_prefix, device=device).clamp(min=1).expand(B)
    return torch.arange(T, device=device)[None, :] < (first_read[:, None] + k - 1)


def window_loss(logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, list[float]]:
    """Mean loss over the targets that are not -1, and each example's own mean (NaN where it has none)."""
    losses = token_losses(logits, targets).double()
    valid = (targets >= 0).double()
    per_example = (losses * valid).sum(1) / valid.sum(1)
    total = float((losses * valid).sum() / valid.sum()) if valid.sum() > 0 else math.nan
    return total, per_example.tolist()


@torch.no_grad()
def pass_dynamics(model: GPT, idx: torch.Tensor, passes: int = 1000, targets: torch.Tensor | None = None,
                  plain_prefix: int | torch.Tensor = 0, reference: torch.Tensor | None = None,
                  progress: bool = False, from_position: int = 0, keep_examples: bool = False) -> pd.DataFrame:
    """Iterate the Jacobi pass map ``passes`` times and report how it approaches its fixed point.

    One row per pass k (1-based): ``delta`` = ``||H^k - H^(k-1)|| / ||H^k||`` (NaN at pass 1);
    ``fixed_point_distance`` = ``||H^k - H*|| / ||H*||`` to the exact sequential memory H*;
    ``contraction_rate`` = ``delta_k / delta_(k-1)`` (NaN where undefined, e.g. once the residual
    is exactly 0); ``loss`` = mean next-token cross-entropy against ``targets`` (B, T), -1 = ignored
    (NaN without targets); ``exact_by_causality`` = the share of the measured positions that pass k
    has already made exact (``exact_by_causality``): where it is above 0 part of each number is the
    sequential recurrence, not the iteration.

    ``from_position``: measure every quantity (norms and loss) only over positions t >= it. A causal
    Jacobi iteration is exact after T passes, and position t after t + 1, so the claim that the
    pass map stays near its fixed point *while iterating* lives at positions the passes have not
    reached: with ``from_position`` >= ``passes`` every pass is compared on the same positions, none
    of them exact by causality. ``keep_examples``: add ``example_loss``, each example's own loss at
    that pass (a list, NaN where an example has no target in the window), for intervals over examples.

    Passes are streamed from ``schedules.iterate_passes`` and only the previous one is kept: memory
    does not grow with ``passes``. ``reference``: H* (B, T, D_mem) when the caller already has it;
    otherwise computed once with ``schedules.sequential``. ``progress``: a tqdm bar over passes.
    """
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1)
    B, T = idx.shape
    check_prefix(plain_prefix, T)
    check_int("from_position", from_position, 0, T - 1)
    if targets is not None and tuple(targets.shape) != tuple(idx.shape):
        raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
    if keep_examples and targets is None:
        raise ValueError("keep_examples=True needs targets: the per-example losses are of targets")
    window = slice(from_position, None)
    with eval_mode(model):
        exact = reference if reference is not None else schedules.sequential(model, idx, plain_prefix).memory
        expected = (*idx.shape, model.config.n_embd)
        if tuple(exact.shape) != expected:
            raise ValueError(f"reference must be the sequential memory of idx, shape {expected}, "
                             f"got {tuple(exact.shape)}")
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


# ---------------------------------------------------------------------------------------------- sensitivity
def _unit_directions(shape: tuple[int, int], seed: int, like: torch.Tensor) -> torch.Tensor:
    """One random unit vector per example, reproducible from ``seed`` whatever the device."""
    direction = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True)
    return direction.to(device=like.device, dtype=like.dtype)


@torch.no_grad()
def sensitivity(model: GPT, idx: torch.Tensor, t0: int, max_distance: int | None = None, eps: float = 1e-3,
                seed: int = 0) -> pd.DataFrame:
    """How a nudge to the memory position ``t0`` carries forward spreads along the exact recurrence.

    Runs the sequential recurrence to ``t0``, then continues twice from the same KV cache: clean,
    and with ``eps * u`` added to the state ``m_t0`` that position ``t0 + 1`` reads (``u`` a random
    unit vector per example). One row per ``distance`` d = 1..``max_distance`` (default: to the end
    of ``idx``): ``position`` = t0 + d, ``effect`` = ``||Δm_{t0+d}|| / eps`` and ``logit_effect`` =
    ``||Δlogits_{t0+d}|| / eps``, both root-mean-square over the batch (the injected perturbation
    itself has effect 1). An effect that decays with d means the feedback forgets; growth means
    the recurrence amplifies small errors. Without a mechanism (``none``) the memory is never read,
    so the effect is exactly 0. Use a float64 model for ``eps`` far below 1e-3.
    """
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    if T < 2:
        raise ValueError(f"idx must hold at least 2 positions to follow a perturbation, got T={T}")
    check_int("t0", t0, 0, T - 2)
    max_distance = T - 1 - t0 if max_distance is None else max_distance
    check_int("max_distance", max_distance, 1, T - 1 - t0)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or math.isinf(eps):
        raise ValueError(f"eps={eps!r} is invalid: must be a finite number > 0")
    stop = t0 + 1 + max_distance
    with eval_mode(model):
        clean = model.new_kv_cache(B, stop)
        schedules.sequential(model, idx[:, :t0 + 1], cache=clean)
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


# ---------------------------------------------------------------------------------------------- jacobian
@torch.no_grad()
def jacobian_power_iteration(model: GPT, idx: torch.Tensor, t: int, iters: int = 50,
                             seed: int = 0) -> dict[str, object]:
    """Power iteration for the spectral norm of the one-step feedback map ``m_{t-1} -> m_t``.

    Everything but the memory position ``t`` reads is held at the exact sequential values (the
    keys/values of positions < t, the token at t). Each iteration takes one Jacobian-vector
    product ``u = J v`` and one vector-Jacobian product ``J^T u`` (both by reverse-mode autograd)
    and renormalises, so ``||J v||`` climbs to the largest singular value. Examples are
    independent, so their Jacobians are the blocks of a block-diagonal map, iterated side by side.

    Returns ``norm`` (float: the spectral norm of the whole batch's map, the largest example's),
    ``per_example`` (B,) and ``estimates`` (the batch norm after each iteration, to judge
    convergence). A norm below 1 means this step contracts perturbations of the memory locally.
    """
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    check_int("t", t, 1, T - 1)
    check_int("iters", iters, 1)
    with eval_mode(model):
        cache = model.new_kv_cache(B, t)
        schedules.sequential(model, idx[:, :t], cache=cache)
        point, step = cache.state, schedules.continuation(model, idx, cache, t, t + 1)

        def one_step(memory: torch.Tensor) -> torch.Tensor:
            return step(memory)[:, 0]

        # The fused attention kernels have no second derivative; the math kernel is plain matmuls
        # and softmax, which autograd differentiates twice.
        with sdpa_kernel(SDPBackend.MATH):
            _, pullback = torch.func.vjp(one_step, point)  # w -> J^T w
            # J^T w is linear in w, so the pullback of the pullback (taken anywhere) is v -> J v:
            # reverse over reverse, built once, with no forward-mode rules needed.
            _, pushforward = torch.func.vjp(pullback, torch.zeros_like(point))
            v = _unit_directions((B, point.size(-1)), seed, point)
            estimates: list[float] = []
            for _ in range(iters):
                (u,) = pushforward((v,))
                sigma = torch.linalg.vector_norm(u, dim=-1)
                estimates.append(float(sigma.max()))
                (w,) = pullback(u)
                v = w / torch.linalg.vector_norm(w, dim=-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    return {"norm": estimates[-1], "per_example": sigma.detach().cpu(), "estimates": estimates}


def jacobian_norm(model: GPT, idx: torch.Tensor, t: int, iters: int = 50, seed: int = 0) -> float:
    """Spectral norm of the one-step feedback map ``m_{t-1} -> m_t`` at position ``t`` (power iteration).

    Below 1: a small error in the memory position t reads shrinks at t (local contraction).
    See ``jacobian_power_iteration`` for the iterates and per-example values.
    """
    return float(jacobian_power_iteration(model, idx, t, iters, seed)["norm"])


@torch.no_grad()
def pass_map_jacobian(model: GPT, idx: torch.Tensor, iters: int = 30, seed: int = 0,
                      plain_prefix: int | torch.Tensor = 0) -> dict[str, object]:
    """Power iteration for the spectral norm of the whole pass map ``H -> F(shift(H))`` at its fixed point.

    F is one Jacobi pass: every position t reads ``H_{t-1}`` and returns its new memory; the
    Jacobian is taken at the exact sequential memory H* (the point the iteration should settle at),
    over all positions at once, by the same reverse-over-reverse products as
    ``jacobian_power_iteration``. Examples are independent blocks; ``norm`` is the largest.

    Why both this and the one-step norm: a norm below 1 certifies that a pass shrinks every
    perturbation of H*. A norm above 1 does *not* mean the iteration diverges: the map is strictly
    causal (position t depends on positions < t of the previous pass only), so its Jacobian is
    nilpotent, its spectral radius is 0, and T passes reach H* whatever the norm. Above 1 says a
    perturbation can grow for a while before causality flushes it out: the transient the pass-mix
    claim is about, on sequences much longer than the passes run.
    Returns ``norm``, ``per_example`` (B,) and ``estimates`` (the norm after each iteration).
    """
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    check_int("iters", iters, 1)
    check_prefix(plain_prefix, T)
    with eval_mode(model):
        point = schedules.sequential(model, idx, plain_prefix).memory
        reads = schedules.feedback_mask(B, T, plain_prefix, idx.device)

        def one_pass(memory: torch.Tensor) -> torch.Tensor:
            return schedules.jacobi_pass(model, idx, memory, reads).memory

        with sdpa_kernel(SDPBackend.MATH):  # the fused kernels have no second derivative
            _, pullback = torch.func.vjp(one_pass, point)
            _, pushforward = torch.func.vjp(pullback, torch.zeros_like(point))
            v = _unit_directions((B, T * point.size(-1)), seed, point).view_as(point)
            estimates: list[float] = []
            for _ in range(iters):
                (u,) = pushforward((v,))
                sigma = torch.linalg.vector_norm(u.flatten(1), dim=-1)
                estimates.append(float(sigma.max()))
                (w,) = pullback(u)
                scale = torch.linalg.vector_norm(w.flatten(1), dim=-1).clamp_min(torch.finfo(w.dtype).tiny)
                v = w / scale[:, None, None]
    return {"norm": estimates[-1], "per_example": sigma.detach().cpu(), "estimates": estimates}


# ---------------------------------------------------------------------------------------------- decoding
@torch.no_grad()
def decoding_states(model: GPT, prompt: torch.Tensor, max_new_tokens: int = 1000, regime: str = "soft"
                    ) -> pd.DataFrame:
    """How big the carried state grows while a model writes ``max_new_tokens`` greedily under ``regime``.

    SOFT decoding is the exact recurrence run forward on the model's own output, far past anything it
    was trained on: each token reads the memory its predecessor wrote. The memory itself is RMS-normed
    (norm sqrt(D) by construction), so the question "does the carried state stay bounded?" is asked of
    the state *before* that norm, ``||h_t||`` at the source depth. One row per position (prompt and
    generated): ``generated`` (whether the model wrote that token), ``state_norm_mean`` / ``_max`` over
    the batch. A norm that climbs without bound would show the recurrence amplifying itself.
    """
    check_tokens(model.config.vocab_size, prompt, "prompt")
    check_int("max_new_tokens", max_new_tokens, 1)
    source = model.mechanism.source_layer % model.config.n_layer
    norms: list[torch.Tensor] = []

    def keep(tensor: torch.Tensor, hook: object) -> None:
        norms.append(torch.linalg.vector_norm(tensor.double(), dim=-1))

    with eval_mode(model), with_hooks(model, {f"blocks.{source}.hook_resid_post": keep}):
        generate(model, prompt, max_new_tokens, regime=regime)
    states = torch.cat(norms, dim=1)  # (B, P + new - 1): the last token written is never run
    P = prompt.size(1)
    return pd.DataFrame({"position": range(states.size(1)), "generated": [t >= P for t in range(states.size(1))],
                         "state_norm_mean": states.mean(0).tolist(), "state_norm_max": states.amax(0).tolist()},
                        columns=DECODING_COLUMNS)


# ---------------------------------------------------------------------------------------------- trajectory
def memory_trajectory(model: GPT, idx: torch.Tensor, top_k: int = 5,
                      plain_prefix: int | torch.Tensor = 0) -> pd.DataFrame:
    """What every token reads and produces under the exact sequential recurrence, one row per position.

    Columns: ``example``, ``position``, ``token``, ``reads`` (whether it reads ``m_{t-1}`` at all:
    not position 0 nor a plain prefix), ``state_norm`` (``||h_t||`` at the source depth *before*
    the RMSNorm that makes it the memory: the memory itself always has norm sqrt(D), so this is
    where its scale shows), ``cosine_prev`` (cosine of ``m_{t-1}`` and ``m_t``, NaN at position 0:
    how far one step turns the carried state), ``top_tokens`` / ``top_probs`` (the ``top_k``
    next-token predictions). One sequential run, indexed afterwards: cheap to step through.
    """
    check_tokens(model.config.vocab_size, idx)
    check_int("top_k", top_k, 1, model.config.vocab_size)
    B, T = idx.shape
    check_prefix(plain_prefix, T)
    source = model.mechanism.source_layer % model.config.n_layer
    state_name = f"blocks.{source}.hook_resid_post"
    with eval_mode(model):
        out, cache = run_with_cache(model, idx, "sequential", plain_prefix=plain_prefix, names_filter=state_name)
    memory = out.memory.double()
    cosine = F.cosine_similarity(memory[:, 1:], memory[:, :-1], dim=-1)
    cosine = torch.cat([torch.full((B, 1), math.nan, dtype=cosine.dtype, device=cosine.device), cosine], dim=1)
    top = out.logits.double().softmax(dim=-1).topk(top_k, dim=-1)
    columns = {
        "example": torch.arange(B)[:, None].expand(B, T), "position": torch.arange(T)[None, :].expand(B, T),
        "token": idx, "reads": schedules.feedback_mask(B, T, plain_prefix, idx.device),
        "state_norm": torch.linalg.vector_norm(cache[state_name].double(), dim=-1), "cosine_prev": cosine,
    }
    frame = pd.DataFrame({name: value.reshape(-1).cpu().numpy() for name, value in columns.items()})
    frame["top_tokens"] = top.indices.reshape(B * T, top_k).cpu().tolist()
    frame["top_probs"] = top.values.reshape(B * T, top_k).cpu().tolist()
    return frame


def pass_milestones(runs: Mapping[str, pd.DataFrame], seq_len: int, tol: float = 1e-4,
                    training_passes: Sequence[int] = (1, 2, 3)) -> pd.DataFrame:
    """One row per ``pass_dynamics`` table: its loss at the passes that matter, and where it settled.

    On length-T sequences the Jacobi iteration *is* the exact recurrence from pass T on, so a run
    of more than T passes tells two stories: passes 1..T (the approach: how fast positions settle,
    whether the training depths already predict well) and the tail after T (rounding noise around
    the fixed point, whose loss is the sequential recurrence's own). Columns: ``run``, ``passes``
    (how many were run), ``seq_len``, ``settled_at`` (first pass with ``fixed_point_distance < tol``;
    NaN if none), ``rate_before_T`` (median ``contraction_rate`` over the passes before T: below 1,
    the residual shrank before exactness forced it to), ``loss_pass{k}`` for ``training_passes``,
    ``loss_at_T`` (NaN when fewer than T passes were run), ``loss_last``, ``delta_last``.
    """
    if not runs:
        raise ValueError("runs is empty: give at least one name -> pass_dynamics table")
    check_int("seq_len", seq_len, 1)
    if not tol > 0:
        raise ValueError(f"tol={tol!r} is invalid: must be > 0")
    rows = []
    for name, frame in runs.items():
        missing = sorted({"pass", "fixed_point_distance", "contraction_rate", "loss", "delta"} - set(frame.columns))
        if missing or frame.empty:
            raise ValueError(f"runs[{name!r}] is not a pass_dynamics table (missing {missing} or empty)")
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
