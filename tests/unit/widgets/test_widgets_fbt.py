"""FBT notebooks' package code: fusion analysis, regime scoring, Jacobi settling, their figures and widgets."""

from __future__ import annotations

import math

import ipywidgets
import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import plots, schedules, widgets
from workbench.analysis import fixed_point, fusion, regimes, schedule_agreement
from workbench.functional import norm

T = 7


@pytest.fixture(scope="module")
def fbt_model() -> wb.GPT:
    return perturbed_model(small_config("fbt"))


@pytest.fixture(scope="module")
def idx() -> torch.Tensor:
    return torch.randint(0, 23, (2, T), generator=torch.Generator().manual_seed(5))


# ---------------------------------------------------------------------------------------------- bandwidth
def test_feedback_bandwidth_counts_token_bits_against_state_bits():
    config = wb.ModelConfig(vocab_size=65536, n_embd=1280, n_head=10)
    out = fusion.feedback_bandwidth(config, bits_per_value=16)
    assert out["token_bits"] == 16.0 and out["state_bits"] == 1280 * 16 and out["ratio"] == 1280.0
    with pytest.raises(ValueError, match="bits_per_value"):
        fusion.feedback_bandwidth(config, bits_per_value=0)
    with pytest.raises(ValueError, match="config"):
        fusion.feedback_bandwidth({"vocab_size": 4})


# ---------------------------------------------------------------------------------------------- fusion parts
def test_fusion_parts_decomposes_the_models_own_input(fbt_model, idx):
    frame = fusion.fusion_parts(fbt_model, idx, plain_prefix=3)
    assert list(frame.columns) == fusion.FUSION_COLUMNS and len(frame) == 2 * T
    plain = frame[~frame["reads"]]
    assert sorted(plain["position"].unique()) == [0, 1, 2]
    assert plain["value_rms"].isna().all() and plain["cos_value"].isna().all()
    np.testing.assert_allclose(plain["cos_embed"], 1.0, atol=1e-12)
    # recompute one fused position by hand from the weights
    memory = schedules.Sequential().run(fbt_model, idx, 3).memory
    t = 5
    with torch.no_grad():
        e = norm(fbt_model.wte.weight[idx[0, t]])
        value = fbt_model.mechanism.W_U(memory[0, t - 1])
        u = norm(value * torch.sigmoid(fbt_model.mechanism.W_G(e)))
    row = frame[(frame["example"] == 0) & (frame["position"] == t)].iloc[0]
    assert row["value_rms"] == pytest.approx(float(value.square().mean().sqrt()), rel=1e-9)
    assert row["cos_value"] == pytest.approx(float(torch.nn.functional.cosine_similarity(u, value, dim=0)), rel=1e-9)
    assert row["cos_embed"] == pytest.approx(float(torch.nn.functional.cosine_similarity(u, e, dim=0)), rel=1e-9)


def test_fusion_parts_needs_an_fbt_model(idx):
    with pytest.raises(ValueError, match="mechanism"):
        fusion.fusion_parts(perturbed_model(small_config("lrt")), idx)


# ---------------------------------------------------------------------------------------------- regimes
@pytest.mark.parametrize("regime", ["standard", "soft", "fused"])
def test_regime_logits_match_generation(fbt_model, idx, regime):
    prompt_len = 3
    out, logits = wb.generate(fbt_model, idx[:, :prompt_len], T - prompt_len, regime=regime, prefill_passes=2,
                              return_logits=True)
    teacher = regimes.regime_logits(fbt_model, out, prompt_len, regime, prefill_passes=2)
    assert teacher.shape == (2, T, 23)
    torch.testing.assert_close(teacher[:, prompt_len - 1:-1], logits, rtol=1e-10, atol=1e-10)


def test_regime_logits_differ_between_regimes_and_validate(fbt_model, idx):
    standard = regimes.regime_logits(fbt_model, idx, 3, "standard")
    soft = regimes.regime_logits(fbt_model, idx, 3, "soft")
    torch.testing.assert_close(standard[:, :3], soft[:, :3])  # the prompt is plain under both
    assert not torch.allclose(standard[:, 3:], soft[:, 3:])
    whole = regimes.regime_logits(fbt_model, idx, T, "fused", prefill_passes=T)  # all prompt: exact recurrence
    torch.testing.assert_close(whole, schedules.Sequential().run(fbt_model, idx).logits, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="regime"):
        regimes.regime_logits(fbt_model, idx, 3, "hard")
    with pytest.raises(ValueError, match="prompt_len"):
        regimes.regime_logits(fbt_model, idx, 0)
    with pytest.raises(ValueError, match="prefill_passes"):
        regimes.regime_logits(fbt_model, idx, 3, "fused", prefill_passes=0)


