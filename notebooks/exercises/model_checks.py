"""Exercise checks on the backbone and the mechanisms, by hand (01, 02, 04, 09)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from workbench.analysis.cache import ActivationCache, run_with_cache
from workbench.config import ModelConfig
from workbench.functional import apply_rotary, norm, rotary
from workbench.kv_cache import KVCache
from workbench.mechanisms import Feedback
from workbench.model import GPT, eval_mode
from workbench.schedules import shift_right

from . import solutions
from .framework import VOCAB, T, as_number, close, exercise, passed, practice_model, practice_tokens, register


@register
@exercise(solutions.cached_logits)
def check_kv_cache_step(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor], model: GPT | None = None) -> Callable:
    """``fn(model, idx, prefill)``: prefill ``idx[:, :prefill]`` into a fresh KV cache in one forward, then feed one
    token per forward; return the logits of every position (B, T, V)."""
    models = [practice_model("none")] + ([] if model is None else [model])
    hint = ("Each one-token step must pass its absolute position (positions=torch.tensor([t])) and the "
            "same cache (kv=cache): without the position RoPE rotates it as position 0; without the cache "
            "it attends to nothing before it.")
    for m in models:
        idx = practice_tokens() % m.config.vocab_size
        with torch.no_grad(), eval_mode(m):
            expected = m(idx)
            for prefill in (1, 4, T - 1):
                tol = 1e-8 if expected.dtype == torch.float64 else 1e-4
                close(fn(m, idx, prefill), expected, f"prefill={prefill}", hint, atol=tol)
    passed("prefill + one-token steps through the cache = one full forward")


@register
@exercise(solutions.rope)
def check_rope(fn: Callable[[torch.Tensor, int, float], torch.Tensor]) -> Callable:
    """``fn(vec, position, base)``: the vector (d,) as RoPE rotates a query or a key at ``position`` (two halves
    paired)."""
    hint = ("Pair channel i with channel i + d/2 (the two halves of the vector); pair i turns by the angle "
            "position * theta_i with theta_i = base^(-2i/d): (a, b) -> (a cos + b sin, b cos - a sin).")

    def reference(vec: torch.Tensor, position: int, base: float) -> torch.Tensor:
        cos, sin = rotary(torch.tensor([position]), vec.size(-1), base, vec.dtype)
        return apply_rotary(vec.view(1, 1, 1, -1), cos, sin).view(-1)

    d, p, base = 8, 3, 10000.0
    unit = torch.eye(d, dtype=torch.float64)
    first, second = fn(unit[0].clone(), p, base), fn(unit[1].clone(), p, base)
    if all(isinstance(x, torch.Tensor) and x.shape == (d,) for x in (first, second)):
        first, second = first.detach().double(), second.detach().double()
        if abs(float(first[1])) > 1e-9:
            raise AssertionError(f"channel 0 alone at position {p}: channel 1 moved. RoPE pairs channel i with "
                                 "channel i + d/2 (the two halves), not neighbouring channels 2i, 2i+1.")
        angle = p * 1.0  # theta_0 = base^0 = 1
        if abs(float(first[d // 2]) - math.sin(angle)) < 1e-9:
            raise AssertionError(f"channel 0 alone at position {p}: channel {d // 2} got +sin({angle:g}), expected "
                                 f"-sin({angle:g}): your rotation turns the other way (the direction of the "
                                 "model's tables: b -> b cos - a sin).")
        slow = p * base ** (-1 / d)
        if abs(float(second[1]) - math.cos(slow)) < 1e-9:
            raise AssertionError(f"channel 1 alone at position {p}: it turned by {slow:.4g} rad, the angle of "
                                 f"theta_1 = base^(-1/d); the exponent is -2i/d, so theta_1 = base^(-2/d).")
    gen = torch.Generator().manual_seed(3)
    for d, base in ((8, 10000.0), (16, 500.0)):
        vec = torch.randn(d, generator=gen, dtype=torch.float64)
        for position in (0, 1, 5, 100):
            close(fn(vec.clone(), position, base), reference(vec, position, base),
                  f"d={d}, base={base:g}, position={position}", hint)
    passed("your rotation matches the model's rotary tables at every position, width and base")


@register
@exercise(solutions.kv_cache_bytes)
def check_kv_cache_bytes(fn: Callable[[ModelConfig, int, int, torch.dtype], int]) -> Callable:
    """``fn(config, batch, max_len, dtype)``: the bytes the K/V tensors of a cache of ``max_len`` positions take."""
    hint = ("Every layer stores a key and a value for each batch row, position and key/value head "
            "(config.kv_heads of them, config.head_dim wide); a number takes dtype.itemsize bytes.")
    cases = [(ModelConfig(vocab_size=VOCAB, n_layer=3, n_head=4, n_kv_head=2, n_embd=32, seq_len=T), 2, 16,
              torch.float32),
             (ModelConfig(vocab_size=VOCAB, n_layer=3, n_head=4, n_kv_head=1, n_embd=32, seq_len=T), 3, 5,
              torch.bfloat16),
             (ModelConfig(vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=16, seq_len=T), 1, T, torch.float64)]
    for config, batch, max_len, dtype in cases:
        cache = KVCache(config.n_layer, batch, config.kv_heads, max_len, config.head_dim, dtype=dtype)
        expected = sum(t.numel() * t.element_size() for t in [*cache.k, *cache.v])
        what = (f"{config.n_layer} layers, {config.n_head} query / {config.kv_heads} key-value heads of width "
                f"{config.head_dim}, batch {batch}, max_len {max_len}, {dtype}")
        got = as_number(fn(config, batch, max_len, dtype), what, hint)
        if got == expected:
            continue
        slips = [(expected / 2, "that counts the keys alone: the cache keeps a value beside every key"),
                 (expected * config.n_head / config.kv_heads, "that counts a key and a value per query head "
                  "(config.n_head): with grouped-query attention only config.kv_heads of them are stored"),
                 (expected / config.n_layer, "that is one layer: every layer keeps its own keys and values"),
                 (expected / dtype.itemsize, "that counts numbers, not bytes: multiply by dtype.itemsize"),
                 (expected / dtype.itemsize * 4, "that is 4 bytes a number whatever the dtype: a number takes "
                  "dtype.itemsize bytes")]
        for value, why in slips:
            if got == value:
                raise AssertionError(f"{what}: {got:,.0f} bytes, the cache allocates {expected:,}: {why}.")
        raise AssertionError(f"{what}: {got:,.0f} bytes, the cache allocates {expected:,}. {hint}")
    passed("your byte counts match what KVCache allocates (grouped-query heads, three dtypes)")


@register
@exercise(solutions.gated_kv)
def check_lrt_kv_injection(fn: Callable[[GPT, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                                        tuple[torch.Tensor, torch.Tensor]]) -> Callable:
    """``fn(model, layer, x, k, v, memory)``: LRT's keys and values (B, T, kv_heads, hd) for block ``layer`` from its
    normed input ``x``, local ``k``/``v`` and the already shifted ``memory`` ``m_{t-1}``."""
    hint = ("gates = 2 * sigmoid(W_gate x[..., :C]) give g_local and g_feedback per kv head; "
            "k~ = g_local * k + g_feedback * (W_k^rec m), likewise v, with the layer's (or the shared) projection.")
    for projection in ("shared", "per_layer"):
        model = practice_model("lrt", lrt_projection=projection)
        c = model.config
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(2, T, c.n_embd, generator=gen, dtype=torch.float64)
        k, v = (torch.randn(2, T, c.kv_heads, c.head_dim, generator=gen, dtype=torch.float64) for _ in range(2))
        memory = torch.randn(2, T, c.n_embd, generator=gen, dtype=torch.float64)
        for layer in range(c.n_layer):
            with torch.no_grad():
                want_k, want_v, _ = model.mechanism.inject_kv(layer, x, k, v, Feedback(memory))
                got = fn(model, layer, x, k, v, memory)
            if not isinstance(got, tuple) or len(got) != 2:
                raise AssertionError(f"fn must return (keys, values), got {type(got).__name__}")
            close(got[0], want_k, f"keys, {projection} projection, layer {layer}", hint)
            close(got[1], want_v, f"values, {projection} projection, layer {layer}", hint)
    passed("gated recurrent keys and values match LRT.inject_kv (shared and per-layer projections)")


def _residual_only(name: str) -> bool:
    """The residual stream at every depth, without the memory hooks (which would hand the answer over)."""
    return "hook_resid" in name or name in ("hook_embed", "hook_input", "hook_final")


@register
@exercise(solutions.memory_read)
def check_memory_read(fn: Callable[[GPT, ActivationCache], torch.Tensor]) -> Callable:
    """``fn(model, cache)``: the memory each position of an LRT model reads, ``m_{t-1}`` (B, T, D), from a
    ``run_with_cache`` of the exact recurrence that holds the residual stream (no memory hook)."""
    hint = ("The memory is the RMS-normed output of the source block: blocks.{l}.hook_resid_post with "
            "l = model.mechanism.source_layer (-1: the top block), through wb.functional.norm; position t reads "
            "its predecessor's, so shift it right by one (wb.schedules.shift_right: zeros at position 0).")
    for source in (0, 1, -1):
        model, idx = practice_model("lrt", lrt_source_layer=source), practice_tokens()
        with torch.no_grad():
            out, cache = run_with_cache(model, idx, "sequential", names_filter=_residual_only)
            got = fn(model, cache)
        expected, what = shift_right(out.memory), f"source_layer={source}"
        layer, top = source % model.config.n_layer, model.config.n_layer - 1
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            slips = [(out.memory, "not shifted: position t reads m_{t-1}, the memory its predecessor produced "
                      "(wb.schedules.shift_right)"),
                     (shift_right(cache[f"blocks.{layer}.hook_resid_post"]), "not normed: the memory is the "
                      "block's output through RMSNorm (wb.functional.norm)"),
                     (shift_right(norm(cache[f"blocks.{layer}.hook_resid_pre"])), "that is the block's input, "
                      "hook_resid_pre: the memory is its output, hook_resid_post")]
            if layer != top:
                slips.append((shift_right(norm(cache[f"blocks.{top}.hook_resid_post"])), "that is the top block's "
                              "output: this model reads its memory at model.mechanism.source_layer"))
            for wrong, why in slips:
                if torch.allclose(got.detach().to(wrong.dtype), wrong, atol=1e-8):
                    raise AssertionError(f"{what}: {why}.")
        close(got, expected, what, hint)
    passed("your memory read matches the exact recurrence's, source layers 0, 1 and -1")


@register
@exercise(solutions.pooled_weights)
def check_pooled_memory(fn: Callable[[int, float], torch.Tensor]) -> Callable:
    """``fn(seq_len, decay)``: the (T, T) weights W with ``p = W h``: LRT's pooled memory (``lrt_memory="pooled"``) at
    every position as a weighted sum of the source states ``h_0 .. h_t``."""
    hint = ("Unroll p_t = decay * p_{t-1} + (1 - decay) * h_t from p_0 = h_0 (position 0 reads no memory): "
            "row t of W holds the weight each h_s, s <= t, has in p_t.")
    for decay in (0.9, 0.7):
        what = f"decay={decay}"
        got = fn(T, decay)
        if not isinstance(got, torch.Tensor) or got.shape != (T, T):
            raise AssertionError(f"{what}: fn must return a ({T}, {T}) tensor, got "
                                 f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        W = got.detach().to(torch.float64)
        if bool((W.triu(1).abs() > 1e-12).any()):
            raise AssertionError(f"{what}: W has weight above its diagonal, so p_t would read later states: it is "
                                 "causal, W[t, s] = 0 for s > t (did you transpose it?).")
        sums = W.sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-9):
            raise AssertionError(f"{what}: row sums {[round(float(x), 4) for x in sums]}: each row must sum to 1 "
                                 "(p_t averages states). Position 0 reads no memory, so p_0 = h_0 with weight 1, "
                                 "not (1 - decay) h_0, and h_0 keeps decay^t in row t.")
        if torch.allclose(W.diagonal()[1:], torch.full((T - 1,), decay, dtype=torch.float64)):
            raise AssertionError(f"{what}: the new state h_t got weight decay in p_t: the new state gets "
                                 "1 - decay, and decay weighs the old average p_{t-1}.")
        model, idx = practice_model("lrt", lrt_memory="pooled", lrt_pool_decay=decay), practice_tokens()
        with torch.no_grad():
            out, cache = run_with_cache(model, idx, "sequential", names_filter=["hook_final"])
        close(W @ cache["hook_final"], out.memory, f"{what}, W @ the source states against the model's pooled "
              "memory", hint)
    passed("your weights rebuild LRT's pooled memory from the source states, decays 0.9 and 0.7")


@register
@exercise(solutions.glu_fusion)
def check_glu_fusion(fn: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor],
                     model: GPT | None = None) -> Callable:
    """``fn(model, tokens, memory)``: FBT's fused input u (B, T, D) from the token ids and ``m_{t-1}``."""
    hint = ("u = RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))): the state on the value path (W_U), the token "
            "embedding, normed, through the gate (W_G); RMSNorm is wb.functional.norm.")
    models = [practice_model("fbt")] + ([] if model is None else [model])
    for m in models:
        c = m.config
        tokens = practice_tokens() % c.vocab_size
        memory = norm(torch.randn(tokens.size(0), T, c.n_embd, generator=torch.Generator().manual_seed(2),
                                  dtype=m.wte.weight.dtype))
        with torch.no_grad(), eval_mode(m):
            expected = m.mechanism.fuse_input(norm(m.wte(tokens)), Feedback(memory))
            tol = 1e-8 if expected.dtype == torch.float64 else 1e-5
            close(fn(m, tokens, memory), expected, "fused input u", hint, atol=tol)
    passed("your GLU fusion matches FBT.fuse_input")


