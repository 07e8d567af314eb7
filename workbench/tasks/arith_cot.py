"""Multi-step +/- arithmetic with correct traces of mixed verbosity: the tokens before ``####`` measure how much a
model reasons out loud rather than in its hidden state::

    Q: 23+45-17+8
    > 68-17+8
    > 51+8
    #### 59
"""

from __future__ import annotations

import re

import numpy as np
import torch

from .base import Batch, Task, check_choice, check_int, check_n, collate, fail, make_rng, next_token_targets
from .tokenizers import CharTokenizer

ANSWER_MARKER = "####"
EOS_MARKER = "$"  # never written otherwise by this task
VERBOSITIES = ("mixed", "full", "skip", "answer", "full_or_skip")
LOSS_ON = ("completion", "answer", "all")
_ANSWER = re.compile(re.escape(ANSWER_MARKER) + r" *(-?\d+)")


def extract_answer(text: str) -> int | None:
    """The integer after the first answer marker, or None."""
    match = _ANSWER.search(text)
    return None if match is None else int(match.group(1))


class ArithCoT(Task):
    """``steps`` chained +/- operations, every partial result in [0, max_value]."""

    name = "arith_cot"

    def __init__(self, steps: int = 3, max_value: int = 99, verbosity: str = "mixed",
                 loss_on: str = "completion", eos: bool = False, skip_trivial: int = 0) -> None:
        check_int(self.name, "steps", steps, 1, 32)
        check_int(self.name, "max_value", max_value, 1, 10**6)
        check_choice(self.name, "verbosity", verbosity, VERBOSITIES)
        check_choice(self.name, "loss_on", loss_on, LOSS_ON)
        if not isinstance(eos, bool):
            fail(self.name, "eos", eos, "must be a bool")
        check_int(self.name, "skip_trivial", skip_trivial, 0, max_value - 1)
        self.skip_trivial = int(skip_trivial)
        self.steps, self.max_value = int(steps), int(max_value)
        self.verbosity, self.loss_on, self.eos = verbosity, loss_on, eos
        self.tokenizer = CharTokenizer()
        self.eos_id = self.tokenizer.encode(EOS_MARKER)[0] if eos else None
        self.params = {"steps": self.steps, "max_value": self.max_value, "verbosity": verbosity,
                       "loss_on": loss_on}
        if eos:  # absent when off, so existing checkpoints' params stay as they were
            self.params["eos"] = True
        if skip_trivial:  # likewise
            self.params["skip_trivial"] = self.skip_trivial
        # longest text: every number at full width, every step written
        d = len(str(self.max_value))
        expr = [(k + 1) * d + k for k in range(self.steps + 1)]  # an expression with k operations
        lines = sum(len("> \n") + expr[k] for k in range(1, self.steps))
        self.seq_len = (len("Q: \n") + expr[self.steps] + lines + len(f"{ANSWER_MARKER} \n") + d
                        + len(EOS_MARKER) * eos)

    def _problem(self, rng: np.random.Generator) -> tuple[list[int], list[str]]:
        value = int(rng.integers(0, self.max_value + 1))
        operands, ops = [value], []
        for _ in range(self.steps):
            op = "+" if rng.random() < 0.5 else "-"
            if (op == "+" and value == self.max_value) or (op == "-" and value == 0):
                op = "-" if op == "+" else "+"
            room = self.max_value - value if op == "+" else value
            operand = int(rng.integers(1, room + 1))
            value += operand if op == "+" else -operand
            operands.append(operand)
            ops.append(op)
        return operands, ops

    def _kept_steps(self, rng: np.random.Generator, operands: list[int]) -> list[bool]:
        verbosity = self.verbosity
        if verbosity == "mixed":
            verbosity = VERBOSITIES[1 + int(rng.integers(3))]
        elif verbosity == "full_or_skip":
            verbosity = VERBOSITIES[1 + int(rng.integers(2))]
        if verbosity == "skip":
            kept = [bool(b) for b in rng.integers(0, 2, size=self.steps - 1)]
        else:
            kept = [verbosity == "full"] * (self.steps - 1)
        return [keep and not trivial for keep, trivial in zip(kept, self._trivial(operands))]

    def _trivial(self, operands: list[int]) -> list[bool]:
        return [x <= self.skip_trivial for x in operands[1:self.steps]]

    def trivial(self, prompt: str) -> list[bool]:
        """Per intermediate line of ``prompt``'s trace: never written?"""
        operands = [int(x) for x in re.findall(r"\d+", prompt)]
        if len(operands) != self.steps + 1:
            fail(self.name, "prompt", prompt, f"must be a question of {self.steps} operations")
        return self._trivial(operands)

    def _example(self, rng: np.random.Generator) -> tuple[str, str, int]:
        operands, ops = self._problem(rng)
        values = [operands[0]]
        for op, x in zip(ops, operands[1:]):
            values.append(values[-1] + x if op == "+" else values[-1] - x)

        def expression(k: int) -> str:  # after the first k operations
            return str(values[k]) + "".join(f"{op}{x}" for op, x in zip(ops[k:], operands[k + 1:]))

        prompt = f"Q: {expression(0)}\n"
        trace = "".join(f"> {expression(k)}\n" for k, keep in zip(range(1, self.steps),
                                                                 self._kept_steps(rng, operands)) if keep)
        end = EOS_MARKER if self.eos else ""
        return prompt, f"{prompt}{trace}{ANSWER_MARKER} {values[-1]}\n{end}", values[-1]

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        """``labels``: the answers, read at the last marker character."""
        check_n(n, self.seq_len)
        rng = make_rng(seed, split)
        prompts, texts, answers = zip(*(self._example(rng) for _ in range(n)))
        ids = [self.tokenizer.encode_array(t) for t in texts]
        marks = [t.index(ANSWER_MARKER) + len(ANSWER_MARKER) - 1 for t in texts]
        if self.loss_on == "completion":
            start = [len(p) - 1 for p in prompts]
        elif self.loss_on == "answer":
            start = marks
        else:
            start = [0] * n
        return collate(
            ids, [next_token_targets(x, s) for x, s in zip(ids, start)], self.tokenizer.pad_id,
            texts=list(texts), groups=np.arange(n), prompts=list(prompts),
            labels=torch.tensor(answers, dtype=torch.long),
            label_positions=torch.tensor(marks, dtype=torch.long),
        )

    def extract_answer(self, text: str) -> int | None:
        return extract_answer(text)

    def trace_length(self, continuation: str) -> int | None:
        """Tokens (= characters) before the answer marker; None if it never answers."""
        at = continuation.find(ANSWER_MARKER)
        return None if at < 0 else at

    def check_answer(self, text: str, answer: int | torch.Tensor) -> bool:
        """The first answer in ``text`` equals ``answer``."""
        got = extract_answer(text)
        return got is not None and got == int(answer)
