"""Exercise checks on probes (05) and interventions (05b)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from workbench.analysis.cache import ActivationCache, run_with_cache
from workbench.analysis.interventions import Intervention, answer_numbers, intervene
from workbench.analysis.probes import fit_probe, fold_assignment, group_interval
from workbench.model import GPT
from workbench.schedules import Multipass

from . import solutions
from .framework import as_number, close, exercise, passed, practice_model, practice_tokens, register


def _probe_data(seed: int, case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and groups: ``readable``; ``leaky`` (labels readable only within seen groups); ``scale`` (a
    scaler fitted on all rows takes its scale from a 1000x held-out group and the fold drops to chance)."""
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
    """``fn(features, labels, groups, folds)``: the mean held-out accuracy of an L2 logistic probe (``C=0.1``) under
    ``folds``-fold grouped cross-validation, features standardised per fold on the training rows only."""
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
    """``fn(model, tokens, i, j, p)``: the logits (V,) at position ``p`` of example ``i`` when the memory it reads there
    is the one example ``j`` produced at ``p - 1`` (positions before ``p`` plain: the probe's ``suffix1``)."""
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


def _majority_cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Labels and groups where a baseline that sees held-out labels, or assumes balanced labels, errs."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(24), 10)
    fold = fold_assignment(groups, 4)
    labels = np.zeros(len(groups), dtype=int)
    for f in range(4):
        rows = np.flatnonzero(fold == f)
        labels[rows if f == 0 else rng.choice(rows, 25, replace=False)] = 1
    three = rng.choice(3, size=len(groups), p=[0.45, 0.35, 0.2])
    return {"labels whose held-out fold flips the training majority": (labels, groups),
            "three labels (shares 0.45, 0.35, 0.2)": (three, groups)}


def _fold_majorities(labels: np.ndarray, groups: np.ndarray, folds: int) -> dict[str, float]:
    """The usual slips: the majority of all rows, or of the held-out rows, scored on each fold."""
    fold = fold_assignment(groups, folds)
    overall = np.bincount(labels).argmax()
    return {"all": float(np.mean([np.mean(labels[fold == f] == overall) for f in range(folds)])),
            "test": float(np.mean([np.bincount(labels[fold == f]).max() / np.sum(fold == f) for f in range(folds)]))}


@register
@exercise(solutions.majority_rate)
def check_majority_rate(fn: Callable[[np.ndarray, np.ndarray, int], float]) -> Callable:
    """``fn(labels, groups, folds)``: the held-out accuracy of always guessing the training rows' most frequent label,
    averaged over ``folds`` grouped folds: the baseline a probe must beat (``fit_probe``'s ``majority``)."""
    hint = ("Split with GroupKFold(n_splits=folds).split(labels, labels, groups); in each fold guess the label "
            "most frequent among labels[train] and score that guess on labels[test]; average the folds.")
    for what, (labels, groups) in _majority_cases().items():
        expected = fit_probe(np.zeros((len(labels), 1)), labels, groups, folds=4)["majority"]
        got = as_number(fn(labels.copy(), groups.copy(), 4), what, hint)
        if abs(got - expected) <= 1e-9:
            continue
        slips = _fold_majorities(labels, groups, 4)
        if abs(got - slips["all"]) <= 1e-9:
            raise AssertionError(f"on {what}: {got:.3f} is the majority of all rows, held-out ones included "
                                 f"(expected {expected:.3f}): the guess may use the training rows only, as a probe "
                                 "does. " + hint)
        if abs(got - slips["test"]) <= 1e-9:
            raise AssertionError(f"on {what}: {got:.3f} is each held-out fold's own majority, guessed from the test "
                                 f"rows (expected {expected:.3f}): a baseline that sees the labels it is scored on. "
                                 + hint)
        if abs(got - 1 / len(np.unique(labels))) <= 1e-9:
            raise AssertionError(f"on {what}: {got:.3f} is one over the number of labels (expected {expected:.3f}): "
                                 "the majority rate is not 1 / (number of labels) unless the labels are balanced. "
                                 + hint)
        raise AssertionError(f"on {what}: majority rate {got:.3f}, expected {expected:.3f}. {hint}")
    passed("your majority rate matches fit_probe's (the training rows' majority, scored on each held-out fold)")


