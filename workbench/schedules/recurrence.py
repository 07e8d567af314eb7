"""The recurrence's primitives: one carry step through a KV cache and one Jacobi pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from ..kv_cache import DecodeCache, KVCache, PurePrefix
from ..model import GPT, StepOutput
from ..validation import check_int, check_tokens
from .output import ScheduleOutput, feedback_mask, pass_masks, shift_right


def carry(model: GPT, tokens: torch.Tensor, positions: torch.Tensor, cache: DecodeCache, *,
          reads: bool | torch.Tensor = True) -> StepOutput:
    """One exact-recurrence forward: the chunk's first position reads ``cache.state``, its last memory replaces it."""
    memory = mask = None
    n = tokens.size(1)
    if cache.state is not None and reads is not False:
        memory = F.pad(cache.state[:, None], (0, 0, 0, n - 1))
        if n > 1 or isinstance(reads, torch.Tensor):  # only the first position reads it
            mask = torch.zeros(tokens.size(0), n, dtype=torch.bool, device=tokens.device)
            mask[:, 0] = reads
    out = model.step(tokens, memory=memory, memory_mask=mask, positions=positions, kv=cache)
    cache.state = out.memory[:, -1]
    return out


def recur(model: GPT, idx: torch.Tensor, cache: DecodeCache, start: int = 0, stop: int | None = None, *,
          chunk: int = 1, reads: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Continue ``cache``'s recurrence over ``start..stop-1``: logits (B, n, V), memory (B, n, D)."""
    stop = idx.size(1) if stop is None else stop
    positions = torch.arange(start, min(start + chunk, stop), device=idx.device)
    logits, memory = [], []
    for begin in range(start, stop, chunk):
        n = min(chunk, stop - begin)
        out = carry(model, idx[:, begin:begin + n], positions[:n], cache,
                    reads=True if reads is None else reads[:, begin])
        positions = positions + chunk
        logits.append(out.logits)
        memory.append(out.memory)
    return torch.cat(logits, dim=1), torch.cat(memory, dim=1)


def continuation(model: GPT, idx: torch.Tensor, cache: KVCache, start: int,
                 stop: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The exact recurrence over ``start..stop-1``, a pure function of the memory ``start`` reads (``torch.func``)."""
    check_int("start", start, 1, idx.size(1) - 1)
    check_int("stop", stop, start + 1, idx.size(1))

    def run(memory: torch.Tensor) -> torch.Tensor:
        return recur(model, idx, PurePrefix(cache, start, memory), start, stop)[1]

    return run


def through_cache(model: GPT, idx: torch.Tensor, chunk: int, plain_prefix: int | torch.Tensor,
             name: str, cache: KVCache | None = None) -> ScheduleOutput:
    """Contiguous chunks in order through a KV cache, the memory carried between them."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    if cache is not None and cache.pos != 0:
        raise ValueError(f"cache must be empty, holds {cache.pos} positions")
    cache = cache if cache is not None else model.new_kv_cache(B, T)
    logits, memory = recur(model, idx, cache, chunk=chunk, reads=feedback_mask(B, T, plain_prefix, idx.device))
    return ScheduleOutput(logits, [logits], memory, [None], [1.0], name)


def jacobi_pass(model: GPT, idx: torch.Tensor, memory: torch.Tensor | None, reads: torch.Tensor,
                kv: DecodeCache | None = None) -> StepOutput:
    """One Jacobi pass: positions that ``reads`` take their predecessor's previous-pass ``memory`` (None: plain)."""
    return model.step(idx, memory=None if memory is None else shift_right(memory), memory_mask=reads, kv=kv)


def iterate_passes(model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0,
                   passes: int | None = None) -> Iterator[StepOutput]:
    """Jacobi passes yielded one at a time (``passes=None``: endlessly)."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    reads = pass_masks(B, T, plain_prefix, passes, idx.device)
    memory = None
    k = 0
    while passes is None or k < passes:
        out = jacobi_pass(model, idx, memory, reads(k))
        memory = out.memory
        k += 1
        yield out

