"""Notebooks 00-03's package code: schedule agreement and cost, LRT statistics, their figures and widgets."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import plots, widgets
from workbench.analysis import lrt_state, work
from workbench.analysis import schedule_agreement as sa

T = 8


@pytest.fixture(scope="module")
def idx() -> torch.Tensor:
    return torch.randint(0, 23, (3, T), generator=torch.Generator().manual_seed(5))


@pytest.fixture(scope="module")
def lrt_model() -> wb.GPT:
    return perturbed_model(small_config("lrt", lrt_source_layer=1))


# ---------------------------------------------------------------------------------------------- work counts
@pytest.mark.parametrize("schedule, kwargs, forwards, token_forwards", [
    ("single", {}, 1, T), ("sequential", {}, T, T), ("multipass", {"passes": 3}, 3, 3 * T),
    ("interleaved", {"subsets": 4}, 5, 2 * T), ("blockwise", {"block": 3}, 3, T)])
def test_count_work_counts_what_each_schedule_runs(lrt_model, idx, schedule, kwargs, forwards, token_forwards):
    with work.count_work(lrt_model) as counted:
        wb.schedules.parse({"schedule": schedule, **kwargs}).run(lrt_model, idx)
    assert (counted.forwards, counted.token_forwards) == (forwards, token_forwards)
    with work.count_work(lrt_model) as after:
        pass
    assert after.forwards == 0  # the hook is gone once the block ends


def test_count_work_sees_a_kv_cache_decode(lrt_model, idx):
    with work.count_work(lrt_model) as counted:
        wb.generate(lrt_model, idx[:, :3], max_new_tokens=4, regime="soft")
    assert counted.forwards == 1 + 3 and counted.token_forwards == 3 + 3  # prefill, then one position per step


# ---------------------------------------------------------------------------------------------- agreement
def test_compare_schedules_exact_settings_have_zero_distance(lrt_model, idx):
    settings = ["single", "sequential", {"schedule": "multipass", "passes": T}, {"schedule": "interleaved",
                "subsets": T}, {"schedule": "blockwise", "block": 1}, {"schedule": "multipass", "passes": 2}]
    table = sa.compare_schedules(lrt_model, idx, settings).set_index("label")
    assert list(table.columns) == [c for c in sa.AGREEMENT_COLUMNS if c != "label"]
    for label in ("sequential", f"multipass(K={T})", f"interleaved(S={T})", "blockwise(B=1)"):
        assert table.loc[label, "distance"] < 1e-12 and table.loc[label, "agreement"] == 1.0
    assert table.loc["single", "distance"] > 1e-3  # the memory matters in this model
    assert table.loc["multipass(K=2)", "distance"] < table.loc["single", "distance"]
    assert table["loss"].isna().all()
    single = table.loc["single", "train_flops"]
    assert table.loc[f"multipass(K={T})", "train_flops"] == pytest.approx(T * single)
    assert table.loc[f"interleaved(S={T})", "train_flops"] == pytest.approx(2 * single)
    assert table.loc["blockwise(B=1)", "pass_equivalents"] == 1.0


def test_compare_schedules_takes_schedule_values_with_the_same_rows_as_their_string_form(lrt_model, idx):
    S = wb.schedules
    values = [S.Single(), S.Multipass(3), S.Interleaved(2), S.Blockwise(4)]
    named = ["single", {"schedule": "multipass", "passes": 3}, {"schedule": "interleaved", "subsets": 2},
             {"schedule": "blockwise", "block": 4}]
    table = sa.compare_schedules(lrt_model, idx, values)
    pd.testing.assert_frame_equal(table, sa.compare_schedules(lrt_model, idx, named))
    assert list(table["label"]) == [v.label for v in values] and list(table["parameter"]) == ["", "passes",
                                                                                             "subsets", "block"]
    assert sa.PARAMETERS == {k: v for k, v in S.KNOBS.items() if k != "fixed_point"}
    assert sa.SYMBOLS == {"passes": "K", "subsets": "S", "block": "B"}
    frame = sa.position_distance(lrt_model, idx, S.Multipass(3))
    assert (frame["label"] == "multipass(K=3)").all()


def test_compare_schedules_scores_only_target_positions(lrt_model, idx):
    targets = torch.roll(idx, -1, 1)
    targets[:, -1] = -1
    row = sa.compare_schedules(lrt_model, idx, ["single"], targets=targets).iloc[0]
    with torch.no_grad():
        logits = wb.schedules.Single().run(lrt_model, idx).logits
        exact = wb.schedules.Sequential().run(lrt_model, idx).logits
    hits = (logits.argmax(-1) == exact.argmax(-1))[:, :-1]
    assert row["agreement"] == pytest.approx(float(hits.double().mean()))
    assert row["loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, 23), targets[:, :-1].reshape(-1))))


def test_interleaved_with_one_subset_is_two_jacobi_passes(lrt_model, idx):
    table = sa.compare_schedules(lrt_model, idx, [{"schedule": "interleaved", "subsets": 1},
                                                  {"schedule": "multipass", "passes": 2}])
    assert table["distance"].iloc[0] == pytest.approx(table["distance"].iloc[1], rel=1e-9)


@pytest.mark.parametrize("settings, match", [
    ([], "settings"), (["nope"], "schedule"), ([{"schedule": "multipass"}], "passes"),
    ([{"schedule": "single", "passes": 2}], r"\['passes'\]"), ([{"schedule": "blockwise", "subsets": 2}], "block")])
def test_compare_schedules_rejects_bad_settings(lrt_model, idx, settings, match):
    with pytest.raises(ValueError, match=match):
        sa.compare_schedules(lrt_model, idx, settings)


def test_compare_schedules_rejects_bad_inputs(lrt_model, idx):
    with pytest.raises(ValueError, match="idx"):
        sa.compare_schedules(lrt_model, idx.float(), ["single"])
    with pytest.raises(ValueError, match="targets"):
        sa.compare_schedules(lrt_model, idx, ["single"], targets=idx[:, :2])
    with pytest.raises(ValueError, match="reference"):
        sa.compare_schedules(lrt_model, idx, ["single"], reference=torch.zeros(1, T, 23))


def test_schedule_sweep_covers_every_value_and_reaches_exactness(lrt_model, idx):
    sweep = sa.schedule_sweep(lrt_model, idx, "multipass")
    assert list(sweep["value"]) == list(range(1, T + 1))
    assert sweep["distance"].iloc[-1] < 1e-12 and sweep["distance"].iloc[0] > 1e-3
    blocks = sa.schedule_sweep(lrt_model, idx, "blockwise", values=[1, 4])
    assert list(blocks["forwards"]) == [T, 2]
    for schedule, values, match in (("single", None, "schedule"), ("multipass", [0], "values"),
                                    ("multipass", [T + 1], "values"), ("multipass", [], "values")):
        with pytest.raises(ValueError, match=match):
            sa.schedule_sweep(lrt_model, idx, schedule, values)


@pytest.mark.parametrize("passes", [1, 3, 5])
def test_position_distance_multipass_is_exact_on_its_first_k_positions(lrt_model, idx, passes):
    frame = sa.position_distance(lrt_model, idx, {"schedule": "multipass", "passes": passes})
    assert list(frame["position"]) == list(range(T)) and (frame["label"] == f"multipass(K={passes})").all()
    assert frame["distance"].iloc[:passes].max() < 1e-12
    assert frame["distance"].iloc[passes:].min() > 1e-9


# ---------------------------------------------------------------------------------------------- LRT state
def test_lrt_gates_match_a_hand_computed_gate(lrt_model, idx):
    gates = lrt_state.lrt_gates(lrt_model, idx)
    assert len(gates) == lrt_model.config.n_layer * T
    _, cache = wb.analysis.run_with_cache(lrt_model, idx, "sequential", names_filter="blocks.2.hook_resid_pre")
    x = torch.nn.functional.rms_norm(cache["blocks.2.hook_resid_pre"], (32,))
    by_hand = 2 * torch.sigmoid(x[..., :32] @ lrt_model.mechanism.gates[2].weight.detach().T)  # (B, T, 2 * kv_heads)
    by_hand = by_hand.view(3, T, 2, -1).mean(dim=(0, 3))
    rows = gates[gates["layer"] == 2]
    np.testing.assert_allclose(rows["gate_feedback"], by_hand[:, 1].numpy(), rtol=1e-10)
    np.testing.assert_allclose(rows["gate_local"], by_hand[:, 0].numpy(), rtol=1e-10)


def test_lrt_layer_stats_reads_scales_gates_and_source(lrt_model, idx):
    stats = lrt_state.lrt_layer_stats(lrt_model, idx)
    assert list(stats["layer"]) == [0, 1, 2] and list(stats["source"]) == [False, True, False]
    np.testing.assert_allclose(stats["gamma"], lrt_model.mechanism.gamma.detach().numpy())
    gates = lrt_state.lrt_gates(lrt_model, idx)
    expected = gates[(gates["layer"] == 0) & (gates["position"] > 0)]["gate_feedback"].mean()
    assert stats["gate_feedback"].iloc[0] == pytest.approx(expected)
    top = lrt_state.lrt_layer_stats(perturbed_model(small_config("lrt")), idx)
    assert list(top["source"]) == [False, False, True]


def test_lrt_stats_without_kv_or_residual_are_nan(idx):
    residual_only = perturbed_model(small_config("lrt", lrt_inject=("residual",)))
    assert lrt_state.lrt_gates(residual_only, idx).empty
    assert lrt_state.lrt_layer_stats(residual_only, idx)["gate_feedback"].isna().all()
    kv_only = lrt_state.lrt_layer_stats(perturbed_model(small_config("lrt", lrt_inject=("kv",))), idx)
    assert kv_only["gamma"].isna().all() and kv_only["gate_local"].notna().all()
    with pytest.raises(ValueError, match="mechanism"):
        lrt_state.lrt_layer_stats(perturbed_model(small_config("none")), idx)


# ---------------------------------------------------------------------------------------------- figures
def test_schedule_distance_draws_sweeps_selection_and_positions(lrt_model, idx):
    sweeps = pd.concat([sa.schedule_sweep(lrt_model, idx, s) for s in sa.PARAMETERS], ignore_index=True)
    fig = plots.schedule_distance(sweeps)
    assert len(fig.axes) == 1 and len(fig.axes[0].lines) == 3
    positions = {"multipass(K=3)": sa.position_distance(lrt_model, idx, {"schedule": "multipass", "passes": 3})}
    fig = plots.schedule_distance(sweeps, positions, {"multipass": 3})
    rings = [line for line in fig.axes[0].lines if line.get_markersize() == 11]
    assert len(fig.axes) == 2 and len(rings) == 1 and rings[0].get_xdata()[0] == 3
    assert fig.axes[1].lines[0].get_ydata()[0] < 1e-12 < fig.axes[1].lines[0].get_ydata()[-1]
    (blockwise,) = [line for line in fig.axes[0].lines if line.get_label() == "blockwise (B)"]
    assert math.isnan(blockwise.get_ydata()[0])  # B=1 is exactly sequential: a gap on the log axis, not -inf
    with pytest.raises(ValueError, match="distance"):
        plots.schedule_distance(sweeps.drop(columns="distance"))


def test_kv_cache_step_blanks_what_is_not_cached_yet():
    pattern = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    fig = plots.kv_cache_step(pattern, np.ones((4, 2)), position=1, labels=list("abcd"))
    shown = fig.axes[0].images[0].get_array()
    assert not np.ma.is_masked(shown[1, 1]) and np.isnan(np.ma.filled(shown, np.nan)[2, 0])
    assert "2 of 4 slots" in fig.axes[1].get_title()
    with pytest.raises(ValueError, match="position"):
        plots.kv_cache_step(pattern, np.ones((4, 2)), position=4)
    with pytest.raises(ValueError, match="pattern"):
        plots.kv_cache_step(pattern[:3], np.ones((4, 2)), position=0)


def test_lrt_mechanism_figure_has_a_gate_map_only_when_given(lrt_model, idx):
    stats = lrt_state.lrt_layer_stats(lrt_model, idx)
    assert len(plots.lrt_mechanism(stats).axes) == 2
    fig = plots.lrt_mechanism(stats)  # the gates start at 1 (2 sigmoid(0)): the line says so, in the one legend
    assert "gates at init (2 sigmoid(0) = 1)" in [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any(name in [t.get_text() for t in fig.legends[0].get_texts()]
                   for name in ("alpha", "gamma", "gate_local", "gate_feedback"))  # words, not code names
    with_map = plots.lrt_mechanism(stats, lrt_state.lrt_gates(lrt_model, idx), title="x")
    assert len(with_map.axes) == 4 and with_map.axes[3].get_ylabel() == "gate on the memory's K/V (1 at init)"
    with pytest.raises(ValueError, match="gamma"):
        plots.lrt_mechanism(stats.drop(columns="gamma"))


def test_lrt_mechanism_draws_the_scales_at_init_and_the_gate_takeaway(lrt_model, idx):
    stats = lrt_state.lrt_layer_stats(lrt_model, idx)
    fig = plots.lrt_mechanism(stats, gamma_init=0.1)
    at_init = {line.get_label(): line.get_ydata()[0] for line in fig.axes[0].lines}
    assert at_init == {r"$\alpha$ at init (1)": 1.0, r"$\gamma$ at init (0.1)": 0.1}
    assert len(plots.lrt_mechanism(stats).axes[0].lines) == 1  # no gamma_init: only alpha's
    below = int((stats["gate_feedback"] < stats["gate_local"]).sum())
    assert plots.gate_takeaway(stats).startswith(f"the memory's gate is below the local one in {below} of "
                                                 f"{len(stats)} blocks")
    with pytest.raises(ValueError, match="^gamma_init="):
        plots.lrt_mechanism(stats, gamma_init=float("nan"))


def test_kv_cache_step_has_labelled_colourbars_and_states_its_takeaway():
    pattern = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    fig = plots.kv_cache_step(pattern, np.ones((4, 2)), position=2)
    assert [ax.get_ylabel() for ax in fig.axes[2:]] == ["attention weight", "key value (per channel)"]
    assert fig.get_suptitle() == "each row sums to 1; nothing after t is read"
    leaky = np.full((4, 4), 0.25)
    assert "reads a later key" in plots.kv_cache_step(leaky, np.ones((4, 2)), position=2).get_suptitle()


# ---------------------------------------------------------------------------------------------- widgets
def test_schedule_explorer_follows_its_sliders(lrt_model, idx):
    targets = torch.roll(idx, -1, 1)
    explorer = widgets.schedule_explorer(lrt_model, idx, targets)
    assert "<b>multipass(K=2)</b>" in explorer.summary.value and "<th>loss</th>" in explorer.summary.value
    first = explorer.image.value
    explorer.controls["passes"].value = T
    exact = sa.compare_schedules(lrt_model, idx, [{"schedule": "multipass", "passes": T}]).iloc[0]
    summary = explorer.summary.value
    assert f"<b>multipass(K={T})</b></td><td>{widgets.core.format_number(exact['distance'])}</td>" in summary
    assert f"<td>{T}</td><td>{T * T}</td><td>{T}x</td>" in summary
    assert explorer.image.value != first
    explorer.controls["subsets"].value = 3
    assert "<b>interleaved(S=3)</b>" in explorer.summary.value and "<td>4</td><td>16</td><td>2x</td>" in \
        explorer.summary.value
    assert "interleaved(S=3)" in [t.get_text() for t in explorer.figure.axes[1].get_legend().get_texts()]
    before = explorer.image.value
    explorer.controls["block"].value = 2
    assert "<b>blockwise(B=2)</b>" in explorer.summary.value and explorer.image.value != before
    assert "blockwise(B=2)" in [t.get_text() for t in explorer.figure.axes[1].get_legend().get_texts()]
    assert all(c.max == T and c.continuous_update is False for c in explorer.controls.values())
    no_targets = widgets.schedule_explorer(lrt_model, idx[:1, :3], floor=2.5)
    assert "<th>loss</th>" not in no_targets.summary.value and "unigram loss" not in no_targets.summary.value


def test_schedule_explorer_shows_wall_clock_beside_flops_and_the_floor(lrt_model, idx):
    explorer = widgets.schedule_explorer(lrt_model, idx, torch.roll(idx, -1, 1), floor=2.5, floor_label="chance")
    summary = explorer.summary.value
    assert "<th>wall-clock here</th>" in summary and summary.count(" ms</td></tr>") == 3
    assert "chance loss 2.5: the floor" in summary


def test_kv_cache_explorer_steps_through_the_decode(lrt_model, idx):
    explorer = widgets.kv_cache_explorer(lrt_model, idx, decode=lambda i: chr(97 + i))
    assert "step t = 0" in explorer.summary.value and "holds 1 of 8 positions" in explorer.summary.value
    explorer.controls["position"].value = 5
    per_position = 2 * 3 * 32 * 8  # K and V, 3 layers, kv_dim 32, float64
    assert "holds 6 of 8 positions" in explorer.summary.value and f"({6 * per_position:,} bytes" in \
        explorer.summary.value
    assert f"&#x27;{chr(97 + int(idx[0, 5]))}&#x27;" in explorer.summary.value
    explorer.controls["layer"].value = 2
    explorer.controls["head"].value = 3
    assert "layer 2, head 3 attends most to" in explorer.summary.value
    assert "6 of 8 slots" in explorer.figure.axes[1].get_title()
    with pytest.raises(ValueError, match="idx"):
        widgets.kv_cache_explorer(lrt_model, idx[0])


def test_lrt_run_explorer_switches_runs_and_shows_the_recorded_metric(idx):
    models = {"mid": perturbed_model(small_config("lrt", lrt_source_layer=1)),
              "top": perturbed_model(small_config("lrt"), seed=1)}
    metrics = {"mid": {"eval": {"accuracy": 0.5}, "eval_schedule": {"schedule": "sequential"}}}
    explorer = widgets.lrt_run_explorer(models, idx, metrics)
    assert "<b>mid</b>: memory read from block 1 of 3" in explorer.summary.value
    assert "recorded accuracy (sequential decoding): <b>0.5</b>" in explorer.summary.value
    explorer.controls["run"].value = "top"
    assert "the top block" in explorer.summary.value and "recorded" not in explorer.summary.value
    stats = lrt_state.lrt_layer_stats(models["top"], idx)
    assert explorer.figure.get_suptitle() == f"top: {plots.gate_takeaway(stats)}"  # the run and its takeaway
    assert r"$\gamma$ at init (0)" in [line.get_label() for line in explorer.figure.axes[0].lines]
    with pytest.raises(ValueError, match="models"):
        widgets.lrt_run_explorer({}, idx)
