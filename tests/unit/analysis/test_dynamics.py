"""Recurrence dynamics (workbench.analysis.dynamics): known answers in float64."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import overlapping_ticks, perturbed_model, small_config
from workbench import schedules as S
from workbench.analysis import dynamics as dyn
from workbench.analysis.cache import run_with_cache
from workbench.experiments.recipes import fixed_point_study as study

B, T = 3, 12


def _model(mechanism: str, **kw) -> wb.GPT:
    return perturbed_model(small_config(mechanism, n_layer=2, **kw)).eval()


def _idx(seed: int = 0, vocab: int = 23) -> torch.Tensor:
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------ Lyapunov
def test_benettin_qr_recovers_a_linear_recurrence():
    """m_t = A m_{t-1}: the exponents are log |eigenvalues| of A, exactly for a diagonal A, in the limit for a
    non-normal one (where the one-step norm exceeds 1 while the radius is below)."""
    diag = torch.diag(torch.tensor([2.0, 0.5, 0.1], dtype=torch.float64))
    exps = dyn.lyapunov_from_jacobians(diag.expand(1, 40, 3, 3), k=3)
    torch.testing.assert_close(exps[0, -1], torch.log(torch.tensor([2.0, 0.5, 0.1], dtype=torch.float64)),
                               rtol=0, atol=1e-12)
    shear = torch.tensor([[0.9, 5.0], [0.0, 0.5]], dtype=torch.float64)
    assert torch.linalg.matrix_norm(shear, ord=2) > 1
    exps = dyn.lyapunov_from_jacobians(shear.expand(1, 2000, 2, 2), k=2)
    torch.testing.assert_close(exps[0, -1], torch.log(torch.tensor([0.9, 0.5], dtype=torch.float64)),
                               rtol=0, atol=2e-3)
    zero = dyn.lyapunov_from_jacobians(torch.zeros(1, 3, 2, 2, dtype=torch.float64), k=1)
    assert math.isinf(float(zero[0, -1, 0])) and float(zero[0, -1, 0]) < 0


@pytest.mark.parametrize("mechanism", ["lrt", "fbt"])
def test_tangent_map_matches_finite_differences_through_the_kv_path(mechanism):
    """The exact tangent follows the perturbation through later keys/values too: central differences of the
    sequential recurrence itself (a perturbed carried state, continued through the KV cache) agree."""
    model, idx = _model(mechanism), _idx()
    t0, horizon, eps = 4, 6, 1e-6
    direction = dyn._orthonormal(B, model.config.n_embd, 1, 0, torch.zeros((), dtype=torch.float64))
    tangent = dyn.tangent_map(model, idx, t0, horizon, direction)[..., 0]  # (B, n, D)

    def continued(sign: float) -> torch.Tensor:
        cache = model.new_kv_cache(B, T)
        S.sequential(model, idx[:, :t0 + 1], cache=cache)
        cache.state = cache.state + sign * eps * direction[..., 0]
        return S.recur(model, idx, cache, t0 + 1, t0 + 1 + horizon)[1]

    with torch.no_grad():
        fd = (continued(1.0) - continued(-1.0)) / (2 * eps)
    torch.testing.assert_close(tangent, fd, rtol=1e-5, atol=1e-7)
    # the memory path holds later keys/values fixed: at horizon 1 nothing else has moved yet, so both agree,
    # the tangent of the axes being the one-step Jacobian itself
    axes = torch.eye(model.config.n_embd, dtype=torch.float64).expand(B, -1, -1)
    torch.testing.assert_close(dyn.tangent_map(model, idx, t0, 1, axes)[:, 0],
                               dyn.recurrence_jacobians(model, idx, [t0 + 1])[:, 0], rtol=1e-10, atol=1e-12)
    full = dyn.lyapunov(model, idx, t0, horizon=1, k=1, path="full")
    memory = dyn.lyapunov(model, idx, t0, horizon=1, k=1, path="memory")
    np.testing.assert_allclose(full["exponent"].to_numpy(), memory["exponent"].to_numpy(), rtol=1e-9)
    # further on they differ: the full tangent also moves the keys/values later positions attend to
    full = dyn.lyapunov(model, idx, t0, horizon=horizon, path="full")
    memory = dyn.lyapunov(model, idx, t0, horizon=horizon, path="memory")
    assert np.abs(full["exponent"].to_numpy() - memory["exponent"].to_numpy()).max() > 1e-6


def test_a_mechanism_without_memory_has_no_finite_exponent():
    """With mechanism 'none' the memory is never read: every tangent is 0 and every exponent -inf."""
    model, idx = _model("none"), _idx()
    for path in ("full", "memory"):
        exps = dyn.lyapunov(model, idx, t0=3, horizon=4, path=path)["exponent"]
        assert np.isneginf(exps).all(), path
    spectra = dyn.jacobian_spectra(model, idx, [2, 5])
    assert (spectra[["spectral_norm", "spectral_radius"]] == 0).all().all()


def test_jacobian_spectra_norm_bounds_radius_and_match_power_iteration():
    from workbench.analysis.contraction import jacobian_power_iteration

    model, idx = _model("fbt"), _idx()
    spectra = dyn.jacobian_spectra(model, idx, [5])
    assert (spectra["spectral_norm"] >= spectra["spectral_radius"] - 1e-12).all()
    power = jacobian_power_iteration(model, idx, 5, iters=200)["per_example"]
    np.testing.assert_allclose(spectra["spectral_norm"].to_numpy(), power.numpy(), rtol=1e-6)


def test_lyapunov_refuses_bad_arguments():
    model, idx = _model("fbt"), _idx()
    with pytest.raises(ValueError, match="t0"):
        dyn.lyapunov(model, idx, t0=T - 1)
    with pytest.raises(ValueError, match="path"):
        dyn.lyapunov(model, idx, t0=2, path="nope")
    with pytest.raises(ValueError, match="horizon"):
        dyn.lyapunov(model, idx, t0=2, horizon=T)


# ------------------------------------------------------------------------------------------ fixed point
def test_fixed_point_quality_reaches_the_exact_recurrence_at_T_passes():
    model, idx = _model("fbt"), _idx()
    targets = _idx(1)
    quality = dyn.fixed_point_quality(model, idx, targets, passes=T)
    rows = quality.per_example
    last = rows[(rows["schedule"] == "multipass") & (rows["pass"] == T)]
    exact = rows[rows["schedule"] == "sequential"]
    assert last["distance"].max() < 1e-12
    np.testing.assert_allclose(last["loss"].to_numpy(), exact["loss"].to_numpy(), rtol=1e-10)
    # pass k is exact on the first k positions (causality), not beyond
    first = quality.per_position[quality.per_position["pass"] == 2]
    assert first.loc[first["position"] < 2, "distance"].max() < 1e-12 and first["distance"].max() > 1e-6


def test_readability_table_measures_the_long_prompts_trained_depth_for_every_model():
    """The long prompts' pass-2 accuracy is measured whatever the model reads at its fixed point (where it fails, the
    long columns measure length generalisation); the exact and fused long columns only for a readable model."""
    task = wb.tasks.get("multi_register", registers=2, writes=1, scratch_updates=0)
    long_task = wb.tasks.get("multi_register", registers=2, writes=1, scratch_updates=8)
    model = perturbed_model(small_config("fbt", n_layer=1, vocab_size=task.vocab_size, seq_len=256)).eval()
    batch, long_batch = task.sample(8, 0, "val"), long_task.sample(4, 1, "val")
    sizes = dict(dynamics_examples=4, lyapunov_examples=2, long_passes=3, window_passes=8,
                 lyapunov_from=batch.tokens.size(1) - 4)
    unread = dyn.readability_table(model, batch, readable=2.0, long_batch=long_batch, **sizes).iloc[0]
    scored = long_batch.targets >= 0
    for k in (1, 2):  # does it need its feedback on the long prompts, and answer there at its trained depth?
        logits = S.Multipass(k).run(model, long_batch.tokens).logits
        expected = ((logits.argmax(-1) == long_batch.targets) | ~scored).all(1).double().mean().item()
        assert unread[f"long_accuracy_pass{k}"] == pytest.approx(expected, abs=1e-12)
    assert math.isnan(unread["long_accuracy_exact"]) and math.isnan(unread["long_accuracy_fused"])
    read = dyn.readability_table(model, batch, readable=-1.0, long_batch=long_batch, **sizes).iloc[0]
    assert 0 <= read["long_accuracy_exact"] <= 1 and 0 <= read["long_accuracy_fused"] <= 1
    # the fused passes on the first prompts only: the exact column keeps every prompt
    first = dyn.readability_table(model, batch, readable=-1.0, long_batch=long_batch, long_fused_examples=1,
                                  **sizes).iloc[0]
    assert first["long_accuracy_exact"] == read["long_accuracy_exact"] and first["long_accuracy_fused"] in (0.0, 1.0)
    # a model that reads its fixed point (here: no target scored, so every prompt counts as answered) but not the
    # long prompts at pass 2: its long columns are not measured
    unscored = dataclasses.replace(batch, targets=torch.full_like(batch.targets, -1))
    gated = dyn.readability_table(model, unscored, readable=0.5, long_batch=long_batch, **sizes).iloc[0]
    assert gated["accuracy_exact"] == 1.0 and gated["long_accuracy_pass2"] < 0.5
    assert math.isnan(gated["long_accuracy_exact"]) and math.isnan(gated["long_accuracy_fused"])
    assert math.isnan(dyn.readability_table(model, batch, **sizes).iloc[0]["long_accuracy_pass2"])


# ------------------------------------------------------------------------------------------ lens
def test_lens_final_depth_reads_the_model_and_the_tuned_lens_is_exact_at_the_top():
    model, idx = _model("fbt"), _idx()
    where = torch.tensor([T - 2] * B)
    logits = S.Multipass(3).run(model, idx).logits
    answer = logits[torch.arange(B), where].argmax(-1)  # the model's own final answer: rank 0 at the top
    tuned = dyn.fit_tuned_lens(model, _idx(5), where, passes=3, ridge=1e-9)
    out = dyn.fed_back_lens(model, idx, where, answer, passes=3, tuned=tuned)
    lens = out["lens"]
    top = lens[(lens["depth"] == model.config.n_layer) & (lens["pass"] == 3)]
    assert (top["answer_rank"] == 0).all() and (top["top1_is_answer"] == 1).all()
    assert set(lens["lens"]) == {"logit", "tuned", "memory"} and lens[lens["lens"] == "memory"]["pass"].min() == 2
    inp = out["input"]
    assert inp.loc[inp["pass"] == 1, "input_cosine"].item() == pytest.approx(1.0)
    assert inp.loc[inp["pass"] == 2, "input_cosine"].item() < 0.999  # the fused input is not the token's
    assert out["flips"]["flip_share"].between(0, 1).all()


# ------------------------------------------------------------------------------------------ geometry
def test_iterate_geometry_stops_every_position_by_T_passes_and_adaptive_prefill_agrees():
    model, idx = _model("fbt"), _idx()
    geo = dyn.iterate_geometry(model, idx, passes=T + 2, targets=_idx(1), rel_tol=1e-9, kl_tol=1e-12)
    assert geo.per_pass["stopped_share"].iloc[-1] == 1.0 and geo.passes_needed.max() <= T + 1
    assert (geo.passes_needed >= 1).all()
    out, used = dyn.adaptive_prefill(model, idx, max_passes=T + 5, rel_tol=1e-9, kl_tol=1e-12)
    assert used <= T + 1
    torch.testing.assert_close(out.logits, S.sequential(model, idx).logits, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="rel_tol"):
        dyn.iterate_geometry(model, idx, passes=3, rel_tol=0)


@pytest.mark.parametrize("values, expected", [
    ([1.0, 0.1, 1e-3, 1e-5, 1e-7, 1e-9], "decays to zero"),
    ([1.0, 0.5, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2], "decays to a plateau"),
    ([1.0, 0.2, 1.0, 0.2, 1.0, 0.2, 1.0, 0.2], "oscillates"),
    ([0.1, 0.2, 0.4, 0.8, 1.6, 3.2], "grows"),
])
def test_residual_behaviour(values, expected):
    assert dyn.residual_behaviour(values) == expected


# ------------------------------------------------------------------------------------------ schedules
def test_fixed_point_schedule_trains_at_the_state_the_exact_recurrence_reaches():
    """With K >= T passes without gradient, the pass with gradient is the exact recurrence; the objective
    is the plain pass's loss plus aux x that pass's (jitter off: the pass with gradient trains with it)."""
    model, idx, targets = _model("fbt", fbt_jitter=0.0).train(), _idx(), _idx(1)
    out = S.FixedPoint(passes=T, tol=0.0, aux_weight=0.5).run(model, idx)
    with wb.model.eval_mode(model):
        exact = S.sequential(model, idx)
    torch.testing.assert_close(out.logits, exact.logits, rtol=1e-9, atol=1e-9)
    plain, last = out.pass_losses(targets)
    torch.testing.assert_close(out.loss(targets), plain + 0.5 * last)
    assert S.parse("fixed_point", passes=7) == S.FixedPoint(7) and S.FixedPoint(7).label == "fixed_point(K=7)"
    with pytest.raises(ValueError, match="tol"):
        S.FixedPoint(3, tol=1.5)


def test_additive_fusion_keeps_the_token():
    """The additive variant's fused input stays close to the token's embedding; the paper's GLU replaces it."""
    idx = _idx()
    for fusion, lo, hi in (("glu", -1.0, 0.9), ("additive", 0.3, 1.0)):
        model = _model("fbt", fbt_fusion=fusion)
        _, cache = run_with_cache(model, idx, S.Multipass(2), names_filter="hook_input")
        cos = torch.nn.functional.cosine_similarity(cache.pass_(1)["hook_input"][:, 1:],
                                                    cache.pass_(0)["hook_input"][:, 1:], dim=-1).mean()
        assert lo < float(cos) < hi, fusion
    with pytest.raises(ValueError, match="fbt_fusion"):
        small_config("fbt", fbt_fusion="sum")


