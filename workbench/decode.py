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

Each regime is a ``schedules`` value (``schedules.regime``: STANDARD ``Single()``, SOFT ``Prefilled(Single())``,
FUSED ``Prefilled(Multipass(1 + prefill_passes))``), and ``generate`` takes such a value too: its ``prefill``
fills the cache, and the generated tokens read memory when the value does.

The model knows nothing of sampling; this module knows nothing of how memory is consumed.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence

import torch

from . import schedules
from .model import GPT, StepOutput, check_model, eval_mode
from .validation import check_float, check_has_weights, check_int, check_tokens

REGIMES = schedules.REGIMES


Generators = torch.Generator | Sequence[torch.Generator] | None


def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                generator: Generators = None) -> torch.Tensor:
    """Next token ids (B,) from last-position logits (B, V): greedy at temperature 0.

    ``generator``: one for the batch, or one per row (B of them), so that a row's draws do not depend on
    which other rows are decoded beside it (a sequence decoded alone or in any batch samples the same)."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if generator is None or isinstance(generator, torch.Generator):
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return torch.cat([torch.multinomial(row, 1, generator=g) for row, g in zip(probs, generator)])


def _validate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, regime: str | schedules.Schedule,
              prefill_passes: int, temperature: float, top_k: int | None, eos: int | None) -> schedules.Schedule:
    """The checked arguments' schedule: the regime's value, or the value given (which must fill a KV cache)."""
    check_model(model)
    check_tokens(model.config.vocab_size, prompt, "prompt")
    check_has_weights("model", model, prompt)  # a meta prompt too: a shape-only dry run
    if eos is not None:
        check_int("eos", eos, 0, model.config.vocab_size - 1)
    check_int("max_new_tokens", max_new_tokens, 0)
    check_int("prefill_passes", prefill_passes, 1)
    value = schedules.regime(regime, prefill_passes) if isinstance(regime, str) else regime
    if not getattr(value, "can_prefill", False):
        raise ValueError(f"regime={regime!r} is invalid: must be one of {REGIMES} or a schedule value that "
                         "fills a KV cache (Single, Sequential, Multipass, Prefilled)")
    check_float("temperature", temperature, 0.0)  # inf would sample uniformly, NaN never
    if top_k is not None:
        check_int("top_k", top_k, 1)
    return value


@functools.cache
def compiled_carry() -> Callable[..., StepOutput]:
    """``schedules.carry`` under ``torch.compile``, built on first use (importing the compiler takes a second)."""
    return torch.compile(schedules.carry, dynamic=False)


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, regime: str | schedules.Schedule = "standard",
             prefill_passes: int = 1, temperature: float = 0.0, top_k: int | None = None,
             eos: int | None = None, generator: Generators = None,
             return_logits: bool = False, compile: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Continue ``prompt`` (B, T) by up to ``max_new_tokens``: returns (B, T + new) like Hugging Face (and, like
    it, warns when the output runs past the length the model was trained at).

    Sequences that emit ``eos`` are padded with ``eos`` afterwards; generation stops early once all
    have (that check reads a value each token, so only generation with ``eos`` waits for the device;
    without it nothing here does). With ``return_logits`` also returns the logits that chose each new
    token (B, new, V).
    ``regime``: a regime's name (``prefill_passes`` is FUSED's) or a schedule value (``Prefilled(...)``,
    or ``Single()``, ``Sequential()``, ``Multipass(K)`` for the prompt, the tokens then reading memory
    unless the value is ``Single()``).
    ``compile``: compile the per-token step (see the module docstring); the prefill stays eager.
    ``generator``: sampling's random source, one for the batch or one per row (``sample_next``).
    """
    value = _validate(model, prompt, max_new_tokens, regime, prefill_passes, temperature, top_k, eos)
    B, P = prompt.shape
    if not (generator is None or isinstance(generator, torch.Generator)
            or (isinstance(generator, Sequence) and len(generator) == B
                and all(isinstance(g, torch.Generator) for g in generator))):
        raise ValueError(f"generator={generator!r} is invalid: must be None, one torch.Generator, or one per prompt "
                         f"row ({B})")
    if compile and not isinstance(model, GPT):
        raise ValueError(f"compile=True needs a workbench GPT (its fixed-shape cache), got {type(model).__name__}")
    length = P + max_new_tokens
    try:
        cache = model.new_kv_cache(B, length, static=True) if compile else model.new_kv_cache(B, length)
    except ValueError as e:  # the cache's size check: name the argument that set the length
        raise ValueError(f"max_new_tokens={max_new_tokens!r} is too many for this prompt of {B} x {P}: {e}") from None
    step_fn = compiled_carry() if compile else schedules.carry
    with eval_mode(model):  # decoding never draws FBT's training jitter, whatever mode the model is in
        result = _decode(model, value, prompt, cache, max_new_tokens, step_fn, temperature, top_k, eos, generator,
                         return_logits)
    reached, trained = (result[0] if return_logits else result).size(1), getattr(model.config, "seq_len", None)
    if trained is not None and reached > trained:  # as Hugging Face warns past max_position_embeddings
        warnings.warn(f"generated to position {reached} past the model's seq_len={trained}: the positions beyond it "
                      "were never trained (RoPE computes them, the model has not learned them)", stacklevel=2)
    return result


def _decode(model: GPT, value: schedules.Schedule, prompt: torch.Tensor, cache, max_new_tokens: int,
            step_fn: Callable[..., StepOutput], temperature: float, top_k: int | None, eos: int | None,
            generator: Generators, return_logits: bool) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The prefill and the token loop of ``generate`` (arguments checked, model in eval mode)."""
    B, P = prompt.shape
    logits = value.prefill(model, prompt, cache).logits[:, -1]
    feedback = value.reads_memory
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
