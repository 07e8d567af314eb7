"""Exercise checks on the analyses: a grouped cross-validated probe (05), a swap patch (05b), the top
Lyapunov exponent of a linear recurrence (06), a trace's length (07) and a recipe's verdict (08)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ..analysis.interventions import Intervention, intervene
from ..analysis.probes import fit_probe
from ..analysis.traces import read_trace
from ..model import GPT
from ..stats import verdict
from ..tasks import ANSWER_MARKER, Task
from ..tasks import get as get_task
from . import solutions
from .framework import as_number, close, exercise, passed, practice_model, practice_tokens, register


def _probe_data(seed: int, case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and groups for one of three cases.

    ``readable``: the label is linearly readable. ``leaky``: every group shares one label and one
    feature code, and the codes say nothing about labels across groups — a probe tested on groups it
    was trained on scores high, on unseen groups near chance. ``scale``: readable from feature 0, but
    one large group (GroupKFold's first fold holds it) has that feature 1000x larger — a scaler fitted
    on all rows takes its scale from that held-out group, shrinks the feature in the training rows
    below what an L2 probe with C=0.1 can use, and the fold drops to chance."""
    rng = np.random.default_rng(seed)
    if case == "scale":
        groups = np.repeat(np.arange(24), [40] + [10] * 23)
        features = rng.normal(size=(len(groups), 16))
        labels = (features[:, 0] > 0).astype(int)
        features[groups == 0, 0] *= 1000.0
    elif case == "leaky":
        groups = np.repeat(np.arange(24), 10)
        labels = rng.integers(0, 2, 24)[groups]
        codes = rng.normal(size=(24, 16))
        features = codes[groups] + 0.3 * rng.normal(size=(len(groups), 16))
    else:
        groups = np.repeat(np.arange(24), 10)
        features = rng.normal(size=(len(groups), 16))
        labels = (features[:, 0] + 0.5 * rng.normal(size=len(groups)) > 0).astype(int)
    return features, labels, groups


PROBE_CASES = {  # what each case catches, as the failure message says it
    "readable": ("linearly readable labels", ""),
    "leaky": ("data where only unseen groups keep it honest",
              "A probe that beats chance here saw its test groups in training: split with GroupKFold. "),
    "scale": ("data where one held-out group's feature 0 is 1000x larger",
              "Fit the StandardScaler on the fold's training rows only: fitted on all rows it takes the "
              "held-out group's scale, and the probe cannot use feature 0 any more. "),
}


@register
@exercise(solutions.grouped_cv_probe)
def check_grouped_cv_probe(fn: Callable[[np.ndarray, np.ndarray, np.ndarray, int], float]) -> Callable:
    """``fn(features, labels, groups, folds)``: the mean held-out accuracy of an L2 logistic probe
    (``C=0.1``) under ``folds``-fold grouped cross-validation, features standardised per fold on the
    training rows only.

    Compared with ``fit_probe``'s accuracy, on data where the label is readable, on data where only
    a probe that sees test groups in training can score (grouping is what keeps it at chance), and on
    data where a scaler fitted on all rows (test rows included) loses the label.
    """
    hint = ("Split with sklearn.model_selection.GroupKFold(n_splits=folds).split(X, y, groups) so that no "
            "group is in both train and test; fit StandardScaler on the training rows; "
            "LogisticRegression(C=0.1); average the folds' accuracies.")
    for case, (what, slip) in PROBE_CASES.items():
        features, labels, groups = _probe_data(seed=0, case=case)
        expected = fit_probe(features, labels, groups, folds=4)["accuracy"]
        got = fn(features, labels, groups, 4)
        if not isinstance(got, (float, np.floating)):
            raise AssertionError(f"fn must return the mean accuracy as a float, got {type(got).__name__}. {hint}")
        if not abs(float(got) - expected) <= 0.03:
            raise AssertionError(f"on {what}: accuracy {float(got):.3f}, expected {expected:.3f} (within 0.03). "
                                 f"{slip}{hint}")
    passed("your grouped-CV probe matches fit_probe (readable labels, group leakage kept out, "
           "the scaler fitted per fold)")


@register
@exercise(solutions.swap_patch)
def check_swap_patch(fn: Callable[[GPT, torch.Tensor, int, int, int], torch.Tensor], model: GPT | None = None,
                     tokens: torch.Tensor | None = None, position: int | None = None) -> Callable:
    """``fn(model, tokens, i, j, p)``: the logits (V,) at position ``p`` of example ``i`` when the memory it
    reads there is the one example ``j`` produced at ``p - 1`` (positions before ``p`` plain: the probe's
    ``suffix1``).

    Compared with ``analysis.interventions.intervene`` (a patch of rows) on a random FBT model, where
    taking i's own memory, the memory of position p, or a step at position 0 all change the logits;
    and on ``model`` with its ``tokens`` (at least 3 rows) and label ``position`` when given.
    """
    hint = ("j's memory is the last position of j's plain run over tokens[j, :p] (m_{p-1}); i's own prefix "
            "tokens[i, :p] fills the KV cache; the step of token p is told positions=torch.tensor([p]).")
    cases = [(practice_model("fbt"), practice_tokens(), 6)] + ([] if model is None else [(model, tokens, position)])
    for m, toks, p in cases:
        for i, j in ((0, 1), (1, 0), (2, 0)):
            rows = torch.arange(len(toks))
            rows[i] = j
            expected = intervene(m, toks[:, : p + 1], Intervention("patch", rows=rows), p, regime="soft",
                                 prompt_len=p)[i, p]
            tol = 1e-8 if expected.dtype == torch.float64 else 1e-5
            close(fn(m, toks, i, j, p), expected, f"the logits of example {i} reading example {j}'s memory",
                  hint, atol=tol)
    passed("your swap patch matches analysis.interventions on a random FBT model"
           + ("" if model is None else " and on the specimen"))


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
    """``fn(task, generated)``: how many of the generated token ids come before the answer marker
    (``"####"``), or all of them when there is none.

    Compared with what ``trace_lengths`` records, on continuations of every verbosity, one cut off
    before its answer and one cut off inside the marker (``"##"``: no marker, so a search for a
    single ``'#'`` miscounts it).
    """
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
    """``fn(interval, expected_sign)``: a recipe's verdict from its interval (``low``, ``high``, ``seeds``)
    and the side of zero the paper claims (``expected_sign``: +1 higher, -1 lower), as
    ``wb.stats.verdict`` reads it: ``reproduces``, ``does not reproduce``, ``inconclusive``, or
    ``not tested: ...`` with fewer than 3 seeds per arm.

    Compared with ``wb.stats.verdict`` on intervals on both sides of zero, for both signs, one
    that straddles zero, and two from too few seeds.
    """
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
    """``fn(A, steps)``: the top Lyapunov exponent of ``m_t = A m_{t-1}`` (A 2x2) estimated over ``steps`` steps.

    For a constant A it is the log of the spectral radius (the largest |eigenvalue|); compared with that, to 0.01,
    over 1,000 steps on a contracting, an expanding and a rotating A. There ``A^n v`` itself overflows to inf or
    underflows to 0, so only an iteration that renormalises gets a finite answer.
    """
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
