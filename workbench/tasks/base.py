"""``Batch`` and ``Task``; a task never uses global RNG, so any process can rebuild a batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import torch

from .. import validation

SPLITS = ("train", "val")


@dataclass
class Batch:
    """A padded batch; ``targets`` is -1 where no loss applies."""

    tokens: torch.Tensor  # (n, T) long, right-padded with the tokenizer's pad_id
    targets: torch.Tensor  # (n, T) long
    lengths: torch.Tensor  # (n,) long, unpadded
    groups: torch.Tensor  # (n,) long, for grouped cross-validation
    texts: list[str]
    labels: torch.Tensor | None = None  # (n,) long: class index (probe tasks) or answer (arith_cot)
    label_names: list[str] | None = None
    label_positions: torch.Tensor | None = None  # (n,) long: where the label is read
    state: torch.Tensor | None = None  # (n, T) long latent state, -1 where undefined
    prompts: list[str] | None = None  # arith_cot: the questions

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def mask(self) -> torch.Tensor:
        """(n, T) bool: positions with a loss."""
        return self.targets >= 0

    def to(self, device: torch.device | str) -> Batch:
        """A copy on ``device``."""
        tensors = {k: v.to(device) for k, v in vars(self).items() if isinstance(v, torch.Tensor)}
        return dataclasses.replace(self, **tensors)


def fail(task: str, name: str, value: Any, allowed: str) -> NoReturn:
    validation.fail(f"{task}: {name}", value, allowed)


def check_choice(task: str, name: str, value: Any, choices: tuple) -> None:
    validation.check_choice(f"{task}: {name}", value, choices)


def check_int(task: str, name: str, value: Any, lo: int, hi: int) -> None:
    validation.check_int(f"{task}: {name}", value, lo, hi)


def make_rng(seed: int, split: str) -> np.random.Generator:
    """A batch's generator: a pure function of (seed, split)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        validation.fail("seed", seed, "must be a non-negative int")
    if split not in SPLITS:
        validation.fail("split", split, f"must be one of {SPLITS}")
    return np.random.default_rng([int(seed), SPLITS.index(split)])


def check_n(n: Any, seq_len: int, name: str = "n") -> None:
    """A positive count whose int64 tensors fit in memory, checked before filling them."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}={n!r} is invalid: must be a positive int")
    validation.check_fits(name, n, 3 * 8 * n * seq_len, f"a batch of {n:,} sequences of {seq_len} tokens")


def next_token_targets(ids: np.ndarray, start: int) -> np.ndarray:
    """Next-token targets from position ``start`` on."""
    targets = np.full(len(ids), -1, dtype=np.int64)
    targets[start:-1] = ids[start + 1:]
    return targets


def pad_stack(rows: Sequence[np.ndarray], fill: int) -> torch.Tensor:
    """Right-pad 1-D int arrays into a (n, T) long tensor."""
    out = np.full((len(rows), max(len(r) for r in rows)), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)


def collate(ids: Sequence[np.ndarray], targets: Sequence[np.ndarray], pad_id: int, texts: list[str],
            groups: Sequence[int], state: Sequence[np.ndarray] | None = None, **fields: Any) -> Batch:
    """Pad per-example arrays into a ``Batch``."""
    return Batch(
        tokens=pad_stack(ids, pad_id),
        targets=pad_stack(targets, -1),
        lengths=torch.tensor([len(r) for r in ids], dtype=torch.long),
        groups=torch.as_tensor(np.asarray(groups, dtype=np.int64)),
        texts=texts,
        state=None if state is None else pad_stack(state, -1),
        **fields,
    )


class Task:
    """Subclasses set ``name``, ``tokenizer``, ``params``, ``seq_len`` and ``sample``."""

    name: str
    params: dict[str, Any]  # JSON-serialisable; get(name, **params) rebuilds the task
    seq_len: int  # the longest sequence sample() can return
    tokenizer: Any
    # True when each sample() call holds one length, often far below seq_len: a trainer pads to the batch's own
    batch_length_varies: bool = False

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"
