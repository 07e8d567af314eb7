"""Contraction analysis: the pass map reaches the exact fixed point on schedule, streams in constant
memory, and sensitivity and Jacobian norms agree with independent autograd and schedule paths."""

from __future__ import annotations

import math
import weakref

import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config, variant_config
from workbench.analysis import run_with_cache
from workbench.analysis.fixed_point import exact_by_causality, pass_dynamics
from workbench.analysis.jacobians import jacobian_norm, jacobian_power_iteration, pass_map_jacobian, sensitivity
from workbench.analysis.schedule_agreement import jacobi_errors
from workbench.analysis.trajectory import decoding_states, memory_trajectory

T = 8


@pytest.fixture(scope="module")
def models() -> dict[str, wb.GPT]:
    models = {name: perturbed_model(small_config(name)) for name in ("none", "lrt", "fbt")}
    models["lrt_mid"] = perturbed_model(variant_config("lrt_per_layer_mid"))  # memory from block 1 of 3
    return models


def _idx(B: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- pass_dynamics
@pytest.mark.parametrize("mechanism", ["lrt", "lrt_mid", "fbt"])
def test_fixed_point_is_reached_at_pass_T_and_not_before(models, mechanism):
    df = pass_dynamics(models[mechanism], _idx(), passes=T + 3)
    assert list(df["pass"]) == list(range(1, T + 4))
    assert math.isnan(df["delta"].iloc[0]) and math.isnan(df["contraction_rate"].iloc[0])
    dist = df.set_index("pass")["fixed_point_distance"]
    assert (dist.loc[T:] < 1e-10).all()
    assert dist.loc[T - 1] > 1e-6
    assert (df["delta"].iloc[1:T] > 0).all()  # the residual is real until the fixed point
    assert df["loss"].isna().all()  # no targets given


def test_a_plain_prefix_reaches_the_fixed_point_sooner(models, capsys):
    """Positions < p read nothing, so the last position is exact after T - p + 1 passes."""
    p = 3
    df = pass_dynamics(models["fbt"], _idx(), passes=T, plain_prefix=p, progress=True)
    dist = df.set_index("pass")["fixed_point_distance"]
    assert (dist.loc[T - p + 1:] < 1e-10).all() and dist.loc[T - p] > 1e-6
    assert "passes" in capsys.readouterr().err  # the progress bar


def test_baseline_is_converged_after_one_pass(models):
    df = pass_dynamics(models["none"], _idx(), passes=4)
    assert (df["fixed_point_distance"] < 1e-10).all()
    assert (df["delta"].iloc[1:] == 0).all()


def test_losses_match_the_multipass_schedule(models):
    idx = _idx()
    targets = torch.roll(idx, -1, dims=1)
    targets[:, -1] = -1
    df = pass_dynamics(models["fbt"], idx, passes=3, targets=targets)
    with torch.no_grad():
        expected = wb.schedules.Multipass(3).run(models["fbt"], idx).pass_losses(targets)
    assert df["loss"].tolist() == pytest.approx([float(x) for x in expected], rel=1e-12)


def test_given_reference_is_used_as_the_fixed_point(models):
    model, idx = models["lrt"], _idx()
    exact = wb.schedules.Sequential().run(model, idx).memory
    own = pass_dynamics(model, idx, passes=3)
    given = pass_dynamics(model, idx, passes=3, reference=exact)
    assert given["fixed_point_distance"].tolist() == pytest.approx(own["fixed_point_distance"].tolist(), abs=1e-14)
    moved = pass_dynamics(model, idx, passes=T, reference=exact * 2)
    assert moved["fixed_point_distance"].iloc[-1] == pytest.approx(0.5, rel=1e-9)


@pytest.mark.parametrize("prefix", [0, 1, 3])
def test_exact_by_causality_marks_exactly_the_positions_the_passes_have_settled(models, prefix):
    """Every marked position has its sequential memory (to rounding); the first unmarked one does not yet."""
    model, idx = models["fbt"], _idx()
    errors = jacobi_errors(model, idx, passes=T, plain_prefix=prefix).set_index(["pass", "position"])["error"]
    for k in range(1, T + 1):
        marked = exact_by_causality(2, T, k, prefix)
        assert (marked[0] == marked[1]).all()
        n = int(marked[0].sum())
        assert all(errors.loc[(k, t)] < 1e-10 for t in range(n))
        if n < T:
            assert errors.loc[(k, n)] > 1e-6


def test_a_window_is_measured_on_its_positions_only(models):
    """``from_position`` restricts norms and loss to t >= it: recomputed by hand from the multipass passes;
    no position of the window is exact by causality until the passes reach it."""
    model, idx, w = models["fbt"], _idx(), 5
    targets = torch.roll(idx, -1, dims=1)
    targets[0, w + 1] = -1  # an ignored target inside the window
    df = pass_dynamics(model, idx, passes=T, targets=targets, from_position=w, keep_examples=True)
    assert (df["exact_by_causality"].iloc[:w] == 0).all() and (df["exact_by_causality"].iloc[w:] > 0).all()
    assert df["exact_by_causality"].iloc[-1] == 1.0
    with torch.no_grad():
        exact = wb.schedules.Sequential().run(model, idx).memory[:, w:].double()
        out = wb.schedules.Multipass(3).run(model, idx)
        m2, m3 = (o.double()[:, w:] for o in (wb.schedules.Multipass(2).run(model, idx).memory, out.memory))
    row = df.set_index("pass").loc[3]
    assert row["delta"] == pytest.approx(float(torch.linalg.vector_norm(m3 - m2) / torch.linalg.vector_norm(m3)))
    assert row["fixed_point_distance"] == pytest.approx(
        float(torch.linalg.vector_norm(m3 - exact) / torch.linalg.vector_norm(exact)))
    window = targets.clone()
    window[:, :w] = -1
    assert row["loss"] == pytest.approx(float(wb.metrics.mean_token_loss(out.logits, window)), rel=1e-12)
    per_example = [float(wb.metrics.mean_token_loss(out.logits[b:b + 1], window[b:b + 1])) for b in range(2)]
    assert row["example_loss"] == pytest.approx(per_example, rel=1e-12)
    with pytest.raises(ValueError, match="from_position"):
        pass_dynamics(model, idx, passes=2, from_position=T)
    with pytest.raises(ValueError, match="keep_examples"):
        pass_dynamics(model, idx, passes=2, keep_examples=True)


def test_memory_stays_constant_over_hundreds_of_passes(models):
    """Every pass's memory tensor is freed once the next pass has used it: at most a couple are alive."""
    model, idx = models["fbt"], _idx()
    reference = wb.schedules.Sequential().run(model, idx).memory
    seen: list[weakref.ref] = []
    alive_counts: list[int] = []

    def track(tensor, hook):
        alive_counts.append(sum(ref() is not None for ref in seen))
        seen.append(weakref.ref(tensor))

    with wb.with_hooks(model, [("hook_memory", track)]):
        df = pass_dynamics(model, idx, passes=300, reference=reference)
    assert len(df) == 300 and len(seen) == 300
    assert max(alive_counts) <= 3
    assert df["fixed_point_distance"].iloc[-1] < 1e-10


def test_pass_dynamics_restores_training_mode(models):
    model = models["fbt"]
    model.train()
    try:
        df = pass_dynamics(model, _idx(), passes=T)  # eval inside: no jitter, so exact at pass T
        assert model.training
        assert df["fixed_point_distance"].iloc[-1] < 1e-10
    finally:
        model.eval()


@pytest.mark.parametrize("kwargs,field", [(dict(passes=0), "passes"), (dict(passes=True), "passes"),
                                           (dict(targets=torch.zeros(2, 3, dtype=torch.long)), "targets"),
                                           (dict(reference=torch.zeros(2, T, 5)), "reference"),
                                           (dict(plain_prefix=-1), "plain_prefix")])
def test_pass_dynamics_rejects_bad_input(models, kwargs, field):
    with pytest.raises(ValueError, match=field):
        pass_dynamics(models["fbt"], _idx(), **kwargs)


def test_bad_tokens_are_rejected(models):
    with pytest.raises(ValueError, match="idx"):
        pass_dynamics(models["fbt"], torch.full((1, 4), 99), passes=1)
    with pytest.raises(ValueError, match="idx"):
        sensitivity(models["fbt"], torch.zeros(4, dtype=torch.long), 0)


# ---------------------------------------------------------------------------------------------- sensitivity
def test_sensitivity_table_shape_and_finiteness(models):
    df = sensitivity(models["fbt"], _idx(), t0=2)
    assert list(df.columns) == ["distance", "position", "effect", "logit_effect"]
    assert df["distance"].tolist() == list(range(1, T - 2)) and df["position"].tolist() == list(range(3, T))
    assert df[["effect", "logit_effect"]].map(math.isfinite).all().all()
    assert (df["effect"] > 0).all()
    assert len(sensitivity(models["lrt"], _idx(), t0=0, max_distance=3)) == 3


def test_without_a_mechanism_the_effect_is_exactly_zero(models):
    df = sensitivity(models["none"], _idx(), t0=1)
    assert (df["effect"] == 0).all() and (df["logit_effect"] == 0).all()


@pytest.mark.parametrize("mechanism", ["lrt", "fbt"])
def test_one_step_sensitivity_is_bounded_by_the_jacobian_norm(models, mechanism):
    """Distance 1 is ||J u|| for a unit u (to first order in eps), so it cannot exceed the spectral norm."""
    model, idx = models[mechanism], _idx(B=1)
    effect = sensitivity(model, idx, t0=3, max_distance=1, eps=1e-7)["effect"].iloc[0]
    assert 0 < effect <= jacobian_norm(model, idx, t=4) * (1 + 1e-4)


@pytest.mark.parametrize("kwargs,field", [(dict(t0=T - 1), "t0"), (dict(t0=-1), "t0"),
                                           (dict(t0=2, max_distance=T), "max_distance"),
                                           (dict(t0=2, max_distance=0), "max_distance"),
                                           (dict(t0=2, eps=0.0), "eps")])
def test_sensitivity_rejects_bad_input(models, kwargs, field):
    with pytest.raises(ValueError, match=field):
        sensitivity(models["fbt"], _idx(), **kwargs)


# ---------------------------------------------------------------------------------------------- jacobian
def _exact_jacobian_norm(model: wb.GPT, idx: torch.Tensor, t: int) -> float:
    """Spectral norm of d m_t / d m_{t-1} from a full causal forward (no KV cache) fed the exact memories."""
    B = idx.size(0)
    exact = wb.schedules.Sequential().run(model, idx).memory
    memory_in = wb.schedules.shift_right(exact[:, : t + 1])
    reads = wb.schedules.feedback_mask(B, t + 1)

    def one_step(m: torch.Tensor) -> torch.Tensor:
        mem = torch.cat([memory_in[:, :t], m[:, None]], dim=1)
        return model.step(idx[:, : t + 1], memory=mem, memory_mask=reads).memory[:, t]

    J = torch.autograd.functional.jacobian(one_step, memory_in[:, t])  # (B, D, B, D): block-diagonal
    D = J.size(-1)
    return float(torch.linalg.matrix_norm(J.reshape(B * D, B * D), ord=2))


@pytest.mark.parametrize("mechanism", ["lrt", "lrt_mid", "fbt"])
def test_power_iteration_matches_the_exact_jacobian_norm(models, mechanism):
    model, idx, t = models[mechanism], _idx(B=2), 5
    result = jacobian_power_iteration(model, idx, t, iters=60)
    assert result["norm"] == pytest.approx(_exact_jacobian_norm(model, idx, t), rel=1e-8)
    assert result["per_example"].shape == (2,) and len(result["estimates"]) == 60
    for b in range(2):  # each example's estimate is its own block's norm
        single = _exact_jacobian_norm(model, idx[b:b + 1], t)
        assert float(result["per_example"][b]) == pytest.approx(single, rel=1e-6)


def test_jacobian_without_a_mechanism_is_zero(models):
    assert jacobian_norm(models["none"], _idx(), t=3, iters=3) == 0.0


@pytest.mark.parametrize("kwargs,field", [(dict(t=0), "t"), (dict(t=T), "t"), (dict(t=2, iters=0), "iters")])
def test_jacobian_rejects_bad_input(models, kwargs, field):
    with pytest.raises(ValueError, match=field):
        jacobian_norm(models["fbt"], _idx(), **kwargs)


def _exact_pass_map_norm(model: wb.GPT, idx: torch.Tensor) -> float:
    """Spectral norm of one whole Jacobi pass's Jacobian at the fixed point, from the full matrix."""
    exact = wb.schedules.Sequential().run(model, idx).memory
    reads = wb.schedules.feedback_mask(*idx.shape)

    def one_pass(m: torch.Tensor) -> torch.Tensor:
        return model.step(idx, memory=wb.schedules.shift_right(m), memory_mask=reads).memory

    n = exact.numel()
    J = torch.autograd.functional.jacobian(one_pass, exact).reshape(n, n)
    return float(torch.linalg.matrix_norm(J, ord=2))


@pytest.mark.parametrize("mechanism", ["lrt", "fbt"])
def test_pass_map_power_iteration_matches_the_full_jacobian(models, mechanism):
    model, idx = models[mechanism], _idx(B=1)
    result = pass_map_jacobian(model, idx, iters=200)
    assert result["norm"] == pytest.approx(_exact_pass_map_norm(model, idx), rel=1e-6)
    assert len(result["estimates"]) == 200 and result["per_example"].shape == (1,)


def test_pass_map_is_nilpotent_whatever_its_norm(models):
    """The pass map is strictly causal: T products of its Jacobian vanish, so the iteration settles in T passes
    even where the norm exceeds 1 (why a norm above 1 is no divergence certificate)."""
    model, idx = models["fbt"], _idx(B=1)
    exact = wb.schedules.Sequential().run(model, idx).memory
    reads = wb.schedules.feedback_mask(*idx.shape)
    n = exact.numel()
    J = torch.autograd.functional.jacobian(
        lambda m: model.step(idx, memory=wb.schedules.shift_right(m), memory_mask=reads).memory, exact).reshape(n, n)
    assert pass_map_jacobian(model, idx, iters=50)["norm"] > 0
    assert float(torch.linalg.matrix_norm(torch.linalg.matrix_power(J, T), ord=2)) < 1e-10


def test_pass_map_jacobian_without_a_mechanism_is_zero_and_rejects_bad_input(models):
    assert pass_map_jacobian(models["none"], _idx(), iters=3)["norm"] == 0.0
    with pytest.raises(ValueError, match="iters"):
        pass_map_jacobian(models["fbt"], _idx(), iters=0)


# ---------------------------------------------------------------------------------------------- trajectory
def test_memory_trajectory_indexes_the_sequential_run(models):
    model, idx = models["lrt_mid"], _idx()
    df = memory_trajectory(model, idx, top_k=3)
    assert len(df) == 2 * T
    assert list(df.columns) == ["example", "position", "token", "reads", "state_norm", "cosine_prev",
                                "top_tokens", "top_probs"]
    first = df[df["position"] == 0]
    assert first["cosine_prev"].isna().all() and not first["reads"].any()
    rest = df[df["position"] > 0]
    assert rest["reads"].all() and rest["cosine_prev"].between(-1, 1).all()
    logits = wb.schedules.Sequential().run(model, idx).logits
    assert df["top_tokens"].map(lambda x: x[0]).tolist() == logits.argmax(-1).reshape(-1).tolist()
    assert df["token"].tolist() == idx.reshape(-1).tolist()
    state = run_with_cache(model, idx, "sequential", names_filter="blocks.1.hook_resid_post")[1]
    assert df["state_norm"].tolist() == pytest.approx(
        torch.linalg.vector_norm(state["blocks.1.hook_resid_post"], dim=-1).reshape(-1).tolist())
    with pytest.raises(ValueError, match="top_k"):
        memory_trajectory(model, idx, top_k=0)


# ---------------------------------------------------------------------------------------------- decoding
def test_decoding_states_follow_a_soft_generation(models):
    """One row per position run (prompt, then every generated token but the last, which is never run);
    the prompt's norms are the plain forward's state at the source depth."""
    model, idx = models["fbt"], _idx()
    df = decoding_states(model, idx[:, :4], max_new_tokens=6)
    assert list(df.columns) == ["position", "generated", "state_norm_mean", "state_norm_max"]
    assert df["position"].tolist() == list(range(4 + 5)) and df["generated"].tolist() == [False] * 4 + [True] * 5
    assert (df["state_norm_max"] >= df["state_norm_mean"]).all() and (df["state_norm_mean"] > 0).all()
    state = run_with_cache(model, idx[:, :4], "single", names_filter="blocks.2.hook_resid_post")[1]
    norms = torch.linalg.vector_norm(state["blocks.2.hook_resid_post"], dim=-1)
    assert df["state_norm_mean"].iloc[:4].tolist() == pytest.approx(norms.mean(0).tolist())
    with pytest.raises(ValueError, match="max_new_tokens"):
        decoding_states(model, idx[:, :4], max_new_tokens=0)


# ---------------------------------------------------------------------------------------------- explorer
def test_pass_window_explorer_marks_the_window_and_follows_the_slider(models):
    from workbench.widgets.fbt import pass_window_explorer

    idx, w = _idx(), 5
    targets = torch.roll(idx, -1, dims=1)
    stacked = pd.concat([pass_dynamics(models[m], idx, passes=w, targets=targets, from_position=w).assign(run=m)
                         for m in ("fbt", "lrt")])
    explorer = pass_window_explorer(stacked, seq_len=T, from_position=w, depths={"trained depth 2": 2})
    assert explorer.controls["pass_"].max == w and explorer.controls["pass_"].value == w
    explorer.controls["pass_"].value = 3
    assert "pass 3 of 5" in explorer.summary.value and "fbt" in explorer.summary.value
    assert "since pass 2" in explorer.summary.value and "exact by causality 0" in explorer.summary.value
    assert f"T = {T}" in explorer.figure.get_suptitle() and "t >= 5" in explorer.figure.get_suptitle()
    explorer.controls["run"].value = "lrt"
    assert "fbt" not in explorer.summary.value
    with pytest.raises(ValueError, match="dynamics"):
        pass_window_explorer(stacked.drop(columns="run"), T, w, {})
    with pytest.raises(ValueError, match="from_position"):
        pass_window_explorer(stacked, T, T, {})


def test_pass_window_explorer_never_draws_more_runs_than_a_panel_holds(models):
    """Seven runs (three arms of two seeds and an LRT) are shown seed by seed, every arm in each view."""
    from workbench.widgets.fbt import MAX_RUNS_SHOWN, pass_window_explorer, run_views

    idx, w = _idx(), 3
    frame = pass_dynamics(models["fbt"], idx, passes=w, targets=torch.roll(idx, -1, dims=1), from_position=w)
    names = [f"{arm}_s{seed}" for arm in ("a", "b", "c") for seed in (0, 1)] + ["lrt"]
    explorer = pass_window_explorer(pd.concat([frame.assign(run=n) for n in names]), T, w, {})
    assert list(explorer.controls["run"].options) == ["every arm, seed 0", "every arm, seed 1", *names]
    for view in ("every arm, seed 0", "every arm, seed 1"):
        explorer.controls["run"].value = view
        lines = [line for line in explorer.figure.axes[1].lines if not line.get_label().startswith("_")]
        assert len(lines) == 4 <= MAX_RUNS_SHOWN and "lrt" in explorer.summary.value, view
    assert run_views(names[:2]) == {"all": names[:2]}
