"""An endless stream of training batches, seeded per (step, rank): resuming needs only the step."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..validation import check_choice, check_int
from .base import SPLITS, Batch, Task, check_n


def step_seed(seed: int, step: int, rank: int) -> int:
    """A 63-bit seed, well mixed so neighbouring steps are unrelated."""
    state = np.random.SeedSequence([seed, step, rank]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


class TrainStream:
    """Batches ``start_step, start_step + 1, ...`` forever; ``step`` is the next."""

    def __init__(self, task: Task, batch_size: int, seed: int = 0, rank: int = 0, world_size: int = 1,
                 start_step: int = 0, split: str = "train") -> None:
        check_n(batch_size, task.seq_len, "batch_size")
        for name, value in (("seed", seed), ("start_step", start_step)):
            check_int(f"TrainStream: {name}", value, 0)
        check_int("TrainStream: world_size", world_size, 1)
        check_int("TrainStream: rank", rank, 0, world_size - 1)
        check_choice("TrainStream: split", split, SPLITS)
        self.task, self.batch_size, self.seed = task, batch_size, seed
        self.rank, self.world_size, self.step, self.split = rank, world_size, start_step, split

    def batch(self, step: int) -> Batch:
        """The batch of ``step`` on this rank."""
        return self.task.sample(self.batch_size, seed=step_seed(self.seed, step, self.rank), split=self.split)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            batch = self.batch(self.step)
            self.step += 1
            yield batch