def _cache_alternatives(cache: ActivationCache, depth: int, k: int, positions: torch.Tensor
                        ) -> list[tuple[torch.Tensor, str]]:
    """The usual slips' features, each with what to say when an answer equals it."""
    rows, L, n = torch.arange(len(positions)), cache.n_layer, cache.n_passes
    name = "hook_input" if depth == 0 else f"blocks.{depth - 1}.hook_resid_post"
    out = []
    if depth == 0:
        out.append((cache.pass_(k)["hook_embed"][rows, positions],
                    "the token's embedding before fusion (hook_embed): depth 0 is hook_input, the input after fusion"))
    if depth < L:
        out.append((cache.pass_(k)[f"blocks.{depth}.hook_resid_post"][rows, positions],
                    f"block {depth}'s output: depths are off by one (depth l is blocks.(l-1).hook_resid_post, "
                    "depth 0 hook_input)"))
    if depth == L:
        out.append((cache.pass_(k)["hook_final"][rows, positions],
                    "hook_final, the top state after the final norm: the top depth is the last block's output, "
                    f"blocks.{L - 1}.hook_resid_post"))
    if k < n:
        out.append((cache.pass_(k + 1)[name][rows, positions],
                    f"pass {k + 1}: passes are numbered from 1 (cache.pass_(k)), not from 0"))
    if k != n:
        out.append((cache[name][rows, positions], "the last pass: cache[name] is the last pass, cache.pass_(k) pass k"))
    out.append((cache.pass_(k)[name][:, positions[0]],
                "example 0's position for every example: read each example's own position"))
    return out


@register
@exercise(solutions.layer_features)
def check_layer_features(fn: Callable[[ActivationCache, int, int, torch.Tensor], torch.Tensor]) -> Callable:
    """``fn(cache, depth, k, positions)``: the residual features (B, D) at ``depth`` (0: ``hook_input``; l: block l-1's
    output) in pass ``k`` (from 1) of a ``run_with_cache`` cache, each example read at its own ``positions[b]``."""
    hint = ("Depth 0 is cache.pass_(k)['hook_input'], depth l the output of block l - 1, "
            "f'blocks.{l - 1}.hook_resid_post'; index the (B, T, D) tensor with one position per row: "
            "acts[torch.arange(B), positions].")
    model, tokens = practice_model("fbt"), practice_tokens()
    positions = torch.tensor([6, 3, 8])
    schedule = Multipass(3)
    _, cache = run_with_cache(model, tokens, schedule)
    _, kept = run_with_cache(model, tokens, schedule, positions=positions[:, None])
    for k in range(1, cache.n_passes + 1):
        for depth in range(model.config.n_layer + 1):
            name = "hook_input" if depth == 0 else f"blocks.{depth - 1}.hook_resid_post"
            expected = kept.pass_(k)[name]
            got = fn(cache, depth, k, positions.clone())
            what = f"depth {depth}, pass {k}"
            if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.allclose(got, expected):
                for alternative, slip in _cache_alternatives(cache, depth, k, positions):
                    if torch.allclose(got, alternative):
                        raise AssertionError(f"{what}: you read {slip}. {hint}")
            close(got, expected, what, hint)
    passed("your features match run_with_cache's at every depth and pass, each example at its own position")


# ---------------------------------------------------------------------------------------------- 05b: effects, intervals
def _flip_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Clean and edited logits (B, V), answers and foils, where wrong clean answers and a third token's rise mislead."""
    g = torch.Generator().manual_seed(0)
    B, V = 200, 29
    clean = torch.randn(B, V, generator=g, dtype=torch.float64)
    answers = torch.randint(0, V, (B,), generator=g)
    foils = (answers + torch.randint(1, V, (B,), generator=g)) % V
    noisy = clean + 1.5 * torch.randn(B, V, generator=g, dtype=torch.float64)
    third = clean.clone()
    others = [[v for v in range(V) if v not in (int(a), int(f))] for a, f in zip(answers, foils)]
    bump = torch.tensor([row[int(i)] for row, i in zip(others, torch.randint(0, V - 2, (B,), generator=g))])
    third[torch.arange(B), bump] += 6.0
    third += 0.5 * torch.randn(B, V, generator=g, dtype=torch.float64)
    return {"random logits and a noisy edit": (clean, noisy, answers, foils),
            "an edit that lifts a third token": (clean, third, answers, foils)}


