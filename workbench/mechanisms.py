"""Latent-feedback mechanisms: where the memory is read and how it is consumed.

Token t reads a memory ``m_{t-1}`` (RMS-normed, so O(1) at any depth) that position t-1 produced. ``LRT``
(arXiv 2605.26797) adds a gated recurrent K/V projection and residual injection ``alpha_l * x + gamma_l * m``; ``FBT``
(arXiv 2608.08888) fuses ``u_t = RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e_t)))`` into the input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from . import config as config_module
from .config import ModelConfig
from .fast import ops
from .functional import glu_state, residual_inject, uniform_init_
from .hooks import HookPoint
from .validation import fail


@dataclass
class Feedback:
    """``memory[:, i]`` is ``m_{t_i - 1}``; ``mask`` (B, T): the readers (None: all); ``memo``: work blocks share."""

    memory: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    memo: dict = field(default_factory=dict)

    def masked_memory(self) -> torch.Tensor | None:
        """Plain positions zeroed (what an additive injection sees)."""
        if self.memory is None or self.mask is None:
            return self.memory
        if "masked" not in self.memo:
            self.memo["masked"] = self.memory * self.mask.unsqueeze(-1).to(self.memory.dtype)
        return self.memo["masked"]


class Mechanism(nn.Module):
    """Base: reads the top state, every point the identity; it describes itself so nothing branches on its name."""

    name: ClassVar[str] = ""
    caption: ClassVar[str] = ""
    overhead_rows: ClassVar[tuple[dict[str, Any], ...]] = ()  # ModelConfig fields beside mechanism=name

    reads: bool = True  # whether any point consumes the memory (False: no schedule changes what it computes)

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.source_layer = -1
        self.memory_width = config.n_embd  # channels of the memory a position leaves (``emit``)

    @classmethod
    def constraints(cls, config: ModelConfig) -> list[tuple[str, Any, str]]:
        """(field, value, allowed) per need ``config`` breaks."""
        return []

    @classmethod
    def sites(cls, n_layer: int) -> dict[str, str]:
        """Intervention sites beyond ``memory``: name -> hook point."""
        return {}

    def init_weights(self) -> None:
        pass

    def emit(self, state: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        """The memory left for the next position."""
        return state

    def fuse_input(self, embedded: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        return embedded

    def inject_residual(self, layer: int, x: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        return x

    def inject_kv(self, layer: int, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  feedback: Feedback) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        return k, v, None


class NoFeedback(Mechanism):
    """The baseline ("none"): consumes no memory."""

    name: ClassVar[str] = "none"
    caption: ClassVar[str] = "baseline: only the sampled token crosses"
    reads = False


class LRT(Mechanism):
    """Latent Recurrent Transformer."""

    name: ClassVar[str] = "lrt"
    caption: ClassVar[str] = "a block's state into every block (LRT)"
    overhead_rows: ClassVar[tuple[dict[str, Any], ...]] = ({"lrt_projection": "shared"},
                                                           {"lrt_projection": "per_layer"})

    @classmethod
    def sites(cls, n_layer: int) -> dict[str, str]:
        """``inject{l}``: what block l's injections read."""
        return {f"inject{layer}": f"mechanism.hook_read.{layer}" for layer in range(n_layer)}

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.config = config
        self.source_layer = config.lrt_source_layer
        self.kv_heads, self.head_dim = config.kv_heads, config.head_dim
        self.gate_channels = config.gate_channels
        self.memory_source, self.pool_decay, self.width = config.lrt_memory, config.lrt_pool_decay, config.n_embd
        reads = config.lrt_memory != "none"
        if "kv" in config.lrt_inject and reads:
            n_proj = 1 if config.lrt_projection == "shared" else config.n_layer
            self.rec_k = nn.ModuleList(nn.Linear(config.n_embd, config.kv_dim, bias=False) for _ in range(n_proj))
            self.rec_v = nn.ModuleList(nn.Linear(config.n_embd, config.kv_dim, bias=False) for _ in range(n_proj))
        if "kv" in config.lrt_inject:
            # per layer: gate_local and gate_feedback for every kv head, from the first C channels
            self.gates = nn.ModuleList(nn.Linear(self.gate_channels, 2 * self.kv_heads, bias=False)
                                       for _ in range(config.n_layer))
        if "residual" in config.lrt_inject:
            self.alpha = nn.Parameter(torch.ones(config.n_layer))
            if reads:
                self.gamma = nn.Parameter(torch.full((config.n_layer,), float(config.lrt_gamma_init)))
        self.hook_read = nn.ModuleList(HookPoint() for _ in range(config.n_layer))  # (B, T, D) per layer
        self.injects_kv, self.injects_residual = "kv" in config.lrt_inject, "residual" in config.lrt_inject
        self.reads = reads
        self.memory_width = 2 * config.n_embd if config.lrt_memory == "older" else config.n_embd

    def init_weights(self) -> None:
        """Zero gates (2*sigmoid(0) = 1) and projections: with gamma=0 it starts as the baseline;
        ``lrt_kv_init="uniform"`` (the reference code's) reaches K/V from step one."""
        with torch.no_grad():
            if self.injects_kv:
                for lin in self.gates:
                    lin.weight.zero_()
                for lin in [*self.rec_k, *self.rec_v] if self.reads else []:
                    if self.config.lrt_kv_init == "uniform":
                        uniform_init_(lin.weight)
                    else:
                        lin.weight.zero_()
            if self.injects_residual:
                self.alpha.fill_(1.0)
                if self.reads:
                    self.gamma.fill_(self.config.lrt_gamma_init)

    def emit(self, state: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        """``"older"``: ``[h_t, h_{t-1}]``, so the successor injects ``h_{t-1}``; ``"pooled"``: the decayed
        average."""
        read = feedback.masked_memory()
        if self.memory_source == "older":
            return torch.cat([state, torch.zeros_like(state) if read is None else read[..., : self.width]], dim=-1)
        if self.memory_source != "pooled" or read is None:
            return state
        pooled = state + self.pool_decay * (read - state)
        return pooled if feedback.mask is None else torch.where(feedback.mask.unsqueeze(-1), pooled, state)

    def inject_residual(self, layer: int, x: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        if not self.injects_residual:
            return x
        alpha, gamma, _, hooked = self._layer(layer, feedback.memo)
        return residual_inject(x, alpha, gamma, self._read(layer, feedback, hooked))

    def inject_kv(self, layer: int, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  feedback: Feedback) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if not self.injects_kv:
            return k, v, None
        B, T = x.shape[:2]
        _, _, gate_weight, hooked = self._layer(layer, feedback.memo)
        sig = torch.sigmoid(F.linear(x[..., : self.gate_channels], gate_weight))
        gates = (sig + sig).view(B, T, 2, self.kv_heads, 1)  # 2 * sigmoid, in (0, 2); a sum costs half a product
        g_local, g_feedback = gates.unbind(2)
        m = self._read(layer, feedback, hooked)
        if m is None:  # zero memory contributes nothing, so a plain pass skips the projection
            return g_local * k, g_local * v, gates
        k_rec, v_rec = self._project(layer, m, feedback.memo, hooked)
        return g_local * k + g_feedback * k_rec, g_local * v + g_feedback * v_rec, gates

    def _layer(self, layer: int, memo: dict) -> tuple[Any, Any, Any, bool]:
        """Memoised: indexing a parameter is an op per block per token."""
        if "lrt" not in memo:
            n = len(self.hook_read)
            alpha = self.alpha.unbind() if self.injects_residual else (None,) * n
            gamma = self.gamma.unbind() if self.injects_residual and self.reads else (None,) * n
            weights = [lin.weight for lin in self.gates] if self.injects_kv else [None] * n
            memo["lrt"] = list(zip(alpha, gamma, weights, [hook.active for hook in self.hook_read]))
        return memo["lrt"][layer]

    def _read(self, layer: int, feedback: Feedback, hooked: bool) -> torch.Tensor | None:
        """Memoised: both injections see one (maybe edited) read, masked after the hook."""
        m = feedback.masked_memory() if self.reads else None
        if m is not None and self.memory_source == "older":
            m = m[..., self.width:]
        if m is None or not hooked:
            return m
        key = ("read", layer)
        if key not in feedback.memo:
            edited = self.hook_read[layer](m)
            feedback.memo[key] = edited if feedback.mask is None else edited * feedback.mask.unsqueeze(-1).to(m.dtype)
        return feedback.memo[key]

    def _project(self, layer: int, m: torch.Tensor, memo: dict, hooked: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Recurrent K/V; a shared projection runs once per forward."""
        proj = 0 if len(self.rec_k) == 1 else layer
        key = ("rec_kv", proj, layer if hooked else None)
        if key not in memo:
            shape = (*m.shape[:2], self.kv_heads, self.head_dim)
            k_rec, v_rec = F.linear(m, self.rec_k[proj].weight), F.linear(m, self.rec_v[proj].weight)
            memo[key] = (k_rec.view(shape), v_rec.view(shape))
        return memo[key]


class FBT(Mechanism):
    """Full-Bandwidth Transformer."""

    name: ClassVar[str] = "fbt"
    caption: ClassVar[str] = "top state fused into the input (FBT)"
    overhead_rows: ClassVar[tuple[dict[str, Any], ...]] = ({"tie_embeddings": True},)

    @classmethod
    def constraints(cls, config: ModelConfig) -> list[tuple[str, Any, str]]:
        if config.tie_embeddings:
            return []
        return [("tie_embeddings", config.tie_embeddings,
                 "must be True when mechanism='fbt' (inputs share the embedding space)")]

    @classmethod
    def sites(cls, n_layer: int) -> dict[str, str]:
        """``input``: the fused input, where the state enters."""
        return {"input": "hook_input"}

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.jitter = config.fbt_jitter
        self.additive = config.fbt_fusion == "additive"
        self.W_U = nn.Linear(config.n_embd, config.n_embd, bias=False)  # value path: the carried state
        self.W_G = nn.Linear(config.n_embd, config.n_embd, bias=False)  # gate path: the token

    def init_weights(self) -> None:
        uniform_init_(self.W_U.weight)
        uniform_init_(self.W_G.weight)

    def fuse_input(self, embedded: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        if feedback.memory is None:
            return embedded
        m = feedback.memory
        if self.training and self.jitter > 0:
            m = m + torch.empty_like(m).uniform_(-self.jitter, self.jitter)
        state = glu_state(m, embedded, self.W_U, self.W_G)
        fused = ops().norm(embedded + state if self.additive else state)
        if feedback.mask is None:
            return fused
        return torch.where(feedback.mask.unsqueeze(-1), fused, embedded)


MECHANISM_CLASSES: dict[str, type[Mechanism]] = {}


def register(cls: type[Mechanism]) -> type[Mechanism]:
    """Register ``cls`` as ``ModelConfig(mechanism=cls.name)``; a class decorator too."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)) or not cls.name:
        fail("cls", cls, "must be a Mechanism subclass with a name")
    MECHANISM_CLASSES[cls.name] = cls
    config_module.register_mechanism(cls.name, cls.constraints)
    return cls


def unregister(name: str) -> None:
    """Forget a registered mechanism (not a built-in)."""
    if name in ("none", "lrt", "fbt") or name not in MECHANISM_CLASSES:
        fail("name", name, "must be a registered, non-built-in mechanism")
    del MECHANISM_CLASSES[name]
    config_module.unregister_mechanism(name)


register(NoFeedback)
register(LRT)
register(FBT)


def build_mechanism(config: ModelConfig) -> Mechanism:
    return MECHANISM_CLASSES[config.mechanism](config)
