"""Reasoning-trace lengths per decoding regime: does latent feedback let a model say less? Prompts are batched by
length: right padding would put pads between question and continuation."""

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
from ..validation import check_int, fail

TRACE_COLUMNS = ["regime", "example", "length", "lines", "answered", "correct", "text"]
TRAINING = "training mix"  # the regime label of the task's own training traces (``training_traces``)
SUMMARY_COLUMNS = ["regime", "n", "median_length", "median_length_lo", "median_length_hi", "accuracy",
                   "accuracy_lo", "accuracy_hi", "answered"]


def _find(seq: list[int], sub: list[int], start: int = 0) -> int | None:
    """Index of ``sub`` in ``seq`` from ``start`` on, or None."""
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    return None


def read_trace(task: Task, generated: list[int], answer: int) -> dict[str, object]:
    """One continuation read; the answer counts only once its line is complete (a cut-off number could pass for a
    shorter, right one)."""
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
    """``regimes`` (names of ``decode.REGIMES``, or a {label: value} mapping) as {label: schedule value}."""
    if isinstance(regimes, Mapping):
        bad = [k for k, v in regimes.items() if not isinstance(k, str) or not getattr(v, "can_prefill", False)]
        if bad or not regimes:
            fail("regimes", dict(regimes), "must map labels to values that fill a KV cache")
        return dict(regimes)
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown or not regimes or isinstance(regimes, str):
        fail("regimes", regimes, f"each must be one of {REGIMES}, or give a mapping")
    return {r: schedules.regime(r, prefill_passes) for r in regimes}


def _prompts(task: Task, n: int, seed: int, split: str):
    """``n`` problems: the batch, each prompt's ids, and the examples of each prompt length."""
    check_int("n", n, 1)
    batch = task.sample(n, seed=seed, split=split)
    if batch.prompts is None:
        raise ValueError(f"task={task!r} gives no prompts")
    prompts = [task.tokenizer.encode(p) for p in batch.prompts]
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_length.setdefault(len(ids), []).append(i)
    return batch, prompts, by_length


def first_decisions(model: GPT, task: Task, regimes: Regimes = ("standard", "soft"), *, n: int = 64,
                    seed: int = 0, split: str = "val", prefill_passes: int = 1) -> pd.DataFrame:
    """Each regime's first token and log-probability gap from the first regime's: regimes that prefill alike
    decide alike."""
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
    """One example's random source, seeded by (``seed``, ``example``) alone."""
    return torch.Generator(device=device).manual_seed(int(np.random.SeedSequence([seed, example]).generate_state(1)[0]))


def trace_lengths(model: GPT, task: Task, regimes: Regimes = REGIMES, *, n: int = 64, seed: int = 0,
                  split: str = "val", max_new_tokens: int = 64, prefill_passes: int = 1, temperature: float = 0.0,
                  top_k: int | None = None) -> pd.DataFrame:
    """Decode ``n`` prompts per regime; sampled traces use common random numbers per example across regimes."""
    values = regime_values(regimes, prefill_passes)
    if not callable(getattr(task, "check_answer", None)):
        raise ValueError(f"task={task!r} has no check_answer (e.g. arith_cot has)")
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
    """The task's training traces, read like generated ones, to set a regime's lengths beside."""
    batch, _, _ = _prompts(task, n, seed, "train")
    rows = []
    for i, (prompt, text) in enumerate(zip(batch.prompts, batch.texts)):
        row = read_trace(task, task.tokenizer.encode(text[len(prompt):]), int(batch.labels[i]))
        if not row["correct"]:
            raise AssertionError(f"training trace {i} of {task!r} is not correct: {text!r}")
        rows.append({"regime": TRAINING, "example": i, **row})
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)


def line_distribution(df: pd.DataFrame, by: Sequence[str] = ("regime",)) -> pd.DataFrame:
    """Share of traces by lines written, per group and outcome: lines, not tokens, are what the training mix fixes."""
    by = list(by)
    missing = sorted({*by, "lines", "correct"} - set(df.columns))
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}")
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
    """``statistic(arm) - statistic(reference)`` over seeds, with a hierarchical interval; seeds are paired."""
    ref = [np.asarray(a, dtype=np.float64) for a in reference]
    other = [np.asarray(a, dtype=np.float64) for a in arm]
    if not ref or len(ref) != len(other):
        raise ValueError(f"reference and arm must hold one array per seed, alike; got {[a.shape for a in ref]} "
                         f"and {[a.shape for a in other]}")
    return bootstrap(other, ref, unit="seeds", paired_seeds=True, statistic=statistic, n_boot=n_boot, seed=seed,
                     level=level)


def compare_regimes(df: pd.DataFrame, reference: str = "standard", n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> pd.DataFrame:
    """Each regime against ``reference`` on the same runs (``run``: the seeds): median length and accuracy."""
    missing = sorted({"regime", "example", "length", "correct"} - set(df.columns))
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}")
    frame = df if "run" in df.columns else df.assign(run="run")
    if reference not in set(frame["regime"]):
        fail("reference", reference, f"must be one of {list(dict.fromkeys(frame['regime']))}")
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
    """Per group: median length and accuracy with intervals; unanswered examples count at full length (the median
    survives that censoring below half)."""
    by = list(by)
    missing = sorted({*by, "length", "correct", "answered"} - set(df.columns))
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}")
    check_int("n_boot", n_boot, 1)
    if not 0.0 < level < 1.0:
        fail("level", level, "must be in (0, 1)")
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
