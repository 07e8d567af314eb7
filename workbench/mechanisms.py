"""Latent-feedback mechanisms: where the memory is read and how it is consumed.

Both papers are one pattern: token t reads a memory vector ``m_{t-1}`` that position t-1
produced. A mechanism decides three things, and the backbone calls it at three named points:

- **read** (``source_layer``): which depth becomes the memory. The memory is always the RMS-normed
  state at that depth, so its scale is O(1) whatever the depth (for the top this is exactly the
  final norm the readout uses);
- **input** (``fuse_input``): how the memory enters the input vector (FBT's GLU fusion);
- **block** (``inject_residual``, ``inject_kv``): how it enters each block's residual stream and
  attention keys/values (LRT).

How a whole sequence is computed when every position needs its predecessor's memory is not the
mechanism's business: that is a *schedule* (``schedules.py``). A mechanism sees a ``Feedback``: the
memory each query position reads, and a mask of the positions that read any memory at all.

Mechanisms (each a ``Mechanism``, whose points are all the identity):
- ``NoFeedback`` ("none"): the baseline; overrides nothing.
- ``LRT`` ("lrt"): gated recurrent K/V projection (shared or per layer) and residual injection
  ``alpha_l * x + gamma_l * m`` (LRT paper and its public code). Each layer's injections read the
  memory through their own hook point, ``mechanism.hook_read.{l}``, so an intervention can reach
  one injection point and leave the others alone.
- ``FBT`` ("fbt"): ``u_t = RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e_t)))`` (FBT paper): the state on
  the value path, the token only gates it, with uniform jitter on the carried state in training.
  ``fbt_fusion="additive"`` (ours) adds that gated state to the intact token embedding instead,
  ``RMSNorm(e_t + (W_U m) * sigmoid(W_G e_t))``, the way LRT adds its memory to an intact stream.
"""

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


@dataclass
class Feedback:
    """What the positions of one forward read: ``memory[:, i]`` is ``m_{t_i - 1}``.

    ``memory`` None means no position reads memory (a plain pass). ``mask`` (B, T) bool marks the
    positions that read it; the others are *plain* (position 0, a prompt, a plain prefix); None
    means every position reads it. ``memo`` holds per-forward work a mechanism shares across
    blocks (LRT's shared projection is computed once, not once per block).
    """

    memory: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    memo: dict = field(default_factory=dict)

    def masked_memory(self) -> torch.Tensor | None:
        """Memory with plain positions zeroed (what an additive injection should see)."""
        if self.memory is None or self.mask is None:
            return self.memory
        if "masked" not in self.memo:
            self.memo["masked"] = self.memory * self.mask.unsqueeze(-1).to(self.memory.dtype)
        return self.memo["masked"]