def test_regime_losses_score_only_the_continuation(fbt_model, idx):
    frame = regimes.regime_losses(fbt_model, idx, 3, prefill_passes=2)
    assert list(frame["regime"].unique()) == ["standard", "soft", "fused"]
    assert sorted(frame["position"].unique()) == list(range(2, T - 1))  # the last position has no target
    logits = regimes.regime_logits(fbt_model, idx, 3, "soft")
    expected = torch.nn.functional.cross_entropy(logits[:, 4].double(), idx[:, 5])
    got = frame[(frame["regime"] == "soft") & (frame["position"] == 4)]["loss"].item()
    assert got == pytest.approx(float(expected), rel=1e-9)
    with pytest.raises(ValueError, match="regimes"):
        regimes.regime_losses(fbt_model, idx, 3, regimes=("nope",))
    with pytest.raises(ValueError, match="targets"):
        regimes.regime_losses(fbt_model, idx, 3, targets=idx[:, :3])


# ---------------------------------------------------------------------------------------------- jacobi
def test_jacobi_errors_show_the_staircase(fbt_model, idx):
    frame = schedule_agreement.jacobi_errors(fbt_model, idx)
    assert list(frame.columns) == schedule_agreement.JACOBI_COLUMNS and frame["pass"].max() == T
    table = frame.pivot(index="pass", columns="position", values="error").to_numpy()
    for k in range(1, T + 1):
        assert (table[k - 1, :k] < 1e-10).all()  # pass k is exact at positions < k
        if k < T:
            assert table[k - 1, k] > 1e-6  # ... and not yet at position k
    assert schedule_agreement.jacobi_errors(fbt_model, idx, passes=2)["pass"].max() == 2
    with pytest.raises(ValueError, match="passes"):
        schedule_agreement.jacobi_errors(fbt_model, idx, passes=0)


# ---------------------------------------------------------------------------------------------- plots
def test_plots_of_notebooks_04_06(fbt_model, idx):
    fig = plots.jacobi_settling(schedule_agreement.jacobi_errors(fbt_model, idx))
    assert fig.axes[0].get_xlabel() == "position t" and len(fig.axes) == 2  # map and colour bar
    history = pd.DataFrame({"step": [1, 2, 3, 4], "loss_pass1": [3.0, 2.9, 2.8, 2.7],
                            "loss_pass2": [math.nan, 2.95, math.nan, 2.75], "loss_pass3": [math.nan] * 3 + [2.7]})
    fig = plots.pass_losses({"mix": history, "one": history[["step", "loss_pass1"]]})
    labels = [t.get_text() for t in fig.legends[0].get_texts()]  # one legend for every panel, below them
    assert labels == ["pass 1", "pass 2", "pass 3"]
    assert fig.axes[0].get_title().endswith("logged steps: pass 1 4, pass 2 2, pass 3 1")
    assert len(fig.axes[1].lines) == 1
    frame = regimes.regime_losses(fbt_model, idx, 3)
    fig = plots.regime_losses(frame)
    assert len(fig.axes[0].lines) == 3
    with pytest.raises(ValueError, match="loss_pass1"):
        plots.pass_losses(pd.DataFrame({"step": [1]}))
    with pytest.raises(ValueError, match="regime_losses"):
        plots.regime_losses(pd.DataFrame({"regime": []}))


# ---------------------------------------------------------------------------------------------- widgets
def test_regime_explorer_follows_regime_and_prefill_passes(fbt_model, idx):
    def decode(ids: list[int]) -> str:  # ids as their digits: enough to find them in the summary
        return "".join(map(str, ids))

    explorer = widgets.regime_explorer(fbt_model, idx[:1], 3, decode=decode)
    assert isinstance(explorer, ipywidgets.VBox)
    assert "<b>soft</b> (prefill passes apply to fused only)" in explorer.summary.value
    soft_image = explorer.image.value
    lines = {line.get_label().split(" ")[0] for line in explorer.figure.axes[0].lines}
    assert lines == {"standard", "soft"}
    explorer.controls["regime"].value = "fused"
    explorer.controls["prefill_passes"].value = 3
    assert "<b>fused</b>, 3 fused prefill pass(es)" in explorer.summary.value
    out = wb.generate(fbt_model, idx[:1, :3], T - 3, regime="fused", prefill_passes=3)
    assert decode(out[0, 3:].tolist()) in explorer.summary.value
    loss = regimes.regime_losses(fbt_model, idx[:1], 3, ("fused",), prefill_passes=3)["loss"].mean()
    assert f"its loss under fused {widgets.core.format_number(loss)}" in explorer.summary.value
    assert explorer.image.value != soft_image
    explorer.controls["regime"].value = "standard"
    assert len(explorer.figure.axes[0].lines) == 1
    with pytest.raises(ValueError, match="prompt_len"):
        widgets.regime_explorer(fbt_model, idx[:1], T, decode=str)
    with pytest.raises(ValueError, match="^floor="):
        widgets.regime_explorer(fbt_model, idx[:1], 3, decode=str, floor=math.nan)
    with pytest.raises(ValueError, match="tokens"):
        widgets.regime_explorer(fbt_model, idx, 3, decode=str)


