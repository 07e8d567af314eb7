"""The third figure review's fixes, each as the behaviour a reader saw go wrong: a setup description for a title, data
hidden under other data (coinciding lines, full-width reference lines on the curves, noisy seeds), figures wider than
a notebook cell (shrunk, their text ~6 px), legends that pair unrelated entries, fractional ticks on counts and
half-empty rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench import plots
from workbench.plots.base import MAX_WIDTH, legend_rows, new_figure, panel_grid, row_major


def legend_rows_shown(legend) -> list[list[str]]:
    """A legend's texts as the reader sees them, row by row (matplotlib fills its columns first)."""
    texts = [t.get_text() for t in legend.get_texts()]
    columns = [list(c) for c in np.array_split(np.array(texts, dtype=object), legend._ncols) if len(c)]
    return [[c[r] for c in columns if r < len(c)] for r in range(len(columns[0]))]


# --------------------------------------------------------------------------------------------- 1. a finding
def window_runs(rises: dict[str, float]) -> pd.DataFrame:
    k = np.arange(1, 7)
    return pd.concat([pd.DataFrame({"run": name, "pass": k, "delta": 0.5 ** k, "fixed_point_distance": 0.5 ** k,
                                    "loss": 1.0 + rise * (k - 2) / 2, "exact_by_causality": 0.0})
                      for name, rise in rises.items()])


def test_pass_window_explorer_titles_the_loss_change_at_the_chosen_pass_then_the_window():
    from workbench.widgets import pass_window_explorer

    explorer = pass_window_explorer(window_runs({"a": 0.41, "b": 0.02}), seq_len=8, from_position=4, depths={})
    explorer.controls["pass_"].value = 4
    first, second = explorer.figure.get_suptitle().split("\n")
    assert first == "pass 4: loss since pass 2 — a +0.41, b +0.02"
    assert second == "over positions t >= 4 of T = 8 (not exact by causality before pass 5)"
    tied = pass_window_explorer(window_runs({"a": 0.3, "b": 0.3}), seq_len=8, from_position=4, depths={})
    tied.controls["pass_"].value = 6
    assert tied.figure.get_suptitle().split("\n")[0] == ("pass 6: loss since pass 2 — +0.60 in every run (a, b): "
                                                          "they tie")
    tied.controls["pass_"].value = 1  # no pass 2 yet: the loss itself
    assert tied.figure.get_suptitle().split("\n")[0] == "pass 1: loss — 0.85 in every run (a, b): they tie"
    explorer.controls["pass_"].value = 1
    assert explorer.figure.get_suptitle().split("\n")[0] == "pass 1: loss — a 0.80, b 0.99"


# --------------------------------------------------------------------------------------------- 2. hidden data
def test_regularisation_paths_coinciding_specimens_keep_a_marker_each_and_are_counted():
    path = pd.DataFrame([{"task": "delayed_memory", "specimen": f"FBT s{s}", "model": "trained", "C": c,
                          "accuracy": 1.0, "plausible": True} for s in (0, 8, 32) for c in (0.1, 1.0, 10.0)])
    fig = plots.regularisation_paths(path)
    (ax,) = fig.axes
    assert len({c.get_sizes()[0] for c in ax.collections if len(c.get_offsets())}) == 3  # a rim each shows
    assert "3 lines at 1.00 (overlaid)" in [t.get_text() for t in ax.get_legend().get_texts()]
    apart = path.assign(accuracy=lambda d: d["specimen"].map({"FBT s0": 0.7, "FBT s8": 0.8, "FBT s32": 0.9}))
    assert not [t.get_text() for t in plots.regularisation_paths(apart).axes[0].get_legend().get_texts()
                if "overlaid" in t.get_text()]


