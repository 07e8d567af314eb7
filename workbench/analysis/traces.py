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

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .. import schedules
from ..decode import REGIMES, generate
from ..model import GPT, eval_mode
from ..schedules import Schedule
from ..stats import STATISTICS, bootstrap
from ..tasks import ANSWER_MARKER, Task
from ..validation import check_int

TRACE_COLUMNS = ["regime", "example", "length", "lines", "answered", "correct", "text"]
TRAINING = "training mix"  # the regime label of the task's own training traces (``training_traces``)
SUMMARY_COLUMNS = ["regime", "n", "median_length", "median_length_lo", "median_length_hi", "accuracy",
                   "accuracy_lo", "accuracy_hi", "answered"]


def _find(seq: list[int], sub: list[int], start: int = 0) -> int | None:
    """Index of the first occurrence of ``sub`` in ``seq`` at or after ``start``, or None."""
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    return None


def read_trace(task: Task, generated: list[int], answer: int) -> dict[str, object]:
    """Length, answered, correct and text of one continuation (token ids after the prompt).

    ``length`` counts tokens before the answer marker (all of them when there is none); ``lines``
    counts the newlines among them (intermediate lines written: 0 for an answer-only trace, so
    lengths read against the training mix of verbosities whatever the numbers' widths). The answer
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
    before = generated if at is None else generated[:at]
    return {"length": len(before), "lines": before.count(newline[0]), "answered": answered,
            "correct": answered and bool(task.check_answer(text, answer)), "text": text}


Regimes = Sequence[str] | Mapping[str, Schedule]


def regime_values(regimes: Regimes, prefill_passes: int = 1) -> dict[str, Schedule]:
    """``regimes`` as {label: schedule value}: names of ``decode.REGIMES`` (FUSED with ``prefill_passes``), or a
    mapping from a label of one's own to any value ``generate`` takes (``{"soft_last": condition("suffix1")}``:
    SOFT started at the prompt's last token)."""
    if isinstance(regimes, Mapping):
        bad = [k for k, v in regimes.items() if not isinstance(k, str) or not getattr(v, "can_prefill", False)]
        if bad or not regimes:
            raise ValueError(f"regimes={dict(regimes)!r} is invalid: must map labels to schedule values that fill a "
                             "KV cache (schedules.regime(...), schedules.condition('suffix1'), ...)")
        return dict(regimes)
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown or not regimes or isinstance(regimes, str):
        raise ValueError(f"regimes={regimes!r} is invalid: each must be one of {REGIMES} (or pass a mapping "
                         "from labels to schedule values)")
    return {r: schedules.regime(r, prefill_passes) for r in regimes}


def _prompts(task: Task, n: int, seed: int, split: str):
    """``n`` of the task's held-out problems: the batch, each prompt's ids, and the examples of each prompt
    length (a batch decodes prompts of one length together)."""
    check_int("n", n, 1)
    batch = task.sample(n, seed=seed, split=split)
    if batch.prompts is None:
        raise ValueError(f"task={task!r} gives no prompts to continue (batch.prompts is None)")
    prompts = [task.tokenizer.encode(p) for p in batch.prompts]
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_length.setdefault(len(ids), []).append(i)
    return batch, prompts, by_length


def first_decisions(model: GPT, task: Task, regimes: Regimes = ("standard", "soft"), *, n: int = 64,
                    seed: int = 0, split: str = "val", prefill_passes: int = 1) -> pd.DataFrame:
    """The first token each regime would write after each prompt, and how far its log-probabilities lie from
    the first regime's: a trace's first verbosity decision ("answer now" or "write a line") is made here.

    Why: a regime that prefills the prompt as another does (SOFT's prefill is STANDARD's plain pass)
    makes the same first decision by construction, so it can differ only in what follows; a design
    whose traces are decided at the first token then cannot separate the two, whatever the models.
    ``regimes``: names or {label: schedule value} (``regime_values``).
    Columns: ``regime``, ``example``, ``first_token`` (the greedy choice), ``max_logprob_gap`` (the
    largest absolute difference of the first token's log-probabilities from the first regime's).
    """
    values = regime_values(regimes, prefill_passes)
    _, prompts, by_length = _prompts(task, n, seed, split)
    device = model.readout_weight.device
    logprobs: dict[str, dict[int, torch.Tensor]] = {r: {} for r in values}
    with eval_mode(model):
        for regime, value in values.items():
            for examples in by_length.values():
                prompt = torch.tensor([prompts[i] for i in examples], dtype=torch.long, device=device)
                _, logits = generate(model, prompt, 1, regime=value, return_logits=True)
                for i, row in zip(examples, torch.log_softmax(logits[:, 0].double(), dim=-1).cpu()):
                    logprobs[regime][i] = row
    first = logprobs[next(iter(values))]
    return pd.DataFrame([{"regime": r, "example": i, "first_token": int(lp.argmax()),
                          "max_logprob_gap": float((lp - first[i]).abs().max())}
                         for r in values for i, lp in sorted(logprobs[r].items())])


