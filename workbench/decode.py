"""Generation with a KV cache: ``standard`` reads no feedback, ``soft`` lets each new token
read its predecessor's memory, ``fused`` also refines the prompt by Jacobi passes."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence

import torch

from . import schedules
from .model import GPT, StepOutput, check_model, eval_mode
from .validation import check_float, check_has_weights, check_int, check_tokens, fail

REGIMES = schedules.REGIMES


Generators = torch.Generator | Sequence[torch.Generator] | None


def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                generator: Generators = None) -> torch.Tensor:
    """Greedy at temperature 0; a ``generator`` per row keeps rows independent."""
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
    """The regime's schedule, arguments checked."""
    check_model(model)
    check_tokens(model.config.vocab_size, prompt, "prompt")
    check_has_weights("model", model, prompt)  # a meta prompt too: a shape-only dry run
    if eos is not None:
        check_int("eos", eos, 0, model.config.vocab_size - 1)
    check_int("max_new_tokens", max_new_tokens, 0)
    check_int("prefill_passes", prefill_passes, 1)
    value = schedules.regime(regime, prefill_passes) if isinstance(regime, str) else regime
    if not getattr(value, "can_prefill", False):
        fail("regime", regime, f"must be one of {REGIMES} or a schedule that fills a KV cache")
    check_float("temperature", temperature, 0.0)  # inf would sample uniformly, NaN never
    if top_k is not None:
        check_int("top_k", top_k, 1)
    return value


@functools.cache
def compiled_carry() -> Callable[..., StepOutput]:
    """``schedules.carry`` compiled on first use (the compiler imports slowly)."""
    return torch.compile(schedules.carry, dynamic=False)


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, regime: str | schedules.Schedule = "standard",
             prefill_passes: int = 1, temperature: float = 0.0, top_k: int | None = None,
             eos: int | None = None, generator: Generators = None,
             return_logits: bool = False, compile: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Continue ``prompt`` (B, T) to (B, T + new), as Hugging Face; rows past ``eos`` are padded with it."""
    value = _validate(model, prompt, max_new_tokens, regime, prefill_passes, temperature, top_k, eos)
    B, P = prompt.shape
    if not (generator is None or isinstance(generator, torch.Generator)
            or (isinstance(generator, Sequence) and len(generator) == B
                and all(isinstance(g, torch.Generator) for g in generator))):
        fail("generator", generator, f"must be None, a torch.Generator or {B} of them")
    if compile and not isinstance(model, GPT):
        raise ValueError(f"compile=True needs a workbench GPT, got {type(model).__name__}")
    length = P + max_new_tokens
    try:
        cache = model.new_kv_cache(B, length, static=True) if compile else model.new_kv_cache(B, length)
    except ValueError as e:  # the cache's size check: name the argument that set the length
        raise ValueError(f"max_new_tokens={max_new_tokens!r} is too many for a {B} x {P} prompt: {e}") from None
    step_fn = compiled_carry() if compile else schedules.carry
    with eval_mode(model):  # decoding never draws FBT's training jitter, whatever mode the model is in
        result = _decode(model, value, prompt, cache, max_new_tokens, step_fn, temperature, top_k, eos, generator,
                         return_logits)
    reached, trained = (result[0] if return_logits else result).size(1), getattr(model.config, "seq_len", None)
    if trained is not None and reached > trained:  # as Hugging Face warns past max_position_embeddings
        warnings.warn(f"generated to {reached}, past the trained seq_len={trained}", stacklevel=2)
    return result


def _decode(model: GPT, value: schedules.Schedule, prompt: torch.Tensor, cache, max_new_tokens: int,
            step_fn: Callable[..., StepOutput], temperature: float, top_k: int | None, eos: int | None,
            generator: Generators, return_logits: bool) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
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
