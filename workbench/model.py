"""The GPT backbone every mechanism and schedule shares (nanochat-style). RoPE comes from absolute positions, so a
full pass, a KV-cache step and a refinement see identical angles. The mechanism's three points (read, fuse, inject)
are identities for ``mechanism="none"``; ``hook_memory_in`` is where interventions edit the feedback channel."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .fast import ops
from .functional import uniform_init_
from .hooks import HookPoint, name_hook_points
from .kv_cache import KVCache, KVStore, Mask, StaticKVCache
from .mechanisms import Feedback, Mechanism, build_mechanism
from .validation import check_fits, check_int, check_memory, check_positions, check_tokens

# The LRT paper's d20 baseline (arXiv 2605.26797): its reported size, which includes value
# embeddings our lean backbone does not carry. Used only to restate the paper's overhead ratio.
PAPER_D20_BASELINE_PARAMS = 1.3e9


def resolve_positions(idx: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    """``positions`` checked, else 0..T-1."""
    T = idx.size(1)
    if positions is None:
        return torch.arange(T, device=idx.device)
    check_positions(positions, T)
    return positions


@dataclass
class Context:
    """What one forward shares across blocks."""

    positions: torch.Tensor  # (T,) absolute positions of the tokens being computed
    rope_q: tuple[torch.Tensor, torch.Tensor] | None  # cos, sin laid out per query head (T, n_head, hd); None: no RoPE
    rope_k: tuple[torch.Tensor, torch.Tensor] | None  # ... per key/value head (T, kv_heads, hd)
    feedback: Feedback
    mechanism: Mechanism
    kv: KVStore | None  # where this forward's keys/values go and come from; None = causal over the chunk


@dataclass
class StepOutput:
    """One forward's outputs."""

    logits: torch.Tensor  # (B, T, V)
    memory: torch.Tensor  # (B, T, D) the memory each position produced (normed state at the source depth)
    top: torch.Tensor  # (B, T, D) top state before the final norm


@runtime_checkable
class FeedbackModel(Protocol):
    """What schedules, decoding and analysis rely on."""

    config: Any  # n_layer, n_embd, vocab_size, mechanism, source_depth, ...

    def step(self, idx: torch.Tensor, *, memory: torch.Tensor | None = None,
             memory_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None,
             kv: KVStore | None = None) -> StepOutput: ...

    def new_kv_cache(self, batch: int, max_len: int) -> KVStore: ...

    @property
    def readout_weight(self) -> torch.Tensor: ...

    def flops_per_token(self, seq_len: int | None = None) -> float: ...

    def num_params(self) -> int: ...

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]: ...