def test_regime_losses_draw_each_regime_minus_the_reference_under_the_losses():
    frame = pd.DataFrame({"regime": ["standard"] * 3 + ["fused"] * 3, "position": [0, 1, 2] * 2,
                          "loss": [2.0, 1.8, 1.7, 2.02, 1.82, 1.71]})
    ax, below = plots.regime_losses(frame).axes
    (fused,) = [line for line in below.lines if line.get_label().startswith("fused - standard")]
    assert fused.get_ydata() == pytest.approx([0.02, 0.02, 0.01])
    assert [line.get_ydata()[0] for line in below.lines if line.get_label() == "standard (0)"] == [0.0]
    assert len(plots.regime_losses(frame[frame["regime"] == "standard"]).axes) == 1  # nothing to subtract from
    assert len(plots.regime_losses(frame, reference=None).axes) == 1


def test_loss_curves_draw_each_run_minus_the_reference_under_the_curves():
    steps = np.arange(5)
    runs = {name: pd.DataFrame({"step": steps, "loss": 2.0 - 0.1 * steps + offset})
            for name, offset in (("pass 1", 0.0), ("pass 2", 0.02), ("pass 3", -0.01))}
    ax, below = plots.loss_curves(runs).axes
    gaps = {line.get_label().split(" (")[0]: line.get_ydata() for line in below.lines}
    assert gaps["pass 2"] == pytest.approx([0.02] * 5) and gaps["pass 3"] == pytest.approx([-0.01] * 5)
    assert below.get_ylabel().startswith("minus pass 1")
    _, below = plots.loss_curves(runs, reference="pass 2").axes
    assert below.get_ylabel().startswith("minus pass 2")
    one = pd.DataFrame({"step": steps, "loss": 4.0, "loss_pass1": 2.0, "loss_pass2": 1.97})
    _, below = plots.loss_curves(one).axes  # one run: each pass minus pass 1
    assert [line.get_ydata() for line in below.lines if line.get_label().startswith("pass 2")][0] == \
        pytest.approx([-0.03] * 5)
    assert len(plots.loss_curves(runs, difference=False).axes) == 1
    with pytest.raises(ValueError, match="^reference="):
        plots.loss_curves(runs, reference="pass 9")


def accuracy_rows(curve: list[float], exact: float) -> pd.DataFrame:
    rows = [{"pass": k, "schedule": "multipass", "correct": c} for k, a in enumerate(curve, 1)
            for c in [1.0] * round(10 * a) + [0.0] * (10 - round(10 * a))]
    return pd.DataFrame(rows + [{"pass": 0, "schedule": "sequential", "correct": c}
                                for c in [1.0] * round(10 * exact) + [0.0] * (10 - round(10 * exact))])


def test_fixed_point_accuracy_draws_the_exact_recurrence_past_the_passes_not_over_them():
    results = {"a": accuracy_rows([0.8, 1.0, 1.0, 1.0], 1.0), "b": accuracy_rows([0.8, 1.0, 1.0, 1.0], 1.0)}
    (ax,) = plots.fixed_point_accuracy(results).axes
    exact = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(exact) == 2
    assert all(line.get_xdata()[0] == 4 and line.get_xdata()[1] > 4 for line in exact)  # from the last pass on
    assert exact[0].get_xdata()[1] != exact[1].get_xdata()[1]  # equal accuracies: the ◆ side by side
    assert [line.get_ydata()[1] for line in exact] == [1.0, 1.0]
    assert ax.get_xticklabels()[-1].get_text() == "exact"


def test_schedule_distance_position_lines_keep_a_marker_each():
    sweeps = pd.DataFrame({"schedule": "multipass", "value": [1, 2], "distance": [0.1, 0.01]})
    positions = {label: pd.DataFrame({"position": range(4), "distance": [1e-9, 1e-9, 0.1, 0.1]})
                 for label in ("multipass(K=2)", "interleaved(S=2)")}
    right = plots.schedule_distance(sweeps, positions).axes[1]
    drawn = [(line.get_marker(), line.get_markersize()) for line in right.lines if line.get_label() in positions]
    assert len(set(drawn)) == 2 and drawn[0][1] > drawn[1][1]  # the first drawn widest: its rim shows


