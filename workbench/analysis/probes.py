"""Linear probes at every residual depth (FBT paper appendix F; control task of Hewitt & Liang 2019).

Scored by **grouped** cross-validation, so a probe is always tested on contexts it never saw; ``selectivity``
discounts what a probe reads merely because the representation encodes everything."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits

from ..mechanisms import uniform_init_
from ..model import GPT, build_model
from ..stats import bootstrap
from ..tasks.base import Batch, Task
from ..validation import check_choice, check_int, fail
from .features import DEFAULT_CONDITIONS, Condition, check_batch, condition_features, named_conditions, subset

DEFAULT_N = 1600  # examples drawn from a task: 400 held out per fold; accuracy near chance has a ~1-point std error
KINDS = ("classification", "regression")

# DataFrame columns per kind: score, its spread over folds, control score, trivial baseline.
_METRICS = {
    "classification": ("accuracy", "accuracy_std", "control_accuracy", "majority"),
    "regression": ("r2", "r2_std", "control_r2", "mean_baseline"),
}


# ------------------------------------------------------------------------------------------ probes
def fold_assignment(groups: np.ndarray | torch.Tensor | Sequence[int], folds: int = 4) -> np.ndarray:
    """Fold index (n,) under ``GroupKFold``: a group never straddles two folds."""
    from sklearn.model_selection import GroupKFold  # sklearn on first use: import workbench stays light
    groups = np.asarray(groups)
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"groups holds {n_groups} distinct group(s), needs >= 2")
    check_int("folds", folds, 2)
    if folds > n_groups:  # the data are too few, not the folds too many
        raise ValueError(f"too few examples: {n_groups} groups cannot fill folds={folds}; give more or fewer folds")
    fold = np.empty(len(groups), dtype=np.int64)
    for i, (_, test) in enumerate(GroupKFold(n_splits=folds).split(np.zeros(len(groups)), groups=groups)):
        fold[test] = i
    return fold


def _fit_score(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, kind: str,
               C: float, alpha: float, max_iter: int) -> tuple[float, np.ndarray | None]:
    """Held-out score of one probe, and per-example hits (None for regression)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, Ridge
    if kind == "regression":
        return float(Ridge(alpha=alpha).fit(x_train, y_train).score(x_test, y_test)), None
    if len(np.unique(y_train)) < 2:  # one class to learn: the best probe predicts it
        hits = y_test == y_train[0]
        return float(np.mean(hits)), hits
    with warnings.catch_warnings():
        # A fit stopped at max_iter is still a valid regularised probe. tol=1e-3: held-out accuracy
        # stops moving long before sklearn's 1e-4 is met, at half the L-BFGS steps.
        warnings.simplefilter("ignore", ConvergenceWarning)
        probe = LogisticRegression(C=C, tol=1e-3, max_iter=max_iter).fit(x_train, y_train)
    hits = probe.predict(x_test) == y_test
    return float(np.mean(hits)), hits


def _baseline(y_train: np.ndarray, y_test: np.ndarray, kind: str) -> float:
    """The trivial probe: the training majority class, or the training mean (R²)."""
    if kind == "regression":
        residual = np.sum((y_test - y_train.mean()) ** 2)
        total = np.sum((y_test - y_test.mean()) ** 2)
        return float(1.0 - residual / total) if total > 0 else float("nan")
    values, counts = np.unique(y_train, return_counts=True)
    return float(np.mean(y_test == values[np.argmax(counts)]))


PROBE_CS = (0.01, 0.1, 1.0, 10.0)  # inverse L2 strengths nested cross-validation chooses from (a log grid)


def _check_strengths(C: float | Sequence[float]) -> tuple[float, ...]:
    """``C`` as a tuple of candidate strengths (>= 2: nested cross-validation)."""
    candidates = (C,) if isinstance(C, (int, float, np.floating)) and not isinstance(C, bool) else tuple(C)
    if not candidates or not all(isinstance(c, (int, float, np.floating)) and not isinstance(c, bool)
                                 and np.isfinite(c) and c > 0 for c in candidates):
        fail("C", C, "must be > 0 and finite, or a sequence of such")
    return tuple(float(c) for c in candidates)


