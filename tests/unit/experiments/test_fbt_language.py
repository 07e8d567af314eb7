"""How fbt_text scores its text specimens (``fbt_language``) and how it decides (``recipes.fbt_text``): the
measures a model gets, what the continuation scores, invariants of the scores on small float64 models, and the
decision rule and compute count on made-up intervals."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.checkpoint import load_metrics
from workbench.config import ModelConfig
from workbench.experiments import fbt_language as lang
from workbench.experiments.common import step_flops
from workbench.experiments.core import Context
from workbench.experiments.recipes import fbt_fixed_point_text, fbt_pass_mixes, fbt_prefill_gain, fbt_regimes, fbt_text
from workbench.experiments.store import checkpoints_root
from workbench.model import build_model
from workbench.tasks import Batch


def small_model(mechanism: str, seq_len: int) -> torch.nn.Module:
    torch.manual_seed(0)
    extra = {"mechanism": "fbt", "fbt_fusion": "additive", "tie_embeddings": True} if mechanism == "fbt" else {}
    cfg = ModelConfig(vocab_size=19, n_layer=2, n_head=2, n_embd=16, seq_len=seq_len, **extra)
    return build_model(cfg).double().eval()


def windows(n: int, length: int, vocab: int = 19) -> Batch:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, vocab, (n, length + 1), generator=g)
    return Batch(tokens=tokens[:, :-1], targets=tokens[:, 1:], lengths=torch.full((n,), length),
                 groups=torch.arange(n), texts=[""] * n)


def test_a_model_without_feedback_gets_only_the_measures_that_differ():
    assert set(lang.measures(feedback=False)) == {"pass1", "exact", "standard"}
    full = lang.measures((1, 4))
    assert {"pass1", "pass2", "pass3", "exact", "standard", "soft", "fused1", "fused4"} == set(full)
    assert [name for name, (_, cont) in full.items() if cont] == ["standard", "soft", "fused1", "fused4"]


def test_the_continuation_scores_only_the_bytes_after_the_prompt():
    batch = windows(3, 12)
    cont = lang.continuation(batch, prompt_len=5)
    assert (cont.targets[:, :4] == -1).all()
    assert torch.equal(cont.targets[:, 4:], batch.targets[:, 4:]) and torch.equal(cont.tokens, batch.tokens)


def test_score_run_on_a_plain_model_reads_the_same_whole_window_and_prompt_independent_continuation():
    model = small_model("none", 16)
    batch = windows(5, 16)
    scores = lang.score_run(model, batch, regime_windows=3, prompt_len=6)
    assert set(scores["measure"]) == {"pass1", "exact", "standard"}
    wide = scores.pivot(index="example", columns="measure", values="bpb")
    np.testing.assert_allclose(wide["exact"], wide["pass1"], rtol=0, atol=1e-10)  # no memory: one forward
    assert wide["standard"].notna().sum() == 3 and wide["pass1"].notna().sum() == 5
    # STANDARD's continuation is the plain forward's per-token loss after the prompt, in bits
    logits = model(batch.tokens[:3]).detach()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.targets[:3], reduction="none")[:, 5:]
    np.testing.assert_allclose(wide["standard"].dropna(), nll.mean(1).numpy() / math.log(2), atol=1e-10)


def test_score_run_on_an_fbt_model_gets_every_measure_and_pass1_is_the_plain_forward():
    model = small_model("fbt", 16)
    batch = windows(4, 16)
    scores = lang.score_run(model, batch, prefill=(1, 2), regime_windows=2, prompt_len=6)
    wide = scores.pivot(index="example", columns="measure", values="bpb")
    assert {"pass2", "pass3", "soft", "fused1", "fused2"} <= set(wide.columns)
    assert wide["fused2"].notna().sum() == 2 and wide["pass3"].notna().sum() == 4
    assert (wide["pass2"] - wide["pass1"]).abs().max() > 1e-6  # the compared conditions differ by construction


@pytest.mark.parametrize(("kwargs", "name"), [({"regime_windows": 0}, "regime_windows"),
                                              ({"prompt_len": 16}, "prompt_len"), ({"prompt_len": 0}, "prompt_len")])
def test_score_run_rejects_bad_input_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        lang.score_run(small_model("none", 16), windows(2, 16), **{"prompt_len": 6, **kwargs})


def test_difference_pairs_windows_and_seeds_and_feedback_used_reads_pass2_minus_pass1():
    rows = []
    for seed in (0, 1, 2):
        for example in range(40):
            rows += [{"arm": "a", "seed": seed, "example": example, "measure": "pass1", "bpb": 2.0 + 0.01 * example},
                     {"arm": "a", "seed": seed, "example": example, "measure": "pass2", "bpb": 1.9 + 0.01 * example}]
    scores = pd.DataFrame(rows)
    used = lang.feedback_used(scores, "a")
    assert used["mean"] == pytest.approx(-0.1) and used["high"] < 0
    assert len(lang.per_seed(scores, "a", "pass1")) == 3


@pytest.mark.parametrize(("equal", "matched", "head"), [
    ((-0.2, -0.1), (0.1, 0.2), "reproduces: at equal tokens FBT is better; at matched compute (tokens x mean "
                               "passes) worse"),
    ((0.1, 0.2), (-0.1, 0.1), "does not reproduce: at equal tokens FBT is worse; at matched compute (tokens x "
                              "mean passes) indistinguishable"),
    ((-0.1, 0.1), (-0.2, -0.1), "inconclusive: at equal tokens FBT is indistinguishable"),
])
def test_the_decision_rule_reads_equal_tokens_and_reports_matched_compute(equal, matched, head):
    verdict = fbt_text.decide({"low": equal[0], "high": equal[1]}, {"low": matched[0], "high": matched[1]})
    assert verdict.startswith(head)


def test_training_flops_count_the_plain_phase_at_one_pass_and_the_rest_at_the_mean_passes():
    cfg = fbt_text.fbt_config("glu_mix", 100, 0)
    single = step_flops(cfg.replace(schedule="single", feedback_start=0.0, prefix_mixin=0.0,
                                    prefix_draw="sequence"))
    mean_passes = sum(k * p for k, p in fbt_text.TRAININGS["mix"][0].items())
    assert fbt_text.training_flops(cfg) / (100 * single) == pytest.approx(0.2 + 0.8 * mean_passes, rel=1e-9)


def test_every_arm_is_trained_on_every_seed_and_the_matched_baselines_get_more_steps():
    specs = fbt_text.build(1.0)
    assert sorted(spec.name for spec in specs) == sorted(
        fbt_text.run_name(arm, seed) for arm in fbt_text.ARMS for seed in fbt_text.seeds_of(arm))
    assert fbt_text.seeds_of(lang.PAPER_ARM) == lang.LONG_SEEDS == fbt_text.seeds_of(lang.CONTROL[0])
    assert fbt_text.seeds_of("glu_mix_x3") == fbt_text.SEEDS
    smoke = fbt_text.build(0.05)  # code paths, not verdicts: the smoke arms on SEEDS, however many seeds landed
    assert {fbt_text.arm_of(s.name) for s in smoke} == set(fbt_text.SMOKE_ARMS)
    assert len(smoke) == len(fbt_text.SMOKE_ARMS) * len(fbt_text.SEEDS)
    by_name = {spec.name: spec.train for spec in specs}
    assert by_name["base_mix_flops_s0"].steps > by_name["base_s0"].steps == by_name["glu_mix_s0"].steps
    assert fbt_text.arm_of("base_mix_flops_s2") == "base_mix_flops"
    assert fbt_text.arm_of("glu_mix_x9_s1") == "glu_mix_x9" == lang.PAPER_ARM
    for factor in lang.LONGS:  # every longer multiple trains the paper's arm and both its baselines, as long as it
        assert by_name[f"glu_mix_x{factor}_s0"].steps == by_name[f"base_x{factor}_s0"].steps == (
            factor * by_name["glu_mix_s0"].steps)
        assert by_name[f"base_mix_flops_x{factor}_s0"].steps > by_name[f"base_x{factor}_s0"].steps
    assert fbt_text.references(lang.PAPER_ARM) == ("base_x9", "base_mix_flops_x9") == lang.CONTROL[::-1]
    assert fbt_text.references("add_random") == ("base", "base_random_flops")
    assert by_name["add_mix_s1"].model["fbt_fusion"] == "additive" and by_name["base_s0"].model.get(
        "mechanism", "none") == "none"


def synthetic_scores(values: dict[str, float], seed_shift: float = 0.5, n: int = 30, arm: str = "a") -> pd.DataFrame:
    """Scores of one arm: each measure's value plus a per-window wiggle and a large per-seed shift shared by every
    measure of that seed (what two measures of the same weights look like)."""
    rows = []
    for seed in (0, 1, 2):
        for example in range(n):
            wiggle = 0.01 * ((example * 7) % 5)
            rows += [{"arm": arm, "seed": seed, "example": example, "measure": m,
                      "bpb": v + wiggle + seed_shift * seed} for m, v in values.items()]
    return pd.DataFrame(rows)


def test_a_difference_of_two_arms_pairs_their_seeds_and_refuses_arms_on_other_seeds():
    # two arms whose runs of one seed share a large shift (same initial draw, same batches): paired by seed, the
    # shift cancels and a 0.02 gap is told apart; arm b's seeds resampled apart from a's would hide it
    scores = pd.concat([synthetic_scores({"exact": 2.0}, arm="a"), synthetic_scores({"exact": 1.98}, arm="b")])
    paired = lang.difference(scores, "b", "exact", "a", "exact")
    assert paired["mean"] == pytest.approx(-0.02) and paired["high"] < 0
    same = lang.contrast(scores.assign(arm="a", measure=scores["arm"]), "a", {"b": 1.0, "a": -1.0})
    assert paired == pytest.approx(same)  # the same resampling as two measures of one run's weights
    assert lang.feedback_used(synthetic_scores({"pass1": 2.0, "pass2": 1.98}), "a")["high"] < 0
    fewer = scores[~((scores["arm"] == "b") & (scores["seed"] == 2))]
    with pytest.raises(ValueError, match="reference_arm"):
        lang.difference(fewer, "b", "exact", "a", "exact")


def test_the_seed_gate_counts_the_fewest_seeds_scored_of_the_paper_arm_and_its_baselines():
    arms = (lang.PAPER_ARM, *lang.CONTROL)
    scores = pd.concat([synthetic_scores({"pass1": 2.0, "pass2": 1.9, "standard": 2.0}, arm=arm) for arm in arms])
    assert lang.seeds_trained(scores) == 3
    assert lang.seeds_trained(scores[~((scores["arm"] == lang.CONTROL[0]) & (scores["seed"] == 0))]) == 2
    assert lang.SEED_GATE.threshold == lang.LONG_SEED_TARGET == len(lang.LONG_SEEDS)


def test_prefill_gains_split_the_gain_into_the_first_pass_and_the_rest():
    scores = synthetic_scores({"standard": 2.0, "fused1": 1.9, "fused2": 1.88, "fused4": 1.87})
    assert fbt_prefill_gain.depths(scores) == [1, 2, 4]
    found = fbt_prefill_gain.gains(scores, "a")
    assert found["first"]["mean"] == pytest.approx(0.1) and found["further"]["mean"] == pytest.approx(0.03)
    assert found["first_minus_further"]["mean"] == pytest.approx(0.07) and found["gain4"]["mean"] == pytest.approx(0.13)
    assert fbt_prefill_gain.decide(found).startswith("reproduces")
    late = fbt_prefill_gain.gains(synthetic_scores({"standard": 2.0, "fused1": 1.98, "fused4": 1.8}), "a")
    assert fbt_prefill_gain.decide(late).startswith("does not reproduce: further passes")
    hurts = fbt_prefill_gain.gains(synthetic_scores({"standard": 2.0, "fused1": 2.1, "fused4": 2.1}), "a")
    assert fbt_prefill_gain.decide(hurts) == "does not reproduce: the first fused pass hurts"


@pytest.mark.parametrize(("fused", "soft", "head"), [
    (-0.05, 0.0, "reproduces: on code FUSED is better and SOFT indistinguishable"),
    (0.05, 0.05, "does not reproduce: on code FUSED is worse and SOFT worse"),
    (0.0, -0.05, "inconclusive: on code FUSED is indistinguishable and SOFT better"),
])
def test_the_regime_rule_reads_fused_against_standard_and_reports_soft(fused, soft, head):
    def interval(mean: float) -> dict[str, float]:
        return {"mean": mean, "low": mean - 0.01, "high": mean + 0.01}
    assert fbt_regimes.decide({"fused1": interval(fused), "soft": interval(soft)}).startswith(head)


def test_the_reading_recipes_read_the_paper_arm_and_list_every_feedback_arm():
    base, flops = lang.CONTROL[1], lang.CONTROL[0]
    scores = pd.concat([synthetic_scores({"pass1": 2.0, "pass2": 1.9, "standard": 2.0}, arm=arm)
                        for arm in (base, lang.PAPER_ARM, "add_mix")])
    scores = scores[~((scores["arm"] == base) & (scores["measure"] == "pass2"))]
    assert lang.feedback_arms(scores) == [lang.PAPER_ARM, "add_mix"]
    values, _ = lang.reading_gates(pd.concat([scores, scores[scores["arm"] == base].assign(arm=flops)]))
    assert values[lang.READING_GATES[1].name] < 0 and values[lang.SEED_GATE.name] == 3


def test_an_arm_reads_its_fixed_point_only_when_it_uses_its_feedback_and_the_exact_recurrence_costs_little():
    measures = {"pass1": 2.0, "pass2": 1.95, "standard": 2.0, "soft": 1.97}
    scores = pd.concat([synthetic_scores({**measures, "exact": 1.952}, arm="reads"),
                        synthetic_scores({**measures, "exact": 2.2}, arm="drifts"),
                        synthetic_scores({**measures, "pass2": 2.05, "exact": 2.05}, arm="unused")])
    table = fbt_fixed_point_text.fixed_point_rows(scores).set_index("arm")
    assert table.loc["reads", "reads_fixed_point"] and not table.loc["drifts", "reads_fixed_point"]
    assert not table.loc["unused", "uses_feedback"] and not table.loc["unused", "reads_fixed_point"]
    assert table.loc["drifts", "exact_minus_pass2"] == pytest.approx(0.25)
    assert fbt_fixed_point_text.verdict(table.reset_index()) == "readable with: reads"
    assert fbt_fixed_point_text.verdict(table.reset_index().iloc[2:]).startswith("not tested")


def test_the_pass_mixes_budget_gives_every_run_the_multi_pass_batches_of_fbt_texts_longest_paper_arm():
    specs = fbt_pass_mixes.RECIPE.build(1.0)
    ctx = Context(fbt_pass_mixes.RECIPE, {s.name: s for s in specs}, {}, {}, checkpoints_root() / "fbt_pass_mixes",
                  1.0)
    budget = fbt_pass_mixes.next_budget(ctx)
    fed = lang.LONG * fbt_text.STEPS * (1 - fbt_text.FEEDBACK_START)  # the paper arm's multi-pass batches
    n_steps = fed / (0.25 * (1 - fbt_text.FEEDBACK_START))  # 75/25 and 75/22/3 both draw 25 % multi-pass batches
    assert budget["need"].startswith(f"{round(n_steps):,} steps")
    seconds = sum(load_metrics(checkpoints_root() / "fbt_pass_mixes" / s.name)["train"]["cpu_seconds"]
                  for s in specs)
    assert budget["cpu_hours"] == pytest.approx(n_steps / specs[0].train.steps * seconds / 3600)



def test_a_reading_recipes_figure_draws_its_results_intervals_and_leads_with_the_verdict():
    """The figure comes from results.csv alone (so a redraw is the same), a panel per interval column, an arm a row."""
    results = pd.DataFrame({"arm": ["add_full", fbt_regimes.PAPER_ARM], "soft_gap": [-0.01, 0.28],
                            "soft_gap_low": [-0.02, 0.24], "soft_gap_high": [-0.002, 0.33], "fused1_gap": [-0.01, 0.29],
                            "fused1_gap_low": [-0.02, 0.25], "fused1_gap_high": [-0.004, 0.34]})
    fig = fbt_regimes.regimes_figure(results, "not tested: a gate failed")
    assert fig.get_suptitle().startswith("verdict: not tested: a gate failed\n")
    assert [len(ax.get_yticklabels()) for ax in fig.axes] == [2, 2]
    bold = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels() if t.get_fontweight() == "bold"]
    assert bold == [fbt_regimes.PAPER_ARM] * 2


def test_fbt_texts_figure_table_holds_every_interval_its_verdict_reads_and_the_positive_control():
    iv = {"mean": 0.01, "low": -0.02, "high": 0.04, "seeds": 6}
    found = {arm: {"equal_tokens": iv, "matched_compute": iv, "feedback": iv}
             for arm in ("add_full", fbt_text.PAPER_ARM)}
    rows = fbt_text.interval_rows(found, {**iv, "mean": -0.06, "low": -0.07, "high": -0.05})
    assert len(rows) == 3 * len(found) + 1 and rows["panel"].nunique() == 4
    equal, matched = fbt_text.references(fbt_text.PAPER_ARM)
    assert rows["label"].iloc[-1] == f"{matched} - {equal}" and rows["high"].iloc[-1] == -0.05
    assert set(rows.loc[rows["highlight"], "label"]) == {f"{fbt_text.PAPER_ARM} - {equal}",
                                                         f"{fbt_text.PAPER_ARM} - {matched}", fbt_text.PAPER_ARM}
    fig = fbt_text.intervals_figure(rows, "not tested: a gate failed")
    assert fig.get_suptitle().startswith("verdict: not tested: a gate failed\nFBT on text")
