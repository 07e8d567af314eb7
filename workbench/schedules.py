"""Schedules: how a whole sequence is computed when every position reads its predecessor's memory.

Every mechanism runs under every schedule (for ``mechanism="none"`` the memory is simply unused):

- ``single``: one plain pass, no feedback (memory is absent everywhere).
- ``sequential``: exact. Token by token through the KV cache, the memory carried from one step to
  the next — the ground truth and the decoding path.
- ``multipass(passes=K)``: Jacobi. Pass 1 is plain; pass k reads pass k-1's memory shifted right by
  one. A causal system, so pass k is exact for the first k positions and ``K = T`` is exact (FBT's
  training objective).
- ``interleaved(subsets=S)``: Gauss–Seidel over strided subsets (LRT's training). An init pass
  fills a buffer of every layer's K/V and of the memory; subset s (``t % S == s``) is recomputed
  against the buffer with the latest shifted memory, and its K/V and memory are written back
  without detach. ``S = T`` is exact.
- ``blockwise(block=B)``: contiguous blocks in order through the KV cache; only the first position
  of a block reads memory (from the previous block's last position). The coarse control of the LRT
  paper; ``B = 1`` is ``sequential`` and ``B = T`` is ``single``.
- ``fixed_point(passes=K)``: training *at* the fixed point (ours, beyond both papers): a plain pass
  with gradient, then up to K Jacobi passes without gradient (in eval mode, stopped once the
  relative residual falls below ``tol``), then one pass with gradient from that detached state, as
  equilibrium models' Jacobian-free backpropagation does. Every pass map measured here contracts,
  so this trains the model on the state the exact recurrence reaches. ``K >= T`` is exact.

Decoding and probing are written in the same values, never re-implemented by the module that needs them:
``Prefilled(prefill, then)`` computes a prompt under one schedule and the rest token by token, as
``decode.generate`` does. The decoding regimes are ``regime(...)``: STANDARD = ``Single()``, SOFT =
``Prefilled(Single())`` (equal to ``Sequential`` with ``plain_prefix`` = the prompt's length, but
computed as the decoder does, bit for bit), FUSED = ``Prefilled(Multipass(1 + prefill_passes))``; a
probe's k-step recurrent suffix is SOFT from ``label_pos - k + 1``, ``Prefilled(suffix=k)`` anchored at each label
(``condition`` reads the probes' condition names; any value is a probe condition). Every value says which positions
read memory (``reads``), how it fills a KV cache (``prefill``), what a training batch runs (``draw``)
and which pass losses are its final estimate (``final_passes``), so no caller asks which class it
holds. One carry step (``carry``) and one Jacobi pass (``jacobi_pass``) underlie all of them.

Each returns a ``ScheduleOutput`` whose ``loss(targets)`` is that schedule's training objective
(multi-pass: ``NTP_1 + lambda * mean_{k>=2} NTP_k``; interleaved: the mean over the 1 + S passes).
``schedule_flops`` counts the work each one really does, for comparisons at matched compute.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from .kv_cache import DecodeCache, KVBuffer, KVCache, PurePrefix, interleave
from .metrics import token_losses
from .model import GPT, StepOutput
from .validation import MAX_COUNT, check_float, check_int, check_tokens

SCHEDULES = ("single", "sequential", "multipass", "interleaved", "blockwise", "fixed_point")


@dataclass
class ScheduleOutput:
    """A schedule's result: the final estimate plus every pass it made."""

    logits: torch.Tensor  # (B, T, V) final estimate at every position
    pass_logits: list[torch.Tensor]  # one per pass or refinement, over ``pass_positions[i]``
    memory: torch.Tensor  # (B, T, D) the memory each position produced (final estimate)
    pass_positions: list[torch.Tensor | None] = field(default_factory=list)  # None = every position
    loss_weights: list[float] = field(default_factory=list)  # how pass losses combine into the objective
    schedule: str = ""

    def pass_losses(self, targets: torch.Tensor, reduction: str = "mean",
                    normaliser: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Next-token cross-entropy of each pass over the positions it computed (targets -1 ignored).

        ``reduction="sum"`` gives summed nats; ``"mean"`` divides each pass's sum by the number of targets
        at its positions in ``normaliser`` (default ``targets``): the trainer passes the global batch's
        targets, so the micro-batches of every split sum to the same objective. A pass with no targets
        gives 0, not NaN.
        """
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction={reduction!r} is invalid: must be 'mean' or 'sum'")
        normaliser = targets if normaliser is None else normaliser
        losses = []
        for logits, pos in zip(self.pass_logits, self.pass_positions):
            total = token_losses(logits, targets if pos is None else targets[:, pos]).sum()
            if reduction == "mean":
                counted = normaliser if pos is None else normaliser[:, pos.to(normaliser.device)]
                total = total / counted.ge(0).sum().clamp(min=1).to(total.device)
            losses.append(total)
        return losses

    def objective(self, pass_losses: list[torch.Tensor]) -> torch.Tensor:
        """The schedule's training objective from its pass losses: their sum weighted by ``loss_weights``."""
        return sum(w * loss for w, loss in zip(self.loss_weights, pass_losses))

    def loss(self, targets: torch.Tensor, normaliser: torch.Tensor | None = None) -> torch.Tensor:
        """The schedule's training objective (``objective`` of the mean ``pass_losses``)."""
        return self.objective(self.pass_losses(targets, normaliser=normaliser))


def shift_right(memory: torch.Tensor) -> torch.Tensor:
    """``m_{t-1}`` aligned with position t; position 0 reads zeros."""
    return F.pad(memory[:, :-1], (0, 0, 1, 0))


def feedback_mask(batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """(B, T) bool: positions that read memory. Position 0 never does; nor do the first ``plain_prefix``.

    ``plain_prefix`` is an int or a (B,) tensor (FBT's prefix mix-in draws one per sequence). Its
    values are checked where they already are, never by waiting for a device: an int on the host, a
    CPU tensor by reading it, an accelerator's tensor asynchronously (the device raises at its next
    synchronisation), a ``meta`` tensor or a compiled graph not at all.
    """
    allowed = (f"plain_prefix={plain_prefix!r} is invalid: must be an int >= 0 or a (B,) integer tensor of them "
               f"(multipass also takes one row per pass that reads memory: a (passes - 1, B) tensor)")
    positions = torch.arange(seq_len, device=device).expand(batch, seq_len)
    if not isinstance(plain_prefix, torch.Tensor):
        if isinstance(plain_prefix, bool) or not isinstance(plain_prefix, (int, np.integer)) or plain_prefix < 0:
            raise ValueError(allowed)
        return positions >= max(int(plain_prefix), 1)
    if plain_prefix.is_floating_point() or plain_prefix.dtype == torch.bool or plain_prefix.ndim > 1:
        raise ValueError(allowed)
    prefix = plain_prefix.to(device=device)
    if not torch.compiler.is_compiling():
        if plain_prefix.device.type == "cpu" and bool((plain_prefix < 0).any()):
            raise ValueError(allowed)
        if prefix.device.type not in ("cpu", "meta"):
            torch._assert_async((prefix >= 0).all(), allowed)
    return positions >= prefix.clamp(min=1).reshape(-1, 1)


def single(model: GPT, idx: torch.Tensor) -> ScheduleOutput:
    """One plain pass: no position reads memory."""
    out = model.step(idx)
    return ScheduleOutput(out.logits, [out.logits], out.memory, [None], [1.0], "single")


def carry(model: GPT, tokens: torch.Tensor, positions: torch.Tensor, cache: DecodeCache, *,
          reads: bool | torch.Tensor = True) -> StepOutput:
    """One forward of the exact recurrence through ``cache``: ``tokens`` (B, n) at ``positions`` (n,).

    The chunk's first position reads ``cache.state``, the memory its predecessor left there (nothing
    while the state is None, before position 0); ``reads`` False, or a (B,) bool tensor per sequence,
    keeps it plain. The chunk's last memory becomes the state the next call reads. The one step the
    sequential and blockwise schedules, decoding, the probes' suffixes and contraction all take, so
    the recurrence is written once.
    """
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
    """Continue the recurrence in ``cache`` over positions ``start..stop-1`` of ``idx``, ``chunk`` at a time.

    ``cache`` holds positions ``< start`` and the state position ``start`` reads; ``reads`` (B, T)
    bool says which positions may read memory (default: all). Returns the logits (B, n, V) and the
    memory (B, n, D) of those positions. Positions stay on the device, advanced there.
    """
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
    """The exact recurrence over positions ``start..stop-1`` as a pure function of the memory ``start`` reads:
    (B, D) -> the memories (B, n, D) of those positions, through ``recur`` over a ``PurePrefix`` of ``cache``
    (which holds positions ``< start``). Nothing is written, so the map can be called again and again and
    differentiated by ``torch.func``: the one-step Jacobians, Lyapunov exponents and power iterations of the
    analyses are all this function."""
    check_int("start", start, 1, idx.size(1) - 1)
    check_int("stop", stop, start + 1, idx.size(1))

    def run(memory: torch.Tensor) -> torch.Tensor:
        return recur(model, idx, PurePrefix(cache, start, memory), start, stop)[1]

    return run


def _chunked(model: GPT, idx: torch.Tensor, chunk: int, plain_prefix: int | torch.Tensor,
             name: str, cache: KVCache | None = None) -> ScheduleOutput:
    """Process contiguous chunks in order through a KV cache, carrying the memory between chunks."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    if cache is not None and cache.pos != 0:
        raise ValueError(f"cache must be empty (it holds {cache.pos} positions): idx starts at position 0")
    cache = cache if cache is not None else model.new_kv_cache(B, T)
    logits, memory = recur(model, idx, cache, chunk=chunk, reads=feedback_mask(B, T, plain_prefix, idx.device))
    return ScheduleOutput(logits, [logits], memory, [None], [1.0], name)


def sequential(model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0,
               cache: KVCache | None = None) -> ScheduleOutput:
    """Exact recurrence: one forward per token through the KV cache, the memory carried along.

    ``plain_prefix``: the first positions read no memory (a prompt prefilled plainly). ``cache``: an
    empty cache to fill (it then holds the keys/values and the state the next token would read).
    """
    return _chunked(model, idx, 1, plain_prefix, "sequential", cache)


def blockwise(model: GPT, idx: torch.Tensor, block: int, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
    """Contiguous blocks in order; memory crosses block boundaries only."""
    check_tokens(model.config.vocab_size, idx)
    check_int("block", block, 1, idx.size(1))
    return _chunked(model, idx, block, plain_prefix, "blockwise")


def jacobi_pass(model: GPT, idx: torch.Tensor, memory: torch.Tensor | None, reads: torch.Tensor,
                kv: DecodeCache | None = None) -> StepOutput:
    """One Jacobi pass: every position that ``reads`` takes its predecessor's memory from the previous pass's
    ``memory`` (None: a plain pass). The one pass multipass, fixed-point training and the pass maps take."""
    return model.step(idx, memory=None if memory is None else shift_right(memory), memory_mask=reads, kv=kv)


def pass_masks(batch: int, seq_len: int, plain_prefix: int | torch.Tensor, passes: int | None,
               device: torch.device | str | None = None) -> Callable[[int], torch.Tensor]:
    """Pass k's feedback mask (k = 0 for pass 1). One plain prefix for every pass (an int or a (B,) tensor), or
    a fresh one for each pass that reads memory: a (passes - 1, B) tensor whose row k - 1 is pass k + 1's
    (FBT's prefix mix-in drawn per pass, as the paper describes it). Pass 1 reads no memory, whatever its mask."""
    if not (isinstance(plain_prefix, torch.Tensor) and plain_prefix.ndim == 2):
        mask = feedback_mask(batch, seq_len, plain_prefix, device)
        return lambda k: mask
    rows = None if passes is None else max(passes - 1, 0)
    if rows is None or tuple(plain_prefix.shape) != (rows, batch):
        raise ValueError(f"plain_prefix of shape {tuple(plain_prefix.shape)} is invalid: one row per pass that "
                         f"reads memory must be ({'passes - 1' if rows is None else rows}, {batch})"
                         + (" and needs a finite number of passes" if rows is None else ""))
    masks = [feedback_mask(batch, seq_len, row, device) for row in plain_prefix]
    masks.insert(0, masks[0] if masks else feedback_mask(batch, seq_len, 0, device))
    return masks.__getitem__


def iterate_passes(model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0,
                   passes: int | None = None) -> Iterator[StepOutput]:
    """Jacobi passes, yielded one at a time (``passes=None``: endlessly), so analysis can stream them.
    ``plain_prefix``: one for every pass, or one row per pass that reads memory (``pass_masks``)."""
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


def multipass(model: GPT, idx: torch.Tensor, passes: int, plain_prefix: int | torch.Tensor = 0,
              aux_weight: float = 1.0, cache: KVCache | None = None) -> ScheduleOutput:
    """Jacobi iteration: pass 1 plain, pass k reads pass k-1's memory shifted by one position.

    Objective ``NTP_1 + aux_weight * mean_{k>=2} NTP_k`` (FBT), no detach between passes. With
    ``cache``, the last pass also writes its keys/values and final memory into it (fused prefill).
    ``plain_prefix``: one for every pass, or a (passes - 1, B) tensor, one row per pass that reads memory.
    """
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1, MAX_COUNT)
    check_float("aux_weight", aux_weight, 0.0, 1e6)
    B, T = idx.shape
    reads = pass_masks(B, T, plain_prefix, passes, idx.device)
    outs: list[StepOutput] = []
    for k in range(passes):  # the last pass alone writes the cache
        outs.append(jacobi_pass(model, idx, outs[-1].memory if outs else None, reads(k),
                                kv=cache if k == passes - 1 else None))
    last = outs[-1]
    if cache is not None:
        cache.state = last.memory[:, -1]
    weights = [1.0] + ([aux_weight / (passes - 1)] * (passes - 1) if passes > 1 else [])
    return ScheduleOutput(last.logits, [o.logits for o in outs], last.memory, [None] * passes, weights,
                          "multipass")


def interleaved(model: GPT, idx: torch.Tensor, subsets: int, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
    """Init pass, then S strided subsets refined in order against a shared K/V/memory buffer.

    Subset s holds positions s, s+S, ...; the memory it reads comes from subset s-1's latest estimate
    (positions one earlier), and for s = 0 from subset S-1's, shifted by one (position 0 reads zeros).
    """
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    check_int("subsets", subsets, 1, T)
    reads = feedback_mask(B, T, plain_prefix, idx.device)
    buffer = KVBuffer(model.config.n_layer, subsets)
    init = model.step(idx, kv=buffer)
    memory = [init.memory[:, s::subsets] for s in range(subsets)]  # the latest estimate, by subset
    pass_logits, pass_positions = [init.logits], [None]
    for s in range(subsets):
        pos = buffer.refine(s)
        previous = memory[s - 1] if s > 0 else F.pad(memory[-1], (0, 0, 1, 0))
        out = model.step(idx[:, s::subsets], memory=previous[:, : pos.numel()], memory_mask=reads[:, s::subsets],
                         positions=pos, kv=buffer)
        memory[s] = out.memory
        pass_logits.append(out.logits)
        pass_positions.append(pos)
    weights = [1.0 / (subsets + 1)] * (subsets + 1)
    return ScheduleOutput(interleave(pass_logits[1:], 1, T), pass_logits, interleave(memory, 1, T),
                          pass_positions, weights, "interleaved")


def _check_tol(tol: object) -> None:
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        raise ValueError(f"tol={tol!r} is invalid: must be a number in [0, 1)")


def fixed_point(model: GPT, idx: torch.Tensor, passes: int, plain_prefix: int | torch.Tensor = 0,
                aux_weight: float = 1.0, tol: float = 1e-3) -> ScheduleOutput:
    """Plain pass, up to ``passes`` Jacobi passes without gradient, one pass with gradient from their state.

    Objective ``NTP_1 + aux_weight * NTP_last``: the plain pass keeps the model a good plain model
    (STANDARD decoding and the first pass of every prefill), the last one trains it to read the
    (near-)fixed point. The passes without gradient run in eval mode (no jitter), so the residual
    ``||H^k - H^(k-1)|| / ||H^k||`` can fall below ``tol``, where they stop early (reading it waits
    for the device once per pass).
    """
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1, MAX_COUNT)
    _check_tol(tol)
    B, T = idx.shape
    reads = feedback_mask(B, T, plain_prefix, idx.device)
    first = model.step(idx)
    memory = first.memory.detach()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for _ in range(min(passes, T)):  # T passes are exact by causality: more would change nothing
                new = jacobi_pass(model, idx, memory, reads).memory
                residual = torch.linalg.vector_norm((new - memory).double()) / torch.linalg.vector_norm(new.double())
                memory = new
                if idx.device.type != "meta" and float(residual) < tol:  # a meta tensor holds no value
                    break
    finally:
        model.train(was_training)
    last = jacobi_pass(model, idx, memory, reads)
    return ScheduleOutput(last.logits, [first.logits, last.logits], last.memory, [None, None],
                          [1.0, aux_weight], "fixed_point")


@dataclass(frozen=True)
class Schedule:
    """A schedule as a small immutable value: how to run it, what it costs, its label and its one knob.

    Trainer, evaluation, cache, recipes and plots take one value instead of a name plus loose keyword
    arguments; ``parse`` reads the string / JSON form the CLI and checkpoints use.
    """

    name: ClassVar[str] = ""
    knob_name: ClassVar[str | None] = None  # the one parameter this schedule has, if any
    symbol: ClassVar[str] = ""  # how labels write that parameter (K passes, S subsets, B block)

    def __post_init__(self) -> None:
        if self.knob_name is not None:
            check_int(self.knob_name, self.knob, 1, MAX_COUNT)
        if hasattr(self, "aux_weight"):  # the range TrainConfig allows: NaN, inf or < 0 make no objective
            check_float("aux_weight", self.aux_weight, 0.0, 1e6)

    reads_memory: ClassVar[bool] = True  # False: no position reads memory (``single``)
    can_prefill: ClassVar[bool] = False  # whether ``prefill`` can fill a KV cache for decoding

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        raise NotImplementedError

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        """Run over a prompt, leaving its keys/values and final memory in ``cache`` for the recurrence to go on."""
        raise ValueError(f"schedule={self.label!r} cannot prefill a KV cache: prefill with single, sequential or "
                         "multipass")

    def reads(self, batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
              device: torch.device | str | None = None) -> torch.Tensor:
        """(B, T) bool: the positions whose final estimate read memory (``feedback_mask`` for most)."""
        if not self.reads_memory:
            return torch.zeros(batch, seq_len, dtype=torch.bool, device=device)
        return feedback_mask(batch, seq_len, plain_prefix, device)

    def draw(self, rng: np.random.Generator) -> Schedule:
        """The schedule one training batch runs (a pass mix draws its depth; every other value is itself)."""
        return self

    @property
    def jacobi_passes(self) -> int:
        """Jacobi passes one batch makes (the history's ``passes`` column): K for multipass, else 1."""
        return 1

    def final_passes(self, passes: int = 1) -> list[int]:
        """The pass losses (1-based) whose mean is the final estimate's loss, for a batch that ran ``passes``
        Jacobi passes: the objective mixes passes, this is what the schedule predicts with."""
        return [self.max_passes]

    def pass_equivalents(self) -> float:
        """Full passes of work per sequence: every position goes through the whole stack once per pass."""
        return 1.0

    @property
    def max_passes(self) -> int:
        """The most pass losses one batch reports (the trainer's ``loss_pass{k}`` columns)."""
        return 1

    def flops(self, model: GPT, batch: int, seq_len: int) -> float:
        """Training FLOPs (forward + backward) of one batch: the one step-FLOPs account."""
        return self.pass_equivalents() * model.flops_per_token(seq_len) * batch * seq_len

    def anchored(self, position: int) -> Schedule:
        """This value with any position it gives relative to the position read (a probe's label) made absolute
        (``Prefilled(..., suffix=k)``: the last k tokens up to ``position`` recur). Other values are themselves."""
        return self

    def recurs_from(self, seq_len: int) -> int | None:
        """Where this value is a plain pass followed by the exact recurrence: the first position that recurs
        (``seq_len``: none does), or None when it computes a sequence another way. A caller that already ran
        the plain pass (a probe) continues it token by token instead of running the value again."""
        return None

    @property
    def knob(self) -> int | None:
        return None if self.knob_name is None else getattr(self, self.knob_name)

    @property
    def label(self) -> str:
        """How tables, legends and titles name it: ``multipass(K=3)``, ``single``."""
        return self.name if self.knob is None else f"{self.name}({self.symbol}={self.knob})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``{"schedule": name, knob: value}``) that ``parse`` reads back."""
        return {"schedule": self.name, **({} if self.knob_name is None else {self.knob_name: self.knob})}


@dataclass(frozen=True)
class Single(Schedule):
    name: ClassVar[str] = "single"
    reads_memory: ClassVar[bool] = False
    can_prefill: ClassVar[bool] = True

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return single(model, idx)

    def recurs_from(self, seq_len: int) -> int | None:
        return seq_len

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        out = model.step(idx, kv=cache)
        cache.state = out.memory[:, -1]
        return ScheduleOutput(out.logits, [out.logits], out.memory, [None], [1.0], self.name)


@dataclass(frozen=True)
class Sequential(Schedule):
    name: ClassVar[str] = "sequential"
    can_prefill: ClassVar[bool] = True

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return sequential(model, idx, plain_prefix)

    def recurs_from(self, seq_len: int) -> int | None:
        return min(1, seq_len)  # position 0 has no predecessor: it is computed as the plain pass computes it

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        return sequential(model, idx, cache=cache)


@dataclass(frozen=True)
class Multipass(Schedule):
    passes: int = 2
    aux_weight: float = 1.0
    name: ClassVar[str] = "multipass"
    knob_name: ClassVar[str] = "passes"
    symbol: ClassVar[str] = "K"
    can_prefill: ClassVar[bool] = True

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return multipass(model, idx, self.passes, plain_prefix, self.aux_weight)

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        return multipass(model, idx, self.passes, aux_weight=self.aux_weight, cache=cache)

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
    subsets: int = 2
    name: ClassVar[str] = "interleaved"
    knob_name: ClassVar[str] = "subsets"
    symbol: ClassVar[str] = "S"

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return interleaved(model, idx, self.subsets, plain_prefix)

    def pass_equivalents(self) -> float:
        """An init pass plus one refinement of every position (each subset attends to the full-length
        buffer, so its attention work is a full pass too): 2, whatever S."""
        return 2.0

    @property
    def max_passes(self) -> int:
        return 1 + self.subsets

    def final_passes(self, passes: int = 1) -> list[int]:
        return list(range(2, self.subsets + 2))  # the S refined subsets (their mean, over equal target counts)


@dataclass(frozen=True)
class Blockwise(Schedule):
    block: int = 32
    name: ClassVar[str] = "blockwise"
    knob_name: ClassVar[str] = "block"
    symbol: ClassVar[str] = "B"

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return blockwise(model, idx, self.block, plain_prefix)

    def reads(self, batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
              device: torch.device | str | None = None) -> torch.Tensor:
        """Only the first position of each block reads memory (from the previous block's last)."""
        first = torch.arange(seq_len, device=device) % min(self.block, seq_len) == 0
        return feedback_mask(batch, seq_len, plain_prefix, device) & first[None, :]


@dataclass(frozen=True)
class FixedPoint(Schedule):
    """Training at the fixed point (``fixed_point``): plain pass, passes without gradient, one with it."""

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
        return fixed_point(model, idx, self.passes, plain_prefix, self.aux_weight, self.tol)

    def pass_equivalents(self) -> float:
        """An upper bound: two passes with gradient, and ``passes`` forwards without (a third of a pass each:
        a backward costs about twice a forward), all of them when the residual never falls below ``tol``."""
        return 2.0 + self.passes / 3.0

    @property
    def max_passes(self) -> int:
        return 2


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it equals (anything else unchanged, for the checks to judge)."""
    return value.item() if isinstance(value, np.generic) else value


@dataclass(frozen=True)
class PassMix(Schedule):
    """FBT's training mix: each batch draws its pass count (e.g. ``{1: .75, 2: .22, 3: .03}``).

    Runs (evaluation) ``passes`` deep, by default the deepest trained depth (``TrainConfig.passes``
    sets it explicitly, as stored runs did); costs the expected passes per batch.
    """

    mix: tuple[tuple[int, float], ...] = ((1, 0.75), (2, 0.22), (3, 0.03))
    aux_weight: float = 1.0
    passes: int | None = None  # the depth it runs at; None: the deepest of the mix
    name: ClassVar[str] = "pass_mix"

    def __post_init__(self) -> None:
        if not isinstance(self.mix, tuple):
            raise ValueError(f"mix={self.mix!r} is invalid: must be a tuple of (passes, probability) pairs")
        for k, p in self.mix:
            check_int("mix pass count", k, 1, MAX_COUNT)
            check_float(f"mix probability of {k} passes", p, 0.0, 1.0)
        if not self.mix or abs(sum(p for _, p in self.mix) - 1) > 1e-6:
            raise ValueError(f"mix={self.mix!r} is invalid: must be (passes >= 1, probability >= 0) pairs "
                             "whose probabilities sum to 1")
        check_float("aux_weight", self.aux_weight, 0.0, 1e6)
        if self.passes is None:
            object.__setattr__(self, "passes", max(k for k, _ in self.mix))
        check_int("passes", self.passes, 1, MAX_COUNT)

    @classmethod
    def of(cls, mix: dict[int, float], aux_weight: float = 1.0, passes: int | None = None) -> PassMix:
        """From ``{passes: probability}``; a pass count must be an int (1.5 is refused, not rounded)."""
        if not isinstance(mix, dict):
            raise ValueError(f"mix={mix!r} is invalid: must be a dict {{passes: probability}}")
        return cls(tuple(sorted((_plain(k), _plain(p)) for k, p in mix.items())),
                   aux_weight, passes)

    @property
    def deepest(self) -> Multipass:
        return Multipass(max(k for k, _ in self.mix), self.aux_weight)

    can_prefill: ClassVar[bool] = True

    def draw(self, rng: np.random.Generator) -> Multipass:
        """The schedule of one training batch: a pass count drawn from the mix."""
        passes = int(rng.choice([k for k, _ in self.mix], p=[p for _, p in self.mix]))
        return Multipass(passes, self.aux_weight)

    @property
    def evaluated(self) -> Multipass:
        """The multipass schedule it runs at (``passes`` deep)."""
        return Multipass(self.passes, self.aux_weight)

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return self.evaluated.run(model, idx, plain_prefix)

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        return self.evaluated.prefill(model, idx, cache)

    @property
    def jacobi_passes(self) -> int:
        return self.passes

    def final_passes(self, passes: int = 1) -> list[int]:
        return [passes]

    def pass_equivalents(self) -> float:
        return float(sum(k * p for k, p in self.mix))

    @property
    def max_passes(self) -> int:
        return self.deepest.passes  # the batches train at most this deep; the evaluation reports no pass losses

    @property
    def label(self) -> str:
        return "pass mix " + "/".join(f"{round(100 * p):g}" for _, p in self.mix)

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": "multipass", "pass_mix": {k: p for k, p in self.mix}, "passes": self.passes}


@dataclass(frozen=True)
class Prefilled(Schedule):
    """A prompt computed one way, then the rest token by token: how decoding computes a sequence.

    ``prefill`` runs over the first ``prompt_len`` positions and fills a KV cache (single, sequential or
    multipass); ``then`` continues through it one token at a time, reading the memory its predecessor
    left (``Sequential()``) or not (``Single()``). The decoding regimes are such values (``regime``):
    SOFT is ``Prefilled(Single())``, FUSED ``Prefilled(Multipass(1 + prefill_passes))``; teacher-forced,
    ``run`` computes what ``generate`` computes on a greedy continuation, bit for bit. ``prompt_len``
    is needed to run a whole sequence, not to generate (the prompt is what is given). ``suffix=k`` gives it
    relative to the position read instead: the last k tokens up to it are the continuation (a probe's k-step
    recurrent suffix, ``anchored`` to each label position; run on a whole sequence, to its last position).
    """

    prefill_with: Schedule = field(default_factory=lambda: Single())
    then: Schedule = field(default_factory=lambda: Sequential())
    prompt_len: int | None = None
    suffix: int | None = None
    name: ClassVar[str] = "prefilled"
    can_prefill: ClassVar[bool] = True  # its prefill part fills the cache (generate continues as ``then``)

    def __post_init__(self) -> None:
        if not getattr(self.prefill_with, "can_prefill", False) or isinstance(self.prefill_with, Prefilled):
            raise ValueError(f"prefill_with={self.prefill_with!r} is invalid: must be a schedule that fills a KV "
                             "cache (single, sequential, multipass or a pass mix)")
        if self.then not in (Single(), Sequential()):
            raise ValueError(f"then={self.then!r} is invalid: the continuation goes token by token, "
                             "Sequential() (reading memory) or Single() (not)")
        if self.prompt_len is not None:
            check_int("prompt_len", self.prompt_len, 1, MAX_COUNT)
        if self.suffix is not None:
            check_int("suffix", self.suffix, 1, MAX_COUNT)
            if self.prompt_len is not None:
                raise ValueError(f"suffix={self.suffix!r} is invalid with prompt_len={self.prompt_len!r}: give the "
                                 "prompt's length or the suffix's, not both")

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
            raise ValueError(f"{self.label} needs prompt_len to run a whole sequence: Prefilled(..., prompt_len=P)")
        check_int("prompt_len", self.prompt_len, 1, seq_len)
        return self.prompt_len

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        check_tokens(model.config.vocab_size, idx)
        B, T = idx.shape
        P = self._prompt_len(T)
        return self._through(model, idx, model.new_kv_cache(B, T), P)

    def _through(self, model: GPT, idx: torch.Tensor, cache: DecodeCache, P: int) -> ScheduleOutput:
        """The first ``P`` positions by ``prefill_with``, the rest of ``idx`` token by token as ``then``."""
        B, T = idx.shape
        out = self.prefill_with.prefill(model, idx[:, :P], cache)
        if P == T:
            return out
        reads = None if self.then.reads_memory else torch.zeros(B, T, dtype=torch.bool, device=idx.device)
        logits, memory = recur(model, idx, cache, P, T, reads=reads)
        logits, memory = torch.cat([out.logits, logits], dim=1), torch.cat([out.memory, memory], dim=1)
        return ScheduleOutput(logits, [logits], memory, [None], [1.0], self.name)

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        """Fill ``cache`` with the prompt ``idx``: all of it by ``prefill_with``, or, with ``suffix=k``, its last k
        tokens already token by token as ``then`` (so feedback acts on the first generated token too: SOFT
        decoding started inside the prompt, ``generate(..., regime=condition("suffix1"))``)."""
        T = idx.size(1)
        return self._through(model, idx, cache, T if self.suffix is None else self._prompt_len(T))

    def reads(self, batch: int, seq_len: int, plain_prefix: int | torch.Tensor = 0,
              device: torch.device | str | None = None) -> torch.Tensor:
        """The prompt's positions as its prefill reads them, then the continuation as ``then`` does."""
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
    """A decoding regime of ``generate`` as a value: STANDARD = ``Single()`` (no feedback anywhere), SOFT =
    ``Prefilled(Single())`` (a plain prompt, then every token reads its predecessor's memory), FUSED =
    ``Prefilled(Multipass(1 + prefill_passes))`` (the prompt refined by Jacobi passes first)."""
    if name not in REGIMES:
        raise ValueError(f"regime={name!r} is invalid: must be one of {REGIMES}")
    check_int("prefill_passes", prefill_passes, 1)
    if name == "standard":
        return Single()
    prefill_with = Single() if name == "soft" else Multipass(1 + prefill_passes)
    return Prefilled(prefill_with, Sequential(), prompt_len)


CONDITION_FORMS = ("standard", "sequential", "suffixK (K >= 1 fused tokens, e.g. suffix1)",
                   "multipassK (K >= 1 Jacobi passes, e.g. multipass3)")
_CONDITION = re.compile(r"(standard|sequential)|(suffix|multipass)([1-9]\d*)")


def condition(name: str | Schedule) -> Schedule:
    """A probe's prefill condition as a value (a value is itself): ``standard`` = ``Single()``; ``sequential``
    = ``Sequential()``; ``multipassK`` = ``Multipass(K)``; ``suffixK`` = ``Prefilled(Single(), Sequential(),
    suffix=K)``, a plain prefill then the exact recurrence over the last K tokens up to the position read
    (SOFT decoding from there). Names are the tables' labels (``condition_name``)."""
    if isinstance(name, Schedule):
        return name
    match = _CONDITION.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(f"conditions={name!r} is invalid: each condition must be a schedule value or one of the "
                         f"forms {', '.join(CONDITION_FORMS)}")
    if match.group(1):
        return Single() if match.group(1) == "standard" else Sequential()
    k = int(match.group(3))
    return Multipass(k) if match.group(2) == "multipass" else Prefilled(Single(), Sequential(), suffix=k)


def condition_name(value: str | Schedule) -> str:
    """How probe tables name a condition: the four named forms by their names, any other value by its label."""
    value = condition(value)
    if value == Single():
        return "standard"
    if value == Sequential():
        return "sequential"
    if isinstance(value, Multipass) and value == Multipass(value.passes):
        return f"multipass{value.passes}"
    if isinstance(value, Prefilled) and value.suffix is not None and value == Prefilled(suffix=value.suffix):
        return f"suffix{value.suffix}"
    return value.label


# every schedule by name (a pass mix is a multipass schedule with a mix); each class knows its own knob
VALUES: dict[str, type[Schedule]] = {c.name: c for c in (Single, Sequential, Multipass, Interleaved, Blockwise,
                                                          FixedPoint)}
KNOBS: dict[str, str] = {name: c.knob_name for name, c in VALUES.items() if c.knob_name is not None}


def parse(schedule: str | Schedule | dict[str, Any], *, passes: int | None = None, subsets: int | None = None,
          block: int | None = None, aux_weight: float | None = None,
          pass_mix: dict[int, float] | None = None) -> Schedule:
    """A ``Schedule`` from its value, its JSON form (``{"schedule": "interleaved", "subsets": 2}``) or a
    name plus the keyword arguments that name uses (the CLI and ``TrainConfig`` form). A keyword left
    None takes the value's own default; keywords another schedule uses are ignored."""
    if isinstance(schedule, Schedule):
        return schedule
    if isinstance(schedule, dict):
        spec = dict(schedule)
        name = spec.pop("schedule", "single")
        if name == Prefilled.name:
            unknown = sorted(set(spec) - {"prefill", "then", "prompt_len", "suffix"})
            if unknown:
                raise ValueError(f"schedule={schedule!r} is invalid: prefilled takes prefill, then, prompt_len and "
                                 f"suffix, not {unknown}")
            return Prefilled(parse(spec.get("prefill", {"schedule": "single"})),
                             parse(spec.get("then", {"schedule": "sequential"})), spec.get("prompt_len"),
                             spec.get("suffix"))
        own = {KNOBS.get(name)} | ({"aux_weight"} if name in ("multipass", "fixed_point") else set()) \
            | ({"pass_mix", "passes"} if name == "multipass" else set())
        unknown = set(spec) - own - {"plain_prefix"}  # plain_prefix: a key old stored forms carry, unused
        if unknown:  # a knob of another schedule would be silently ignored: refused instead
            raise ValueError(f"schedule={schedule!r} is invalid: {name} takes "
                             f"{sorted(k for k in own if k) or 'no parameter'}, not {sorted(unknown)}")
        spec.pop("plain_prefix", None)
        return parse(name, **{"passes": passes, "subsets": subsets, "block": block, "aux_weight": aux_weight,
                              "pass_mix": pass_mix, **spec})
    if schedule not in VALUES:
        raise ValueError(f"schedule={schedule!r} is invalid: must be one of {SCHEDULES}")
    given = {"passes": passes, "subsets": subsets, "block": block, "aux_weight": aux_weight}
    if pass_mix and schedule == "multipass":
        return PassMix.of(pass_mix, 1.0 if aux_weight is None else aux_weight, passes)
    cls = VALUES[schedule]
    return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if given.get(f.name) is not None})


def run(model: GPT, idx: torch.Tensor, schedule: str | Schedule = "single", *, passes: int = 2, subsets: int = 2,
        block: int = 32, plain_prefix: int | torch.Tensor = 0, aux_weight: float = 1.0) -> ScheduleOutput:
    """Run a schedule: a ``Schedule`` value, or a name with its own parameter from the keyword arguments."""
    check_tokens(model.config.vocab_size, idx)
    value = parse(schedule, passes=passes, subsets=subsets, block=block, aux_weight=aux_weight)
    return value.run(model, idx, plain_prefix)


def pass_equivalents(schedule: str | Schedule, passes: int = 2, subsets: int = 2) -> float:
    """How many full passes of work a schedule does per sequence (see ``Schedule.pass_equivalents``)."""
    return parse(schedule, passes=passes, subsets=subsets).pass_equivalents()


def schedule_flops(model: GPT, schedule: str | Schedule, batch: int, seq_len: int, passes: int = 2,
                   subsets: int = 2) -> float:
    """Training FLOPs (forward + backward) of one batch under a schedule (``Schedule.flops``)."""
    return parse(schedule, passes=passes, subsets=subsets).flops(model, batch, seq_len)