# ------------------------------------------------------------------------------------------ the study
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
    assert scratch["fbt_glu_phased"].pass_mix == study.PHASED_MIX and 1 not in study.PHASED_MIX
    assert scratch["fbt_glu_phased"].replace(pass_mix=scratch["fbt_glu"].pass_mix) == scratch["fbt_glu"]
    steps = {study.arm_of(r): r.train.steps for r in study.build(1.0)}  # the duration family: 3x the steps
    assert steps[("duration", "ft_fixed_point_4500")] == steps[("duration", "ft_mix_4500")] == 3 * steps[
        ("training", "ft_fixed_point")] == 4500
    long = [r for r in runs if study.arm_of(r)[0] == "long"]  # trained where no other run answers: T > 1,000
    assert {r.train.init_from for r in long} == {study.LONG_SPECIMEN.format(seed=s) for s in study.SEEDS}
    assert all(r.train.task_params["scratch_updates"] == [8, 32, 128] for r in long)  # a length curriculum
    assert {r.train.batch_size for r in long} == {study.LONG_BATCH}
    assert {r.eval_batch().tokens.size(1) for r in long} == {wb.tasks.get("multi_register", **study.LONG).seq_len}
    sequential = [r for r in runs if study.arm_of(r) == ("training", "ft_sequential")]
    assert [(r.train.schedule, r.train.prefix_mixin) for r in sequential] == [("sequential", 0.0)] * 2  # the exact
    assert [r.train.init_from for r in sequential] == [study.SPECIMEN.format(seed=s) for s in study.SEEDS]  # recurrence


