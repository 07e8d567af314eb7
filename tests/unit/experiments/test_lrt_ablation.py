"""The LRT ablations on language (``lrt_ablation`` and its four recipes): each decision rule reaches every verdict on
synthetic intervals, the negligible band is where gate_control says, equal steps are read off the curves as
stated, and each recipe trains its arms under the run names lrt_vs_baseline shares."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from workbench.experiments import lrt_ablation
from workbench.experiments.core import Context
from workbench.experiments.recipes import (
    gate_control,
    injection_ablation,
    lrt_vs_baseline,
    memory_source,
    source_layer,
)
from workbench.experiments.text_arms import SEEDS

RECIPES = {m.RECIPE.name: m for m in (source_layer, memory_source, injection_ablation, gate_control)}
ARMS = {"source_layer": ("baseline", "lrt_interleaved", "lrt_src3", "lrt_src1"),
        "memory_source": ("baseline", "lrt_interleaved", "lrt_older", "lrt_pooled"),
        "injection_ablation": ("baseline", "lrt_interleaved", "lrt_kv_only", "lrt_residual_only"),
        "gate_control": ("baseline", "gates_only", "lrt_interleaved")}


def iv(low: float, high: float, seeds: int = 3) -> dict[str, float]:
    return {"mean": (low + high) / 2, "low": low, "high": high, "seeds": seeds}


def steps(low: float, high: float, seeds: int = 3) -> dict[str, float]:
    return {"diff_min": low, "diff_max": high, "diff_mean": (low + high) / 2, "seeds": seeds}


ABOVE, BELOW, ACROSS = iv(0.01, 0.05), iv(-0.05, -0.01), iv(-0.02, 0.03)


@pytest.mark.parametrize("first,second,expected", [
    (ABOVE, ABOVE, "reproduces"),
    (ABOVE, BELOW, "does not reproduce: b lies below 0"),
    (BELOW, ACROSS, "does not reproduce: a lies below 0"),  # one below decides, whatever the other says
    (ABOVE, ACROSS, "inconclusive: b contains 0"),
    (ACROSS, ACROSS, "inconclusive: a contains 0; b contains 0"),
    (ABOVE, iv(0.01, 0.05, seeds=2), "not tested: seeds = 2 (needs >= 3)"),
])
def test_every_above_reaches_each_verdict(first, second, expected):
    assert lrt_ablation.every_above({"a": first, "b": second}) == expected


@pytest.mark.parametrize("module,ruled", [(memory_source, ("lrt_older", "lrt_pooled")),
                                          (injection_ablation, ("lrt_kv_only", "lrt_residual_only"))])
def test_both_ablations_must_lie_above_the_reference_lrt(module, ruled):
    a, b = ruled
    others = {"lrt_interleaved": BELOW}  # the reference's own gain is reported, never ruled on
    assert module.decide({a: ABOVE, b: ABOVE, **others}, {}) == "reproduces"
    assert module.decide({a: ABOVE, b: BELOW, **others}, {}) == (f"does not reproduce: {b} - lrt_interleaved lies "
                                                                 "below 0")
    assert module.decide({a: ACROSS, b: ABOVE, **others}, {}) == f"inconclusive: {a} - lrt_interleaved contains 0"


@pytest.mark.parametrize("interval,expected", [(BELOW, "reproduces"), (ABOVE, "does not reproduce"),
                                               (ACROSS, "inconclusive"), (iv(-0.05, -0.01, seeds=2), "not tested")])
def test_source_layer_rules_on_block_3_minus_top_only(interval, expected):
    assert source_layer.decide({"lrt_src3": interval, "lrt_src1": ABOVE, "lrt_interleaved": ABOVE}, {}) \
        .startswith(expected)


N = gate_control.NEGLIGIBLE


@pytest.mark.parametrize("low,high,expected", [
    (-N, N, "holds"),  # the band's edges belong to it
    (-N / 2, N / 4, "holds"),
    (-N / 2, N * 1.5, "inconclusive"),  # straddles an edge
    (-N * 1.5, N * 1.5, "inconclusive"),
    (N * 1.01, N * 3, "fails"),  # the gates alone hurt
    (-N * 3, -N * 1.01, "fails"),  # the gates alone help
])
def test_the_negligible_band(low, high, expected):
    assert gate_control.negligible(iv(low, high)) == expected


def test_the_negligible_band_is_two_hundredths_of_a_bit_per_byte():
    assert N == 0.02 and f"+-{N:g} bits/byte" in gate_control.RECIPE.rule


@pytest.mark.parametrize("low,high,expected", [(-0.1, -0.01, "holds"), (0.01, 0.1, "fails"),
                                               (-0.1, 0.01, "inconclusive"), (-0.1, 0.0, "inconclusive")])
def test_the_memory_gain_at_equal_steps_needs_every_seed_below_0(low, high, expected):
    assert gate_control.memory_gain(steps(low, high)) == expected


@pytest.mark.parametrize("gates,gain,expected", [
    (iv(-N / 2, N / 2), steps(-0.1, -0.05), "reproduces"),
    (iv(-N * 3, -N * 2), steps(-0.1, -0.05), f"does not reproduce: {gate_control.HALF_A} fails"),
    (iv(-N / 2, N / 2), steps(0.05, 0.1), f"does not reproduce: {gate_control.HALF_B} fails"),
    (iv(N * 2, N * 3), steps(0.05, 0.1), f"does not reproduce: {gate_control.HALF_A} fails; {gate_control.HALF_B} "
                                         "fails"),
    (iv(-N / 2, N * 2), steps(-0.1, -0.05), f"inconclusive: {gate_control.HALF_A} is undecided"),
    (iv(-N * 3, -N * 2), steps(-0.1, 0.05), f"does not reproduce: {gate_control.HALF_A} fails"),  # a failure wins
    (iv(-N / 2, N / 2, seeds=2), steps(-0.1, -0.05), "not tested: seeds = 2 (needs >= 3)"),
    (iv(-N / 2, N / 2), steps(-0.1, -0.05, seeds=1), "not tested: seeds = 1 (needs >= 3)"),
])
def test_gate_control_reproduces_only_when_both_halves_hold(gates, gain, expected):
    assert gate_control.decide({"gates_only": gates, "lrt_interleaved": BELOW},
                               {"gates_only": steps(-0.1, 0.1), "lrt_interleaved": gain}) == expected


def write_curve(root, name: str, points: list[tuple[int, float]]) -> None:
    (root / name).mkdir()
    pd.DataFrame({"step": [s for s, _ in points], "val_bpb": [b for _, b in points]}).to_csv(
        root / name / "history.csv", index=False)


def test_equal_steps_compares_both_curves_at_the_shorter_run_s_end(tmp_path):
    """The arm (5 steps) against the reference (10) read at step 5, and what the reference's last 5 bought it; the
    other way round the shorter reference's end is the mark and it has no further steps."""
    write_curve(tmp_path, "arm_s0", [(1, 4.0), (5, 3.0)])
    write_curve(tmp_path, "ref_s0", [(2, 4.0), (4, 3.6), (6, 3.2), (10, 3.0)])
    ctx = Context(None, {}, {}, {}, tmp_path, 1.0)
    row = lrt_ablation.equal_steps(ctx, ["arm_s0"], ["ref_s0"])
    assert row["steps"] == 5 and row["arm_steps"] == 5 and row["reference_steps"] == 10 and row["seeds"] == 1
    assert row["diff_mean"] == pytest.approx(3.0 - 3.4) and row["missing_steps_mean"] == pytest.approx(3.0 - 3.4)
    back = lrt_ablation.equal_steps(ctx, ["ref_s0"], ["arm_s0"])
    assert back["steps"] == 5 and back["diff_mean"] == pytest.approx(0.4) and back["missing_steps_mean"] == 0
    with pytest.raises(ValueError):  # seeds are paired: an arm with a seed missing is an error, not a truncation
        lrt_ablation.equal_steps(ctx, ["arm_s0", "ref_s0"], ["ref_s0"])


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_build_trains_the_arms_under_the_shared_run_names(name):
    runs = {spec.name: spec for spec in RECIPES[name].RECIPE.build(1.0)}
    assert set(runs) == {f"text_{arm}_s{seed}" for arm in ARMS[name] for seed in SEEDS}
    assert RECIPES[name].ARMS == ARMS[name]
    # the baseline and reference LRT are lrt_vs_baseline's runs to the last field, so the runner copies them
    for spec in lrt_vs_baseline.RECIPE.build(1.0):
        assert runs[spec.name].train == spec.train and runs[spec.name].eval_schedule == spec.eval_schedule


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_recipe_states_its_gates_before_training(name):
    recipe = RECIPES[name].RECIPE
    assert recipe.kind == "paper" and recipe.paper and recipe.rule and recipe.finding is not None
    assert recipe.gates[:2] == lrt_vs_baseline.RECIPE.gates  # the baseline's checks, exactly as stated there
    memory = recipe.gates[2]
    assert (memory.name, memory.op, memory.threshold) == ("reference LRT uses its memory", "<", 0.0)
    assert set(RECIPES[name].COMPARISONS) | set(RECIPES[name].COMPARISONS.values()) <= set(ARMS[name])


def results_of(name: str) -> pd.DataFrame:
    """A results.csv as the analysis writes it, with made-up numbers."""
    rows = [{"arm": "baseline", "value": 2.1}]
    for i, (arm, vs) in enumerate(RECIPES[name].COMPARISONS.items()):
        rows.append({"arm": arm, "value": 2.2, "vs": vs, "diff": 0.01 * (i + 1), "ci_low": -0.02, "ci_high": 0.04,
                     "diff_equal_steps": -0.03 * (i + 1)})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_finding_says_each_compared_arm_and_follows_the_numbers(name):
    summary = {"verdict": "inconclusive", "gates": []}
    results = results_of(name)
    said = RECIPES[name].RECIPE.finding(copy.deepcopy(summary), results)
    assert said.sentence.endswith(".") and "nan" not in said.sentence and "Not tested" not in said.sentence
    assert "at matched FLOPs" in said.sentence and "at equal steps" in said.sentence
    changed = results.assign(diff=results["diff"] * 2 + 0.1, diff_equal_steps=results["diff_equal_steps"] - 0.2)
    again = RECIPES[name].RECIPE.finding(copy.deepcopy(summary), changed)
    assert again.ours != said.ours and again.sentence != said.sentence