def _standardised(x: np.ndarray, train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x[train]`` and ``x[test]`` scaled by the training rows alone, so no test example informs the probe."""
    from sklearn.preprocessing import StandardScaler
    scaler = StandardScaler().fit(x[train])
    return scaler.transform(x[train]), scaler.transform(x[test])


def _choose_C(x: np.ndarray, y: np.ndarray, groups: np.ndarray, candidates: tuple[float, ...], inner_folds: int,
              max_iter: int) -> float:
    """Nested CV: the best inner-fold candidate (ties: the strongest penalty)."""
    inner = fold_assignment(groups, min(inner_folds, len(np.unique(groups))))
    scores = np.zeros(len(candidates))
    for f in np.unique(inner):
        train, test = inner != f, inner == f
        x_train, x_test = _standardised(x, train, test)
        for i, c in enumerate(candidates):
            scores[i] += _fit_score(x_train, y[train], x_test, y[test], "classification", c, 1.0, max_iter)[0]
    return candidates[int(np.flatnonzero(scores >= scores.max() - 1e-12)[0])]  # candidates ascend: smallest C


def fit_probe(features: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor,
              groups: np.ndarray | torch.Tensor, *, kind: str = "classification",
              control_labels: np.ndarray | torch.Tensor | None = None, folds: int = 4,
              C: float | Sequence[float] = 0.1, fold_C: Sequence[float] | None = None, inner_folds: int = 3,
              alpha: float = 1.0, max_iter: int = 500) -> dict[str, float | int | list[float]]:
    """Grouped cross-validated linear probe of ``labels`` (n,) from ``features`` (n, D).

    ``C``: one inverse L2 strength (0.1: too weak to memorise ~1,000 examples), or candidates of which **nested** CV
    picks one per outer fold, so the held-out score never saw the choice."""
    check_choice("kind", kind, KINDS)
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"features must be (n, D) and labels (n,), got {x.shape} and {y.shape}")
    if not np.isfinite(x).all():  # scikit-learn would report it from inside the scaler, naming nothing of ours
        bad = np.unique(np.nonzero(~np.isfinite(x))[0])
        raise ValueError(f"features hold NaN or inf in {len(bad)} of {len(x)} examples (first: {bad[:5].tolist()})")
    if kind == "regression":
        y = y.astype(np.float64)
    control = None if control_labels is None else np.asarray(control_labels)
    if control is not None and control.shape != y.shape:
        raise ValueError(f"control_labels must have shape {y.shape}, got {control.shape}")
    candidates = tuple(sorted(_check_strengths(C)))
    if not alpha > 0:
        fail("alpha", alpha, "must be > 0")
    check_int("max_iter", max_iter, 1)
    check_int("inner_folds", inner_folds, 2)
    if fold_C is not None:
        if len(candidates) > 1:
            raise ValueError("give either candidates C=(...) or fold_C=[...], not both")
        if len(fold_C) != folds:
            fail("fold_C", fold_C, f"must give one strength per fold (folds={folds})")
        _check_strengths(tuple(fold_C))
    groups = np.asarray(groups)
    fold = fold_assignment(groups, folds)
    scores, control_scores, baselines, used = [], [], [], []
    held_out = np.zeros(len(y), dtype=bool)
    # One BLAS thread: on ~1,200 x 128 problems threads cost more than they save (35x slower on 2 busy cores).
    with threadpool_limits(limits=1, user_api="blas"):
        for f in range(folds):
            train, test = fold != f, fold == f
            if fold_C is not None:
                c = float(fold_C[f])
            elif len(candidates) > 1 and kind == "classification":
                c = _choose_C(x[train], y[train], groups[train], candidates, inner_folds, max_iter)
            else:
                c = candidates[0]
            used.append(c)
            x_train, x_test = _standardised(x, train, test)
            score, hits = _fit_score(x_train, y[train], x_test, y[test], kind, c, alpha, max_iter)
            scores.append(score)
            if hits is not None:
                held_out[test] = hits
            baselines.append(_baseline(y[train], y[test], kind))
            if control is not None:
                control_scores.append(_fit_score(x_train, control[train], x_test, control[test], kind, c, alpha,
                                                 max_iter)[0])
    score_name, std_name, control_name, baseline_name = _METRICS[kind]
    score = float(np.mean(scores))
    control_score = float(np.mean(control_scores)) if control_scores else float("nan")
    values, counts = np.unique(used, return_counts=True)
    return {score_name: score, std_name: float(np.std(scores, ddof=1)), control_name: control_score,
            "selectivity": score - control_score, baseline_name: float(np.mean(baselines)),
            "fold_scores": scores, "n": len(y), "folds": folds, "C": float(values[np.argmax(counts)]),
            "fold_C": used, "held_out": held_out if kind == "classification" else None}


def regularisation_path(features: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor,
                        groups: np.ndarray | torch.Tensor, Cs: Sequence[float] = PROBE_CS, *,
                        control_labels: np.ndarray | torch.Tensor | None = None, folds: int = 4,
                        max_iter: int = 500, seed: int = 0) -> pd.DataFrame:
    """Held-out accuracy per ``C``: a verdict that flips among ``plausible`` strengths is the penalty's, not the
    representation's."""
    strengths = sorted(_check_strengths(tuple(Cs)))
    rows = []
    for c in strengths:
        result = fit_probe(features, labels, groups, control_labels=control_labels, folds=folds, C=c,
                           max_iter=max_iter)
        interval = group_interval(result["held_out"], groups, seed=seed)
        rows.append({"C": c, "accuracy": result["accuracy"], "accuracy_low": interval["low"],
                     "accuracy_high": interval["high"], "control_accuracy": result["control_accuracy"],
                     "selectivity": result["selectivity"]})
    path = pd.DataFrame(rows)
    best = path["accuracy"].max()
    path["plausible"] = path["accuracy_high"] >= best  # its low end is below its own accuracy, so below the best
    return path


def group_interval(values: np.ndarray | Sequence[float], groups: np.ndarray | torch.Tensor | Sequence[int],
                   reference: np.ndarray | Sequence[float] | None = None, *, n_boot: int = 2000, seed: int = 0,
                   level: float = 0.95) -> dict[str, float]:
    """Mean of ``values`` (minus ``reference``) resampling whole **groups**, whose examples share a context."""
    v = np.asarray(values, dtype=np.float64)
    if reference is not None and np.asarray(reference).shape != v.shape:
        raise ValueError(f"reference must have shape {v.shape}, got {np.asarray(reference).shape}")
    if v.ndim != 1 or np.asarray(groups).shape != v.shape or len(v) == 0:
        raise ValueError(f"values and groups must be non-empty (n,), got {v.shape} and {np.asarray(groups).shape}")
    return bootstrap(v, reference, unit="groups", groups=np.asarray(groups), n_boot=n_boot, seed=seed, level=level)


# ------------------------------------------------------------------------------------------ control task
def control_position(batch: Batch) -> int | None:
    """A label-irrelevant position for the control task (constant within a group, which holds every label), or None."""
    check_batch(batch)
    tokens = batch.tokens[:, : int(batch.label_positions.min())].cpu().numpy()
    _, first, inverse = np.unique(batch.groups.cpu().numpy(), return_index=True, return_inverse=True)
    constant = (tokens == tokens[first[inverse]]).all(axis=0)
    distinct = np.array([len(np.unique(column)) for column in tokens.T], dtype=np.int64)
    candidates = np.flatnonzero(constant & (distinct >= 2))
    if len(candidates) == 0:
        return None
    best = distinct[candidates].max()
    return int(candidates[distinct[candidates] == best][-1])


def control_labels(batch: Batch, position: int, labels: np.ndarray | torch.Tensor | None = None, *,
                   kind: str = "classification", seed: int = 0) -> np.ndarray:
    """Control labels: a fixed random function of the token at ``position``, in the real class proportions."""
    check_choice("kind", kind, KINDS)
    check_int("position", position, 0, batch.tokens.size(1) - 1)
    real = np.asarray(batch.labels if labels is None else labels)
    tokens = batch.tokens[:, position].cpu().numpy()
    values, counts = np.unique(tokens, return_counts=True)
    rng = np.random.default_rng(seed)
    if kind == "regression":
        assigned = rng.choice(real, size=len(values))
    else:
        classes, class_counts = np.unique(real, return_counts=True)
        order = rng.permutation(len(classes))  # random tie-breaking between equally short classes
        classes, deficit = classes[order], class_counts[order].astype(np.float64)
        assigned = np.empty(len(values), dtype=classes.dtype)
        for v in rng.permutation(len(values)):
            c = int(np.argmax(deficit))
            assigned[v] = classes[c]
            deficit[c] -= counts[v]
    return assigned[np.searchsorted(values, tokens)]


# ------------------------------------------------------------------------------------------ the sweep
def random_init_model(model: GPT, seed: int = 0) -> GPT:
    """A randomly initialised twin; every matrix is redrawn, as ``build_model`` zeroes output projections."""
    own = getattr(model, "random_init", None)
    if callable(own):
        return own(seed)
    weight = model.readout_weight
    devices = [weight.device] if weight.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        twin = build_model(model.config, device=weight.device, dtype=weight.dtype)
        for p in [*twin.blocks.parameters(), *twin.mechanism.parameters()]:
            if p.ndim == 2:
                uniform_init_(p)
    return twin.eval()


def probe_layers(model: GPT, task_or_batch: Task | Batch, conditions: Sequence[Condition] = DEFAULT_CONDITIONS, *,
                 n: int | None = None, seed: int = 0, split: str = "val", kind: str = "classification",
                 labels: np.ndarray | torch.Tensor | None = None, control: bool | int = True,
                 random_baseline: bool = True, folds: int = 4, C: float | Sequence[float] = 0.1,
                 alpha: float = 1.0, max_iter: int = 500, batch_size: int = 1024) -> pd.DataFrame:
    """Probe a task's label at every depth under every prefill condition; the twin and the control use the trained
    probe's strengths, fold by fold (a weaker penalty lifts them too)."""
    check_choice("kind", kind, KINDS)
    names = list(named_conditions(conditions))
    if isinstance(task_or_batch, Task):
        batch = task_or_batch.sample(DEFAULT_N if n is None else n, seed=seed, split=split)
        task_name = task_or_batch.name
    else:
        check_batch(task_or_batch)
        if n is not None:
            check_int("n", n, 1, len(task_or_batch))
        batch, task_name = task_or_batch if n is None else subset(task_or_batch, torch.arange(n)), "batch"
    target = batch.labels if labels is None else labels
    if target is None:
        raise ValueError("task_or_batch has no labels: pass labels=")
    target = np.asarray(target.cpu() if isinstance(target, torch.Tensor) else target)
    if target.shape != (len(batch),):
        raise ValueError(f"labels must have shape ({len(batch)},), got {target.shape}")
    control_target = _control_target(batch, control, target, kind, seed)
    groups = batch.groups.cpu().numpy()
    fold_assignment(groups, folds)  # fail on bad folds before any forward
    _check_strengths(C)
    models = [("trained", model)] + ([("random init", random_init_model(model, seed))] if random_baseline else [])
    fits = {}
    for model_name, m in models:
        feats = condition_features(m, batch, conditions, batch_size=batch_size)
        for condition in names:
            for layer, x in enumerate(feats[condition]):
                chosen = fits["trained", condition, layer]["fold_C"] if model_name == "random init" else None
                fits[model_name, condition, layer] = fit_probe(
                    x.numpy(), target, groups, kind=kind, control_labels=control_target, folds=folds,
                    C=C if chosen is None else 1.0, fold_C=chosen, alpha=alpha, max_iter=max_iter)
    rows = []
    for (model_name, condition, layer), result in fits.items():
        row = {"model": model_name, "task": task_name, "condition": condition, "layer": layer, "n": len(batch),
               **{k: result[k] for k in (*_METRICS[kind], "selectivity")}}
        if kind == "classification":
            interval = group_interval(result["held_out"], groups, seed=seed)
            row.update(C=result["C"], accuracy_low=interval["low"], accuracy_high=interval["high"])
            twin = fits.get(("random init", condition, layer)) if model_name == "trained" else None
            if twin is not None:
                diff = group_interval(result["held_out"], groups, twin["held_out"], seed=seed)
                row.update(twin_accuracy=twin["accuracy"], twin_selectivity=diff["mean"], twin_low=diff["low"],
                           twin_high=diff["high"])
        rows.append(row)
    score_name, std_name, control_name, baseline_name = _METRICS[kind]
    columns = ["model", "task", "condition", "layer", "n", score_name, std_name, control_name, "selectivity",
               baseline_name]
    if kind == "classification":
        columns += ["C", "accuracy_low", "accuracy_high"]
        columns += ["twin_accuracy", "twin_selectivity", "twin_low", "twin_high"] if random_baseline else []
    return pd.DataFrame(rows, columns=columns)


def _control_target(batch: Batch, control: bool | int, labels: np.ndarray, kind: str, seed: int) -> np.ndarray | None:
    """Control labels for ``probe_layers``' ``control`` (None: no control)."""
    if control is False:
        return None
    if control is True:
        position = control_position(batch)
        return None if position is None else control_labels(batch, position, labels, kind=kind, seed=seed)
    check_int("control", control, 0, int(batch.label_positions.min()) - 1)
    return control_labels(batch, int(control), labels, kind=kind, seed=seed)
