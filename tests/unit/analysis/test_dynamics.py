"""Recurrence dynamics (``analysis.jacobians``, ``fixed_point``, ``lens``): known answers in float64."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import schedules as S
from workbench.analysis import fixed_point, jacobians
from workbench.analysis.cache import run_with_cache
from workbench.analysis.lens import fed_back_lens, fit_tuned_lens

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
    exps = jacobians.lyapunov_from_jacobians(diag.expand(1, 40, 3, 3), k=3)
    torch.testing.assert_close(exps[0, -1], torch.log(torch.tensor([2.0, 0.5, 0.1], dtype=torch.float64)),
                               rtol=0, atol=1e-12)
    shear = torch.tensor([[0.9, 5.0], [0.0, 0.5]], dtype=torch.float64)
    assert torch.linalg.matrix_norm(shear, ord=2) > 1
    exps = jacobians.lyapunov_from_jacobians(shear.expand(1, 2000, 2, 2), k=2)
    torch.testing.assert_close(exps[0, -1], torch.log(torch.tensor([0.9, 0.5], dtype=torch.float64)),
                               rtol=0, atol=2e-3)
    zero = jacobians.lyapunov_from_jacobians(torch.zeros(1, 3, 2, 2, dtype=torch.float64), k=1)
    assert math.isinf(float(zero[0, -1, 0])) and float(zero[0, -1, 0]) < 0


@pytest.mark.parametrize("mechanism", ["lrt", "fbt"])
def test_tangent_map_matches_finite_differences_through_the_kv_path(mechanism):
    """The exact tangent follows the perturbation through later keys/values too: central differences of the
    sequential recurrence itself (a perturbed carried state, continued through the KV cache) agree."""
    model, idx = _model(mechanism), _idx()
    t0, horizon, eps = 4, 6, 1e-6
    direction = jacobians._orthonormal(B, model.config.n_embd, 1, 0)
    tangent = jacobians.tangent_map(model, idx, t0, horizon, direction)[..., 0]  # (B, n, D)

    def continued(sign: float) -> torch.Tensor:
        cache = model.new_kv_cache(B, T)
        S.Sequential().prefill(model, idx[:, :t0 + 1], cache)
        cache.state = cache.state + sign * eps * direction[..., 0]
        return S.recur(model, idx, cache, t0 + 1, t0 + 1 + horizon)[1]

    with torch.no_grad():
        fd = (continued(1.0) - continued(-1.0)) / (2 * eps)
    torch.testing.assert_close(tangent, fd, rtol=1e-5, atol=1e-7)
    # the memory path holds later keys/values fixed: at horizon 1 nothing else has moved yet, so both agree,
    # the tangent of the axes being the one-step Jacobian itself
    axes = torch.eye(model.config.n_embd, dtype=torch.float64).expand(B, -1, -1)
    torch.testing.assert_close(jacobians.tangent_map(model, idx, t0, 1, axes)[:, 0],
                               jacobians.recurrence_jacobians(model, idx, [t0 + 1])[:, 0], rtol=1e-10, atol=1e-12)
    full = jacobians.lyapunov(model, idx, t0, horizon=1, k=1, path="full")
    memory = jacobians.lyapunov(model, idx, t0, horizon=1, k=1, path="memory")
    np.testing.assert_allclose(full["exponent"].to_numpy(), memory["exponent"].to_numpy(), rtol=1e-9)
    # further on they differ: the full tangent also moves the keys/values later positions attend to
    full = jacobians.lyapunov(model, idx, t0, horizon=horizon, path="full")
    memory = jacobians.lyapunov(model, idx, t0, horizon=horizon, path="memory")
    assert np.abs(full["exponent"].to_numpy() - memory["exponent"].to_numpy()).max() > 1e-6


def test_a_mechanism_without_memory_has_no_finite_exponent():
    """With mechanism 'none' the memory is never read: every tangent is 0 and every exponent -inf."""
    model, idx = _model("none"), _idx()
    for path in ("full", "memory"):
        exps = jacobians.lyapunov(model, idx, t0=3, horizon=4, path=path)["exponent"]
        assert np.isneginf(exps).all(), path
    spectra = jacobians.jacobian_spectra(model, idx, [2, 5])
    assert (spectra[["spectral_norm", "spectral_radius"]] == 0).all().all()


def test_jacobian_spectra_norm_bounds_radius_and_match_power_iteration():
    model, idx = _model("fbt"), _idx()
    spectra = jacobians.jacobian_spectra(model, idx, [5])
    assert (spectra["spectral_norm"] >= spectra["spectral_radius"] - 1e-12).all()
    power = jacobians.jacobian_power_iteration(model, idx, 5, iters=200)["per_example"]
    np.testing.assert_allclose(spectra["spectral_norm"].to_numpy(), power.numpy(), rtol=1e-6)


def test_lyapunov_refuses_bad_arguments():
    model, idx = _model("fbt"), _idx()
    with pytest.raises(ValueError, match="t0"):
        jacobians.lyapunov(model, idx, t0=T - 1)
    with pytest.raises(ValueError, match="path"):
        jacobians.lyapunov(model, idx, t0=2, path="nope")
    with pytest.raises(ValueError, match="horizon"):
        jacobians.lyapunov(model, idx, t0=2, horizon=T)


# ------------------------------------------------------------------------------------------ fixed point
def test_fixed_point_quality_reaches_the_exact_recurrence_at_T_passes():
    model, idx = _model("fbt"), _idx()
    targets = _idx(1)
    quality = fixed_point.fixed_point_quality(model, idx, targets, passes=T)
    rows = quality.per_example
    last = rows[(rows["schedule"] == "multipass") & (rows["pass"] == T)]
    exact = rows[rows["schedule"] == "sequential"]
    assert last["distance"].max() < 1e-12
    np.testing.assert_allclose(last["loss"].to_numpy(), exact["loss"].to_numpy(), rtol=1e-10)
    # pass k is exact on the first k positions (causality), not beyond
    first = quality.per_position[quality.per_position["pass"] == 2]
    assert first.loc[first["position"] < 2, "distance"].max() < 1e-12 and first["distance"].max() > 1e-6


# ------------------------------------------------------------------------------------------ lens
def test_lens_final_depth_reads_the_model_and_the_tuned_lens_is_exact_at_the_top():
    model, idx = _model("fbt"), _idx()
    where = torch.tensor([T - 2] * B)
    logits = S.Multipass(3).run(model, idx).logits
    answer = logits[torch.arange(B), where].argmax(-1)  # the model's own final answer: rank 0 at the top
    tuned = fit_tuned_lens(model, _idx(5), where, passes=3, ridge=1e-9)
    out = fed_back_lens(model, idx, where, answer, passes=3, tuned=tuned)
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
    geo = fixed_point.iterate_geometry(model, idx, passes=T + 2, targets=_idx(1), rel_tol=1e-9, kl_tol=1e-12)
    assert geo.per_pass["stopped_share"].iloc[-1] == 1.0 and geo.passes_needed.max() <= T + 1
    assert (geo.passes_needed >= 1).all()
    out, used = fixed_point.adaptive_prefill(model, idx, max_passes=T + 5, rel_tol=1e-9, kl_tol=1e-12)
    assert used <= T + 1
    torch.testing.assert_close(out.logits, S.Sequential().run(model, idx).logits, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="rel_tol"):
        fixed_point.iterate_geometry(model, idx, passes=3, rel_tol=0)


@pytest.mark.parametrize("values, expected", [
    ([1.0, 0.1, 1e-3, 1e-5, 1e-7, 1e-9], "decays to zero"),
    ([1.0, 0.5, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2], "decays to a plateau"),
    ([1.0, 0.2, 1.0, 0.2, 1.0, 0.2, 1.0, 0.2], "oscillates"),
    ([0.1, 0.2, 0.4, 0.8, 1.6, 3.2], "grows"),
])
def test_residual_behaviour(values, expected):
    assert fixed_point.residual_behaviour(values) == expected


# ------------------------------------------------------------------------------------------ schedules
def test_fixed_point_schedule_trains_at_the_state_the_exact_recurrence_reaches():
    """With K >= T passes without gradient, the pass with gradient is the exact recurrence; the objective
    is the plain pass's loss plus aux x that pass's (jitter off: the pass with gradient trains with it)."""
    model, idx, targets = _model("fbt", fbt_jitter=0.0).train(), _idx(), _idx(1)
    out = S.FixedPoint(passes=T, tol=0.0, aux_weight=0.5).run(model, idx)
    with wb.model.eval_mode(model):
        exact = S.Sequential().run(model, idx)
    torch.testing.assert_close(out.logits, exact.logits, rtol=1e-9, atol=1e-9)
    plain, last = out.pass_losses(targets)
    torch.testing.assert_close(out.loss(targets), plain + 0.5 * last)
    assert S.parse({"schedule": "fixed_point", "passes": 7}) == S.FixedPoint(7)
    assert S.FixedPoint(7).label == "fixed_point(K=7)"
    with pytest.raises(ValueError, match="tol"):
        S.FixedPoint(3, tol=1.5)


def test_additive_fusion_keeps_the_token():
    """The additive variant's fused input stays close to the token's embedding; the paper's GLU replaces it."""
    idx = _idx()
    for fusion, lo, hi in (("glu", -1.0, 0.9), ("additive", 0.3, 1.0)):
        model = _model("fbt", fbt_fusion=fusion)
        _, cache = run_with_cache(model, idx, S.Multipass(2), names_filter="hook_input")
        cos = torch.nn.functional.cosine_similarity(cache.pass_(2)["hook_input"][:, 1:],
                                                    cache.pass_(1)["hook_input"][:, 1:], dim=-1).mean()
        assert lo < float(cos) < hi, fusion
    with pytest.raises(ValueError, match="fbt_fusion"):
        small_config("fbt", fbt_fusion="sum")


# ------------------------------------------------------------------------------------------ figures
def test_dynamics_figures_draw_what_they_are_given():
    model, idx, targets = _model("fbt"), _idx(), _idx(1)
    quality = {"a": fixed_point.fixed_point_quality(model, idx, targets, 4).per_example,
               "b": fixed_point.fixed_point_quality(_model("lrt"), idx, targets, 4).per_example}
    fig = wb.plots.fixed_point_accuracy(quality, trained_depth=3)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.lines) == 4  # a curve and a dashed exact line per model
    np.testing.assert_allclose(ax.lines[0].get_ydata(), quality["a"].query("schedule == 'multipass'")
                               .groupby("pass")["correct"].mean().to_numpy())
    exps = {"a": pd.concat([jacobians.lyapunov(model, idx, 4, path=p) for p in ("full", "memory")])}
    assert len(wb.plots.lyapunov_curves(exps).axes) == 2
    where = torch.tensor([T - 2] * B)
    lens = fed_back_lens(model, idx, where, idx[:, -1], passes=3)["lens"]
    fig = wb.plots.lens_by_pass({"a": lens, "b": lens})
    assert len([a for a in fig.axes if a.get_title() in ("a", "b")]) == 2