# ------------------------------------------------------------------------------------------ figures
def test_dynamics_figures_draw_what_they_are_given():
    model, idx, targets = _model("fbt"), _idx(), _idx(1)
    quality = {"a": dyn.fixed_point_quality(model, idx, targets, 4).per_example,
               "b": dyn.fixed_point_quality(_model("lrt"), idx, targets, 4).per_example}
    fig = wb.plots.fixed_point_accuracy(quality, trained_depth=3)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.lines) == 4  # a curve and a dashed exact line per model
    np.testing.assert_allclose(ax.lines[0].get_ydata(), quality["a"].query("schedule == 'multipass'")
                               .groupby("pass")["correct"].mean().to_numpy())
    exps = {"a": pd.concat([dyn.lyapunov(model, idx, 4, path=p) for p in ("full", "memory")])}
    assert len(wb.plots.lyapunov_curves(exps).axes) == 2
    where = torch.tensor([T - 2] * B)
    lens = dyn.fed_back_lens(model, idx, where, idx[:, -1], passes=3)["lens"]
    fig = wb.plots.lens_by_pass({"a": lens, "b": lens})
    assert len([a for a in fig.axes if a.get_title() in ("a", "b")]) == 2


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
    bars = [p for p in fig.axes[0].patches]
    assert len(bars) == 4 * 4  # four arms, four bars each
    exact_heights = [b.get_height() for b in bars[12:]]  # the exact-recurrence bars, drawn last
    assert exact_heights == [0.0, 1.0, 0.0, 0.7]
    assert len(wb.experiments.experiment_figure({"results": table}).axes) == len(fig.axes)


def test_the_study_figure_labels_do_not_run_together_with_the_shipped_arms():
    """Every arm of the study as it stands, two seeds each: the tick labels stay apart, and the readable bar and
    chance line are named in the legend, not written over the bars."""
    arms = [(a, "scratch") for a in study.SCRATCH_ARMS] + [
        (a, family) for family, group in study.FAMILY_ARMS.items() for a in group.arms]
    table = pd.DataFrame([{"arm": arm, "family": family, "accuracy_pass1": 0.8, "accuracy_pass2": 1.0,
                           "accuracy_pass3": 0.9, "accuracy_exact": 0.5, "lyapunov_top": -0.05, "seed": s}
                          for arm, family in arms for s in (0, 1)])
    ax = wb.plots.fixed_point_readability(table, "t").axes[0]
    assert len(ax.get_xticklabels()) == len(arms) and overlapping_ticks(ax) == []
    assert {"readable bar 0.95", "chance 0.5"} <= {t.get_text() for t in ax.get_legend().get_texts()}
    assert not [t for t in ax.texts if t.get_text()]  # nothing written inside the panel