def test_probe_compute_probes_every_model_once_per_task(monkeypatch):
    calls = []

    def fake_probe_layers(model, task, conditions, **kw):
        calls.append((model, task.name, conditions, kw["n"]))
        return pd.DataFrame([{"model": "trained", "task": task.name, "condition": c, "layer": layer,
                              "accuracy": 0.5 + 0.1 * layer + (0.2 if model == "b" else 0.0)}
                             for c in conditions for layer in range(3)])

    monkeypatch.setattr(widgets.fbt, "probe_layers", fake_probe_layers)
    compute = widgets.probe_compute({"delayed_memory": {"baseline": "a", "FBT": "b"}}, ["standard", "suffix1"], n=16)
    first = compute("delayed_memory", "suffix1")
    assert set(first["condition"]) == {"suffix1"} and sorted(first["model"].unique()) == ["FBT", "baseline"]
    compute("delayed_memory", "standard")
    assert [c[0] for c in calls] == ["a", "b"] and calls[0][2:] == (("standard", "suffix1"), 16)
    explorer = widgets.probe_explorer(compute, ["delayed_memory"], ["standard", "suffix1"])
    assert "FBT: accuracy 0.7" in explorer.summary.value
    explorer.controls["depth"].value = 2
    assert "FBT: accuracy 0.9" in explorer.summary.value and len(calls) == 2
    with pytest.raises(ValueError, match="condition"):
        compute("delayed_memory", "sequential")
    with pytest.raises(ValueError, match="task"):
        compute("multi_register", "standard")
    with pytest.raises(ValueError, match=r"models.*\['nope'\]"):
        widgets.probe_compute({"nope": {"a": "a"}}, ["standard"])
    with pytest.raises(ValueError, match="conditions"):
        widgets.probe_compute({"delayed_memory": {"a": "a"}}, ["suffix0"])
    with pytest.raises(ValueError, match="n="):
        widgets.probe_compute({"delayed_memory": {"a": "a"}}, ["standard"], n=2)


def test_probe_compute_runs_real_probes():
    model = wb.build_model(wb.ModelConfig(vocab_size=wb.tasks.get("delayed_memory").vocab_size, n_layer=1,
                                          n_head=2, n_embd=16, seq_len=160, mechanism="fbt", tie_embeddings=True))
    compute = widgets.probe_compute({"delayed_memory": {"FBT": model}}, ["standard", "suffix1"], n=16)
    frame = compute("delayed_memory", "suffix1")
    assert list(frame["layer"]) == [0, 1] and (frame["model"] == "FBT").all()
    assert frame["accuracy"].between(0, 1).all()


def test_pass_milestones_reads_training_depths_T_and_the_tail(fbt_model, idx):
    long = wb.analysis.pass_dynamics(fbt_model, idx, passes=T + 3, targets=idx)
    short = wb.analysis.pass_dynamics(fbt_model, idx, passes=T - 2, targets=idx)
    table = fixed_point.pass_milestones({"long": long, "short": short}, seq_len=T, tol=1e-10).set_index("run")
    assert table.loc["long", "settled_at"] == T and math.isnan(table.loc["short", "settled_at"])
    assert table.loc["long", "passes"] == T + 3 and table.loc["short", "passes"] == T - 2
    assert table.loc["long", "loss_pass2"] == long.loc[1, "loss"]
    assert table.loc["long", "loss_at_T"] == pytest.approx(table.loc["long", "loss_last"], abs=1e-10)
    assert math.isnan(table.loc["short", "loss_at_T"])
    assert table.loc["long", "rate_before_T"] == long.loc[long["pass"] < T, "contraction_rate"].median()
    with pytest.raises(ValueError, match="pass_dynamics"):
        fixed_point.pass_milestones({"x": pd.DataFrame({"pass": [1]})}, seq_len=T)
    with pytest.raises(ValueError, match="seq_len"):
        fixed_point.pass_milestones({"long": long}, seq_len=0)


def test_regime_explorer_draws_the_floor_and_titles_the_difference_from_standard(fbt_model, idx):
    explorer = widgets.regime_explorer(fbt_model, idx[:1], 3, decode=str, floor=2.5, floor_label="unigram")
    ax = explorer.figure.axes[0]
    assert [line.get_ydata()[0] for line in ax.lines if line.get_label() == "unigram 2.500"] == [2.5]
    frame = regimes.regime_losses(fbt_model, idx[:1], 3, ("standard", "soft"))
    means = frame.groupby("regime")["loss"].mean()
    assert ax.get_title().startswith(f"soft - standard: {means['soft'] - means['standard']:+.3f} nats / token")


def test_pass_window_explorer_draws_the_chance_line_on_the_loss_panel():
    k = np.arange(1, 6)
    stacked = pd.concat([pd.DataFrame({"run": name, "pass": k, "delta": 0.5 ** k, "fixed_point_distance": 0.5 ** k,
                                       "loss": 1.0 + 0.1 * k, "exact_by_causality": 0.0}) for name in ("a", "b")])
    explorer = widgets.pass_window_explorer(stacked, seq_len=8, from_position=4, depths={"trained depth 2": 2},
                                            chance={"chance 0.693": 0.693})
    loss_panel = explorer.figure.axes[2]
    assert [line.get_ydata()[0] for line in loss_panel.lines if line.get_label() == "chance 0.693"] == [0.693]