def _tiny_feedback_gpt2() -> Any:
    """A float64 2-layer GPT-2 wrapped by ``FeedbackLM``, built offline from a config."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from workbench.hf import FeedbackLM

    config = GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    return FeedbackLM(GPT2LMHeadModel(config).to(torch.float64)).eval()


@register
@exercise(solutions.hf_fused_input)
def check_hf_fusion(fn: Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor], model: Any = None) -> Callable:
    """``fn(model, input_ids, memory)``: the input (B, T, E) a GLU-fusion ``FeedbackLM`` feeds its HF stack in place
    of the embedding ``e``, with ``memory[:, t]`` = ``m_{t-1}``:
    ``RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))) * rms(e)``."""
    hint = ("Take e from the HF model's own embedding (model.hf.get_input_embeddings()); fuse as FBT does, "
            "norm((W_U m) * sigmoid(W_G norm(e))) with model.mechanism.fusion's W_U and W_G; then multiply by "
            "rms(e) = e.pow(2).mean(-1, keepdim=True).sqrt(), so the fused input has the scale of the embedding "
            "it replaces (an HF stack expects its raw scale, not unit RMS).")
    models = [_tiny_feedback_gpt2()] + ([] if model is None else [model])
    for m in models:
        width = m.config.n_embd
        ids = practice_tokens() % m.config.vocab_size
        dtype = m.hf.get_input_embeddings().weight.dtype
        memory = norm(torch.randn(ids.size(0), ids.size(1), width, generator=torch.Generator().manual_seed(5),
                                  dtype=dtype))
        with torch.no_grad():
            e = m.hf.get_input_embeddings()(ids)
            expected = m.mechanism.fuse_input(e, Feedback(memory))
            got = fn(m, ids, memory)
            fusion, rms = m.mechanism.fusion, e.pow(2).mean(dim=-1, keepdim=True).sqrt()
            slips = [(norm(fusion.W_U(memory) * torch.sigmoid(fusion.W_G(norm(e)))), "it has unit RMS, not the "
                      "scale of the embedding it replaces: multiply the normed product by rms(e) (an HF stack "
                      "expects its embedding's raw scale)"),
                     (norm(fusion.W_U(memory) * torch.sigmoid(fusion.W_G(e))) * rms, "the gate read the raw "
                      "embedding: W_G reads RMSNorm(e), the embedding normed first (the HF embedding is far from "
                      "unit scale, so the raw one saturates or flattens the sigmoid)")]
        tol = 1e-8 if dtype == torch.float64 else 1e-5
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for wrong, why in slips:
                if torch.allclose(got.detach().to(wrong.dtype), wrong, atol=tol * max(1.0, float(wrong.abs().max()))):
                    raise AssertionError(f"fused input: {why}.")
        close(got, expected.to(dtype), "fused input", hint, atol=tol * max(1.0, float(expected.abs().max())))
    passed("your fusion matches the wrapper's GLU fusion"
           + ("" if model is None else " (a tiny GPT-2 and this model)"))
