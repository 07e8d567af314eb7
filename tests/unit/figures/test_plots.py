"""Figures: each draws what it is given (panels, lines, bar heights), registers nothing with pyplot and saves."""

from __future__ import annotations

import io

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

from conftest import overlapping_ticks, perturbed_model, small_config
from workbench import plots
from workbench.analysis import memory_trajectory, pass_dynamics, sensitivity

CONDITIONS = ["standard", "recurrent k=1", "sequential"]


def probes_frame(tasks=("memory", "completion"), models=("trained", "random init"), layers=4) -> pd.DataFrame:
    rows = []
    for t, task in enumerate(tasks):
        for m, model in enumerate(models):
            for c, condition in enumerate(CONDITIONS):
                for layer in range(layers + 1):
                    acc = 0.5 + 0.1 * c + 0.01 * layer + 0.001 * m + 0.0001 * t
                    rows.append(dict(condition=condition, layer=layer, accuracy=acc, accuracy_std=0.02,
                                     control_accuracy=0.55, selectivity=acc - 0.55, majority=0.5, model=model,
                                     task=task))
    return pd.DataFrame(rows)


def traces_frame() -> pd.DataFrame:
    rows = []
    for regime, lengths, correct in [("fused", [5, 7, 9], [True, True, True]),
                                     ("standard", [10, 12, 20, 30], [True, False, True, False]),
                                     ("soft", [8, 9], [True, False])]:
        rows += [dict(regime=regime, length=n, correct=ok, example=i)
                 for i, (n, ok) in enumerate(zip(lengths, correct))]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, pd.DataFrame]]:
    idx = torch.randint(0, 23, (2, 6), generator=torch.Generator().manual_seed(0))
    out: dict[str, dict[str, pd.DataFrame]] = {"dynamics": {}, "sensitivity": {}}
    for mechanism in ("none", "lrt", "fbt"):
        model = perturbed_model(small_config(mechanism))
        out["dynamics"][mechanism] = pass_dynamics(model, idx, passes=9, targets=idx)
        out["sensitivity"][mechanism] = sensitivity(model, idx, t0=1)
    out["trajectory"] = {"fbt": memory_trajectory(perturbed_model(small_config("fbt")), idx, top_k=4)}
    return out


def _saves(fig: Figure) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=40)
    assert buffer.getvalue()[:4] == b"\x89PNG"


def test_figures_are_not_registered_with_pyplot():
    before = plt.get_fignums()
    fig = plots.probe_heatmap(probes_frame())
    assert plt.get_fignums() == before and isinstance(fig, Figure)
    _saves(fig)


def test_probe_heatmap_has_a_panel_per_task_and_model_and_depth_zero_at_the_bottom():
    df = probes_frame()
    fig = plots.probe_heatmap(df)
    assert len(fig.axes) == 4 + 1  # four panels and one shared colour bar
    ax = fig.axes[0]
    assert ax.get_title() == "memory / trained"
    assert [t.get_text() for t in ax.get_xticklabels()] == CONDITIONS
    assert [t.get_text() for t in ax.get_yticklabels()] == ["4", "3", "2", "1", "0"]
    cells = ax.collections[0].get_array().reshape(5, 3)
    expected = df[(df.task == "memory") & (df.model == "trained") & (df.layer == 0)]["accuracy"].to_numpy()
    np.testing.assert_allclose(cells[-1], expected)  # bottom row = depth 0
    single = plots.probe_heatmap(probes_frame(tasks=("memory",), models=("trained",)))
    assert len(single.axes) == 2


def test_layer0_comparison_bars_are_the_depth_zero_accuracies():
    df = probes_frame()
    fig = plots.layer0_comparison(df)
    assert len(fig.axes) == 2
    ax = fig.axes[1]
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == len(CONDITIONS) * 2
    at0 = df[(df.task == "completion") & (df.layer == 0)]
    expected = [at0[(at0.model == m) & (at0.condition == c)]["accuracy"].item()
                for m in ("random init", "trained") for c in CONDITIONS]  # models in sorted order
    assert heights == pytest.approx(expected)
    majority = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(majority) == 1 and majority[0].get_ydata()[0] == 0.5
    at2 = plots.layer0_comparison(df, depth=2).axes[0].patches[0].get_height()
    assert at2 == pytest.approx(df[(df.task == "memory") & (df.layer == 2) & (df.model == "random init")][
        "accuracy"].iloc[0])
    with pytest.raises(ValueError, match="depth"):
        plots.layer0_comparison(df, depth=9)


