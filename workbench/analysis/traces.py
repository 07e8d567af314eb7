"""Reasoning-trace lengths under the decoding regimes: does latent feedback let a model say less?

The FBT paper reports that base models decoding under SOFT feedback write shorter reasoning traces
(median length) at equal or better accuracy. ``trace_lengths`` puts that to a task whose traces
are correct at every verbosity (``arith_cot``: how much to write before the answer marker is the
model's free choice): it decodes the task's prompts under each regime on the same weights and
records how many tokens each continuation spends before the marker and whether the answer is right.
``summarize_traces`` turns that into medians and accuracies with bootstrap confidence intervals, so
a difference between regimes can be told from noise.

Prompts are batched by length: ``generate`` continues every row from the same position, and right
padding a prompt would put pad tokens between the question and the continuation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ..decode import REGIMES, generate
from ..model import GPT, eval_mode
from ..tasks import ANSWER_MARKER, Task

TRACE_COLUMNS = ["regime", "example", "length", "answered", "correct", "text"]
SUMMARY_COLUMNS = ["regime", "n", "median_length", "median_length_lo", "median_length_hi", "accuracy",
                   "accuracy_lo", "accuracy_hi", "answered"]


def _check_int(name: str, value: object, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name}={value!r} is invalid: must be an int >= {lo}")


def _find(seq: list[int], sub: list[int], start: int = 0) -> int | None:
    """Index of the first occurrence of ``sub`` in ``seq`` at or after ``start``, or None."""
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    return None


def _read_trace(task: Task, generated: list[int], answer: int) -> dict[str, object]:
    """Length, answered, correct and text of one continuation (token ids after the prompt).

    ``length`` counts tokens before the answer marker (all of them when there is none). The answer
    counts only once its line is complete (a newline after the marker): a number cut off by
    ``max_new_tokens`` could otherwise pass for a shorter, right one. ``text`` stops after that line;
    what a model writes once it has answered is not part of the trace.
    """
    marker = task.tokenizer.encode(ANSWER_MARKER)
    newline = task.tokenizer.encode("\n")
    at = _find(generated, marker)
    end = None if at is None else _find(generated, newline, at + len(marker))
    answered = end is not None
    text = task.tokenizer.decode(generated if end is None else generated[: end + len(newline)])
    return {"length": len(generated) if at is None else at, "answered": answered,
            "correct": answered and bool(task.check_answer(text, answer)), "text": text}


def trace_lengths(model: GPT, task: Task, regimes: Sequence[str] = REGIMES, *, n: int = 64, seed: int = 0,
                  split: str = "val", max_new_tokens: int = 64, prefill_passes: int = 1, temperature: float = 0.0,
                  top_k: int | None = None) -> pd.DataFrame:
    """Decode ``n`` of the task's prompts under each regime; one row per (regime, example).

    ``task`` must carry prompts and an exact answer check (``arith_cot``). Examples are drawn with
    ``seed`` from ``split`` ("val": questions a trained model never saw); the same examples under
    every regime, so regimes compare pairwise. ``prefill_passes`` is the ``fused`` regime's number
    of fused prefill passes; sampling at ``temperature > 0`` is seeded with ``seed``.

    Columns: ``regime``, ``example`` (index in the batch), ``length`` (tokens before the answer
    marker, or every generated token when there is none), ``answered`` (a complete answer line was
    written), ``correct`` (the task's exact check), ``text`` (the continuation up to its answer line).
    """
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown or not regimes:
        raise ValueError(f"regimes={tuple(regimes)!r} is invalid: each must be one of {REGIMES}")
    if not callable(getattr(task, "check_answer", None)):
        raise ValueError(f"task={task!r} has no check_answer: trace lengths need a task with exact answers "
                         f"(e.g. arith_cot)")
    _check_int("n", n, 1)
    _check_int("max_new_tokens", max_new_tokens, 1)
    batch = task.sample(n, seed=seed, split=split)
    if batch.prompts is None:
        raise ValueError(f"task={task!r} gives no prompts to continue (batch.prompts is None)")
    device = model.readout_weight.device
    prompts = [task.tokenizer.encode(p) for p in batch.prompts]
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_length.setdefault(len(ids), []).append(i)
    rows = []
    with eval_mode(model):
        for regime in regimes:
            generator = None
            if temperature > 0:
                generator = torch.Generator(device=device).manual_seed(seed)
            traces: dict[int, dict[str, object]] = {}
            for length, examples in by_length.items():
                prompt = torch.tensor([prompts[i] for i in examples], dtype=torch.long, device=device)
                out = generate(model, prompt, max_new_tokens, regime=regime, prefill_passes=prefill_passes,
                               temperature=temperature, top_k=top_k, generator=generator)
                for i, generated in zip(examples, out[:, length:].tolist()):
                    traces[i] = _read_trace(task, generated, int(batch.labels[i]))
            rows.extend({"regime": regime, "example": i, **traces[i]} for i in sorted(traces))
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)


def summarize_traces(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Per regime: median trace length and accuracy with percentile-bootstrap confidence intervals.

    Examples are resampled with replacement ``n_boot`` times (one resample serves both statistics);
    ``_lo``/``_hi`` are the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the resampled
    statistic. Unanswered examples count with their full generated length (the median is robust to
    that censoring while fewer than half are unanswered; ``answered`` reports the share).
    """
    missing = sorted({"regime", "length", "correct", "answered"} - set(df.columns))
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}: pass trace_lengths' output")
    _check_int("n_boot", n_boot, 1)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level!r} is invalid: must be in (0, 1)")
    rng = np.random.default_rng(seed)
    q = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    rows = []
    for regime, group in df.groupby("regime", sort=False):
        lengths = group["length"].to_numpy(dtype=np.float64)
        correct = group["correct"].to_numpy(dtype=np.float64)
        resample = rng.integers(0, len(group), size=(n_boot, len(group)))
        med_lo, med_hi = np.quantile(np.median(lengths[resample], axis=1), q)
        acc_lo, acc_hi = np.quantile(correct[resample].mean(axis=1), q)
        rows.append({"regime": regime, "n": len(group), "median_length": float(np.median(lengths)),
                     "median_length_lo": float(med_lo), "median_length_hi": float(med_hi),
                     "accuracy": float(correct.mean()), "accuracy_lo": float(acc_lo), "accuracy_hi": float(acc_hi),
                     "answered": float(group["answered"].mean())})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