def test_ablation_distance_draws_the_seed_mean_bold_and_the_seed_range_as_a_band():
    rows = [{"run": f"text_lrt_s{s}", "distance": d, "position": p, "increase": 0.1 / d + 0.05 * s * (p % 2)}
            for s in range(3) for d in (1, 2) for p in range(4)]
    fig = plots.ablation_distance(pd.DataFrame(rows))
    by_position = fig.axes[1]
    (mean,) = [line for line in by_position.lines if line.get_label() == "text_lrt (mean of 3 seeds)"]
    seeds = [line for line in by_position.lines if line.get_label().startswith("_")]
    assert len(seeds) >= 3 and all(line.get_linewidth() < mean.get_linewidth() for line in seeds)
    assert mean.get_ydata() == pytest.approx([0.1, 0.15, 0.1, 0.15])
    (band,) = by_position.collections
    assert band.get_paths()[0].vertices[:, 1].max() == pytest.approx(0.2)  # the highest seed at an odd position
    assert "band: seed range (thin: each seed)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


# --------------------------------------------------------------------------------------------- 3. widths
@pytest.mark.parametrize("n, width", [(3, 6.6), (4, 5.7), (3, 4.2), (6, 4.4)])
def test_panel_grids_fit_a_notebook_cell_and_keep_every_panel(n, width):
    fig, axes = panel_grid(n, panel=(width, 3.0))
    assert fig.get_figwidth() <= MAX_WIDTH and len(axes) == len(fig.axes) == n


def test_a_row_too_wide_narrows_a_little_or_wraps_and_a_grid_keeps_its_rows():
    fig, axes = new_figure(3, panel=(4.4, 3.0))  # 13.2 in: narrowed, still one row
    assert fig.get_figwidth() == pytest.approx(MAX_WIDTH) and len({ax.get_subplotspec().rowspan.start
                                                                     for ax in axes}) == 1
    fig, axes = new_figure(4, panel=(4.2, 3.0))  # 16.8 in: wrapped
    assert fig.get_figwidth() <= MAX_WIDTH and len(axes) == len(fig.axes) == 4
    fig, axes = new_figure(3, 2, panel=(4.4, 3.0))  # a grid's rows mean something: narrowed, never wrapped
    assert fig.get_figwidth() <= MAX_WIDTH and len(axes) == 6
    assert [ax.get_subplotspec().rowspan.start for ax in axes] == [0, 0, 0, 1, 1, 1]


def test_the_wide_bar_figures_fit_a_notebook_cell():
    from workbench.experiments.common import bar_figure

    swaps = pd.DataFrame([{"task": task, "scratch_updates": s, "specimen": f"{task} s{s} seed 1", "design": design,
                           **{f"{k}_{c}": 0.5 for k in ("swap", "control") for c in ("flip", "low", "high")}}
                          for task in ("a", "b", "c") for s in (0, 8, 32) for design in ("site", "stream")])
    assert plots.swap_flips(swaps).get_figwidth() <= MAX_WIDTH
    table = pd.DataFrame([{"task": "text", "arm": f"arm_{i}", "metric": m, "value": 1.0}
                          for m in ("val_bpb", "val_loss", "accuracy") for i in range(6)])
    assert bar_figure(table, "").get_figwidth() <= MAX_WIDTH
    lens = pd.DataFrame([{"pass": k, "depth": d, "lens": "logit", "top1_is_answer": 0.5}
                         for k in (1, 2) for d in (0, 1)])
    fig = plots.lens_by_pass({f"m{i}": lens for i in range(4)})
    assert fig.get_figwidth() <= MAX_WIDTH and fig.axes[-1].get_ylabel() == "share whose top token is the answer"