def test_probe_profile_draws_accuracy_and_control_per_condition():
    df = probes_frame(tasks=("memory",), models=("trained",))
    fig = plots.probe_profile(df, highlight_depth=2)
    (ax,) = fig.axes
    # accuracy and control each, the control's legend key, majority, highlight
    assert len(ax.lines) == 2 * len(CONDITIONS) + 3
    labels = ax.get_legend_handles_labels()[1]
    assert "dashed: its control task" in labels and "selected depth 2" in labels  # every line kind explained
    assert plots.probe_profile(df, title="at depth 0: x").axes[0].get_title() == "at depth 0: x"
    at0 = df[df.layer == 0].set_index("condition")["accuracy"]
    assert plots.profile_takeaway(df, depth=0) == (f"at depth 0: sequential reads best ({at0['sequential']:.2f}), "
                                                   f"standard worst ({at0['standard']:.2f}); majority 0.50")
    with pytest.raises(ValueError, match="^depth="):
        plots.profile_takeaway(df, depth=9)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), df[df.condition == "standard"]["accuracy"])
    with pytest.raises(ValueError, match="accuracy"):
        plots.probe_profile(df.drop(columns="accuracy"))


def test_contraction_curves_one_line_per_run_on_log_axes(runs):
    fig = plots.contraction_curves(runs["dynamics"])
    assert len(fig.axes) == 3  # the runs carry a loss
    for ax in fig.axes:
        assert len(ax.lines) == 3
    assert fig.axes[0].get_yscale() == "log" and fig.axes[1].get_yscale() == "log"
    none_delta = fig.axes[0].lines[0].get_ydata()
    assert np.isnan(none_delta).all()  # baseline residual is exactly 0 after pass 1: no line on a log axis
    fbt_distance = fig.axes[1].lines[2].get_ydata()
    assert np.isfinite(fbt_distance[:5]).all()
    floor = plots.contraction_curves(runs["dynamics"], chance={"unigram loss 3.18": 3.18}).axes[2]
    assert [list(line.get_ydata()) for line in floor.lines[3:]] == [[3.18, 3.18]]  # the loss panel's chance line
    assert "unigram loss 3.18" in [t.get_text() for t in floor.figure.legends[0].get_texts()]
    cut = plots.contraction_curves(runs["dynamics"]["fbt"].drop(columns="loss"), max_pass=4)
    cut.canvas.draw()
    assert all(float(t).is_integer() for ax in cut.axes[:2] for t in ax.get_xticks()), "a pass tick between passes"
    assert len(cut.axes) == 2 and list(cut.axes[0].lines[0].get_xdata()) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="runs"):
        plots.contraction_curves({})


def test_sensitivity_decay_marks_the_perturbation_size_and_unused_memory(runs):
    fig = plots.sensitivity_decay(runs["sensitivity"])
    (ax,) = fig.axes
    assert len(ax.lines) == 3 + 1 and ax.get_yscale() == "log"
    labels = ax.get_legend_handles_labels()[1]
    assert "memory unused" in labels[0] and "memory unused" not in labels[2]
    np.testing.assert_allclose(ax.lines[2].get_ydata(), runs["sensitivity"]["fbt"]["effect"])


def test_trace_lengths_orders_regimes_and_reports_accuracy():
    fig = plots.trace_lengths(traces_frame())
    ax_len, ax_acc = fig.axes
    for ax in (ax_len, ax_acc):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["standard", "soft", "fused"]
    assert [p.get_height() for p in ax_acc.patches] == pytest.approx([0.5, 0.5, 1.0])
    texts = [t.get_text() for t in ax_len.texts]
    assert texts == ["median 16", "median 8.5", "median 7"]
    with pytest.raises(ValueError, match="correct"):
        plots.trace_lengths(traces_frame().drop(columns="correct"))


def test_trace_lengths_labels_stay_apart_with_every_regime_and_the_training_mix():
    """Six boxes (the decoding regimes, the baseline and the training mix): tick labels do not run together and
    the legend does not sit on the medians written above the boxes."""
    frame = traces_frame()
    extra = [frame.assign(regime=name) for name in ("soft_last", "baseline", "training mix")]
    fig = plots.trace_lengths(pd.concat([frame, *extra], ignore_index=True))
    ax_len = fig.axes[0]
    assert overlapping_ticks(ax_len) == [] and overlapping_ticks(fig.axes[1]) == []
    legend = ax_len.get_legend().get_window_extent()
    assert not [t.get_text() for t in ax_len.texts if t.get_window_extent().overlaps(legend)]


def _history(offset: float = 0.0) -> pd.DataFrame:
    steps = np.arange(10)
    return pd.DataFrame(dict(step=steps, flops=steps * 1e9, tokens=steps * 100, loss=3.0 - 0.1 * steps + offset,
                             loss_pass1=3.1 - 0.1 * steps, loss_pass2=2.9 - 0.1 * steps,
                             val_loss=[2.5 if s % 5 == 0 else np.nan for s in steps]))


