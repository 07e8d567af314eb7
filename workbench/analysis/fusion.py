"""FBT's latent feedback taken apart: how much it carries and what the fused input is made of.

``feedback_bandwidth`` puts the bandwidth argument in numbers (``log2 |V|`` bits per sampled token against a
D-dimensional state); ``fusion_parts`` decomposes the fused input ``u_t = RMSNorm((W_U m_{t-1}) * sigmoid(W_G e_t))``
per position under the exact recurrence."""

from __future__ import annotations

import math

import pandas as pd
import torch
import torch.nn.functional as F

from .. import schedules
from ..config import ModelConfig
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens
from .cache import run_with_cache
from .fixed_point import check_prefix

FUSION_COLUMNS = ["example", "position", "token", "reads", "value_rms", "gate_mean", "gate_std", "cos_value",
                  "cos_embed"]


def feedback_bandwidth(config: ModelConfig, bits_per_value: int = 16) -> dict[str, float]:
    """What a step can feed back: a sampled token (at most ``log2 |V|`` bits, ``token_bits``) or the state it came
    from (D values of ``bits_per_value`` bits, ``state_bits``; 16 for bf16); ``ratio`` = state / token bits."""
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

    One row per (example, position): ``reads``; ``value_rms`` of the value path ``W_U m_{t-1}`` (NaN where nothing is
    read); ``gate_mean`` / ``gate_std`` of ``sigmoid(W_G e_t)`` over channels; ``cos_value`` / ``cos_embed``: cosine
    of the actual input ``u_t`` with the value path and with ``e_t``. A fused position with high ``cos_value`` reads
    mostly the state, gated by the token: by the GLU's design the token cannot route around the state."""
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
