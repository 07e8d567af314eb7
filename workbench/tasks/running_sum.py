"""Running sum mod p: the simplest task whose latent state (the target itself) changes at every token."""

from __future__ import annotations

import numpy as np

from .base import Batch, Task, check_int, check_n, collate, make_rng
from .tokenizers import CharTokenizer

SYMBOLS = "0123456789abcdefghijklmnopqrstuvwxyz"


class RunningSum(Task):
    """Symbols in [0, p), lengths in [min_length, length]."""

    name = "running_sum"

    def __init__(self, p: int = 10, length: int = 32, min_length: int | None = None) -> None:
        check_int(self.name, "p", p, 2, len(SYMBOLS))
        check_int(self.name, "length", length, 1, 65536)
        min_length = length if min_length is None else min_length
        check_int(self.name, "min_length", min_length, 1, length)
        self.p, self.length, self.min_length = int(p), int(length), int(min_length)
        self.tokenizer = CharTokenizer()
        self.params = {"p": self.p, "length": self.length, "min_length": self.min_length}
        self.seq_len = self.length
        self._symbol_ids = self.tokenizer.encode_array(SYMBOLS[: self.p])

    def chance_accuracy(self) -> float:
        """Per-target accuracy without state (first target known, the rest 1-in-p): the floor to read against."""
        lengths = np.arange(self.min_length, self.length + 1)
        return float(np.sum(1 + (lengths - 1) / self.p) / np.sum(lengths))

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        check_n(n, self.seq_len)
        rng = make_rng(seed, split)
        lengths = rng.integers(self.min_length, self.length + 1, size=n)
        values = [rng.integers(0, self.p, size=int(k)) for k in lengths]
        sums = [np.cumsum(v) % self.p for v in values]
        return collate(
            [self._symbol_ids[v] for v in values], [self._symbol_ids[s] for s in sums], self.tokenizer.pad_id,
            texts=["".join(SYMBOLS[i] for i in v) for v in values], groups=np.arange(n), state=sums,
        )