def test_loss_curves_single_run_and_matched_compute_comparison():
    ax, _ = plots.loss_curves(_history()).axes  # and pass 2 minus pass 1 under it
    assert len(ax.lines) == 4  # objective, two passes, held-out
    np.testing.assert_allclose(ax.lines[-1].get_xdata(), [0, 5])
    (ax,) = plots.loss_curves(_history(), difference=False).axes
    ax, below = plots.loss_curves({"baseline": _history(), "fbt": _history(0.5)}, x="flops").axes
    assert len(ax.lines) == 4  # train and held-out per run
    np.testing.assert_allclose(ax.lines[0].get_xdata(), np.arange(10) * 1e9)
    assert below.get_xlabel() == "training FLOPs"  # under the difference panel, which shares the x axis
    with pytest.raises(ValueError, match="x="):
        plots.loss_curves(_history(), x="seconds")
    with pytest.raises(ValueError, match="loss"):
        plots.loss_curves(_history().drop(columns="loss"))


def test_token_steps_marks_the_position_and_shows_its_top_tokens(runs):
    trajectory = runs["trajectory"]["fbt"]
    fig = plots.token_steps(trajectory, position=3, example=1, decode=lambda i: chr(97 + i))
    ax_cos, ax_top = fig.axes
    assert ax_cos.lines[1].get_xdata()[0] == 3
    row = trajectory[(trajectory.example == 1) & (trajectory.position == 3)].iloc[0]
    assert [p.get_width() for p in ax_top.patches] == pytest.approx(row["top_probs"][::-1])
    assert ax_top.get_yticklabels()[-1].get_text() == repr(chr(97 + row["top_tokens"][0]))
    with pytest.raises(ValueError, match="position"):
        plots.token_steps(trajectory, position=99)
    with pytest.raises(ValueError, match="example"):
        plots.token_steps(trajectory, position=0, example=5)


def test_pass_losses_wraps_six_runs_into_rows_that_read_at_cell_width():
    history = pd.DataFrame({"step": [1, 2, 3], "loss_pass1": [3.0, 2.9, 2.8], "loss_pass2": [np.nan, 2.95, 2.7]})
    fig = plots.pass_losses({f"run{i}": history.assign(loss_pass1=history["loss_pass1"] + i) for i in range(6)})
    assert len(fig.axes) == 6  # 2 rows of 3, no leftover empty cell
    width, height = fig.get_size_inches() * 80
    assert width <= 1000 and height >= 400, (width, height)  # was 2304 x 288 px: six panels in a row
    assert fig.axes[0].get_ylim() == fig.axes[5].get_ylim()  # one loss scale for every run
    moved = plots.pass_losses({f"run{i}": history for i in range(2)})
    assert len(moved.axes) == 2 and moved.get_size_inches()[0] < fig.get_size_inches()[0] + 1e-9
    five = plots.pass_losses({f"run{i}": history for i in range(5)})
    assert len(five.axes) == 5  # the sixth grid cell is removed, not left blank


def test_layer0_comparison_drops_empty_panels_bounds_only_suffix1_and_keeps_the_legend_outside():
    df = probes_frame(tasks=("memory", "completion"), models=("trained",))
    df["scratch_updates"] = 0
    longer = df[df.task == "memory"].assign(scratch_updates=8)
    df = pd.concat([df, longer], ignore_index=True).assign(
        upper_bound=0.9, condition=lambda d: d["condition"].replace({"recurrent k=1": "suffix1"}))
    fig = plots.layer0_comparison(df)
    memory0, completion0, memory8 = fig.axes  # no completion specimen with 8 scratch lines: no panel for it
    assert memory8.get_title() == "memory / 8 scratch lines" and all(ax.patches for ax in fig.axes)
    stars = [c for c in memory0.collections if c.get_label().startswith("upper bound")]
    offsets = np.ma.filled(np.ma.asarray(stars[0].get_offsets(), dtype=float), np.nan)
    # suffix1 (x = 1), the star right of its bar's centre: the twin's circle sits left of it, never underneath
    assert len(stars) == 1 and offsets[np.isfinite(offsets[:, 1]), 0].tolist() == pytest.approx([1.0 + 0.25 * 0.8])
    assert plots.layer0_comparison(df, depth=2).axes[0].collections  # control ticks still drawn there
    assert not [c for c in plots.layer0_comparison(df, depth=2).axes[0].collections
                if c.get_label().startswith("upper bound")]  # not a bound on a deeper probe
    assert fig.legends and all(ax.get_legend() is None for ax in fig.axes)  # beside the bars, not over them