# --------------------------------------------------------------------------------------------- 4. cosmetic
def test_row_major_puts_entries_given_together_side_by_side():
    handles, labels = row_major(list("abcdefg"), list("abcdefg"), 3)
    assert labels == ["a", "d", "g", "b", "e", "c", "f"]  # columns a d g | b e | c f read as rows a b c, d e f, g
    assert row_major([1, 2], ["x", "y"], 4) == ([1, 2], ["x", "y"])
    _, labels = legend_rows([[(1, "run a"), (2, "run b")], [(3, "chance")]], ncols=3)
    assert labels == ["run a", "chance", "run b", ""]  # shown: run a, run b, (blank) | chance: a row of its own


def test_lrt_mechanism_legend_rows_pair_each_scale_with_its_init():
    stats = pd.DataFrame({"layer": [0, 1], "alpha": [1.2, 0.8], "gamma": [0.3, 0.2], "gate_local": [1.1, 0.9],
                          "gate_feedback": [0.4, 0.5], "source": [False, True]})
    gates = pd.DataFrame([{"layer": layer, "position": p, "gate_feedback": 0.5} for layer in (0, 1) for p in range(4)])
    rows = legend_rows_shown(plots.lrt_mechanism(stats, gates, gamma_init=0.1).legends[0])
    assert rows[0] == [r"$\alpha$: scale of the block's own residual", r"$\alpha$ at init (1)",
                       r"$\gamma$: scale of the memory added", r"$\gamma$ at init (0.1)"]
    assert rows[1] == ["gate on the token's own keys/values", "gate on the memory's keys/values",
                       "gates at init (2 sigmoid(0) = 1)", "source block of the memory"]


def test_fixed_point_accuracy_legend_puts_the_models_before_the_keys():
    results = {name: accuracy_rows([0.8, 1.0], 0.5) for name in ("a", "b", "c", "d")}
    rows = legend_rows_shown(plots.fixed_point_accuracy(results, chance=0.5).legends[0])
    assert rows[:2] == [["a", "b", "c"], ["d", "", ""]]  # the models, then a fresh row for chance and the keys
    assert rows[2][0] == "chance 0.5"


def test_trace_length_axes_count_tokens_in_whole_ticks():
    traces = pd.DataFrame([{"regime": r, "example": i, "length": n, "correct": True, "answered": True}
                           for r in ("standard", "soft") for i, n in enumerate((1, 2, 3))])
    fig = plots.trace_example(traces, example=0)
    fig.draw_without_rendering()
    assert all(float(t).is_integer() for t in fig.axes[0].get_yticks())
    fig = plots.trace_lengths(traces)
    fig.draw_without_rendering()
    assert all(float(t).is_integer() for t in fig.axes[0].get_yticks())


def test_fixed_point_readability_sizes_panels_to_their_arms_and_packs_small_families_in_a_row():
    arms = {"mechanism": ["fbt_glu", "lrt"], "duration": ["ft_mix_4500", "ft_fixed_point_4500", "ft_mix"],
            "training": ["ft_jitter_0.2", "ft_random_1_8", "ft_phased_88_12", "ft_fixed_point"]}
    table = pd.DataFrame([{"arm": arm, "family": family, "accuracy_pass1": 0.8, "accuracy_pass2": 1.0,
                           "accuracy_pass3": 0.9, "accuracy_exact": 0.5, "lyapunov_top": -0.05}
                          for family, group in arms.items() for arm in group for _ in range(2)])
    fig = plots.fixed_point_readability(table)
    fig.draw_without_rendering()
    bars = fig.axes[0::2]
    assert [ax.get_title(loc="left") for ax in bars] == list(arms)
    assert [ax.get_xlim() for ax in bars] == [(-0.5, 1.5), (-0.5, 2.5), (-0.5, 3.5)]  # no empty slots
    boxes = [ax.get_position() for ax in bars]
    assert boxes[0].y0 == pytest.approx(boxes[1].y0) and boxes[2].y0 < boxes[0].y0  # 2 + 3 arms share a row
    per_arm = [box.width / len(group) for box, group in zip(boxes, arms.values())]
    assert max(per_arm) / min(per_arm) < 1.25  # about the same bar width in every panel
    assert fig.get_figwidth() <= MAX_WIDTH


