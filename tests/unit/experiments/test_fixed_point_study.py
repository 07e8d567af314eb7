"""The fixed-point study's design: its arms, its rule and competence gates, the row it measures per model
(``readability_table``) and its figure."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import overlapping_ticks, perturbed_model, small_config
from workbench import schedules as S
from workbench.experiments.recipes import fixed_point_study as study


def test_readability_table_measures_the_long_prompts_trained_depth_for_every_model():
    """The long prompts' pass-2 accuracy is measured whatever the model reads at its fixed point (where it fails, the
    long columns measure length generalisation); the exact and fused long columns only for a readable model."""
    task = wb.tasks.get("multi_register", registers=2, writes=1, scratch_updates=0)
    long_task = wb.tasks.get("multi_register", registers=2, writes=1, scratch_updates=8)
    model = perturbed_model(small_config("fbt", n_layer=1, vocab_size=task.vocab_size, seq_len=256)).eval()
    batch, long_batch = task.sample(8, 0, "val"), long_task.sample(4, 1, "val")
    sizes = dict(dynamics_examples=4, lyapunov_examples=2, long_passes=3, window_passes=8,
                 lyapunov_from=batch.tokens.size(1) - 4)
    unread = study.readability_table(model, batch, readable=2.0, long_batch=long_batch, **sizes).iloc[0]
    scored = long_batch.targets >= 0
    for k in (1, 2):  # does it need its feedback on the long prompts, and answer there at its trained depth?
        logits = S.Multipass(k).run(model, long_batch.tokens).logits
        expected = ((logits.argmax(-1) == long_batch.targets) | ~scored).all(1).double().mean().item()
        assert unread[f"long_accuracy_pass{k}"] == pytest.approx(expected, abs=1e-12)
    assert math.isnan(unread["long_accuracy_exact"]) and math.isnan(unread["long_accuracy_fused"])
    read = study.readability_table(model, batch, readable=-1.0, long_batch=long_batch, **sizes).iloc[0]
    assert 0 <= read["long_accuracy_exact"] <= 1 and 0 <= read["long_accuracy_fused"] <= 1
    # the fused passes on the first prompts only: the exact column keeps every prompt
    first = study.readability_table(model, batch, readable=-1.0, long_batch=long_batch, long_fused_examples=1,
                                  **sizes).iloc[0]
    assert first["long_accuracy_exact"] == read["long_accuracy_exact"] and first["long_accuracy_fused"] in (0.0, 1.0)
    # a model that reads its fixed point (here: no target scored, so every prompt counts as answered) but not the
    # long prompts at pass 2: its long columns are not measured
    unscored = dataclasses.replace(batch, targets=torch.full_like(batch.targets, -1))
    gated = study.readability_table(model, unscored, readable=0.5, long_batch=long_batch, **sizes).iloc[0]
    assert gated["accuracy_exact"] == 1.0 and gated["long_accuracy_pass2"] < 0.5
    assert math.isnan(gated["long_accuracy_exact"]) and math.isnan(gated["long_accuracy_fused"])
    assert math.isnan(study.readability_table(model, batch, **sizes).iloc[0]["long_accuracy_pass2"])


def test_study_rule_and_arms():
    assert study.decide("x", [0.97, 0.96], {"low": 0.1, "high": 0.5}) == "makes the fixed point readable"
    assert study.decide("x", [0.97, 0.5], {"low": 0.1, "high": 0.5}) == "helps, not readable"
    assert study.decide("x", [0.1, 0.1], {"low": -0.5, "high": -0.1}) == "hurts"
    assert study.decide("x", [0.1, 0.1], {"low": -0.1, "high": 0.1}) == "no effect detected"
    assert study.decide("x", [0.0, 0.0], {"low": 0.0, "high": 0.0}).startswith("no effect detected (degenerate")
    runs = study.build(0.001)
    assert {study.arm_of(r) for r in runs} == {("scratch", a) for a in study.SCRATCH_ARMS} | {
        (family, a) for family, group in study.FAMILY_ARMS.items() for a in group.arms}
    assert all(r.train.init_from for r in runs if study.arm_of(r)[0] != "scratch")
    assert all(r.train.init_from is None for r in runs if study.arm_of(r)[0] == "scratch")
    # the additive family starts from the additive FBTs trained from scratch, and fuses additively
    additive = [r for r in runs if study.arm_of(r)[0] == "additive"]
    assert {r.train.init_from for r in additive} == {study.ADDITIVE_SPECIMEN.format(seed=s) for s in study.SEEDS}
    assert {r.train.model["fbt_fusion"] for r in additive} == {"additive"}
    scratch = {study.arm_of(r)[1]: r.train for r in runs if study.arm_of(r)[0] == "scratch"}
    assert scratch["fbt_additive"].model == {**scratch["fbt_glu"].model, "fbt_fusion": "additive"}
    assert scratch["fbt_additive"].replace(model=scratch["fbt_glu"].model) == scratch["fbt_glu"]  # only the fusion
    # the phased reading: after the same plain phase, every batch fed back (2-pass, 3 % 3-pass); nothing else differs
    assert dict(scratch["fbt_glu_phased"].schedule.mix) == study.PHASED_MIX and 1 not in study.PHASED_MIX
    assert scratch["fbt_glu_phased"].replace(schedule=scratch["fbt_glu"].schedule) == scratch["fbt_glu"]
    steps = {study.arm_of(r): r.train.steps for r in study.build(1.0)}  # the duration family: 3x the steps
    assert steps[("duration", "ft_fixed_point_4500")] == steps[("duration", "ft_mix_4500")] == 3 * steps[
        ("training", "ft_fixed_point")] == 4500
    long = [r for r in runs if study.arm_of(r)[0] == "long"]  # trained where no other run answers: T > 1,000
    assert {r.train.init_from for r in long} == {study.LONG_SPECIMEN.format(seed=s) for s in study.SEEDS}
    assert all(r.train.task_params["scratch_updates"] == [8, 32, 128] for r in long)  # a length curriculum
    assert {r.train.batch_size for r in long} == {study.LONG_BATCH}
    assert {r.eval_batch().tokens.size(1) for r in long} == {wb.tasks.get("multi_register", **study.LONG).seq_len}
    sequential = [r for r in runs if study.arm_of(r) == ("training", "ft_sequential")]
    assert [(r.train.schedule, r.train.prefix_mixin) for r in sequential] == [(S.Sequential(), 0.0)] * 2  # the exact
    assert [r.train.init_from for r in sequential] == [study.SPECIMEN.format(seed=s) for s in study.SEEDS]  # recurrence


def test_study_competence_refuses_arms_that_do_not_need_or_use_their_feedback():
    """An arm that answers at pass 1 cannot show a readable *fed-back* fixed point; a reference that does not answer
    at pass 2 is no baseline for a fine-tune; an arm may trade pass 2 away (training at the fixed point does)."""
    def rows(pass1, pass2):
        return pd.DataFrame({"accuracy_pass1": pass1, "accuracy_pass2": pass2})

    assert study.competence(rows([0.80, 0.75], [1.0, 0.99]), "a", reference=True) is None
    assert "answers without its feedback" in study.competence(rows([0.80, 0.93], [1.0, 1.0]), "a", reference=False)
    assert "pass-2 accuracy 0.900" in study.competence(rows([0.8, 0.8], [1.0, 0.9]), "ref", reference=True)
    assert study.competence(rows([0.8, 0.8], [1.0, 0.5]), "a", reference=False) is None
    # the long family reads both on the long prompts
    long = rows([0.8, 0.8], [1.0, 1.0]).assign(long_accuracy_pass1=[0.5, 0.6], long_accuracy_pass2=[0.9, 1.0])
    assert study.competence(long, "ref", reference=True) is None
    assert "on the long prompts (pass-2 accuracy 0.900)" in study.competence(long, "ref", True, where="long_")


def test_the_specimen_bar_needs_feedback_and_a_readable_fixed_point_at_both_lengths_and_after_fused_passes():
    good = {"run": "good", "accuracy_pass1": 0.8, "long_accuracy_pass1": 0.7, "accuracy_exact": 0.99,
            "long_accuracy_exact": float("nan"), "long_accuracy_fused": 0.97}
    table = pd.DataFrame([good, {**good, "run": "no_feedback_needed", "long_accuracy_pass1": 0.95},
                          {**good, "run": "fused_fails", "long_accuracy_fused": 0.5},
                          {**good, "run": "short_only", "accuracy_exact": 0.9},
                          {**good, "run": "measured_here", "long_accuracy_exact": 0.96},
                          {**good, "run": "unmeasured_long", "long_accuracy_fused": float("nan")}])
    # the long exact accuracy: a trained-there run's own evaluation, else the column measured in the analysis
    assert study.specimen_runs(table, {"good": 0.96, "fused_fails": 1.0, "short_only": 1.0}) == ["good",
                                                                                                  "measured_here"]
    assert study.specimen_runs(table, {"good": 0.9}) == ["measured_here"]


def test_the_study_figure_draws_each_arm_and_is_the_experiment_figure_of_its_table():
    rows = [{"arm": arm, "family": family, "accuracy_pass1": 0.8, "accuracy_pass2": 1.0, "accuracy_pass3": 0.9,
             "accuracy_exact": exact, "lyapunov_top": -0.05, "seed": s}
            for arm, family, exact in (("fbt_glu", "mechanism", 0.0), ("lrt", "mechanism", 1.0),
                                       ("ft_mix", "training", 0.0), ("ft_fixed_point", "training", 0.7))
            for s in (0, 1)]
    table = pd.DataFrame(rows)
    fig = wb.plots.fixed_point_readability(table, "t")
    panels = fig.axes[0::2]  # a row per family: the accuracy bars, then the Lyapunov exponents
    assert [p.get_title(loc="left") for p in panels] == ["mechanism", "training"]
    bars = [b for p in panels for b in p.patches]
    assert len(bars) == 4 * 4  # four arms, four bars each
    exact_heights = [b.get_height() for p in panels for b in p.patches[6:]]  # per panel the exact bars come last
    assert exact_heights == [0.0, 1.0, 0.0, 0.7]
    redrawn = wb.experiments.experiment_figure({"results": table}, title="fixed_point_study")  # the explorer's call
    assert len(redrawn.axes) == len(fig.axes)
    assert redrawn.get_suptitle() == wb.plots.fixed_point_readability(table).get_suptitle()  # the takeaway


def test_the_study_figure_labels_do_not_run_together_with_the_shipped_arms():
    """Every arm of the study as it stands, two seeds each: the tick labels stay apart, and the readable bar and
    chance line are named in the legend, not written over the bars."""
    arms = [(a, "scratch") for a in study.SCRATCH_ARMS] + [
        (a, family) for family, group in study.FAMILY_ARMS.items() for a in group.arms]
    table = pd.DataFrame([{"arm": arm, "family": family, "accuracy_pass1": 0.8, "accuracy_pass2": 1.0,
                           "accuracy_pass3": 0.9, "accuracy_exact": 0.5, "lyapunov_top": -0.05, "seed": s}
                          for arm, family in arms for s in (0, 1)])
    fig = wb.plots.fixed_point_readability(table, "t")
    panels = fig.axes[0::2]
    assert sum(len(ax.get_xticklabels()) for ax in panels) == len(arms)
    assert all(len(ax.get_xticklabels()) <= wb.plots.dynamics.ARMS_PER_PANEL and overlapping_ticks(ax) == []
               for ax in panels)
    assert {"readable bar 0.95", "chance 0.5"} <= {t.get_text() for t in fig.legends[0].get_texts()}
    assert not [t for ax in panels for t in ax.texts if t.get_text()]  # nothing written inside a panel
