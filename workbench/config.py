"""Config dataclasses, validated at construction, with an exact JSON round trip."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .validation import check_choice, check_float, check_int, fail

# mechanism name -> its constraints on the rest of the config; filled by ``mechanisms.register``
_MECHANISM_CONSTRAINTS: dict[str, Callable[[ModelConfig], list[tuple[str, Any, str]]]] = {}


def mechanisms() -> tuple[str, ...]:
    """The registered ``ModelConfig.mechanism`` names."""
    return tuple(_MECHANISM_CONSTRAINTS)


def register_mechanism(name: str, constraints: Callable[[ModelConfig], list[tuple[str, Any, str]]]) -> None:
    _MECHANISM_CONSTRAINTS[name] = constraints


def unregister_mechanism(name: str) -> None:
    del _MECHANISM_CONSTRAINTS[name]
FBT_FUSIONS = ("glu", "additive")
LRT_INJECTIONS = ("kv", "residual")
LRT_PROJECTIONS = ("shared", "per_layer")
LRT_KV_INITS = ("zero", "uniform")
LRT_MEMORIES = ("previous", "older", "pooled", "none")


def field_docs(cls: type) -> dict[str, str]:
    """A class's ``Attributes:`` section as {field: text}: the one description the CLI help and API docs read."""
    import inspect
    import re

    doc = inspect.cleandoc(cls.__doc__ or "")
    fields: dict[str, str] = {}
    for line in doc.split("\nAttributes:\n", 1)[1].splitlines() if "\nAttributes:\n" in doc else []:
        entry = re.match(r"    (\w+): (.*)", line)
        if entry:
            fields[entry[1]] = entry[2]
        elif line.startswith("        ") and fields:
            fields[next(reversed(fields))] += " " + line.strip()
        elif line.strip():
            break  # the section ends at the first line indented less than a field's continuation
    return fields