def test_difference_intervals_draw_each_interval_against_zero_coloured_by_its_side():
    from workbench.plots import difference_intervals
    from workbench.plots.training import INTERVAL_COLOURS

    frame = pd.DataFrame({"panel": ["a", "a", "b"], "label": ["x - y", "z - y", "control"],
                          "mean": [0.05, 0.01, -0.06], "low": [0.04, -0.02, -0.07], "high": [0.06, 0.03, -0.05],
                          "highlight": [True, False, False]})
    fig = difference_intervals(frame, "verdict: worse", "bits/byte")
    first, second = fig.axes[:2]
    assert [t.get_text() for t in first.get_yticklabels()] == ["x - y", "z - y"]
    assert first.get_yticklabels()[0].get_fontweight() == "bold"
    for ax in (first, second):
        low, high = ax.get_xlim()
        assert low < 0 < high  # no difference is always in view, even for an interval far from it
    colours = [line.get_color() for line in first.lines if line.get_marker() == "o"]
    assert colours == [INTERVAL_COLOURS["above"], INTERVAL_COLOURS["across"]]
    assert fig.get_suptitle() == "verdict: worse"
    with pytest.raises(ValueError, match="empty"):
        difference_intervals(frame.iloc[:0])


def test_pass_losses_difference_panel_shows_a_gain_smaller_than_the_noise_and_the_legend_lists_passes_first():
    steps = np.arange(1, 41)
    noise = np.random.default_rng(0).normal(0, 0.3, steps.size)  # batch to batch: far above the gain
    history = pd.DataFrame({"step": steps, "loss_pass1": 2.0 + noise, "loss_pass2": 1.92 + noise,
                            "loss_pass3": np.where(steps % 10 == 0, 1.95 + noise, np.nan)})
    runs = {"a": history, "b": history.assign(loss_pass3=np.nan)}
    fig = plots.pass_losses(runs, floor=3.0, difference=True)
    assert len(fig.axes) == 3 and fig.axes[0].get_ylim() == fig.axes[1].get_ylim()
    gaps = fig.axes[2]
    pass2 = [line for line in gaps.lines if line.get_label().startswith("a, pass 2")][0]
    assert np.allclose(pass2.get_ydata(), -0.08) and "last 10: -0.080" in pass2.get_label()
    assert not [line for line in gaps.lines if line.get_label().startswith("b, pass 3")]  # nothing logged: no entry
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["pass 1", "pass 2", "pass 3", "unigram 3.000"]
    assert len(plots.pass_losses(runs).axes) == 2  # off by default


def test_pass_losses_difference_range_reads_the_late_gain_not_the_jump_where_feedback_starts():
    steps = np.arange(1, 201)
    noise = np.random.default_rng(1).normal(0, 0.01, steps.size)
    gap = np.where(steps <= 3, 1.2, -0.08) + noise  # three steps of a 1.2-nat jump, then the gain
    history = pd.DataFrame({"step": steps, "loss_pass1": 2.0, "loss_pass2": 2.0 + gap})
    gaps = plots.pass_losses({"a": history}, difference=True).axes[-1]
    low, high = gaps.get_ylim()
    assert low < -0.08 and 0 < high < 0.5  # the gain and zero in view; the jump is not what sets the scale
    assert "3 of 200 points off the scale" in gaps.get_title()
    running = [line for line in gaps.lines if line.get_linestyle() == "-" and line.get_label().startswith("_")]
    assert np.isclose(running[0].get_ydata()[-1], gap[-10:].mean())


def test_difference_intervals_key_the_sides_in_one_order_whatever_comes_first():
    frame = pd.DataFrame({"panel": "a", "label": ["up", "down"], "mean": [0.1, -0.1], "low": [0.05, -0.2],
                          "high": [0.2, -0.05]})
    fig = plots.difference_intervals(frame)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["wholly below 0", "wholly above 0"]