def test_swap_flips_shows_scratch_as_ints_and_no_legend_colour_without_a_bar():
    swaps = pd.DataFrame({"task": ["delayed_memory", "delayed_memory"], "scratch_updates": [0.0, 8.0],
                          **{f"{k}_{c}": [0.0, 0.0] for k in ("swap", "control") for c in ("flip", "low", "high")},
                          "zero_flip": [0.1, 0.3], "zero_low": [0.05, 0.2], "zero_high": [0.2, 0.4]})
    fig = plots.swap_flips(swaps)
    (ax,) = fig.axes  # one panel per task, the task in its title
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0 scratch", "8 scratch"]
    assert ax.get_title(loc="left").startswith("delayed_memory")
    words = [t.get_text() for t in fig.legends[0].get_texts()]  # every edit in words, no bare code names
    assert words == ["zero: the memory set to 0", "no bar: swap, control flip no answer anywhere"]
    swaps["swap_flip"], swaps["swap_high"] = [0.5, 0.0], [0.6, 0.0]  # a visible swap bar: back in the legend
    labels = [t.get_text() for t in plots.swap_flips(swaps).legends[0].get_texts()]
    assert labels == ["swap: another example's memory, other label", "zero: the memory set to 0",
                      "no bar: control flip no answer anywhere"]
    assert plots.swap_flips(swaps).get_suptitle() == ("does the answer follow the memory?\n"
                                                      "a swap flips 25% of answers, a control 0%")


def test_causal_use_figure_panels_hold_six_specimens_two_edits_and_labels_that_do_not_run_together():
    from workbench.experiments.recipes.causal_use import causal_use_figure

    names = [f"{t} s{n} seed 1" for t in ("completion_tracking", "delayed_memory", "multi_register")
             for n in (0, 8, 32)]
    rates = {f"{k}_{c}": 0.5 for k in ("swap", "control", "mean", "zero") for c in ("flip", "low", "high")}
    swaps = pd.DataFrame([{"task": n.split()[0], "scratch_updates": 0, "specimen": n, "design": d, **rates}
                          for n in names[:7] for d in ("site", "stream")])
    controls = swaps.head(8).assign(task="multi_register",
                                    specimen=[f"reg_75_22_3_s{i % 2}" for i in range(8)])
    distances = pd.DataFrame([{"run": f"lrt_s{s}", "distance": d, "position": p, "increase": 0.1}
                              for s in range(3) for d in range(1, 17) for p in range(2, 130)])
    fig = causal_use_figure(swaps, controls, distances)
    bars = [ax for ax in fig.axes if ax.patches]
    # completion_tracking (6 rows), delayed_memory (6), multi_register (2); the control's 8 rows in two; the LRT's 2
    assert len(bars) == 5 and len(fig.axes) == 7
    assert all(len(ax.get_xticks()) <= 6 and len(ax.patches) == 2 * len(ax.get_xticks()) for ax in bars)
    assert bars[0].get_xticklabels()[0].get_text() == "s0\nseed\u00a01\nsite"
    assert bars[3].get_xticklabels()[0].get_text() == "reg_75_22_3\ns0\nsite"
    assert [overlapping_ticks(ax) for ax in fig.axes] == [[]] * len(fig.axes)


def test_contraction_curves_log_pass_axis_shows_training_depths_and_marks_exact_zeros(runs):
    long = {name: pd.DataFrame({"pass": np.arange(1, 104), "delta": np.geomspace(1, 1e-6, 103),
                                "fixed_point_distance": np.r_[np.geomspace(1, 1e-6, 50), np.zeros(53)]})
            for name in ("mix_s0", "mix_s1", "other")}
    fig = plots.contraction_curves(long, depths={"trained depth 2": 2, "trained depth 3": 3})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and {2, 3, 100} <= {t for t in ax.get_xticks()}
    assert [t.get_text() for t in ax.get_xticklabels()][:3] == ["1", "2", "3"]
    colors = [line.get_color() for line in ax.lines[:3]]
    assert colors[0] == colors[1] != colors[2] and ax.lines[0].get_linestyle() != ax.lines[1].get_linestyle()
    zeros = [c for c in fig.axes[1].collections if c.get_label() == plots.ZERO_LABEL]
    assert len(zeros) == 1 and plots.ZERO_LABEL in [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(fig.axes[1].collections) == 3  # every run's zeros marked, the legend names them once
    short = plots.contraction_curves(runs["dynamics"])  # 9 passes: a linear axis is clearer
    assert short.axes[0].get_xscale() == "linear"
    assert [c for c in short.axes[0].collections]  # the baseline's residual is exactly 0: marked, not gone
