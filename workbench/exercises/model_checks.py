"""Exercise checks on the backbone and the mechanisms, by hand: the KV cache (01), LRT's gated keys and
values (02), FBT's fusion (04) and the Hugging Face wrapper's (09)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..functional import norm
from ..mechanisms import Feedback
from ..model import GPT, eval_mode
from . import solutions
from .framework import VOCAB, T, close, exercise, passed, practice_model, practice_tokens, register


@register
@exercise(solutions.cached_logits)
def check_kv_cache_step(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor], model: GPT | None = None) -> Callable:
    """``fn(model, idx, prefill)``: prefill ``idx[:, :prefill]`` into a fresh KV cache in one forward,
    then feed one token per forward; return the logits of every position (B, T, V).

    Compared with one full forward ``model(idx)`` for several prefill lengths, on a random baseline
    model (and on ``model`` too when given: a trained one).
    """
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
@exercise(solutions.gated_kv)
def check_lrt_kv_injection(fn: Callable[[GPT, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                                        tuple[torch.Tensor, torch.Tensor]]) -> Callable:
    """``fn(model, layer, x, k, v, memory)``: LRT's keys and values for block ``layer`` (B, T, kv_heads, hd).

    ``x`` is the block's normed input, ``k``/``v`` its local keys/values, ``memory`` the (already
    shifted) ``m_{t-1}``. Compared with ``LRT.inject_kv`` for the shared and the per-layer projection.
    """
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


@register
@exercise(solutions.glu_fusion)
def check_glu_fusion(fn: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor],
                     model: GPT | None = None) -> Callable:
    """``fn(model, tokens, memory)``: FBT's fused input u (B, T, D) from the token ids and ``m_{t-1}``.

    Compared with ``FBT.fuse_input`` (every position reads memory here) on a random FBT model, and
    on ``model`` when given.
    """
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
    """A float64 2-layer GPT-2 wrapped by ``FeedbackLM``, built offline from a config (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from ..hf import FeedbackLM

    config = GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    return FeedbackLM(GPT2LMHeadModel(config).to(torch.float64)).eval()


@register
@exercise(solutions.hf_fused_input)
def check_hf_fusion(fn: Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor], model: Any = None) -> Callable:
    """``fn(model, input_ids, memory)``: the input (B, T, E) a ``FeedbackLM`` with GLU fusion feeds its HF
    stack in place of the embedding ``e``, where ``memory[:, t]`` is ``m_{t-1}``:
    ``RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))) * rms(e)``.

    Compared with the wrapper's own ``mechanism.fuse_input`` (every position reads memory) on a tiny
    float64 GPT-2, whose embeddings sit far from unit scale, and on ``model`` when given.
    """
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
            expected = m.mechanism.fuse_input(m.hf.get_input_embeddings()(ids), Feedback(memory))
            got = fn(m, ids, memory)
        tol = 1e-8 if dtype == torch.float64 else 1e-5
        close(got, expected.to(dtype), "fused input", hint, atol=tol * max(1.0, float(expected.abs().max())))
    passed("your fusion matches the wrapper's GLU fusion"
           + ("" if model is None else " (a tiny GPT-2 and this model)"))