class JSONMixin:
    """Exact JSON round trip for flat dataclasses whose tuples are stored as lists."""

    def _plain_numbers(self) -> None:
        """numpy scalar fields as Python numbers, so they validate and serialise."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.generic):
                setattr(self, f.name, value.item())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


@dataclass
class ModelConfig(JSONMixin):
    """Shape of the GPT backbone and its latent-feedback mechanism.

    Attributes:
        vocab_size: Token ids, >= 2; a training run takes it from its task.
        n_layer: Transformer blocks (L).
        n_head: Query heads; must divide ``n_embd``.
        n_kv_head: Key/value heads (GQA), dividing ``n_head``; None: ``n_head``.
        n_embd: Residual width (D); with ``rope`` the head size must be even.
        seq_len: Training context; decoding may run past it.
        rope: Rotary position embeddings; False: none (NoPE, an ablation).
        rope_base: Rotary base, > 0.
        qk_norm: RMS-normalise queries and keys: bounded attention logits (nanochat).
        logit_softcap: ``c * tanh(logits / c)``; 0: off. 15 stops logits running away early.
        tie_embeddings: Share embedding and readout; None: True for ``"fbt"`` (its fused input needs it).
        mechanism: ``"none"`` (the baseline), ``"lrt"``, ``"fbt"`` or a registered one.
        lrt_source_layer: LRT: the block whose RMS-normed output is the memory; -1: the top, after the final norm.
        lrt_inject: LRT: a non-empty subset of ``("kv", "residual")`` (both: the paper).
        lrt_projection: LRT: recurrent K/V projection ``"shared"`` by all blocks or ``"per_layer"``.
        lrt_gamma_init: LRT: initial residual-injection scale; 0 starts as the baseline (reference code: 0.1).
        lrt_gate_channels: LRT: input channels the K/V gates read; None: ``min(32, n_embd)``.
        lrt_kv_init: LRT: recurrent K/V projections start ``"zero"`` or ``"uniform"`` (reference code).
        lrt_memory: LRT: ``"previous"``, ``"older"`` (m_{t-2}), ``"pooled"`` or ``"none"``.
        lrt_pool_decay: LRT ``"pooled"``: ``m~_t = decay * m~_{t-1} + (1 - decay) * h_t``, in (0, 1).
        fbt_jitter: FBT: half-width of the uniform training noise on the carried state.
        fbt_fusion: FBT: ``"glu"`` (the paper's) or ``"additive"`` (ours: token embedding kept intact).
        document_token: A position holding this token reads no memory (none crosses documents); None: off."""

    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int | None = None
    n_embd: int = 128
    seq_len: int = 256
    rope: bool = True
    rope_base: float = 10000.0
    qk_norm: bool = True
    logit_softcap: float = 15.0
    tie_embeddings: bool | None = None
    mechanism: str = "none"
    # --- LRT (Latent Recurrent Transformer) ---
    lrt_source_layer: int = -1
    lrt_inject: tuple[str, ...] = ("kv", "residual")
    lrt_projection: str = "shared"
    lrt_gamma_init: float = 0.0
    lrt_gate_channels: int | None = None
    lrt_kv_init: str = "zero"
    lrt_memory: str = "previous"
    lrt_pool_decay: float = 0.9
    # --- FBT (Full-Bandwidth Transformer) ---
    fbt_jitter: float = 0.02
    fbt_fusion: str = "glu"
    # --- documents ---
    document_token: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field (``GPT`` calls it again, catching later changes)."""
        c = "ModelConfig"
        self._plain_numbers()
        if self.tie_embeddings is None:
            self.tie_embeddings = self.mechanism == "fbt"
        if isinstance(self.lrt_inject, (list, str)):
            self.lrt_inject = (self.lrt_inject,) if isinstance(self.lrt_inject, str) else tuple(self.lrt_inject)
        check_int(f"{c}.vocab_size", self.vocab_size, 2)
        check_int(f"{c}.n_layer", self.n_layer, 1)
        check_int(f"{c}.n_head", self.n_head, 1)
        if self.n_kv_head is not None:
            check_int(f"{c}.n_kv_head", self.n_kv_head, 1, self.n_head)
            if self.n_head % self.n_kv_head:
                fail(f"{c}.n_kv_head", self.n_kv_head, f"must divide n_head={self.n_head}")
        check_int(f"{c}.n_embd", self.n_embd, 2)
        if self.n_embd % self.n_head:
            fail(f"{c}.n_embd", self.n_embd, f"must be divisible by n_head={self.n_head}")
        for flag in ("rope", "qk_norm", "tie_embeddings"):
            if not isinstance(getattr(self, flag), bool):
                fail(f"{c}.{flag}", getattr(self, flag), "must be a bool")
        if self.rope and (self.n_embd // self.n_head) % 2:
            fail(f"{c}.n_embd", self.n_embd,
                 f"head size n_embd/n_head={self.n_embd // self.n_head} must be even (RoPE)")
        check_int(f"{c}.seq_len", self.seq_len, 1)
        check_float(f"{c}.rope_base", self.rope_base, 0.0, lo_open=True)
        check_float(f"{c}.logit_softcap", self.logit_softcap, 0.0)
        check_choice(f"{c}.mechanism", self.mechanism, mechanisms())
        check_int(f"{c}.lrt_source_layer", self.lrt_source_layer, -1, self.n_layer - 1)
        if not self.lrt_inject or any(i not in LRT_INJECTIONS for i in self.lrt_inject) \
                or len(set(self.lrt_inject)) != len(self.lrt_inject):
            fail(f"{c}.lrt_inject", self.lrt_inject, f"must be a non-empty subset of {LRT_INJECTIONS}")
        check_choice(f"{c}.lrt_projection", self.lrt_projection, LRT_PROJECTIONS)
        check_float(f"{c}.lrt_gamma_init", self.lrt_gamma_init, -10.0, 10.0)
        if self.lrt_gate_channels is not None:
            check_int(f"{c}.lrt_gate_channels", self.lrt_gate_channels, 1, self.n_embd)
        check_choice(f"{c}.lrt_kv_init", self.lrt_kv_init, LRT_KV_INITS)
        check_choice(f"{c}.lrt_memory", self.lrt_memory, LRT_MEMORIES)
        check_float(f"{c}.lrt_pool_decay", self.lrt_pool_decay, 0.0, 1.0, lo_open=True)
        if self.lrt_pool_decay == 1.0:
            fail(f"{c}.lrt_pool_decay", self.lrt_pool_decay, "must be in (0, 1)")
        check_float(f"{c}.fbt_jitter", self.fbt_jitter, 0.0, 1.0)
        check_choice(f"{c}.fbt_fusion", self.fbt_fusion, FBT_FUSIONS)
        if self.document_token is not None:
            check_int(f"{c}.document_token", self.document_token, 0, self.vocab_size - 1)
        for name, value, allowed in _MECHANISM_CONSTRAINTS[self.mechanism](self):
            fail(f"{c}.{name}", value, allowed)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def kv_dim(self) -> int:
        """kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def gate_channels(self) -> int:
        """Channels the LRT gates read."""
        return min(32, self.n_embd) if self.lrt_gate_channels is None else self.lrt_gate_channels

    def replace(self, **changes: Any) -> ModelConfig:
        """A validated copy."""
        return dataclasses.replace(self, **changes)

