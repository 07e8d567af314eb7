"""What a schedule costs, counted live from ``hook_positions``: forwards (its sequential depth, the latency) and
positions computed (its work); ``Schedule.flops`` is the trainer's computed counterpart."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..hooks import with_hooks
from ..model import GPT


@dataclass
class WorkCount:
    """What a computation cost the model: forwards (calls of ``model.step``) and positions computed."""

    forwards: int = 0
    token_forwards: int = 0  # positions pushed through the whole stack, summed over forwards


@contextmanager
def count_work(model: GPT) -> Iterator[WorkCount]:
    """Count the forwards and positions ``model`` computes inside the ``with`` block: what really ran (a KV-cache
    decode, a schedule, a hand-written loop), not what a formula predicts."""
    count = WorkCount()

    def record(positions: torch.Tensor, hook) -> None:
        count.forwards += 1
        count.token_forwards += int(positions.numel())

    with with_hooks(model, {"hook_positions": record}):
        yield count
