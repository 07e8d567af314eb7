"""A schedule's cost counted live from ``hook_positions``: forwards (latency) and positions computed (work)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..hooks import with_hooks
from ..model import GPT


@dataclass
class WorkCount:
    """Forwards (calls of ``model.step``) and positions computed."""

    forwards: int = 0
    token_forwards: int = 0  # positions pushed through the whole stack, summed over forwards


@contextmanager
def count_work(model: GPT) -> Iterator[WorkCount]:
    """Count what ``model`` really computes inside the block, not what a formula predicts."""
    count = WorkCount()

    def record(positions: torch.Tensor, hook) -> None:
        count.forwards += 1
        count.token_forwards += int(positions.numel())

    with with_hooks(model, {"hook_positions": record}):
        yield count
