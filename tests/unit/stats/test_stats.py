"""The one bootstrap engine, the exact paired test and the Wilson interval: known answers and reductions."""

from __future__ import annotations

import numpy as np
import pytest

from workbench import stats
from workbench.analysis.probes import group_interval
from workbench.analysis.traces import paired_hierarchical_difference
from workbench.evaluation import hierarchical_difference, paired_difference


def _sample(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    return a, a + 0.5 + 0.3 * rng.normal(size=n)


def test_an_interval_brackets_its_estimate_and_a_seed_fixes_it():
    a, b = _sample()
    one = stats.bootstrap(b, a, n_boot=500, seed=3)
    assert one == stats.bootstrap(b, a, n_boot=500, seed=3)
    assert one["low"] < one["mean"] < one["high"] and one["mean"] == pytest.approx((b - a).mean(), abs=1e-12)
    assert stats.bootstrap(b, a, n_boot=500, seed=4) != one
    median = stats.bootstrap(b, statistic="median", n_boot=500)
    assert median["mean"] == pytest.approx(np.median(b)) and median["low"] <= median["mean"] <= median["high"]
    constant = stats.bootstrap(np.full(20, 2.0), np.full(20, 0.5))
    assert constant == {"mean": 1.5, "low": 1.5, "high": 1.5}


def test_the_units_reduce_to_one_another_where_they_must():
    a, b = _sample()
    examples = stats.bootstrap(b, a, n_boot=400, seed=1)
    # one seed per arm: the seeds unit is the paired example bootstrap (same draws)
    seeds = stats.bootstrap([b], [a], unit="seeds", n_boot=400, seed=1)
    assert seeds["seeds"] == 1
    assert [seeds[k] for k in ("mean", "low", "high")] == pytest.approx([examples[k] for k in ("mean", "low", "high")])
    # every example its own group: the groups unit is the example bootstrap
    groups = stats.bootstrap(b, a, unit="groups", groups=np.arange(len(a)), n_boot=400, seed=1)
    assert [groups[k] for k in ("mean", "low", "high")] == pytest.approx([examples[k] for k in ("mean", "low", "high")])
    # constant examples: only the seeds vary, and the interval is the bootstrap of the seed means
    arm = [np.full(10, v) for v in (1.0, 2.0, 3.0)]
    seed_only = stats.bootstrap(arm, [np.zeros(10)] * 3, unit="seeds", n_boot=2000, seed=0)
    assert seed_only["mean"] == pytest.approx(2.0) and 1.0 <= seed_only["low"] < 2.0 < seed_only["high"] <= 3.0
    # the same runs under two identical conditions: paired seeds give exactly zero
    same = stats.bootstrap(arm, arm, unit="seeds", paired_seeds=True, statistic="median")
    assert same == {"mean": 0.0, "low": 0.0, "high": 0.0, "seeds": 3}


def test_groups_widen_the_interval_when_groups_share_their_value():
    """Examples in blocks of 10 that share one value are 6 draws, not 60: the group interval is wider."""
    rng = np.random.default_rng(0)
    values = np.repeat(rng.normal(size=6), 10)
    groups = np.repeat(np.arange(6), 10)
    by_group = stats.bootstrap(values, unit="groups", groups=groups)
    by_example = stats.bootstrap(values)
    assert by_group["high"] - by_group["low"] > 2 * (by_example["high"] - by_example["low"])


def test_the_named_intervals_are_the_engine():
    a, b = _sample()
    ref, arm = [a, a + 0.1], [b, b - 0.1]
    assert paired_difference(a, b, seed=2) == stats.bootstrap(b, a, seed=2)
    assert hierarchical_difference(ref, arm, seed=2) == stats.bootstrap(arm, ref, unit="seeds", seed=2)
    assert group_interval(b, np.arange(60) // 3, a, seed=2) == stats.bootstrap(b, a, unit="groups",
                                                                                groups=np.arange(60) // 3, seed=2)
    assert paired_hierarchical_difference(ref, arm, "median", seed=2) == stats.bootstrap(
        arm, ref, unit="seeds", paired_seeds=True, statistic="median", seed=2)


@pytest.mark.parametrize("call,message", [
    (lambda: stats.bootstrap([1.0], unit="folds"), "unit="),
    (lambda: stats.bootstrap([1.0], statistic="mode"), "statistic="),
    (lambda: stats.bootstrap([1.0], n_boot=0), "n_boot="),
    (lambda: stats.bootstrap([1.0], level=1.0), "level="),
    (lambda: stats.bootstrap([1.0], unit="groups"), "groups.*unit='groups'"),
    (lambda: stats.bootstrap([1.0], groups=[0]), "groups.*unit='groups'"),
    (lambda: stats.bootstrap([1.0, 2.0], unit="groups", groups=[0, 1], statistic="median"), "statistic="),
    (lambda: stats.bootstrap([1.0], paired_seeds=True), "paired_seeds"),
    (lambda: stats.bootstrap([[1.0], [2.0]], [[1.0]], unit="seeds", paired_seeds=True), "paired_seeds=True.*reference"),
    (lambda: stats.bootstrap([1.0, 2.0], [1.0]), r"reference.*\(1,\)"),
    (lambda: stats.bootstrap([[1.0], [2.0, 3.0]], unit="seeds"), r"arm.*\[1, 2\]"),
    (lambda: stats.verdict({"low": 0, "high": 1}, 0), "expected_sign="),
])
def test_bad_input_names_the_parameter(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_verdict_reads_the_interval_against_the_predicted_sign():
    assert stats.verdict({"low": 0.1, "high": 0.3, "seeds": 3}, 1) == "reproduces"
    assert stats.verdict({"low": 0.1, "high": 0.3, "seeds": 3}, -1) == "does not reproduce"
    assert stats.verdict({"low": -0.1, "high": 0.3, "seeds": 3}, 1) == "inconclusive"
    assert stats.verdict({"low": 0.1, "high": 0.3, "seeds": 2}, 1).startswith("not tested: seeds = 2")
