"""FBT's latent feedback taken apart: how much it carries, what the fused input is made of, how the
decoding regimes score the same text, and how the Jacobi passes settle position by position.

- ``feedback_bandwidth``: the bandwidth argument in numbers — ``log2 |V|`` bits per sampled token
  against a ``D``-dimensional state, from a model's config;
- ``fusion_parts``: the fused input ``u_t = RMSNorm((W_U m_{t-1}) * sigmoid(W_G e_t))`` decomposed
  per position under the exact recurrence: the size of the value path, the gate, and whether the
  fused input points along the state or along the token;
- ``regime_logits`` / ``regime_losses``: a given text scored (teacher-forced) the way each decoding
  regime of ``decode.generate`` would compute it — STANDARD, SOFT, FUSED on the same weights;
- ``jacobi_errors``: the distance of every position's memory to the exact sequential one after each
  Jacobi pass — the staircase that makes ``multipass(T)`` exact;
- ``pass_milestones``: ``pass_dynamics`` tables read at the passes that matter — the training depths,
  the pass T at which a length-T sequence reaches the exact fixed point, and the last pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from .. import schedules
from ..config import ModelConfig
from ..metrics import per_position_loss
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens
from .cache import run_with_cache
from .contraction import check_prefix
from .interventions import run_schedule

FUSION_COLUMNS = ["example", "position", "token", "reads", "value_rms", "gate_mean", "gate_std", "cos_value",
                  "cos_embed"]
JACOBI_COLUMNS = ["pass", "position", "error"]


def feedback_bandwidth(config: ModelConfig, bits_per_value: int = 16) -> dict[str, float]:
    """What a step can feed back to the bottom of the stack: a sampled token or the state it came from.

    A token carries at most ``log2 |V|`` bits (``token_bits``); the top state is ``D`` numbers of
    ``bits_per_value`` bits each (``state_bits``, e.g. 16 for bf16). ``ratio`` = state / token bits.
    """
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
    check_int("bits_per_value", bits_per_value, 1, 64)
    token_bits = math.log2(config.vocab_size)
    state_bits = config.n_embd * bits_per_value
    return {"vocab_size": config.vocab_size, "token_bits": token_bits, "state_dims": config.n_embd,
            "bits_per_value": bits_per_value, "state_bits": state_bits, "ratio": state_bits / token_bits}


def _check_fbt(model: GPT) -> None:
    if model.config.mechanism != "fbt":
        raise ValueError(f"model.config.mechanism={model.config.mechanism!r} is invalid: fusion needs 'fbt'")


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a.double(), b.double(), dim=-1)


@torch.no_grad()
def fusion_parts(model: GPT, idx: torch.Tensor, plain_prefix: int = 0) -> pd.DataFrame:
    """The fused input of every position under the exact recurrence, decomposed into its two paths.

    One row per (example, position): ``reads`` (whether the position fuses ``m_{t-1}`` at all);
    ``value_rms`` = RMS of the value path ``W_U m_{t-1}`` (NaN where nothing is read);
    ``gate_mean`` / ``gate_std`` = mean and spread over channels of the gate ``sigmoid(W_G e_t)``
    (defined for every token); ``cos_value`` / ``cos_embed`` = cosine of the model's actual input
    ``u_t`` (``hook_input``) with the value path and with the plain embedding ``e_t``. A plain
    position has ``cos_embed = 1``; a fused one whose ``cos_value`` is high reads mostly the state,
    channel-wise gated by the token — the GLU's design: the token cannot route around the state.
    """
    _check_fbt(model)
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    check_prefix(plain_prefix, T)
    with eval_mode(model):
        out, cache = run_with_cache(model, idx, "sequential", plain_prefix=plain_prefix,
                                    names_filter=["hook_embed", "hook_input"])
        embedded, fused = cache["hook_embed"], cache["hook_input"]
        value = model.mechanism.W_U(schedules.shift_right(out.memory))
        gate = torch.sigmoid(model.mechanism.W_G(embedded))
    reads = schedules.feedback_mask(B, T, plain_prefix, idx.device)
    nan = torch.full((B, T), math.nan, dtype=torch.float64, device=idx.device)
    columns = {
        "example": torch.arange(B)[:, None].expand(B, T), "position": torch.arange(T)[None, :].expand(B, T),
        "token": idx, "reads": reads,
        "value_rms": torch.where(reads, value.double().square().mean(-1).sqrt(), nan),
        "gate_mean": gate.double().mean(-1), "gate_std": gate.double().std(-1),
        "cos_value": torch.where(reads, _cosine(fused, value), nan), "cos_embed": _cosine(fused, embedded),
    }
    return pd.DataFrame({name: value.reshape(-1).cpu().numpy() for name, value in columns.items()},
                        columns=FUSION_COLUMNS)


# ---------------------------------------------------------------------------------------------- regimes
@torch.no_grad()
def regime_logits(model: GPT, tokens: torch.Tensor, prompt_len: int, regime: str = "standard",
                  prefill_passes: int = 1) -> torch.Tensor:
    """Logits (B, T, V) of ``tokens`` teacher-forced the way ``generate(prompt, regime=...)`` computes them.

    The first ``prompt_len`` tokens are the prompt, the rest a continuation fed in as if generated:
    the regime's schedule value (``schedules.regime``) run at ``prompt_len``. ``standard`` = one plain
    pass; ``soft`` = plain prompt, then every continuation token reads its predecessor's memory;
    ``fused`` = the prompt refined by ``1 + prefill_passes`` Jacobi passes (its last pass fills the KV
    cache), then as ``soft``. Position ``prompt_len - 1 + i`` holds the logits that choose continuation
    token ``i``, so on a greedy continuation they equal ``generate(..., return_logits=True)``'s logits.
    """
    check_tokens(model.config.vocab_size, tokens)
    value = run_schedule(regime=regime, prompt_len=prompt_len, prefill_passes=prefill_passes, T=tokens.size(1))
    with eval_mode(model):
        return value.run(model, tokens).logits


def regime_losses(model: GPT, tokens: torch.Tensor, prompt_len: int, regimes: Sequence[str] = schedules.REGIMES,
                  prefill_passes: int = 1, targets: torch.Tensor | None = None) -> pd.DataFrame:
    """Per-position next-token loss of a text's continuation under each decoding regime: one row per
    (regime, position) with ``loss`` in nats (mean over the batch; bits per byte / ln 2 for byte text).

    Only positions from ``prompt_len - 1`` on are scored (those whose prediction is a continuation
    token). ``targets`` (B, T), -1 = no loss; default: ``tokens`` shifted left by one.
    """
    if not regimes or any(r not in schedules.REGIMES for r in regimes):
        raise ValueError(f"regimes={tuple(regimes)!r} is invalid: each must be one of {schedules.REGIMES}")
    check_tokens(model.config.vocab_size, tokens)
    if targets is None:
        targets = F.pad(tokens[:, 1:], (0, 1), value=-1)
    if tuple(targets.shape) != tuple(tokens.shape):
        raise ValueError(f"targets must have the shape of tokens {tuple(tokens.shape)}, got {tuple(targets.shape)}")
    scored = targets.clone()
    scored[:, : max(prompt_len - 1, 0)] = -1
    rows = []
    for regime in regimes:
        loss = per_position_loss(regime_logits(model, tokens, prompt_len, regime, prefill_passes), scored)
        rows += [{"regime": regime, "position": t, "loss": float(v)} for t, v in enumerate(loss.tolist())
                 if not math.isnan(v)]
    return pd.DataFrame(rows, columns=["regime", "position", "loss"])


# ---------------------------------------------------------------------------------------------- jacobi
@torch.no_grad()
def jacobi_errors(model: GPT, idx: torch.Tensor, passes: int | None = None, plain_prefix: int = 0) -> pd.DataFrame:
    """Distance of each position's memory to the exact sequential memory after each Jacobi pass.

    One row per (pass k = 1..``passes``, position t): ``error`` = max over the batch of
    ``||H^k_t - H*_t|| / ||H*_t||``. Pass k is exact (up to rounding) at positions t < k: pass 1 gets
    position 0 right (it reads nothing), and each pass carries one more exact memory one step on —
    hence ``multipass(T) == sequential``. ``passes`` defaults to T.
    """
    check_tokens(model.config.vocab_size, idx)
    T = idx.size(1)
    passes = T if passes is None else passes
    check_int("passes", passes, 1)
    check_prefix(plain_prefix, T)
    rows = []
    with eval_mode(model):
        exact = schedules.sequential(model, idx, plain_prefix).memory.double()
        scale = torch.linalg.vector_norm(exact, dim=-1)
        for k, out in enumerate(schedules.iterate_passes(model, idx, plain_prefix, passes), start=1):
            error = (torch.linalg.vector_norm(out.memory.double() - exact, dim=-1) / scale).amax(0)
            rows += [{"pass": k, "position": t, "error": float(e)} for t, e in enumerate(error.tolist())]
    return pd.DataFrame(rows, columns=JACOBI_COLUMNS)


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