def check_model(model: object, name: str = "model") -> None:
    """Raise unless ``model`` is a ``FeedbackModel``."""
    if not (isinstance(model, nn.Module) and isinstance(model, FeedbackModel)):
        held = getattr(model, "model", None)
        hint = "; pass its .model" if isinstance(held, nn.Module) else ""
        raise ValueError(f"{name}={type(model).__name__} is invalid: must be a GPT or hf.FeedbackLM{hint}")


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_head, self.kv_heads, self.head_dim = config.n_head, config.kv_heads, config.head_dim
        self.qk_norm = config.qk_norm
        self.c_q = nn.Linear(config.n_embd, config.n_head * config.head_dim, bias=False)
        self.c_k = nn.Linear(config.n_embd, config.kv_dim, bias=False)
        self.c_v = nn.Linear(config.n_embd, config.kv_dim, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_gate = HookPoint()  # LRT gates (B, T, 2, kv_heads, 1): local, feedback
        self.hook_pattern = HookPoint()  # (B, H, Tq, Tk); computed only when a hook asks for it

    def forward(self, x: torch.Tensor, ctx: Context) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.kv_heads, self.head_dim)
        v = self.c_v(x).view(B, T, self.kv_heads, self.head_dim)
        k, v, gates = ctx.mechanism.inject_kv(self.layer, x, k, v, ctx.feedback)
        if gates is not None:
            self.hook_gate(gates)
        if self.qk_norm:
            q, k = ops().norm(q), ops().norm(k)
        if ctx.rope_q is not None:
            q, k = ops().apply_rotary(q, *ctx.rope_q), ops().apply_rotary(k, *ctx.rope_k)
        q, k, v = (self.hook_q(q.transpose(1, 2)), self.hook_k(k.transpose(1, 2)), self.hook_v(v.transpose(1, 2)))
        mask: Mask = "causal"
        if ctx.kv is not None:
            k, v, mask = ctx.kv.update(self.layer, k, v, ctx.positions)
        y = self._attend(q, k, v, mask)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask) -> torch.Tensor:
        gqa = self.kv_heads != self.n_head
        if isinstance(mask, str):
            if not self.hook_pattern.active:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril()
        if not self.hook_pattern.active:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        if gqa:
            k = k.repeat_interleave(self.n_head // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.n_head // self.kv_heads, dim=1)
        scores = q @ k.transpose(-1, -2) / self.head_dim ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        pattern = self.hook_pattern(scores.softmax(dim=-1))
        return pattern @ v


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(ops().relu_squared(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.attn = CausalSelfAttention(config, layer)
        self.mlp = MLP(config)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor, ctx: Context) -> torch.Tensor:
        x = self.hook_resid_pre(ctx.mechanism.inject_residual(self.layer, x, ctx.feedback))
        x = self.hook_resid_mid(x + self.attn(ops().norm(x), ctx))
        return self.hook_resid_post(x + self.mlp(ops().norm(x)))


class GPT(nn.Module):
    """Token embedding, ``n_layer`` blocks, a readout and one mechanism. ``model(idx)`` is one plain pass: feedback
    needs the previous position's memory, so schedules and the decoder call ``step``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
        config.validate()  # again: a field set after construction (cfg.n_layer = 0) must not build a broken model
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        self.mechanism = build_mechanism(config)
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.hook_embed, self.hook_input = HookPoint(), HookPoint()
        self.hook_memory, self.hook_final = HookPoint(), HookPoint()
        self.hook_memory_in = HookPoint()  # the memory read (B, T, D), only in forwards that read one
        self.hook_positions = HookPoint()  # the absolute positions of each forward: lets caches assemble passes
        name_hook_points(self)

    # ------------------------------------------------------------------ init
    def init_weights(self) -> None:
        """Tied embeddings N(0, 1/D) so logits start O(1); output projections zero, so blocks start as identities."""
        D = self.config.n_embd
        with torch.no_grad():
            self.wte.weight.normal_(0.0, D ** -0.5 if self.config.tie_embeddings else 1.0)
            if self.lm_head is not None:
                self.lm_head.weight.normal_(0.0, 0.001)
            for block in self.blocks:
                for lin in (block.attn.c_q, block.attn.c_k, block.attn.c_v, block.mlp.c_fc):
                    uniform_init_(lin.weight)
                block.attn.c_proj.weight.zero_()
                block.mlp.c_proj.weight.zero_()
        self.mechanism.init_weights()

    # ------------------------------------------------------------------ forward
    @property
    def readout_weight(self) -> torch.Tensor:
        return self.wte.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """One plain pass with no feedback: logits (B, T, V)."""
        return self.step(idx).logits

    def step(self, idx: torch.Tensor, *, memory: torch.Tensor | None = None,
             memory_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None,
             kv: KVStore | None = None) -> StepOutput:
        """``memory`` (B, T, width): what each position reads, already shifted; ``memory_mask`` (B, T): readers."""
        check_tokens(self.config.vocab_size, idx)
        B, T = idx.shape
        check_memory(memory, memory_mask, B, T, self.mechanism.memory_width)
        positions = self.hook_positions(resolve_positions(idx, positions))
        c = self.config
        if memory is not None:
            memory = self.hook_memory_in(memory)
            if c.document_token is not None:  # a document start reads no memory: none crosses a <bos>
                opens = idx == c.document_token
                memory_mask = ~opens if memory_mask is None else memory_mask & ~opens
        rope_q = rope_k = None
        if c.rope:
            tables = ops().rotary(positions, c.head_dim, c.rope_base, self.wte.weight.dtype)
            rope_q = tuple(ops().per_head(t, c.n_head) for t in tables)
            rope_k = rope_q if c.kv_heads == c.n_head else tuple(ops().per_head(t, c.kv_heads) for t in tables)
        ctx = Context(positions, rope_q, rope_k, Feedback(memory, memory_mask), self.mechanism, kv)
        x = self.hook_embed(ops().norm(self.wte(idx)))
        x = self.hook_input(self.mechanism.fuse_input(x, ctx.feedback))
        memory_out = None
        source = self.mechanism.source_layer
        for block in self.blocks:
            x = block(x, ctx)
            if block.layer == source:
                memory_out = ops().norm(x)
        if kv is not None:
            kv.advance(T)
        final = self.hook_final(ops().norm(x))
        memory_out = self.hook_memory(self.mechanism.emit(final if memory_out is None else memory_out, ctx.feedback))
        logits = F.linear(final, self.readout_weight)
        cap = self.config.logit_softcap
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        return StepOutput(logits=logits, memory=memory_out, top=x)

    def new_kv_cache(self, batch: int, max_len: int, static: bool = False) -> KVCache | StaticKVCache:
        """An empty KV cache on the model's device and dtype; ``static=True`` for a compiled decode step."""
        check_int("batch", batch, 1)  # checked here: torch.zeros would refuse either naming neither
        check_int("max_len", max_len, 1)
        w = self.wte.weight
        c = self.config
        cls = StaticKVCache if static else KVCache
        return cls(c.n_layer, batch, c.kv_heads, max_len, c.head_dim, device=w.device, dtype=w.dtype)

    # ------------------------------------------------------------------ accounting
    def num_params_by_group(self) -> dict[str, int]:
        """Per group (readout 0 when tied), and total."""
        counts = {
            "embedding": self.wte.weight.numel(),
            "blocks": sum(p.numel() for p in self.blocks.parameters()),
            "mechanism": sum(p.numel() for p in self.mechanism.parameters()),
            "readout": 0 if self.lm_head is None else self.lm_head.weight.numel(),
        }
        counts["total"] = sum(counts.values())
        return counts

    def num_params(self) -> int:
        return self.num_params_by_group()["total"]

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token of one pass (nanochat: 6 per matmul weight, plus attention)."""
        c = self.config
        T = c.seq_len if seq_len is None else seq_len
        groups = self.num_params_by_group()
        matmul = groups["blocks"] + groups["mechanism"] + (self.wte.weight.numel() if self.lm_head is None
                                                          else groups["readout"])
        return 6.0 * matmul + 12.0 * c.n_layer * c.n_embd * T

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """By optimiser role; 2-D hidden ``matrices`` go to Muon."""
        groups: dict[str, list[nn.Parameter]] = {"matrices": [], "embedding": [self.wte.weight],
                                                 "readout": [], "scalars": []}
        if self.lm_head is not None:
            groups["readout"].append(self.lm_head.weight)
        for p in [*self.blocks.parameters(), *self.mechanism.parameters()]:
            groups["matrices" if p.ndim == 2 else "scalars"].append(p)
        return groups


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode for the block (analysis must not see FBT's jitter)."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


D20_SHAPE = dict(vocab_size=65536, n_layer=20, n_head=10, n_embd=1280, seq_len=2048)  # nanochat d20


def mechanism_overhead(config: ModelConfig) -> dict[str, float]:
    """Parameters a mechanism adds over the same backbone."""
    base = build_model(config.replace(mechanism="none"), device="meta").num_params()
    total = build_model(config, device="meta").num_params()
    extra = total - base
    return {"baseline_params": base, "params": total, "extra_params": extra, "extra_fraction": extra / base,
            "extra_fraction_of_paper_d20": extra / PAPER_D20_BASELINE_PARAMS}


def build_model(config: ModelConfig, device: torch.device | str | None = None,
                dtype: torch.dtype | None = None) -> GPT:
    """Build on the meta device, materialise on ``device``, init."""
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
    config = dataclasses.replace(config)
    with torch.device("meta"):
        model = GPT(config)
    elements = sum(t.numel() for t in (*model.parameters(), *model.buffers()))
    size = elements * (dtype or torch.get_default_dtype()).itemsize
    check_fits("config", f"n_layer={config.n_layer}, n_embd={config.n_embd}, vocab_size="
                          f"{config.vocab_size}", size, f"a model of {elements:,} weights", device)
    model.to_empty(device=device or "cpu")
    model.init_weights()
    if dtype is not None:
        model.to(dtype=dtype)
    return model