def example_generator(seed: int, example: int, device: torch.device | str | None = None) -> torch.Generator:
    """The random source of one example's sampled trace: seeded by (``seed``, ``example``) alone."""
    return torch.Generator(device=device).manual_seed(int(np.random.SeedSequence([seed, example]).generate_state(1)[0]))


def trace_lengths(model: GPT, task: Task, regimes: Regimes = REGIMES, *, n: int = 64, seed: int = 0,
                  split: str = "val", max_new_tokens: int = 64, prefill_passes: int = 1, temperature: float = 0.0,
                  top_k: int | None = None) -> pd.DataFrame:
    """Decode ``n`` of the task's prompts under each regime; one row per (regime, example).

    ``task`` must carry prompts and an exact answer check (``arith_cot``). Examples are drawn with
    ``seed`` from ``split`` ("val": questions a trained model never saw); the same examples under
    every regime, so regimes compare pairwise. ``regimes``: names or {label: schedule value}
    (``regime_values``); ``prefill_passes`` is the ``fused`` regime's number of fused prefill passes.
    Sampling at ``temperature > 0`` draws each example from its own generator (``example_generator``):
    an example samples the same whatever else is decoded with it, and every regime starts it from the
    same random numbers (common random numbers: the regimes' differences are the models', not the draws').

    Columns: ``regime``, ``example`` (index in the batch), ``length`` (tokens before the answer
    marker, or every generated token when there is none), ``lines`` (intermediate lines among
    them), ``answered`` (a complete answer line was
    written), ``correct`` (the task's exact check), ``text`` (the continuation up to its answer line).
    """
    values = regime_values(regimes, prefill_passes)
    if not callable(getattr(task, "check_answer", None)):
        raise ValueError(f"task={task!r} has no check_answer: trace lengths need a task with exact answers "
                         f"(e.g. arith_cot)")
    check_int("max_new_tokens", max_new_tokens, 1)
    batch, prompts, by_length = _prompts(task, n, seed, split)
    device = model.readout_weight.device
    eos = getattr(task, "eos_id", None)  # a task that marks its end lets decoding stop there
    rows = []
    with eval_mode(model):
        for regime, value in values.items():
            traces: dict[int, dict[str, object]] = {}
            for length, examples in by_length.items():
                prompt = torch.tensor([prompts[i] for i in examples], dtype=torch.long, device=device)
                generators = [example_generator(seed, i, device) for i in examples] if temperature > 0 else None
                out = generate(model, prompt, max_new_tokens, regime=value, temperature=temperature, top_k=top_k,
                               eos=eos, generator=generators)
                for i, generated in zip(examples, out[:, length:].tolist()):
                    traces[i] = read_trace(task, generated, int(batch.labels[i]))
            rows.extend({"regime": regime, "example": i, **traces[i]} for i in sorted(traces))
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)


