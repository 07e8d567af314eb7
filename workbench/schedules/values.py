"""The schedules as values: each algorithm written once, as its value's ``run``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from ..kv_cache import DecodeCache, KVBuffer, KVCache, interleave
from ..model import GPT, StepOutput
from ..validation import MAX_COUNT, check_float, check_int, check_tokens, fail
from .output import ScheduleOutput, feedback_mask, pass_masks
from .recurrence import jacobi_pass, through_cache


@dataclass(frozen=True)
class Schedule:
    """A schedule as an immutable value: how to run it, its cost, its label and its one knob."""

    name: ClassVar[str] = ""
    knob_name: ClassVar[str | None] = None  # the one parameter this schedule has, if any
    symbol: ClassVar[str] = ""  # the knob's letter in labels

    def __post_init__(self) -> None:
        if self.knob_name is not None:
            check_int(self.knob_name, self.knob, 1, MAX_COUNT)
        if hasattr(self, "aux_weight"):  # NaN, inf or < 0 make no objective
            check_float("aux_weight", self.aux_weight, 0.0, 1e6)

    reads_memory: ClassVar[bool] = True
    can_prefill: ClassVar[bool] = False  # whether ``prefill`` can fill a KV cache for decoding

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        raise NotImplementedError

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        """Run over a prompt, leaving keys, values and final memory in ``cache``."""
        raise ValueError(f"schedule={self.label!r} cannot prefill: must be single, sequential or multipass")

    def reads(self, batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
              device: torch.device | str | None = None) -> torch.Tensor:
        """(B, T) bool: the positions whose final estimate read memory."""
        if not self.reads_memory:
            return torch.zeros(batch, seq_len, dtype=torch.bool, device=device)
        return feedback_mask(batch, seq_len, plain_prefix, device)

    def draw(self, rng: np.random.Generator) -> Schedule:
        """The schedule one training batch runs."""
        return self

    @property
    def jacobi_passes(self) -> int:
        """Jacobi passes per batch (the history's ``passes`` column)."""
        return 1

    def final_passes(self, passes: int = 1) -> list[int]:
        """The 1-based pass losses whose mean is the final estimate's loss."""
        return [self.max_passes]

    def pass_equivalents(self) -> float:
        """Full passes of work per sequence."""
        return 1.0

    @property
    def max_passes(self) -> int:
        """The most pass losses a batch reports (``loss_pass{k}`` columns)."""
        return 1

    def flops(self, model: GPT, batch: int, seq_len: int) -> float:
        """Training FLOPs (forward + backward) of one batch."""
        return self.pass_equivalents() * model.flops_per_token(seq_len) * batch * seq_len

    def anchored(self, position: int) -> Schedule:
        """Positions relative to the one read made absolute."""
        return self

    def recurs_from(self, seq_len: int) -> int | None:
        """Where a plain pass gives way to the exact recurrence, if it does."""
        return None

    @property
    def knob(self) -> int | None:
        return None if self.knob_name is None else getattr(self, self.knob_name)

    @property
    def label(self) -> str:
        """How tables and figures name it: ``multipass(K=3)``."""
        return self.name if self.knob is None else f"{self.name}({self.symbol}={self.knob})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``parse`` reads."""
        knob = {} if self.knob_name is None else {self.knob_name: self.knob}
        rest = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != self.knob_name and getattr(self, f.name) != f.default}
        return {"schedule": self.name, **knob, **rest}


@dataclass(frozen=True)
class Single(Schedule):
    """One plain pass."""

    name: ClassVar[str] = "single"
    reads_memory: ClassVar[bool] = False
    can_prefill: ClassVar[bool] = True

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        out = model.step(idx)
        return ScheduleOutput(out.logits, [out.logits], out.memory, [None], [1.0], self.name)

    def recurs_from(self, seq_len: int) -> int | None:
        return seq_len

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        out = model.step(idx, kv=cache)
        cache.state = out.memory[:, -1]
        return ScheduleOutput(out.logits, [out.logits], out.memory, [None], [1.0], self.name)


@dataclass(frozen=True)
class Sequential(Schedule):
    """The exact recurrence: one forward per token through the KV cache."""

    name: ClassVar[str] = "sequential"
    can_prefill: ClassVar[bool] = True

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return through_cache(model, idx, 1, plain_prefix, self.name)

    def recurs_from(self, seq_len: int) -> int | None:
        return min(1, seq_len)  # position 0 has no predecessor

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        return through_cache(model, idx, 1, 0, self.name, cache)


@dataclass(frozen=True)
class Multipass(Schedule):
    """Jacobi (FBT's training): pass k is exact for the first k positions. Objective ``NTP_1 + aux_weight *
    mean_{k>=2} NTP_k``, no detach."""

    passes: int = 2
    aux_weight: float = 1.0
    name: ClassVar[str] = "multipass"
    knob_name: ClassVar[str] = "passes"
    symbol: ClassVar[str] = "K"
    can_prefill: ClassVar[bool] = True

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return self._iterate(model, idx, plain_prefix)

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        return self._iterate(model, idx, 0, cache)

    def _iterate(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor,
                 cache: KVCache | None = None) -> ScheduleOutput:
        check_tokens(model.config.vocab_size, idx)
        B, T = idx.shape
        reads = pass_masks(B, T, plain_prefix, self.passes, idx.device)
        outs: list[StepOutput] = []
        for k in range(self.passes):  # the last pass alone writes the cache
            outs.append(jacobi_pass(model, idx, outs[-1].memory if outs else None, reads(k),
                                    kv=cache if k == self.passes - 1 else None))
        last = outs[-1]
        if cache is not None:
            cache.state = last.memory[:, -1]
        weights = [1.0] + ([self.aux_weight / (self.passes - 1)] * (self.passes - 1) if self.passes > 1 else [])
        return ScheduleOutput(last.logits, [o.logits for o in outs], last.memory, [None] * self.passes, weights,
                              self.name)

    def pass_equivalents(self) -> float:
        return float(self.passes)

    @property
    def max_passes(self) -> int:
        return self.passes

    @property
    def jacobi_passes(self) -> int:
        return self.passes

    def final_passes(self, passes: int = 1) -> list[int]:
        return [passes]


