"""The engine: autoregressive generation with a KV cache and the three decoding regimes.

On the same weights and one forward per token: ``standard`` reads no feedback; ``soft`` prefills the prompt plainly,
then each generated token reads its predecessor's memory; ``fused`` first refines the prompt by Jacobi passes.
``compile=True`` compiles the per-token step over a fixed-shape ``StaticKVCache`` (one graph per model, batch size and
regime; results match eager to float rounding)."""

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
    """Next token ids (B,) from last-position logits (B, V), greedy at temperature 0; one ``generator`` per row keeps a
    row's draws independent of the rows decoded beside it."""
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
    """Continue ``prompt`` (B, T) by up to ``max_new_tokens``, returning (B, T + new) like Hugging Face.

    Sequences that emit ``eos`` are padded with it; generation stops once all have (only then does a step wait for the
    device). ``regime``: a name or a schedule value for the prompt. Warns past the trained ``seq_len``."""
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
    """The prefill and the token loop of ``generate``."""
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