class Mechanism(nn.Module):
    """What the backbone calls at its points: reads the top state (``source_layer`` -1, so schedules can
    report it) and every point is the identity; a mechanism overrides the points it uses.

    A mechanism also describes itself, so that nothing else branches on its name: its ``name`` (the
    ``ModelConfig.mechanism`` value), a one-line ``caption``, the config ``constraints`` it needs, the
    ``sites`` an intervention can edit besides the memory itself, and the configs whose overhead
    ``python -m workbench info --d20`` reports (``overhead_rows``). ``register`` makes a new one a
    ``ModelConfig.mechanism`` value: a third mechanism is one class (see the test suite's).
    """

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
        """What ``config`` breaks of this mechanism's needs: (field, value, what is allowed) per violation."""
        return []

    @classmethod
    def sites(cls, n_layer: int) -> dict[str, str]:
        """Intervention sites beyond ``memory``, by name, with the hook point each edits."""
        return {}

    def init_weights(self) -> None:
        pass

    def emit(self, state: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        """The memory a position leaves for its successor, from its source ``state`` (B, T, D) and what it read
        (``feedback``): the state itself, unless the mechanism carries more (LRT's older or pooled sources)."""
        return state

    def fuse_input(self, embedded: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        return embedded

    def inject_residual(self, layer: int, x: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        return x

    def inject_kv(self, layer: int, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  feedback: Feedback) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        return k, v, None


class NoFeedback(Mechanism):
    """The baseline ("none"): a mechanism that consumes no memory, every point left the identity."""

    name: ClassVar[str] = "none"
    caption: ClassVar[str] = "baseline: only the sampled token crosses"
    reads = False


class LRT(Mechanism):
    """Latent Recurrent Transformer memory: gated K/V projection plus residual injection."""

    name: ClassVar[str] = "lrt"
    caption: ClassVar[str] = "a block's state into every block (LRT)"
    overhead_rows: ClassVar[tuple[dict[str, Any], ...]] = ({"lrt_projection": "shared"},
                                                           {"lrt_projection": "per_layer"})

    @classmethod
    def sites(cls, n_layer: int) -> dict[str, str]:
        """``inject{l}``: what block l's injections read (its own hook point, the others left alone)."""
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
        """Zero gates (gates = 2*sigmoid(0) = 1) and, by default, zero projections: with gamma=0 the model
        starts as the baseline. ``lrt_kv_init="uniform"`` starts the projections as the reference code
        does (nanochat's matrix init, the scale of the block's own K/V), so the memory reaches keys and
        values from the first step instead of waiting for the projections to grow from zero."""
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
        """``"older"``: the state beside the one it read (``[h_t, h_{t-1}]``), so its successor injects
        ``h_{t-1}``, two positions back from itself; ``"pooled"``: the decayed average of the states so far (a
        plain position starts it afresh); otherwise the state."""
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
        """Block ``layer``'s ``(alpha, gamma, gate weight, whether a hook listens at hook_read.{layer})``; None
        for a part this LRT does not inject. Looked up for every layer at a forward's first block and kept in its
        ``memo``: indexing a parameter vector is an op, and a decoded token would pay it in every block."""
        if "lrt" not in memo:
            n = len(self.hook_read)
            alpha = self.alpha.unbind() if self.injects_residual else (None,) * n
            gamma = self.gamma.unbind() if self.injects_residual and self.reads else (None,) * n
            weights = [lin.weight for lin in self.gates] if self.injects_kv else [None] * n
            memo["lrt"] = list(zip(alpha, gamma, weights, [hook.active for hook in self.hook_read]))
        return memo["lrt"][layer]

    def _read(self, layer: int, feedback: Feedback, hooked: bool) -> torch.Tensor | None:
        """The memory layer ``layer`` injects (plain positions zeroed), through its hook point when a hook
        listens (``hooked``, from ``_layer``); memoised so the residual and K/V injections of one layer see
        one (possibly edited) read. An edit cannot make a plain position read memory: the mask applies again
        after the hook."""
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
        """Recurrent keys/values (B, T, kv_heads, head_dim); a shared projection is computed once per forward
        (once per layer for a layer whose read a hook may have edited)."""
        proj = 0 if len(self.rec_k) == 1 else layer
        key = ("rec_kv", proj, layer if hooked else None)
        if key not in memo:
            shape = (*m.shape[:2], self.kv_heads, self.head_dim)
            k_rec, v_rec = F.linear(m, self.rec_k[proj].weight), F.linear(m, self.rec_v[proj].weight)
            memo[key] = (k_rec.view(shape), v_rec.view(shape))
        return memo[key]


class FBT(Mechanism):
    """Full-Bandwidth Transformer latent feedback: GLU fusion of the top state with the token."""

    name: ClassVar[str] = "fbt"
    caption: ClassVar[str] = "top state fused into the input (FBT)"
    overhead_rows: ClassVar[tuple[dict[str, Any], ...]] = ({"tie_embeddings": True},)

    @classmethod
    def constraints(cls, config: ModelConfig) -> list[tuple[str, Any, str]]:
        if config.tie_embeddings:
            return []
        return [("tie_embeddings", config.tie_embeddings,
                 "must be True when mechanism='fbt' (plain and fused inputs share the embedding space)")]

    @classmethod
    def sites(cls, n_layer: int) -> dict[str, str]:
        """``input``: the fused input vector, where the state enters the stack."""
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
    """Make ``cls`` the mechanism of ``ModelConfig(mechanism=cls.name)`` (usable as a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)) or not cls.name:
        raise ValueError(f"cls={cls!r} is invalid: must be a Mechanism subclass with a name")
    MECHANISM_CLASSES[cls.name] = cls
    config_module.register_mechanism(cls.name, cls.constraints)
    return cls


def unregister(name: str) -> None:
    """Forget a registered mechanism (a test's own); the three built in stay."""
    if name in ("none", "lrt", "fbt") or name not in MECHANISM_CLASSES:
        raise ValueError(f"name={name!r} is invalid: must be a registered mechanism other than none, lrt, fbt")
    del MECHANISM_CLASSES[name]
    config_module.unregister_mechanism(name)


register(NoFeedback)
register(LRT)
register(FBT)


def build_mechanism(config: ModelConfig) -> Mechanism:
    return MECHANISM_CLASSES[config.mechanism](config)
