"""Statistics for verdicts: one bootstrap engine and the verdict rule.

``bootstrap`` resamples the unit the data were drawn in, outer unit first, so an interval is as wide as the real
uncertainty and a fixed ``seed`` gives it on any machine."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .validation import check_int, fail

UNITS = ("examples", "groups", "seeds")
STATISTICS = {"mean": np.mean, "median": np.median}
MIN_SEEDS = 3  # a claim about a difference between arms rests on at least this many seeds per arm

Values = np.ndarray | Sequence[float] | Sequence[np.ndarray]


def _per_seed(name: str, values: Values, unit: str, n: int | None) -> np.ndarray:
    """(seeds, examples) float64: one row per seed (``unit="seeds"``), else the one sample as one row."""
    if unit == "seeds":
        rows = [np.asarray(a, dtype=np.float64) for a in values]
        if not rows or any(a.ndim != 1 or len(a) == 0 for a in rows):
            raise ValueError(f"{name} must be a non-empty list of non-empty 1-D arrays")
        if len({len(a) for a in rows}) != 1 or (n is not None and len(rows[0]) != n):
            raise ValueError(f"{name}: seed lengths {[len(a) for a in rows]} differ" + (f" or != {n}" if n else ""))
        return np.stack(rows)
    row = np.asarray(values, dtype=np.float64)
    if row.ndim != 1 or len(row) == 0 or (n is not None and len(row) != n):
        raise ValueError(f"{name} must be non-empty 1-D" + (f" of length {n}" if n else "") + f", got {row.shape}")
    return row[None, :]


def _interval(estimate: float, boot: np.ndarray, level: float) -> dict[str, float]:
    tail = (1.0 - level) / 2.0
    return {"mean": float(estimate), "low": float(np.quantile(boot, tail)), "high": float(np.quantile(boot, 1 - tail))}


def bootstrap(arm: Values, reference: Values | None = None, *, unit: str = "examples",
              groups: np.ndarray | Sequence[int] | None = None, paired_seeds: bool = False, statistic: str = "mean",
              n_boot: int = 2000, seed: int | Sequence[int] | np.random.Generator = 0,
              level: float = 0.95) -> dict[str, float]:
    """``statistic`` of ``arm`` (minus ``reference``) with a percentile-bootstrap interval over ``unit``; ``mean`` is
    the point estimate whatever the statistic."""
    if unit not in UNITS:
        fail("unit", unit, f"must be one of {UNITS}")
    if statistic not in STATISTICS:
        fail("statistic", statistic, f"must be one of {tuple(STATISTICS)}")
    check_int("n_boot", n_boot, 1)
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        fail("level", level, "must be in (0, 1)")
    if (groups is None) != (unit != "groups"):
        raise ValueError("groups is required with unit='groups' and only then")
    if paired_seeds and unit != "seeds":
        raise ValueError("paired_seeds=True belongs to unit='seeds'")
    a = _per_seed("arm", arm, unit, None)
    r = None if reference is None else _per_seed("reference", reference, unit, a.shape[1])
    stat = STATISTICS[statistic]
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n = a.shape[1]
    if unit == "groups":
        if statistic != "mean":
            fail("statistic", statistic, "must be 'mean' with unit='groups'")
        g = np.asarray(groups)
        if g.shape != (n,):
            raise ValueError(f"groups must have shape ({n},), got {g.shape}")
        v = a[0] if r is None else a[0] - r[0]
        _, index = np.unique(g, return_inverse=True)
        sums, sizes = np.bincount(index, weights=v), np.bincount(index).astype(np.float64)
        draws = rng.integers(0, len(sums), size=(n_boot, len(sums)))
        return _interval(v.mean(), sums[draws].sum(1) / sizes[draws].sum(1), level)
    if unit == "examples":
        draws = rng.integers(0, n, size=(n_boot, n))
        if r is not None and statistic == "mean":  # linear: the mean of the paired differences
            diff = a[0] - r[0]
            return _interval(diff.mean(), diff[draws].mean(1), level)
        boot = stat(a[0][draws], axis=1) - (0.0 if r is None else stat(r[0][draws], axis=1))
        return _interval(stat(a[0]) - (0.0 if r is None else stat(r[0])), boot, level)
    r = np.zeros_like(a) if r is None else r
    if paired_seeds:
        if len(a) != len(r):
            raise ValueError(f"paired_seeds=True: arm has {len(a)} seeds, reference {len(r)}")
        pick_seeds = rng.integers(0, len(a), size=(n_boot, len(a), 1))  # the outer unit, shared
        pick_examples = rng.integers(0, n, size=(n_boot, 1, n))
        boot = (stat(a[pick_seeds, pick_examples], axis=2) - stat(r[pick_seeds, pick_examples], axis=2)).mean(1)
        estimate = np.mean(stat(a, axis=1) - stat(r, axis=1))  # per-seed differences: the seeds are paired
    else:
        examples = rng.integers(0, n, size=(n_boot, n))  # shared by every seed of both arms: they are paired
        ref_seeds = rng.integers(0, len(r), size=(n_boot, len(r)))
        arm_seeds = rng.integers(0, len(a), size=(n_boot, len(a)))
        ref_stats = stat(r[:, examples], axis=2).T  # (n_boot, seeds)
        arm_stats = stat(a[:, examples], axis=2).T
        boot = (np.take_along_axis(arm_stats, arm_seeds, axis=1).mean(1)
                - np.take_along_axis(ref_stats, ref_seeds, axis=1).mean(1))
        estimate = np.mean(stat(a, axis=1)) - np.mean(stat(r, axis=1))
    return {**_interval(estimate, boot, level), "seeds": int(min(len(a), len(r)))}


def verdict(interval: dict[str, float], expected_sign: int) -> str:
    """Read the interval against the paper's sign; 'not tested' below ``MIN_SEEDS`` seeds per arm."""
    if expected_sign not in (-1, 1):
        raise ValueError(f"expected_sign={expected_sign!r}: must be -1 or 1")
    if interval.get("seeds", MIN_SEEDS) < MIN_SEEDS:
        return f"not tested: seeds = {interval['seeds']} (needs >= {MIN_SEEDS})"
    if interval["low"] > 0:
        return "reproduces" if expected_sign > 0 else "does not reproduce"
    if interval["high"] < 0:
        return "reproduces" if expected_sign < 0 else "does not reproduce"
    return "inconclusive"
