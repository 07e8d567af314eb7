"""The three probing tasks of the FBT paper (appendix F), in its text format: label-free scratch lines separate the
label-bearing detail from the final colon. A group differs only in that detail and balances the labels, so grouped
cross-validation probes unseen contexts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import torch

from .base import Batch, Task, check_choice, check_n, collate, fail, make_rng, next_token_targets
from .tokenizers import ByteTokenizer, CharTokenizer

SCRATCH_UPDATES = (0, 8, 32, 128, 256)
LOSS_ON = ("answer", "all")
LABEL_AT = ("colon", "answer")
SCRATCH_DRAWS = ("group", "batch")
TOKENIZERS = {"ascii": CharTokenizer, "bytes": ByteTokenizer}
SCRATCH_OPS = ("+=", "-=", "^=")
SCRATCH_LINE = len("scratch += 0\n")


def scratch_lines(rng: np.random.Generator, count: int) -> str:
    """``count`` label-free scratch lines."""
    ops = rng.integers(0, len(SCRATCH_OPS), size=count)
    values = rng.integers(0, 10, size=count)
    return "".join(f"scratch {SCRATCH_OPS[o]} {v}\n" for o, v in zip(ops, values))


@dataclass
class _Example:
    text: str
    label: int  # index into label_names
    state: np.ndarray  # (len(text),) latent state, -1 where undefined


class ProbeTask(Task):
    """Groups of examples read at the final colon."""

    label_names: list[str]

    def __init__(self, scratch_updates: int | Sequence[int] = 8, loss_on: str = "answer", label_at: str = "colon",
                 tokenizer: str = "ascii", scratch_draw: str = "group") -> None:
        mixed = isinstance(scratch_updates, (list, tuple))
        choices = list(scratch_updates) if mixed else [scratch_updates]
        if mixed and not choices:
            fail(self.name, "scratch_updates", scratch_updates, f"must name one of {SCRATCH_UPDATES}")
        for count in choices:
            check_choice(self.name, "scratch_updates", count, SCRATCH_UPDATES)
        check_choice(self.name, "loss_on", loss_on, LOSS_ON)
        check_choice(self.name, "label_at", label_at, LABEL_AT)
        check_choice(self.name, "tokenizer", tokenizer, tuple(TOKENIZERS))
        check_choice(self.name, "scratch_draw", scratch_draw, SCRATCH_DRAWS)
        self.scratch_draw = scratch_draw
        self.scratch_choices = sorted(set(choices)) if mixed else None
        self.batch_length_varies = mixed and scratch_draw == "batch"
        self.scratch_updates = max(choices)  # seq_len is sized for the longest
        self.loss_on = loss_on
        self.label_at = label_at
        self.tokenizer = TOKENIZERS[tokenizer]()
        self.params = {"scratch_updates": list(choices) if mixed else scratch_updates, "loss_on": loss_on}
        # only non-default options join params, so existing checkpoints keep theirs
        options = (("label_at", label_at, "colon"), ("tokenizer", tokenizer, "ascii"),
                   ("scratch_draw", scratch_draw, "group"))
        self.params.update({k: v for k, v, default in options if v != default})

    def _draw(self, rng: np.random.Generator) -> int:
        return int(self.scratch_choices[rng.integers(len(self.scratch_choices))])

    def _scratch(self, rng: np.random.Generator, count: int | None) -> str:
        if count is None:
            count = self.scratch_updates if self.scratch_choices is None else self._draw(rng)
        return scratch_lines(rng, count)

    def _groups(self, rng: np.random.Generator, count: int | None) -> Iterator[list[_Example]]:
        raise NotImplementedError

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        """``n`` examples, whole groups in order, members shuffled."""
        check_n(n, self.seq_len)
        rng = make_rng(seed, split)
        count = self._draw(rng) if self.scratch_draw == "batch" and self.scratch_choices is not None else None
        examples: list[_Example] = []
        groups: list[int] = []
        for gid, group in enumerate(self._groups(rng, count)):
            examples.extend(group[i] for i in rng.permutation(len(group)))
            groups.extend([gid] * len(group))
            if len(examples) >= n:
                break
        examples, groups = examples[:n], groups[:n]
        ids = [self._encode(ex.text) for ex in examples]
        colons = [ex.text.rindex(":") for ex in examples]
        start = colons if self.loss_on == "answer" else [0] * n
        # "answer": the space after the colon, which predicts the label
        positions = colons if self.label_at == "colon" else [c + 1 for c in colons]
        return collate(
            ids, [next_token_targets(x, s) for x, s in zip(ids, start)], self.tokenizer.pad_id,
            texts=[ex.text for ex in examples], groups=groups, state=[ex.state for ex in examples],
            labels=torch.tensor([ex.label for ex in examples], dtype=torch.long),
            label_names=list(self.label_names),
            label_positions=torch.tensor(positions, dtype=torch.long),
        )

    def _encode(self, text: str) -> np.ndarray:
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.encode_bytes(text.encode("ascii"))
        return self.tokenizer.encode_array(text)


def _state_from(length: int, position: int, value: int) -> np.ndarray:
    state = np.full(length, -1, dtype=np.int64)
    state[position:] = value
    return state


class CompletionTracking(ProbeTask):
    """``required = a``, ``completed = b``: done iff a == b; digits balanced across fields and labels."""

    name = "completion_tracking"
    label_names = ["more", "done"]
    pairs = list(combinations(range(10), 2))

    @property
    def seq_len(self) -> int:
        return len("required = 0\ncompleted = 0\nStatus: done\n") + SCRATCH_LINE * self.scratch_updates

    def _example(self, required: int, completed: int, scratch: str) -> _Example:
        head = f"required = {required}\ncompleted = "
        label = int(required == completed)
        text = f"{head}{completed}\n{scratch}Status: {self.label_names[label]}\n"
        return _Example(text, label, _state_from(len(text), len(head), label))

    def _groups(self, rng: np.random.Generator, count: int | None) -> Iterator[list[_Example]]:
        while True:
            for k in rng.permutation(len(self.pairs)):
                a, b = self.pairs[k]
                scratch = self._scratch(rng, count)
                yield [self._example(x, y, scratch) for x, y in ((a, a), (a, b), (b, a), (b, b))]


class DelayedMemory(ProbeTask):
    """Remember one bit across the scratch (a group: both bits)."""

    name = "delayed_memory"
    label_names = ["0", "1"]

    @property
    def seq_len(self) -> int:
        return len("state = 0\n# final state: 0\n") + SCRATCH_LINE * self.scratch_updates

    def _groups(self, rng: np.random.Generator, count: int | None) -> Iterator[list[_Example]]:
        while True:
            scratch = self._scratch(rng, count)
            group = []
            for bit in (0, 1):
                text = f"state = {bit}\n{scratch}# final state: {bit}\n"
                group.append(_Example(text, bit, _state_from(len(text), len("state = "), bit)))
            yield group


class MultiRegister(ProbeTask):
    """Binary registers written ``writes`` times each; the label is the queried one's latest value."""

    name = "multi_register"
    label_names = ["0", "1"]
    REGISTERS = (1, 2, 4, 8)
    WRITES = (1, 2, 4, 8)  # 1: no "latest" to find, only which line writes the queried register
    SCRATCH_LAYOUTS = ("block", "shuffled")
    WRITE_LINE = len("r0 = 1\n")

    def __init__(self, registers: int = 2, writes: int = 2, scratch_updates: int | Sequence[int] = 8,
                 loss_on: str = "answer", label_at: str = "colon", tokenizer: str = "ascii",
                 scratch_draw: str = "group", scratch_layout: str = "block") -> None:
        check_choice(self.name, "registers", registers, self.REGISTERS)
        check_choice(self.name, "writes", writes, self.WRITES)
        check_choice(self.name, "scratch_layout", scratch_layout, self.SCRATCH_LAYOUTS)
        super().__init__(scratch_updates=scratch_updates, loss_on=loss_on, label_at=label_at, tokenizer=tokenizer,
                         scratch_draw=scratch_draw)
        self.registers = registers
        self.writes = writes
        self.scratch_layout = scratch_layout
        self.params = {"registers": registers, "writes": writes, **self.params}
        if scratch_layout != "block":  # only non-default options join params
            self.params["scratch_layout"] = scratch_layout

    @property
    def seq_len(self) -> int:
        return (self.WRITE_LINE * self.registers * self.writes + SCRATCH_LINE * self.scratch_updates
                + len("query = r0\nValue: 0\n"))

    def _example(self, schedule: np.ndarray, values: np.ndarray, scratch: list[str], slots: np.ndarray,
                 query: int) -> _Example:
        writes = [f"r{r} = {v}\n" for r, v in zip(schedule, values)]
        is_write = np.zeros(len(writes) + len(scratch), dtype=bool)
        is_write[slots] = True
        write_iter, scratch_iter = iter(writes), iter(scratch)
        lines = [next(write_iter) if w else next(scratch_iter) for w in is_write]
        label = int(values[schedule == query][-1])
        text = f"{''.join(lines)}query = r{query}\nValue: {label}\n"
        state = np.full(len(text), -1, dtype=np.int64)
        starts = np.cumsum([0] + [len(line) for line in lines])
        registers, written = 0, 0
        for slot, r, v in zip(slots, schedule, values):
            registers = (registers & ~(1 << int(r))) | (int(v) << int(r))
            written |= 1 << int(r)
            if written == (1 << self.registers) - 1:
                state[starts[slot] + len("r0 = "):] = registers
        return _Example(text, label, state)

    def _groups(self, rng: np.random.Generator, count: int | None) -> Iterator[list[_Example]]:
        while True:
            schedule = rng.permutation(np.repeat(np.arange(self.registers), self.writes))
            values = rng.integers(0, 2, size=len(schedule))
            query = int(rng.integers(self.registers))
            latest = int(np.flatnonzero(schedule == query)[-1])
            scratch = self._scratch(rng, count).splitlines(keepends=True)
            lines = len(schedule) + len(scratch)
            slots = (np.sort(rng.choice(lines, size=len(schedule), replace=False))
                     if self.scratch_layout == "shuffled" else np.arange(len(schedule)))
            group = []
            for bit in (0, 1):
                values = values.copy()
                values[latest] = bit
                group.append(self._example(schedule, values, scratch, slots, query))
            yield group
