"""Exercise checks on the dynamics (06), traces (07) and verdicts (08)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from workbench.analysis.traces import compare_regimes, read_trace
from workbench.decode import generate
from workbench.hooks import with_hooks
from workbench.model import GPT
from workbench.schedules import Schedule, Sequential, condition, regime
from workbench.stats import verdict
from workbench.tasks import ANSWER_MARKER, Task
from workbench.tasks import get as get_task

from . import solutions
from .framework import as_number, exercise, passed, practice_model, practice_tokens, register


def _trace_cases(task: Task) -> list[tuple[list[int], int]]:
    """Continuations of the task's prompts: every step written, steps skipped, answer only, cut off."""
    cases = []
    for verbosity in ("full", "skip", "answer"):
        variant = get_task("arith_cot", steps=task.steps, max_value=task.max_value, verbosity=verbosity)
        batch = variant.sample(4, seed=3)
        for text, prompt, answer in zip(batch.texts, batch.prompts, batch.labels.tolist()):
            cases.append((task.tokenizer.encode(text[len(prompt):]), int(answer)))
    cut, answer = cases[0]
    cases.append((cut[: len(cut) // 2], answer))  # no marker yet: every generated token counts
    at = next(i for i in range(len(cut)) if task.tokenizer.decode(cut[i:i + 4]) == ANSWER_MARKER)
    cases.append((cut[: at + 2], answer))  # cut off inside the marker ("##"): no marker, every token counts
    return cases


@register
@exercise(solutions.trace_length)
def check_trace_length(fn: Callable[[Task, list[int]], int], task: Task | None = None) -> Callable:
    """``fn(task, generated)``: how many generated token ids come before the answer marker (``"####"``), or all of
    them."""
    task = get_task("arith_cot") if task is None else task
    hint = ("Find the first occurrence of the whole marker, the sub-list task.tokenizer.encode('####') (four "
            "ids, not one '#'), in the generated ids and count the ids before it; without a marker, count them "
            "all (a continuation cut off after '##' has none). An answer-only trace has length 0.")
    for generated, answer in _trace_cases(task):
        expected = read_trace(task, generated, answer)["length"]
        got = fn(task, list(generated))
        if got != expected:
            text = task.tokenizer.decode(generated)
            raise AssertionError(f"for the continuation {text!r}: length {got!r}, expected {expected}. {hint}")
    passed("your trace length matches trace_lengths on every verbosity and a cut-off trace")


VERDICT_CASES = [  # (interval, expected_sign): both sides of zero, both signs, straddling, too few seeds
    ({"low": 0.1, "high": 0.3, "seeds": 3}, 1), ({"low": 0.1, "high": 0.3, "seeds": 3}, -1),
    ({"low": -0.3, "high": -0.1, "seeds": 3}, -1), ({"low": -0.3, "high": -0.1, "seeds": 5}, 1),
    ({"low": -0.1, "high": 0.3, "seeds": 3}, 1), ({"low": -0.3, "high": 0.01, "seeds": 3}, -1),
    ({"low": 0.1, "high": 0.3, "seeds": 2}, 1), ({"low": -0.3, "high": -0.1, "seeds": 1}, -1),
]


@register
@exercise(solutions.read_verdict)
def check_verdict(fn: Callable[[dict[str, float], int], str]) -> Callable:
    """``fn(interval, expected_sign)``: a recipe's verdict from its interval (``low``, ``high``, ``seeds``) and the
    claimed side of zero (+1 higher, -1 lower), as ``wb.stats.verdict`` reads it: ``reproduces``,
    ``does not reproduce``, ``inconclusive``, or ``not tested: ...`` with fewer than 3 seeds per arm."""
    hint = ("First the seeds: fewer than 3 per arm is 'not tested: ...' whatever the interval. Then the side: an "
            "interval wholly above 0 (low > 0) or wholly below (high < 0) reproduces only when that side is the "
            "paper's (expected_sign); the other side does not reproduce; an interval holding 0 is inconclusive.")
    for interval, sign in VERDICT_CASES:
        expected = verdict(interval, sign)
        got = fn(dict(interval), sign)
        agrees = got == expected or (expected.startswith("not tested") and str(got).startswith("not tested"))
        if not agrees:
            raise AssertionError(f"interval [{interval['low']:+.2f}, {interval['high']:+.2f}] from "
                                 f"{interval['seeds']} seeds, expected_sign={sign:+d}: got {got!r}, expected "
                                 f"{expected!r}. {hint}")
    passed("your verdicts match wb.stats.verdict on every side of zero, both signs and too few seeds")


def _rotation(angle: float, scale: float) -> list[list[float]]:
    c, s = scale * math.cos(angle), scale * math.sin(angle)
    return [[c, -s], [s, c]]


LYAPUNOV_CASES = {  # A, its spectral radius far enough from 1 that A^n v leaves float64's range within 1,000 steps
    "contracting A (radius 0.25)": [[0.25, 0.5], [0.0, 0.1]],
    "expanding A (radius 2.5)": [[2.0, 1.0], [0.5, 1.5]],
    "A rotating by 0.7 rad and scaling by 1.1": _rotation(0.7, 1.1),
}


@register
@exercise(solutions.lyapunov_2x2)
def check_lyapunov_2x2(fn: Callable[[torch.Tensor, int], float]) -> Callable:
    """``fn(A, steps)``: the top Lyapunov exponent of ``m_t = A m_{t-1}`` (A 2x2) over ``steps`` steps; ``A^n v`` over-
    or underflows there, so only an iteration that renormalises stays finite."""
    hint = ("Carry a unit vector: at each step apply A, add the log of the new vector's norm (the step's growth) to "
            "a running sum, and divide the vector by that norm; the exponent is the sum over the number of steps.")
    steps = 1000
    for what, rows in LYAPUNOV_CASES.items():
        A = torch.tensor(rows, dtype=torch.float64)
        radius = float(torch.linalg.eigvals(A).abs().max())
        expected = math.log(radius)
        got = as_number(fn(A.clone(), steps), what, hint)
        if abs(got - expected) <= 1e-2:
            continue
        if not math.isfinite(got):
            raise AssertionError(f"{what}: exponent {got}, expected {expected:.4g}: A^n v leaves float64's range over "
                                 f"{steps} steps (inf, or 0 and then nan). Renormalise the vector to unit length "
                                 "after every step, and sum the logs of the growths.")
        if abs(got - radius) <= 1e-2 * radius:
            raise AssertionError(f"{what}: {got:.4g} is the growth per step (the spectral radius {radius:.4g}), not "
                                 f"its log: the exponent {expected:.4g} averages log(growth).")
        raise AssertionError(f"{what}: exponent {got:.4g}, expected log(spectral radius) = {expected:.4g}. {hint}")
    passed("your exponent matches log(spectral radius) for a contracting, an expanding and a rotating A")


def _count_forwards(value: Schedule, prompt: torch.Tensor, new_tokens: int) -> int:
    """How many forwards ``generate`` makes: ``hook_positions`` fires once per forward."""
    model = _COUNTING_MODEL()
    count = [0]

    def tick(positions: torch.Tensor, *, hook) -> None:
        count[0] += 1

    with with_hooks(model, [("hook_positions", tick)]):
        generate(model, prompt, new_tokens, regime=value)
    return count[0]


@functools.cache
def _COUNTING_MODEL() -> GPT:  # noqa: N802 (a constant, built once)
    return practice_model("fbt")


def _decode_values(prefill_passes: int) -> dict[str, Schedule]:
    return {"standard": regime("standard"), "soft": regime("soft"), "soft_last": condition("suffix1"),
            "fused": regime("fused", prefill_passes), "sequential": Sequential()}


@register
@exercise(solutions.decode_forwards)
def check_decode_forwards(fn: Callable[[str, int, int, int], int]) -> Callable:
    """``fn(regime, prompt_len, new_tokens, prefill_passes)``: the forwards (sequential model calls) ``wb.generate``
    makes to write ``new_tokens >= 1`` tokens after a ``prompt_len`` prompt under ``regime``: ``standard``, ``soft``,
    ``soft_last`` (``condition("suffix1")``), ``fused`` (``prefill_passes`` Jacobi passes after a plain one) or
    ``sequential``."""
    hint = ("Count the prefill's forwards (standard and soft: one plain pass; soft_last: a plain pass over all but "
            "the last prompt token, then that token alone; fused: a plain pass and prefill_passes more; sequential: "
            "one per prompt token), then one forward per new token but the first, which the prefill's last logits "
            "choose.")
    prompts = practice_tokens(1)
    for prefill_passes in (1, 2):
        for name, value in _decode_values(prefill_passes).items():
            for prompt_len in (3, 5):
                for new_tokens in (1, 4):
                    expected = _count_forwards(value, prompts[:, :prompt_len], new_tokens)
                    what = (f"{name}, a prompt of {prompt_len} tokens, {new_tokens} new token(s)"
                            + (f", prefill_passes={prefill_passes}" if name == "fused" else ""))
                    got = fn(name, prompt_len, new_tokens, prefill_passes)
                    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
                        raise AssertionError(f"{what}: fn must return a whole number of forwards, got "
                                             f"{type(got).__name__}. {hint}")
                    if got == expected:
                        continue
                    if got == expected + 1:
                        slip = ("one forward too many: the first new token is chosen by the prefill's last logits, "
                                "so only the others need a forward")
                    elif name == "fused" and got == expected - 1:
                        slip = "one forward too few: FUSED runs a plain pass first, then prefill_passes fused ones"
                    elif name == "soft_last" and got == expected - 1:
                        slip = ("one forward too few: soft_last's prefill is a plain pass over all but the last prompt "
                                "token, then that token by the recurrence")
                    elif name == "sequential" and got < expected:
                        slip = ("too few: the exact recurrence runs one forward per prompt token, each reading its "
                                "predecessor's memory")
                    else:
                        slip = "not what generate runs"
                    raise AssertionError(f"{what}: {got} forwards, counted {expected}: {slip}. {hint}")
    passed("your forward counts match generate's, for every regime, prompt length and trace length")


def _length_cases() -> dict[str, pd.DataFrame]:
    """Traces of three seeds where pooled medians, or medians of per-question differences, give another answer."""
    rng = np.random.default_rng(0)
    rows = []
    for run, offset in (("fbt_s0", 0), ("fbt_s1", 9), ("fbt_s2", 20)):
        standard = offset + rng.integers(0, 14, 41)
        lengths = {"standard": standard,
                   "soft": np.where(rng.random(41) < 0.4, standard - rng.integers(0, 8, 41), standard),
                   "fused": standard + rng.integers(-3, 5, 41)}
        for name, values in lengths.items():
            rows += [{"run": run, "regime": name, "example": i, "length": int(max(v, 0)), "correct": True}
                     for i, v in enumerate(values)]
    frame = pd.DataFrame(rows)
    return {"three seeds in order": frame,
            "the same traces, rows shuffled": frame.sample(frac=1.0, random_state=0).reset_index(drop=True)}


@register
@exercise(solutions.median_length_difference)
def check_median_length_difference(fn: Callable[[pd.DataFrame, str], float]) -> Callable:
    """``fn(traces, regime)``: per seed (``run``), the median ``length`` under ``regime`` minus that under ``standard``,
    averaged over seeds: ``compare_regimes``' ``diff`` for ``median_length``."""
    hint = ("Group by run; in each, take the median length under the regime and under 'standard' and subtract "
            "(a difference of medians); average those differences over the runs.")
    for what, frame in _length_cases().items():
        table = compare_regimes(frame, n_boot=1).set_index(["quantity", "regime"])
        for name in ("soft", "fused"):
            expected = float(table.loc[("median_length", name), "diff"])
            got = as_number(fn(frame.copy(), name), f"{what}, {name}", hint)
            if abs(got - expected) <= 1e-9:
                continue
            by = frame.pivot_table(index=["run", "example"], columns="regime", values="length")
            pooled = frame[frame["regime"] == name]["length"].median() - frame[frame["regime"] == "standard"][
                "length"].median()
            per_question = (by[name] - by["standard"]).groupby(level="run").median().mean()
            said = f"{what}, {name}: {got:+.3f} tokens, expected {expected:+.3f}"
            if abs(got - pooled) <= 1e-9:
                raise AssertionError(f"{said}: that is the median pooled over every seed's traces. Seeds write at "
                                     f"different lengths: take the medians per seed, then average. {hint}")
            if abs(got - per_question) <= 1e-9:
                raise AssertionError(f"{said}: that is the median of the per-question differences, not the "
                                     f"difference of the medians, which is what the claim is about. {hint}")
            raise AssertionError(f"{said}. {hint}")
    passed("your differences match compare_regimes' median_length diff (per seed, then averaged)")