def training_traces(task: Task, n: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The task's own training traces, read like generated ones: the verbosity mix a model learned from.

    One row per example of ``task.sample(n, seed, "train")`` with ``trace_lengths``' columns and
    ``regime = TRAINING``; every training trace is answered and correct (the check holds it). Why:
    a regime's trace lengths mean little on their own; beside the mix the model was trained on they
    show whether decoding copies that mix, collapses onto one verbosity, or writes less than any.
    """
    check_int("n", n, 1)
    batch = task.sample(n, seed=seed, split="train")
    if batch.prompts is None:
        raise ValueError(f"task={task!r} gives no prompts (batch.prompts is None): it has no traces to read")
    rows = []
    for i, (prompt, text) in enumerate(zip(batch.prompts, batch.texts)):
        row = read_trace(task, task.tokenizer.encode(text[len(prompt):]), int(batch.labels[i]))
        if not row["correct"]:
            raise AssertionError(f"training trace {i} of {task!r} is not correct: {text!r}")
        rows.append({"regime": TRAINING, "example": i, **row})
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)


def line_distribution(df: pd.DataFrame, by: Sequence[str] = ("regime",)) -> pd.DataFrame:
    """Share of traces by intermediate lines written, per group and outcome (correct / wrong / all).

    ``df``: ``trace_lengths`` and/or ``training_traces`` rows (concatenated). Columns: ``by``,
    ``outcome``, ``lines``, ``count``, ``share`` (of the group's traces with that outcome). Lines,
    not tokens, are what the training mix fixes (full / skipped / answer-only), so this is the
    table that says whether a regime's traces are shorter than the mix it learned from.
    """
    by = list(by)
    missing = sorted({*by, "lines", "correct"} - set(df.columns))
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}: pass trace_lengths' or training_traces' output")
    frames = []
    for outcome, part in (("all", df), ("correct", df[df["correct"]]), ("wrong", df[~df["correct"]])):
        counts = part.groupby([*by, "lines"], sort=False).size().rename("count").reset_index()
        counts["outcome"] = outcome
        frames.append(counts)
    table = pd.concat(frames, ignore_index=True)
    table["share"] = table["count"] / table.groupby([*by, "outcome"])["count"].transform("sum")
    return table[[*by, "outcome", "lines", "count", "share"]].sort_values([*by, "outcome", "lines"],
                                                                          kind="stable", ignore_index=True)


def paired_hierarchical_difference(reference: Sequence[np.ndarray], arm: Sequence[np.ndarray],
                                   statistic: str = "mean", n_boot: int = 2000, seed: int = 0,
                                   level: float = 0.95) -> dict[str, float]:
    """``statistic(arm) - statistic(reference)`` per seed, averaged over seeds, with a hierarchical interval.

    ``reference[s]`` and ``arm[s]`` are one seed's per-example values under two conditions of the
    *same* model (two decoding regimes on the same weights), on the same examples for every seed.
    Each replicate resamples the seeds (one draw shared by both conditions: they are paired by
    seed as well as by example), then the examples (one draw shared by every seed and condition).
    Why not ``evaluation.hierarchical_difference``: that one compares unrelated runs (seeds resampled
    per arm) and means only; a median trace length needs the median, and regimes share their seeds.
    Returns ``mean`` (the point estimate), ``low``, ``high`` and ``seeds``.
    """
    ref = [np.asarray(a, dtype=np.float64) for a in reference]
    other = [np.asarray(a, dtype=np.float64) for a in arm]
    if not ref or len(ref) != len(other):
        raise ValueError(f"reference and arm must hold one non-empty 1-D array per seed, the same number of "
                         f"seeds and examples each; got shapes {[a.shape for a in ref]} and {[a.shape for a in other]}")
    return bootstrap(other, ref, unit="seeds", paired_seeds=True, statistic=statistic, n_boot=n_boot, seed=seed,
                     level=level)


def compare_regimes(df: pd.DataFrame, reference: str = "standard", n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> pd.DataFrame:
    """Each regime against ``reference`` on the same runs: median trace length and accuracy differences.

    ``df``: ``trace_lengths`` rows of one or more runs (a ``run`` column; the runs are the seeds),
    the same examples under every regime. Columns: ``regime``, ``quantity`` (``median_length`` in
    tokens, ``accuracy``), ``value`` (the regime's statistic averaged over seeds), ``diff``
    (regime - reference), ``low``, ``high`` (``paired_hierarchical_difference``), ``seeds``.
    """
    missing = sorted({"regime", "example", "length", "correct"} - set(df.columns))
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}: pass trace_lengths' output")
    frame = df if "run" in df.columns else df.assign(run="run")
    if reference not in set(frame["regime"]):
        raise ValueError(f"reference={reference!r} is invalid: the traces hold {list(dict.fromkeys(frame['regime']))}")
    runs = list(dict.fromkeys(frame["run"]))
    rows = []
    for quantity, column, statistic in (("median_length", "length", "median"), ("accuracy", "correct", "mean")):
        def per_seed(regime: str, column: str = column) -> list[np.ndarray]:
            part = frame[frame["regime"] == regime]
            return [part[part["run"] == r].sort_values("example")[column].to_numpy(dtype=np.float64) for r in runs]

        ref = per_seed(reference)
        for regime in dict.fromkeys(frame["regime"]):
            values = per_seed(regime)
            row = {"regime": regime, "quantity": quantity,
                   "value": float(np.mean([STATISTICS[statistic](v) for v in values]))}
            if regime != reference:
                interval = paired_hierarchical_difference(ref, values, statistic, n_boot, seed, level)
                row.update(diff=interval["mean"], low=interval["low"], high=interval["high"])
            rows.append({**row, "seeds": len(runs)})
    return pd.DataFrame(rows, columns=["regime", "quantity", "value", "diff", "low", "high", "seeds"])


def summarize_traces(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                     by: Sequence[str] = ("regime",)) -> pd.DataFrame:
    """Per regime (or per ``by`` group): median trace length and accuracy with percentile-bootstrap intervals.

    Examples are resampled with replacement ``n_boot`` times (one resample serves both statistics);
    ``_lo``/``_hi`` are the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the resampled
    statistic. Unanswered examples count with their full generated length (the median is robust to
    that censoring while fewer than half are unanswered; ``answered`` reports the share).
    """
    by = list(by)
    missing = sorted({*by, "length", "correct", "answered"} - set(df.columns))
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}: pass trace_lengths' output")
    check_int("n_boot", n_boot, 1)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level!r} is invalid: must be in (0, 1)")
    rng = np.random.default_rng(seed)
    rows = []
    for key, group in df.groupby(by, sort=False):
        lengths = group["length"].to_numpy(dtype=np.float64)
        correct = group["correct"].to_numpy(dtype=np.float64)
        drawn = rng.bit_generator.state  # both statistics read one resample: the generator is rewound
        median = bootstrap(lengths, statistic="median", n_boot=n_boot, seed=rng, level=level)
        rng.bit_generator.state = drawn
        accuracy = bootstrap(correct, n_boot=n_boot, seed=rng, level=level)
        rows.append({**dict(zip(by, key)), "n": len(group), "median_length": median["mean"],
                     "median_length_lo": median["low"], "median_length_hi": median["high"],
                     "accuracy": accuracy["mean"], "accuracy_lo": accuracy["low"], "accuracy_hi": accuracy["high"],
                     "answered": float(group["answered"].mean())})
    return pd.DataFrame(rows, columns=[*by, *SUMMARY_COLUMNS[1:]])