@register
@exercise(solutions.flip_rate)
def check_flip_rate(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], float]) -> Callable:
    """``fn(clean, edited, answers, foils)``: the share of examples whose prediction, the answer against its foil (not
    an argmax over the vocabulary), differs between the clean and edited logits (B, V); a tie goes to the answer."""
    hint = ("Per example, the prediction is answer-vs-foil: clean[b, answers[b]] >= clean[b, foils[b]]; the same "
            "on the edited logits; a flip is a changed prediction, either way; return the share that flipped.")
    for what, (clean, edited, answers, foils) in _flip_cases().items():
        _, before = answer_numbers(clean, answers, foils)
        _, after = answer_numbers(edited, answers, foils)
        expected = float(np.mean(before != after))
        got = as_number(fn(clean.clone(), edited.clone(), answers.clone(), foils.clone()), what, hint)
        if abs(got - expected) <= 1e-9:
            continue
        rows = torch.arange(len(answers))
        right_before = (clean[rows, answers] >= clean[rows, foils]).numpy()
        right_after = (edited[rows, answers] >= edited[rows, foils]).numpy()
        slips = {
            "wrong": (float(np.mean(~right_after)), "the share answering wrong after the edit: an example already "
                      "wrong before it has not flipped; a flip is a changed prediction"),
            "one way": (float(np.mean(right_before & ~right_after)), "only answers that went from right to wrong: "
                        "a flip counts either way"),
            "argmax": (float((clean.argmax(1) != edited.argmax(1)).double().mean()), "changes of the argmax over "
                       "the whole vocabulary: the recipe reads the answer against its foil"),
        }
        for value, slip in slips.values():
            if abs(got - value) <= 1e-9:
                raise AssertionError(f"on {what}: {got:.3f} is {slip} (expected {expected:.3f}). {hint}")
        raise AssertionError(f"on {what}: flip rate {got:.3f}, expected {expected:.3f}. {hint}")
    passed("your flip rate matches the package's (answer against foil, a changed prediction either way)")


def _interval_cases() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Values, reference and groups (40 of 8) where resampling examples, or unpaired values, gets the width wrong."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 8)
    shared = rng.normal(size=40)[groups] + 0.1 * rng.normal(size=len(groups))
    reference = rng.normal(size=len(groups))
    paired = reference + 0.3 + 0.2 * rng.normal(size=len(groups))
    return {"values shared within groups": (shared, np.zeros(len(groups)), groups),
            "values paired with their references": (paired, reference, groups)}


@register
@exercise(solutions.paired_interval)
def check_paired_interval(fn: Callable[[np.ndarray, np.ndarray, np.ndarray, int, int], dict]) -> Callable:
    """``fn(values, reference, groups, n_boot, seed)``: ``{"mean", "low", "high"}``: the mean of ``values - reference``
    and its 95 % percentile-bootstrap interval resampling whole groups (endpoints within a tenth of the width)."""
    hint = ("Take the difference per example first (paired); then, n_boot times, draw as many groups as there are, "
            "with replacement, and average the differences of every example of the drawn groups; low and high are "
            "the 2.5th and 97.5th percentiles of those means.")
    n_boot = 4000
    for what, (values, reference, groups) in _interval_cases().items():
        expected = group_interval(values, groups, reference, n_boot=n_boot, seed=1)
        got = fn(values.copy(), reference.copy(), groups.copy(), n_boot, 0)
        if not isinstance(got, dict) or not {"mean", "low", "high"} <= set(got):
            raise AssertionError(f"{what}: fn must return a dict with 'mean', 'low' and 'high', got {got!r}. {hint}")
        mean, low, high = (as_number(got[key], f"{what}: {key}", hint) for key in ("mean", "low", "high"))
        if abs(mean - expected["mean"]) > 1e-9:
            raise AssertionError(f"{what}: mean {mean:.4f}, expected {expected['mean']:.4f}, the mean of values - "
                                 f"reference over all examples. {hint}")
        width, tol = expected["high"] - expected["low"], 0.1 * (expected["high"] - expected["low"])
        if abs(low - expected["low"]) <= tol and abs(high - expected["high"]) <= tol:
            continue
        said = (f"{what}: interval [{low:.3f}, {high:.3f}], expected about [{expected['low']:.3f}, "
                f"{expected['high']:.3f}]")
        if high - low < 0.7 * width:
            raise AssertionError(f"{said}: far too narrow. Examples of a group share their context: resample whole "
                                 f"groups, not examples. {hint}")
        if high - low > 1.4 * width:
            raise AssertionError(f"{said}: far too wide. The values are paired with their references: resample one "
                                 f"difference per example, not values and references apart. {hint}")
        raise AssertionError(f"{said}. {hint}")
    passed("your paired interval matches group_interval (whole groups resampled, one difference per example)")
