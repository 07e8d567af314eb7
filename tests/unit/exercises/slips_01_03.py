"""The slips of notebooks 01, 02 and 03' later exercises: each row (check, the reference solution written with a
slip switch, the switch, a phrase the check's message must say), merged into test_exercises.SLIPS."""

from __future__ import annotations

import torch

import exercises as ex
from workbench.functional import norm
from workbench.schedules import shift_right


def rope(vec, position, base, *, pairs="halves", sign=1.0, step=2):
    d = vec.size(-1)
    theta = base ** (-step * torch.arange(d // 2, dtype=torch.float64) / d)
    cos, sin = (position * theta).cos().to(vec.dtype), sign * (position * theta).sin().to(vec.dtype)
    if pairs == "neighbours":  # channels (2i, 2i+1) paired, as some RoPE codes pair them
        a, b = vec[..., 0::2], vec[..., 1::2]
        out = torch.empty_like(vec)
        out[..., 0::2], out[..., 1::2] = a * cos + b * sin, b * cos - a * sin
        return out
    a, b = vec[..., : d // 2], vec[..., d // 2:]
    return torch.cat([a * cos + b * sin, b * cos - a * sin], dim=-1)


def kv_cache_bytes(config, batch, max_len, dtype, *, values=True, heads="kv", layers=True, unit="bytes"):
    heads_stored = config.kv_heads if heads == "kv" else config.n_head
    count = (2 if values else 1) * batch * heads_stored * max_len * config.head_dim
    count *= config.n_layer if layers else 1
    return count * {"bytes": dtype.itemsize, "numbers": 1, "four": 4}[unit]


def memory_read(model, cache, *, shift=True, normed=True, hook="hook_resid_post", use_source=True):
    L = model.config.n_layer
    source = model.mechanism.source_layer % L if use_source else L - 1
    memory = cache[f"blocks.{source}.{hook}"]
    memory = norm(memory) if normed else memory
    return shift_right(memory) if shift else memory


def pooled_weights(seq_len, decay, *, start_at_own_state=True, swap=False, transpose=False):
    keep, new = (1 - decay, decay) if swap else (decay, 1 - decay)
    W = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    W[0, 0] = 1.0 if start_at_own_state else new
    for t in range(1, seq_len):
        W[t] = keep * W[t - 1]
        W[t, t] = new
    return W.T if transpose else W


def token_flops(model, seq_len, *, per_weight=6.0, attention=True, embedding=False, tied_readout=True,
                mechanism=True, context="asked"):
    groups, c = model.num_params_by_group(), model.config
    readout = groups["readout"] or (groups["embedding"] if tied_readout else 0)
    weights = groups["blocks"] + (groups["mechanism"] if mechanism else 0) + readout
    weights += groups["embedding"] if embedding and groups["readout"] else 0
    keys = seq_len if context == "asked" else c.seq_len
    return per_weight * weights + (2 * per_weight) * c.n_layer * c.n_embd * keys * attention


SLIPS: dict[str, tuple] = {
    "rope: neighbouring channels paired": (ex.check_rope, rope, dict(pairs="neighbours"), "neighbouring channels"),
    "rope: turned the other way": (ex.check_rope, rope, dict(sign=-1.0), "the other way"),
    "rope: frequencies without the 2": (ex.check_rope, rope, dict(step=1), "-2i/d"),
    "kv bytes: keys alone": (ex.check_kv_cache_bytes, kv_cache_bytes, dict(values=False), "keys alone"),
    "kv bytes: per query head": (ex.check_kv_cache_bytes, kv_cache_bytes, dict(heads="query"), "per query head"),
    "kv bytes: one layer": (ex.check_kv_cache_bytes, kv_cache_bytes, dict(layers=False), "one layer"),
    "kv bytes: numbers, not bytes": (ex.check_kv_cache_bytes, kv_cache_bytes, dict(unit="numbers"),
                                     "numbers, not bytes"),
    "kv bytes: 4 bytes a number": (ex.check_kv_cache_bytes, kv_cache_bytes, dict(unit="four"), "4 bytes a number"),
    "memory: not shifted": (ex.check_memory_read, memory_read, dict(shift=False), "not shifted"),
    "memory: not normed": (ex.check_memory_read, memory_read, dict(normed=False), "not normed"),
    "memory: the block's input": (ex.check_memory_read, memory_read, dict(hook="hook_resid_pre"),
                                  "the block's input"),
    "memory: the top block always": (ex.check_memory_read, memory_read, dict(use_source=False),
                                     "top block's output"),
    "pooled: started from zero": (ex.check_pooled_memory, pooled_weights, dict(start_at_own_state=False),
                                  "sum to 1"),
    "pooled: weights swapped": (ex.check_pooled_memory, pooled_weights, dict(swap=True), "old average"),
    "pooled: transposed": (ex.check_pooled_memory, pooled_weights, dict(transpose=True), "causal"),
    "flops: forward alone": (ex.check_token_flops, token_flops, dict(per_weight=2.0), "forward alone"),
    "flops: no attention": (ex.check_token_flops, token_flops, dict(attention=False), "no attention term"),
    "flops: embedding lookup counted": (ex.check_token_flops, token_flops, dict(embedding=True),
                                        "embedding lookup"),
    "flops: tied readout left out": (ex.check_token_flops, token_flops, dict(tied_readout=False), "also the readout"),
    "flops: mechanism left out": (ex.check_token_flops, token_flops, dict(mechanism=False), "mechanism's weights"),
    "flops: the config's context": (ex.check_token_flops, token_flops, dict(context="config"),
                                    "config.seq_len keys"),
}
