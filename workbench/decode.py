"""The engine: autoregressive generation with a KV cache and the three decoding regimes.

Regimes, all on the same weights, all one forward per generated token:
- ``standard``: no feedback anywhere (the model as an ordinary transformer);
- ``soft``: plain single-pass prefill of the prompt, then every generated token reads the memory
  its predecessor produced (latent feedback during generation);
- ``fused``: the prompt is refined by ``prefill_passes`` fused passes (multi-pass prefill: one
  plain pass, then ``prefill_passes`` passes reading the previous pass's memory), then as ``soft``.

``compile=True`` runs each generated token's forward through ``torch.compile`` over a fixed-shape
cache (``StaticKVCache``): one graph per (model, batch size, regime), with the elementwise work of
a step fused and Python's per-op overhead gone. The first call compiles (seconds to a minute on a
CPU); later calls reuse it. Results match eager decoding to float rounding.

The model knows nothing of sampling; this module knows nothing of how memory is consumed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from . import schedules
from .kv_cache import KVCache, StaticKVCache
from .model import GPT, StepOutput
from .validation import check_float, check_int, check_tokens

REGIMES = ("standard", "soft", "fused")


def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token ids (B,) from last-position logits (B, V): greedy at temperature 0."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)


def _validate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, regime: str, prefill_passes: int,
              temperature: float, top_k: int | None, eos: int | None) -> None:
    check_tokens(model.config.vocab_size, prompt, "prompt")
    if eos is not None:
        check_int("eos", eos, 0, model.config.vocab_size - 1)
    if regime not in REGIMES:
        raise ValueError(f"regime={regime!r} is invalid: must be one of {REGIMES}")
    check_int("max_new_tokens", max_new_tokens, 0)
    check_int("prefill_passes", prefill_passes, 1)
    check_float("temperature", temperature, 0.0)  # inf would sample uniformly, NaN never
    if top_k is not None:
        check_int("top_k", top_k, 1)


def decode_step(model: GPT, token: torch.Tensor, memory: torch.Tensor | None, position: torch.Tensor,
                cache: KVCache | StaticKVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """One generated token's forward (token (B, 1) at ``position`` (1,)) reading ``memory`` (B, 1, D) or none:
    its logits (B, V) and memory (B, D). ``schedules.carry`` with the memory given rather than carried."""
    cache.state = None if memory is None else memory[:, -1]
    out = schedules.carry(model, token, position, cache)
    return out.logits[:, -1], out.memory[:, -1]


@functools.cache
def compiled_decode_step() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``decode_step`` under ``torch.compile`` (its old callers' signature; ``generate`` uses ``compiled_carry``)."""
    return torch.compile(decode_step, dynamic=False)


@functools.cache
def compiled_carry() -> Callable[..., StepOutput]:
    """``schedules.carry`` under ``torch.compile``, built on first use (importing the compiler takes a second)."""
    return torch.compile(schedules.carry, dynamic=False)


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, regime: str = "standard",
             prefill_passes: int = 1, temperature: float = 0.0, top_k: int | None = None,
             eos: int | None = None, generator: torch.Generator | None = None,
             return_logits: bool = False, compile: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Continue ``prompt`` (B, T) by up to ``max_new_tokens``: returns (B, T + new) like Hugging Face.

    Sequences that emit ``eos`` are padded with ``eos`` afterwards; generation stops early once all
    have (that check reads a value each token, so only generation with ``eos`` waits for the device;
    without it nothing here does). With ``return_logits`` also returns the logits that chose each new
    token (B, new, V).
    ``compile``: compile the per-token step (see the module docstring); the prefill stays eager.
    """
    _validate(model, prompt, max_new_tokens, regime, prefill_passes, temperature, top_k, eos)
    B, P = prompt.shape
    if compile and not isinstance(model, GPT):
        raise ValueError(f"compile=True needs a workbench GPT (its fixed-shape cache), got {type(model).__name__}")
    length = P + max_new_tokens
    cache = model.new_kv_cache(B, length, static=True) if compile else model.new_kv_cache(B, length)
    step_fn = compiled_carry() if compile else schedules.carry
    if regime == "fused":
        out = schedules.multipass(model, prompt, passes=prefill_passes + 1, cache=cache)
        logits = out.logits[:, -1]
    else:
        step = model.step(prompt, kv=cache)
        cache.state, logits = step.memory[:, -1], step.logits[:, -1]
    feedback = regime != "standard"
    tokens, chosen_by = [prompt], []
    done = torch.zeros(B, dtype=torch.bool, device=prompt.device)
    position = torch.full((1,), P, device=prompt.device)  # advanced on the device: no copy from the host
    for i in range(max_new_tokens):
        nxt = sample_next(logits, temperature, top_k, generator)
        if eos is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
            done |= nxt == eos
        tokens.append(nxt[:, None])
        chosen_by.append(logits)
        if i == max_new_tokens - 1 or (eos is not None and bool(done.all())):
            break
        logits = step_fn(model, nxt[:, None], position, cache, reads=feedback).logits[:, -1]
        position = position + 1
    out_tokens = torch.cat(tokens, dim=1)
    if return_logits:
        empty = torch.empty(B, 0, model.config.vocab_size, device=prompt.device)
        return out_tokens, torch.stack(chosen_by, dim=1) if chosen_by else empty
    return out_tokens
