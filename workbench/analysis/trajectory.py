"""The carried state token by token. Its scale is ``||h_t||`` before the RMSNorm that makes it the memory
(whose norm is always sqrt(D))."""

from __future__ import annotations

import math

import pandas as pd
import torch
import torch.nn.functional as F

from .. import schedules
from ..decode import generate
from ..hooks import with_hooks
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens
from .cache import run_with_cache
from .fixed_point import check_prefix

DECODING_COLUMNS = ["position", "generated", "state_norm_mean", "state_norm_max"]


def _state_hook(model: GPT) -> str:
    """The source block's output: the state before the norm."""
    return f"blocks.{model.mechanism.source_layer % model.config.n_layer}.hook_resid_post"


def memory_trajectory(model: GPT, idx: torch.Tensor, top_k: int = 5,
                      plain_prefix: int | torch.Tensor = 0) -> pd.DataFrame:
    """Per position under the exact recurrence: ``||h_t||``, cosine of ``m_{t-1}`` and ``m_t``, top predictions."""
    check_tokens(model.config.vocab_size, idx)
    check_int("top_k", top_k, 1, model.config.vocab_size)
    B, T = idx.shape
    check_prefix(plain_prefix, T)
    state_name = _state_hook(model)
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


@torch.no_grad()
def decoding_states(model: GPT, prompt: torch.Tensor, max_new_tokens: int = 1000, regime: str = "soft"
                    ) -> pd.DataFrame:
    """``||h_t||`` while the model writes greedily: a norm climbing without bound is the recurrence amplifying."""

    check_tokens(model.config.vocab_size, prompt, "prompt")
    check_int("max_new_tokens", max_new_tokens, 1)
    norms: list[torch.Tensor] = []

    def keep(tensor: torch.Tensor, hook: object) -> None:
        norms.append(torch.linalg.vector_norm(tensor.double(), dim=-1))

    with eval_mode(model), with_hooks(model, {_state_hook(model): keep}):
        generate(model, prompt, max_new_tokens, regime=regime)
    states = torch.cat(norms, dim=1)  # (B, P + new - 1): the last token written is never run
    P = prompt.size(1)
    return pd.DataFrame({"position": range(states.size(1)), "generated": [t >= P for t in range(states.size(1))],
                         "state_norm_mean": states.mean(0).tolist(), "state_norm_max": states.amax(0).tolist()},
                        columns=DECODING_COLUMNS)
