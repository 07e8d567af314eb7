"""FBT's latent feedback taken apart: its bandwidth, and the fused input
``u_t = RMSNorm((W_U m_{t-1}) * sigmoid(W_G e_t))`` decomposed per position."""

from __future__ import annotations

import math

import pandas as pd
import torch
import torch.nn.functional as F

from .. import schedules
from ..config import ModelConfig
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens, fail
from .cache import run_with_cache
from .fixed_point import check_prefix

FUSION_COLUMNS = ["example", "position", "token", "reads", "value_rms", "gate_mean", "gate_std", "cos_value",
                  "cos_embed"]


def feedback_bandwidth(config: ModelConfig, bits_per_value: int = 16) -> dict[str, float]:
    """Bits a step can feed back: a sampled token (``log2 |V|``) vs the D-dim state; ``ratio`` = state / token."""
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
    check_int("bits_per_value", bits_per_value, 1, 64)
    token_bits = math.log2(config.vocab_size)
    state_bits = config.n_embd * bits_per_value
    return {"vocab_size": config.vocab_size, "token_bits": token_bits, "state_dims": config.n_embd,
            "bits_per_value": bits_per_value, "state_bits": state_bits, "ratio": state_bits / token_bits}


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a.double(), b.double(), dim=-1)


@torch.no_grad()
def fusion_parts(model: GPT, idx: torch.Tensor, plain_prefix: int = 0) -> pd.DataFrame:
    """Each position's fused input split into value path and gate: the GLU gives the token no route around the
    state."""
    if model.config.mechanism != "fbt":
        fail("model.config.mechanism", model.config.mechanism, "needs 'fbt'")
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
