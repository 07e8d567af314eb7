"""Decoding's values: a prompt computed one way, the rest token by token."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..kv_cache import DecodeCache
from ..model import GPT
from ..validation import MAX_COUNT, check_int, check_tokens, fail
from .output import ScheduleOutput
from .recurrence import recur
from .values import Multipass, Schedule, Sequential, Single


@dataclass(frozen=True)
class Prefilled(Schedule):
    """``prefill_with`` over ``prompt_len`` positions, then ``then`` token by token: bit for bit what ``generate``
    computes greedily. ``suffix=k``: the last k tokens up to the position read recur."""

    prefill_with: Schedule = field(default_factory=lambda: Single())
    then: Schedule = field(default_factory=lambda: Sequential())
    prompt_len: int | None = None
    suffix: int | None = None
    name: ClassVar[str] = "prefilled"
    can_prefill: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not getattr(self.prefill_with, "can_prefill", False) or isinstance(self.prefill_with, Prefilled):
            fail("prefill_with", self.prefill_with, "must be single, sequential, multipass or a pass mix")
        if self.then not in (Single(), Sequential()):
            fail("then", self.then, "must be Sequential() or Single()")
        if self.prompt_len is not None:
            check_int("prompt_len", self.prompt_len, 1, MAX_COUNT)
        if self.suffix is not None:
            check_int("suffix", self.suffix, 1, MAX_COUNT)
            if self.prompt_len is not None:
                raise ValueError(f"suffix={self.suffix!r} is invalid with prompt_len={self.prompt_len!r}: give one")

    def anchored(self, position: int) -> Schedule:
        check_int("position", position, 0)
        if self.suffix is None:
            return self
        return dataclasses.replace(self, prompt_len=max(position - self.suffix + 1, 1), suffix=None)

    def recurs_from(self, seq_len: int) -> int | None:
        if self.prefill_with != Single():
            return None
        return self._prompt_len(seq_len) if self.then.reads_memory else seq_len

    @property
    def reads_memory(self) -> bool:  # type: ignore[override]
        return self.prefill_with.reads_memory or self.then.reads_memory

    def _prompt_len(self, seq_len: int) -> int:
        if self.suffix is not None:  # a whole sequence ends at the position read
            return self.anchored(seq_len - 1)._prompt_len(seq_len)
        if self.prompt_len is None:
            raise ValueError(f"{self.label} needs prompt_len to run a whole sequence")
        check_int("prompt_len", self.prompt_len, 1, seq_len)
        return self.prompt_len

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        check_tokens(model.config.vocab_size, idx)
        B, T = idx.shape
        P = self._prompt_len(T)
        return self._through(model, idx, model.new_kv_cache(B, T), P)

    def _through(self, model: GPT, idx: torch.Tensor, cache: DecodeCache, P: int) -> ScheduleOutput:
        B, T = idx.shape
        out = self.prefill_with.prefill(model, idx[:, :P], cache)
        if P == T:
            return out
        reads = None if self.then.reads_memory else torch.zeros(B, T, dtype=torch.bool, device=idx.device)
        logits, memory = recur(model, idx, cache, P, T, reads=reads)
        logits, memory = torch.cat([out.logits, logits], dim=1), torch.cat([out.memory, memory], dim=1)
        return ScheduleOutput(logits, [logits], memory, [None], [1.0], self.name)

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        """Fill ``cache``; with ``suffix=k`` feedback reaches the first generated token."""
        T = idx.size(1)
        return self._through(model, idx, cache, T if self.suffix is None else self._prompt_len(T))

    def reads(self, batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
              device: torch.device | str | None = None) -> torch.Tensor:
        """The prompt as its prefill reads, the rest as ``then``."""
        P = self._prompt_len(seq_len)
        prompt = self.prefill_with.reads(batch, P, 0, device)
        rest = torch.full((batch, seq_len - P), self.then.reads_memory, dtype=torch.bool, device=device)
        return torch.cat([prompt, rest], dim=1)

    def flops(self, model: GPT, batch: int, seq_len: int) -> float:
        P = self._prompt_len(seq_len)
        return self.prefill_with.flops(model, batch, P) + self.then.flops(model, batch, 1) * (seq_len - P)

    @property
    def label(self) -> str:
        if self.suffix is not None:
            return f"{self.prefill_with.label} prefill, then {self.then.label} over the last {self.suffix}"
        return f"{self.prefill_with.label} prefill, then {self.then.label}"

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.name, "prefill": self.prefill_with.to_dict(), "then": self.then.to_dict(),
                "prompt_len": self.prompt_len, **({} if self.suffix is None else {"suffix": self.suffix})}


REGIMES = ("standard", "soft", "fused")


def regime(name: str, prefill_passes: int = 1, prompt_len: int | None = None) -> Schedule:
    """A decoding regime of ``generate`` as a value (FUSED prefills with ``Multipass(1 + prefill_passes)``)."""
    if name not in REGIMES:
        fail("regime", name, f"must be one of {REGIMES}")
    check_int("prefill_passes", prefill_passes, 1)
    if name == "standard":
        return Single()
    prefill_with = Single() if name == "soft" else Multipass(1 + prefill_passes)
    return Prefilled(prefill_with, Sequential(), prompt_len)
