"""Probes: the fit recovers planted signal and reports chance on noise, folds respect groups, and the sweep returns
every row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import tasks
from workbench.analysis.features import DEFAULT_CONDITIONS
from workbench.analysis.probes import (
    control_labels,
    control_position,
    fit_probe,
    fold_assignment,
    group_interval,
    probe_layers,
    random_init_model,
    regularisation_path,
)

VOCAB = tasks.CharTokenizer().vocab_size


def _synthetic(n_groups: int = 200, per_group: int = 4, d: int = 8, seed: int = 0):
    """Features with a planted linear label, groups of examples, and a per-group token the features ignore."""
    rng = np.random.default_rng(seed)
    n = n_groups * per_group
    x = rng.standard_normal((n, d))
    labels = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    groups = np.repeat(np.arange(n_groups), per_group)
    token = np.repeat(rng.integers(0, 10, n_groups), per_group)  # label-irrelevant, invisible to the features
    control = (np.arange(10) % 2)[rng.permutation(10)][token]
    return x, labels, groups, control


def test_planted_signal_is_recovered_and_selective():
    x, labels, groups, control = _synthetic()
    result = fit_probe(x, labels, groups, control_labels=control, folds=4)
    assert result["accuracy"] > 0.95
    assert abs(result["majority"] - 0.5) < 0.1
    assert abs(result["control_accuracy"] - 0.5) < 0.12
    assert result["selectivity"] == pytest.approx(result["accuracy"] - result["control_accuracy"])
    assert result["selectivity"] > 0.35
    assert len(result["fold_scores"]) == 4 and result["accuracy_std"] >= 0


def test_noise_reads_as_chance():
    x, _, groups, control = _synthetic(seed=1)
    labels = np.random.default_rng(2).integers(0, 2, len(x))
    result = fit_probe(x, labels, groups, control_labels=control)
    assert abs(result["accuracy"] - 0.5) < 0.1
    assert abs(result["selectivity"]) < 0.15


def test_control_readable_by_the_features_kills_selectivity():
    x, labels, groups, control = _synthetic()
    x = np.concatenate([x, np.eye(2)[control] * 3.0], axis=1)  # the representation now encodes the control too
    result = fit_probe(x, labels, groups, control_labels=control)
    assert result["control_accuracy"] > 0.95 and result["selectivity"] < 0.1


def test_regression_probe_scores_r2():
    x, _, groups, _ = _synthetic()
    y = x @ np.linspace(1.0, -1.0, x.shape[1]) + 0.1 * np.random.default_rng(3).standard_normal(len(x))
    result = fit_probe(x, y, groups, kind="regression", alpha=1e-3)
    assert result["r2"] > 0.95 and result["mean_baseline"] < 0.05 and np.isnan(result["control_r2"])


def test_folds_never_split_a_group():
    groups = np.random.default_rng(0).integers(0, 37, 500)
    fold = fold_assignment(groups, folds=4)
    assert set(fold.tolist()) == {0, 1, 2, 3}
    for g in np.unique(groups):
        assert len(set(fold[groups == g].tolist())) == 1
    with pytest.raises(ValueError, match="folds=38"):
        fold_assignment(groups, folds=38)
    with pytest.raises(ValueError, match="folds=1"):
        fold_assignment(groups, folds=1)


def test_non_finite_features_are_refused_by_name_before_scikit_learn():
    x = np.random.default_rng(0).normal(size=(40, 3))
    x[7, 1] = np.nan
    with pytest.raises(ValueError, match=r"features.*\[7\]"):
        fit_probe(x, np.arange(40) % 2, np.arange(40) // 4)


def test_bad_input_is_refused():
    x, labels, groups, _ = _synthetic()
    with pytest.raises(ValueError, match="kind"):
        fit_probe(x, labels, groups, kind="ordinal")
    with pytest.raises(ValueError, match="C="):
        fit_probe(x, labels, groups, C=0.0)


# ---------------------------------------------------------------------------------------------- control
def test_control_position_is_label_irrelevant():
    batch = tasks.get("completion_tracking", scratch_updates=8).sample(40, seed=0)
    pos = control_position(batch)
    assert pos is not None and pos < int(batch.label_positions.min())
    tokens = batch.tokens[:, pos]
    for g in batch.groups.unique():
        assert len(tokens[batch.groups == g].unique()) == 1
    assert len(tokens.unique()) > 1
    control = control_labels(batch, pos, seed=0)
    assert set(control.tolist()) <= {0, 1} and len(set(control.tolist())) == 2
    assert np.array_equal(control, control_labels(batch, pos, seed=0))
    assert control_position(tasks.get("delayed_memory", scratch_updates=0).sample(8, seed=0)) is None


def test_random_init_model_is_random_seeded_and_leaves_global_rng():
    model = perturbed_model(small_config("lrt"))
    state = torch.get_rng_state()
    a, b = random_init_model(model, seed=3), random_init_model(model, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert a.config == model.config and next(a.parameters()).dtype == torch.float64
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert a.blocks[0].mlp.c_proj.weight.abs().max() > 0  # blocks are not the identity
    assert a.mechanism.rec_k[0].weight.abs().max() > 0  # and the feedback path is open
    model.random_init = lambda seed: ("its own twin", seed)  # a model that knows its random twin (hf.FeedbackLM)
    assert random_init_model(model, seed=5) == ("its own twin", 5)


# ---------------------------------------------------------------------------------------------- sweep
def test_probe_layers_end_to_end():
    task = tasks.get("delayed_memory", scratch_updates=8)
    model = wb.build_model(wb.ModelConfig(vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=16, seq_len=160,
                                          mechanism="fbt", tie_embeddings=True)).eval()
    df = probe_layers(model, task, n=48, seed=0, folds=4)
    assert list(df.columns) == ["model", "task", "condition", "layer", "n", "accuracy", "accuracy_std",
                                "control_accuracy", "selectivity", "majority", "C", "accuracy_low", "accuracy_high",
                                "twin_accuracy", "twin_selectivity", "twin_low", "twin_high"]
    expected = {(m, c, layer) for m in ("trained", "random init") for c in DEFAULT_CONDITIONS for layer in range(3)}
    assert set(zip(df["model"], df["condition"], df["layer"])) == expected and len(df) == len(expected)
    assert (df["task"] == "delayed_memory").all() and (df["n"] == 48).all()
    for col in ("accuracy", "control_accuracy", "majority"):
        assert df[col].between(0, 1).all()
    np.testing.assert_allclose(df["selectivity"], df["accuracy"] - df["control_accuracy"])
    # standard prefill, depth 0: the colon's own embedding, the same for every example -> the majority class
    row = df[(df["model"] == "trained") & (df["condition"] == "standard") & (df["layer"] == 0)].iloc[0]
    assert row["accuracy"] == pytest.approx(row["majority"])
    trained, twin = df[df["model"] == "trained"], df[df["model"] == "random init"]
    assert (trained["accuracy_low"] <= trained["accuracy_high"]).all() and twin["twin_selectivity"].isna().all()
    np.testing.assert_allclose(trained["twin_accuracy"], twin["accuracy"])
    # the paired difference is over examples, the accuracy a mean over (near-equal) folds
    np.testing.assert_allclose(trained["twin_selectivity"], trained["accuracy"] - trained["twin_accuracy"], atol=0.03)
    assert (trained["twin_low"] <= trained["twin_selectivity"]).all()
    assert (trained["twin_selectivity"] <= trained["twin_high"]).all()


def test_probe_layers_regression_on_a_batch_without_baselines():
    model = perturbed_model(small_config("fbt", vocab_size=VOCAB, seq_len=64))
    batch = tasks.get("arith_cot", steps=2, max_value=20).sample(24, seed=1)
    df = probe_layers(model, batch, ("standard", "multipass2"), kind="regression", control=False,
                      random_baseline=False, folds=3, n=20)
    assert list(df.columns) == ["model", "task", "condition", "layer", "n", "r2", "r2_std", "control_r2",
                                "selectivity", "mean_baseline"]
    assert len(df) == 2 * 4 and (df["n"] == 20).all() and (df["model"] == "trained").all()
    assert df["control_r2"].isna().all() and df["r2"].notna().all()
    with pytest.raises(ValueError, match="conditions"):
        probe_layers(model, batch, ("standard", "suffix"), random_baseline=False)
    with pytest.raises(ValueError, match="control"):
        probe_layers(model, batch, ("standard",), control=999, random_baseline=False)


# ---------------------------------------------------------------------------------------------- intervals
def test_group_interval_resamples_groups_not_examples():
    groups = np.repeat(np.arange(50), 4)
    assert group_interval(np.ones(200), groups) == {"mean": 1.0, "low": 1.0, "high": 1.0}
    # each group is all-right or all-wrong: 50 independent draws, not 200
    per_group = np.random.default_rng(0).integers(0, 2, 50).astype(float)
    values = np.repeat(per_group, 4)
    grouped = group_interval(values, groups, seed=1)
    naive = group_interval(values, np.arange(200), seed=1)
    assert grouped["mean"] == pytest.approx(per_group.mean())
    assert grouped["high"] - grouped["low"] > 1.6 * (naive["high"] - naive["low"])  # sqrt(4) = 2 in expectation
    se = np.sqrt(per_group.mean() * (1 - per_group.mean()) / 50)
    assert grouped["high"] - grouped["low"] == pytest.approx(2 * 1.96 * se, rel=0.2)
    paired = group_interval(values, groups, reference=values, seed=1)
    assert paired == {"mean": 0.0, "low": 0.0, "high": 0.0}
    with pytest.raises(ValueError, match="reference"):
        group_interval(values, groups, reference=values[:10])
    with pytest.raises(ValueError, match="level"):
        group_interval(values, groups, level=1.5)


def test_probe_task_options_leave_the_defaults_alone():
    plain = tasks.get("completion_tracking").sample(16, seed=3)
    answer = tasks.get("completion_tracking", label_at="answer").sample(16, seed=3)
    assert torch.equal(plain.tokens, answer.tokens) and torch.equal(answer.label_positions, plain.label_positions + 1)
    for text, pos in zip(answer.texts, answer.label_positions.tolist()):
        assert text[pos] == " " and text[pos + 1:].rstrip("\n") in ("more", "done")
    as_bytes = tasks.get("completion_tracking", label_at="answer", tokenizer="bytes").sample(16, seed=3)
    assert as_bytes.texts == answer.texts and as_bytes.tokens[0, 0] == ord(answer.texts[0][0])
    assert tasks.get("completion_tracking").params == {"scratch_updates": 8, "loss_on": "answer"}
    mixed = tasks.get("multi_register", scratch_updates=[0, 32])
    batch = mixed.sample(64, seed=0)
    assert mixed.seq_len == tasks.get("multi_register", scratch_updates=32).seq_len
    assert set(batch.lengths.tolist()) == {tasks.get("multi_register", scratch_updates=s).seq_len for s in (0, 32)}
    for g in batch.groups.unique():  # a group shares its scratch context, so its length
        assert len(batch.lengths[batch.groups == g].unique()) == 1
    per_batch = tasks.get("multi_register", scratch_updates=[0, 32], scratch_draw="batch")
    assert per_batch.batch_length_varies and not mixed.batch_length_varies
    assert per_batch.params["scratch_draw"] == "batch" and "scratch_draw" not in mixed.params
    drawn = [per_batch.sample(16, seed=s) for s in range(12)]
    assert all(len(b.lengths.unique()) == 1 for b in drawn)  # one length per sample() call ...
    assert {int(b.lengths[0]) for b in drawn} == set(batch.lengths.tolist())  # ... and every choice over calls
    for bad, match in (({"scratch_updates": []}, r"scratch_updates=\[\]"),
                       ({"scratch_updates": [8, 7]}, "scratch_updates=7"),
                       ({"scratch_draw": "example"}, "scratch_draw"),
                       ({"label_at": "space"}, "label_at"), ({"tokenizer": "utf8"}, "tokenizer")):
        with pytest.raises(ValueError, match=match):
            tasks.get("delayed_memory", **bad)


# ---------------------------------------------------------------------------------------------- figures
def _layer0_rows() -> pd.DataFrame:
    rows = []
    for task in ("delayed_memory", "completion_tracking"):
        for scratch in (0, 8, 32):
            for arm in ("baseline", "fbt"):
                for condition in ("standard", "suffix1"):
                    acc = 0.5 if arm == "baseline" or condition == "standard" else 1.0 - scratch / 100
                    rows.append(dict(task=task, scratch_updates=scratch, model=arm, condition=condition, layer=0,
                                     accuracy=acc, majority=0.5, twin_accuracy=0.6, upper_bound=0.99))
    return pd.DataFrame(rows)


def test_layer0_figures_mark_twin_upper_bound_and_scratch_length():
    df = _layer0_rows()
    fig = wb.plots.layer0_comparison(df)
    assert len(fig.axes) == 2 * 3  # a panel per task and scratch length
    assert fig.axes[0].get_title() == "delayed_memory / 0 scratch lines"
    labels = {t.get_text() for t in fig.legends[0].get_texts()}  # one legend under the panels
    assert {"untrained twin", "upper bound (fed-back top layer)", "majority"} <= labels
    lines = wb.plots.accuracy_vs_scratch(df)
    fbt = next(line for line in lines.axes[0].lines if line.get_label() == "fbt")
    assert list(fbt.get_xdata()) == [0, 8, 32] and list(fbt.get_ydata()) == pytest.approx([1.0, 0.92, 0.68])
    with pytest.raises(ValueError, match="condition"):
        wb.plots.accuracy_vs_scratch(df, condition="suffix4")


def test_specimen_gates_draws_each_gate_against_its_threshold():
    df = pd.DataFrame([dict(task="delayed_memory", arm=arm, scratch_updates=s, gate_value=v, answer_sequential=0.5)
                       for arm, values in (("baseline", (1.0, 0.99, 0.9)), ("fbt", (1.0, 0.97, 0.6)))
                       for s, v in zip((0, 8, 32), values)])
    fig = wb.plots.specimen_gates(df, 0.95)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == pytest.approx([1.0, 0.99, 0.9, 1.0, 0.97, 0.6])
    assert any(line.get_ydata()[0] == 0.95 for line in fig.axes[0].lines)


def test_specimen_gates_colours_seeds_by_label_and_refuses_two_specimens_in_one_bar():
    df = pd.DataFrame([dict(task="delayed_memory", arm="fbt", label=label, scratch_updates=s, gate_value=v)
                       for label, values in (("fbt", (1.0, 0.9)), ("fbt seed 1", (0.8, 0.7)))
                       for s, v in zip((0, 8), values)])
    with pytest.raises(ValueError, match="by='arm'"):
        wb.plots.specimen_gates(df, 0.95)
    fig = wb.plots.specimen_gates(df, 0.95, by="label")
    assert [p.get_height() for p in fig.axes[0].patches] == pytest.approx([1.0, 0.9, 0.8, 0.7])


# ---------------------------------------------------------------------------------------------- L2 strength
def _underfit_by_a_strong_penalty(seed: int = 0):
    """Many weak features that only a weak penalty can add up: C = 0.001 underfits, C = 10 does not."""
    rng = np.random.default_rng(seed)
    n, d = 800, 60
    x = rng.standard_normal((n, d))
    labels = (x @ np.full(d, 0.2) + 0.3 * rng.standard_normal(n) > 0).astype(np.int64)
    return x, labels, np.repeat(np.arange(n // 4), 4)


def test_nested_cv_picks_the_strength_on_training_groups_only():
    x, labels, groups = _underfit_by_a_strong_penalty()
    nested = fit_probe(x, labels, groups, C=(0.001, 10.0))
    assert nested["fold_C"] == [10.0] * 4 and nested["C"] == 10.0
    assert nested["accuracy"] > fit_probe(x, labels, groups, C=0.001)["accuracy"] + 0.02
    # the choice for a fold never sees that fold: scrambling its held-out labels leaves it unchanged
    fold = fold_assignment(groups, 4)
    scrambled = labels.copy()
    scrambled[fold == 0] = np.random.default_rng(1).integers(0, 2, int((fold == 0).sum()))
    assert fit_probe(x, scrambled, groups, C=(0.001, 10.0))["fold_C"][0] == 10.0


def test_fixed_fold_strengths_are_the_fixed_probe_and_are_checked():
    x, labels, groups, control = _synthetic()
    fixed = fit_probe(x, labels, groups, control_labels=control, C=0.01)
    given = fit_probe(x, labels, groups, control_labels=control, fold_C=[0.01] * 4)
    assert given["fold_scores"] == fixed["fold_scores"] and given["control_accuracy"] == fixed["control_accuracy"]
    with pytest.raises(ValueError, match="C=.*fold_C="):
        fit_probe(x, labels, groups, C=(0.1, 1.0), fold_C=[0.1] * 4)
    with pytest.raises(ValueError, match="fold_C=.*folds=4"):
        fit_probe(x, labels, groups, fold_C=[0.1] * 3)
    with pytest.raises(ValueError, match="C=.*-1.0"):
        fit_probe(x, labels, groups, C=(0.1, -1.0))


def test_the_twin_is_probed_at_the_trained_probes_strengths():
    task = tasks.get("delayed_memory", scratch_updates=0)
    model = perturbed_model(wb.ModelConfig(vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=16, seq_len=160,
                                           mechanism="fbt", tie_embeddings=True))
    frame = probe_layers(model, task, ("standard", "suffix1"), n=96, C=(0.01, 10.0))
    assert set(frame["C"]) <= {0.01, 10.0}
    trained = frame[frame["model"] == "trained"].set_index(["condition", "layer"])["C"]
    twin = frame[frame["model"] == "random init"].set_index(["condition", "layer"])["C"]
    pd.testing.assert_series_equal(trained, twin, check_names=False)


def test_the_regularisation_path_marks_the_strengths_cv_cannot_tell_from_the_best():
    x, labels, groups = _underfit_by_a_strong_penalty()
    path = regularisation_path(x, labels, groups, (0.001, 1.0, 10.0))
    assert list(path["C"]) == [0.001, 1.0, 10.0]
    best = path["accuracy"].idxmax()
    assert path.loc[best, "plausible"] and not path.loc[0, "plausible"]  # the underfit strength is told apart
    assert path.loc[2, "accuracy"] == fit_probe(x, labels, groups, C=10.0)["accuracy"]
    assert (path["accuracy_low"] <= path["accuracy"]).all() and (path["accuracy"] <= path["accuracy_high"]).all()


def test_regularisation_paths_draw_each_specimen_and_twin_on_a_log_axis():
    rows = [dict(task=task, specimen=f"FBT s{s}", model=model, C=c, accuracy=a, plausible=c >= 1.0)
            for task in ("delayed_memory", "multi_register") for s in (0, 8)
            for model, base in (("trained", 0.9), ("random init", 0.6))
            for c, a in zip((0.01, 1.0, 10.0), (base - 0.1, base, base + 0.02))]
    fig = wb.plots.regularisation_paths(pd.DataFrame(rows), threshold=0.95)
    assert len(fig.axes) == 2 and fig.axes[0].get_xscale() == "log"
    lines = [line for line in fig.axes[0].lines if line.get_linestyle() in ("-", "--")]
    assert len(lines) == 4  # two specimens, each trained (solid) and twin (dashed)
    solid = next(line for line in lines if line.get_label() == "FBT s0")
    assert list(solid.get_ydata()) == pytest.approx([0.8, 0.9, 0.92])
    assert any(line.get_ydata()[0] == 0.95 for line in fig.axes[0].lines)  # the claim's bar
    moved = pd.DataFrame(rows).assign(accuracy=lambda d: d["accuracy"] - 0.2)  # the lines follow the numbers
    again = next(line for line in wb.plots.regularisation_paths(moved).axes[0].lines if line.get_label() == "FBT s0")
    assert list(again.get_ydata()) == pytest.approx([0.6, 0.7, 0.72])


def test_a_specimen_keeps_its_colour_from_the_gates_to_the_probes_and_the_takeaway_heads_the_figure():
    """Rows in another order and a label the gates do not have (as in notebook 05): colours follow the names."""
    probes = pd.concat([_layer0_rows().assign(model=lambda d: d["model"].map({"baseline": "fbt seed 1",
                                                                             "fbt": "text fbt"})),
                        _layer0_rows()], ignore_index=True)
    gates = pd.DataFrame([dict(task="delayed_memory", label=label, scratch_updates=0, gate_value=1.0)
                          for label in ("baseline", "fbt", "fbt seed 1")])

    def colours(fig) -> dict[str, tuple]:
        return {label: tuple(handle.patches[0].get_facecolor()) for handle, label in
                zip(*fig.axes[0].get_legend_handles_labels()) if hasattr(handle, "patches")}

    bars = colours(wb.plots.layer0_comparison(probes, title="layer 0 reads the label after one step"))
    held = colours(wb.plots.specimen_gates(gates, 0.95, by="label"))
    assert set(held) == {"baseline", "fbt", "fbt seed 1"} and all(bars[k] == held[k] for k in held)
    fig = wb.plots.specimen_gates(gates, 0.95, by="label")
    assert fig.legends and fig.axes[0].get_legend() is None  # under the panels, off the bars
    assert wb.plots.layer0_comparison(probes, title="takeaway").get_suptitle() == "takeaway"