@dataclass(frozen=True)
class Interleaved(Schedule):
    """Gauss-Seidel (LRT's training): an init pass, then S strided subsets refined in order, without detach."""

    subsets: int = 2
    name: ClassVar[str] = "interleaved"
    knob_name: ClassVar[str] = "subsets"
    symbol: ClassVar[str] = "S"

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        check_tokens(model.config.vocab_size, idx)
        B, T = idx.shape
        S = self.subsets
        check_int("subsets", S, 1, T)
        reads = feedback_mask(B, T, plain_prefix, idx.device)
        buffer = KVBuffer(model.config.n_layer, S)
        init = model.step(idx, kv=buffer)
        memory = [init.memory[:, s::S] for s in range(S)]  # the latest estimate, by subset
        pass_logits, pass_positions = [init.logits], [None]
        for s in range(S):
            pos = buffer.refine(s)
            previous = memory[s - 1] if s > 0 else F.pad(memory[-1], (0, 0, 1, 0))
            out = model.step(idx[:, s::S], memory=previous[:, : pos.numel()], memory_mask=reads[:, s::S],
                             positions=pos, kv=buffer)
            memory[s] = out.memory
            pass_logits.append(out.logits)
            pass_positions.append(pos)
        weights = [1.0 / (S + 1)] * (S + 1)
        return ScheduleOutput(interleave(pass_logits[1:], 1, T), pass_logits, interleave(memory, 1, T),
                              pass_positions, weights, self.name)

    def pass_equivalents(self) -> float:
        """2 whatever S: each subset attends to the full buffer."""
        return 2.0

    @property
    def max_passes(self) -> int:
        return 1 + self.subsets

    def final_passes(self, passes: int = 1) -> list[int]:
        return list(range(2, self.subsets + 2))  # the S refined subsets


@dataclass(frozen=True)
class Blockwise(Schedule):
    """Blocks through the KV cache; only a block's first position reads memory (LRT's coarse control)."""

    block: int = 32
    name: ClassVar[str] = "blockwise"
    knob_name: ClassVar[str] = "block"
    symbol: ClassVar[str] = "B"

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        check_tokens(model.config.vocab_size, idx)
        check_int("block", self.block, 1, idx.size(1))
        return through_cache(model, idx, self.block, plain_prefix, self.name)

    def reads(self, batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
              device: torch.device | str | None = None) -> torch.Tensor:
        """Each block's first position."""
        first = torch.arange(seq_len, device=device) % min(self.block, seq_len) == 0
        return feedback_mask(batch, seq_len, plain_prefix, device) & first[None, :]


def _check_tol(tol: object) -> None:
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        fail("tol", tol, "must be a number in [0, 1)")


@dataclass(frozen=True)
class FixedPoint(Schedule):
    """Ours: Jacobi passes without gradient to the fixed point (residual < ``tol``), then one with gradient from it
    (Jacobian-free backpropagation). Objective ``NTP_1 + aux_weight * NTP_last``."""

    passes: int = 40
    aux_weight: float = 1.0
    tol: float = 1e-3
    name: ClassVar[str] = "fixed_point"
    knob_name: ClassVar[str] = "passes"
    symbol: ClassVar[str] = "K"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_tol(self.tol)

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        check_tokens(model.config.vocab_size, idx)
        B, T = idx.shape
        reads = feedback_mask(B, T, plain_prefix, idx.device)
        first = model.step(idx)
        memory = first.memory.detach()
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                for _ in range(min(self.passes, T)):  # T passes are exact by causality
                    new = jacobi_pass(model, idx, memory, reads).memory
                    residual = (torch.linalg.vector_norm((new - memory).double())
                                / torch.linalg.vector_norm(new.double()))
                    memory = new
                    if idx.device.type != "meta" and float(residual) < self.tol:  # a meta tensor holds no value
                        break
        finally:
            model.train(was_training)
        last = jacobi_pass(model, idx, memory, reads)
        return ScheduleOutput(last.logits, [first.logits, last.logits], last.memory, [None, None],
                              [1.0, self.aux_weight], self.name)

    def pass_equivalents(self) -> float:
        """Upper bound: ``passes`` forwards cost a third of a pass each."""
        return 2.0 + self.passes / 3.0

    @property
    def max_passes(self) -> int:
        return 2


def run(model: GPT, idx: torch.Tensor, schedule: Schedule, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
    """``schedule.run`` as a function, for ``torch.compile`` (one graph per value)."""
    if not isinstance(schedule, Schedule):
        fail("schedule", schedule, "must be a Schedule (see schedules.parse)")
    return schedule.run(model, idx, plain_prefix)
