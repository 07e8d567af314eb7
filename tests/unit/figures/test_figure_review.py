"""The figure review's fixes (notes/figs/REVIEW.md), each as the behaviour a reader saw go wrong: titles that crown
one of several tied series or call a float32 fixed point "never", lines and marks that hide each other, empty
panels, legends over the data, chance lines missing, box numbers that disagree with the title."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.colors import to_rgba

from conftest import overlapping_ticks, small_config
from workbench import diagrams, plots


def hlines(ax, y: float) -> list:
    return [line for line in ax.lines if len(line.get_ydata()) == 2 and np.allclose(line.get_ydata(), y)]


def texts(fig) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


# --------------------------------------------------------------------------------------------- 1. probe ties
def profile(at_one: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame([{"condition": c, "layer": layer, "accuracy": value if layer else 0.5, "majority": 0.5}
                         for c, value in at_one.items() for layer in (0, 1)])


def test_profile_takeaway_names_a_tie_instead_of_crowning_the_first():
    every = profile({"standard": 1.0, "suffix1": 0.999, "suffix2": 1.0})
    assert plots.profile_takeaway(every, depth=1) == "at depth 1: all 3 lines read 1.00; majority 0.50"
    some = profile({"standard": 0.5, "suffix1": 1.0, "suffix2": 0.998, "suffix4": 1.0})
    assert plots.profile_takeaway(some, depth=1) == ("at depth 1: suffix1, suffix2, suffix4 tie at 1.00, "
                                                     "standard worst (0.50); majority 0.50")


def test_probe_profile_coinciding_lines_each_keep_a_marker_of_their_own():
    fig = plots.probe_profile(profile({"standard": 1.0, "suffix1": 1.0, "suffix2": 1.0}))
    series = [line for line in fig.axes[0].lines if line.get_label() in ("standard", "suffix1", "suffix2")]
    assert len({(line.get_marker(), line.get_markersize()) for line in series}) == 3
    drawn = [line.get_markersize() for line in series]
    assert drawn == sorted(drawn, reverse=True)  # the first drawn is the widest: a rim shows around later ones


def test_probe_profile_keys_a_control_and_a_band_only_where_they_are_drawn():
    def keys(df: pd.DataFrame) -> list[str]:
        return plots.probe_profile(df).axes[0].get_legend_handles_labels()[1]

    bare = profile({"standard": 0.9}).assign(control_accuracy=np.nan, accuracy_std=0.0)
    assert "dashed: its control task" not in keys(bare) and "band: ± std over folds" not in keys(bare)
    drawn = bare.assign(control_accuracy=0.6, accuracy_std=0.02)
    assert "dashed: its control task" in keys(drawn) and "band: ± std over folds" in keys(drawn)


# --------------------------------------------------------------------------------------------- 2. float32
def plateau(level: float, settles: int = 12, passes: int = 24) -> pd.DataFrame:
    k = np.arange(1, passes + 1)
    return pd.DataFrame({"pass": k, "fixed_point_distance": np.where(k >= settles, level, 0.5 ** k)})


def test_a_float32_run_at_its_fixed_point_is_within_float32_rounding_not_never():
    assert plots.contraction_takeaway(plateau(2.4e-6)) == "exact fixed point (within float32 rounding) at pass 12"
    assert plots.contraction_takeaway(plateau(2.4e-6), dtype="float64") == \
        "the run is not within 1e-09 of its fixed point by its last pass"  # a float64 run there is not exact
    assert plots.contraction_takeaway(plateau(2.4e-6).assign(dtype="float32"), exact_below=1e-12) == \
        "exact fixed point (within float32 rounding) at pass 12"
    falling = plateau(0.0, settles=99, passes=20)  # 1e-6 at its last pass but still halving: not a plateau
    assert plots.contraction_takeaway(falling) == "the run is not within 1e-09 of its fixed point by its last pass"
    assert plots.contraction_takeaway({"a": plateau(0.0, settles=5), "b": plateau(2.4e-6)}) == \
        "exact fixed point at a pass 5 (< 1e-09), b pass 12 (within float32 rounding)"


def test_a_float32_run_is_exact_from_the_pass_it_reaches_its_floor_not_before():
    run = pd.DataFrame({"pass": range(1, 8), "fixed_point_distance": [1e-1, 1e-3, 2.2e-6, 3e-7, 7.9e-8, 8e-8, 7.9e-8]})
    assert plots.contraction_takeaway(run, dtype="float32") == "exact fixed point (within float32 rounding) at pass 4"


def test_a_real_float32_model_reads_within_float32_rounding():
    from workbench import build_model
    from workbench.analysis import pass_dynamics

    torch.manual_seed(0)
    model = build_model(small_config("fbt"), dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    idx = torch.randint(0, 23, (2, 8), generator=torch.Generator().manual_seed(0))
    frame = pass_dynamics(model.eval(), idx, passes=16)
    said = plots.contraction_takeaway(frame)
    assert "never" not in said and "not within" not in said and "at pass" in said


# --------------------------------------------------------------------------------------------- 3. seed spread
def ends(*offsets: float) -> list[pd.DataFrame]:
    steps = np.arange(1, 11)
    return [pd.DataFrame({"flops": steps * 1e9, "val_bpb": 3.0 - 0.1 * steps + o}) for o in offsets]


def test_ends_title_says_tie_when_the_seed_ranges_overlap():
    curves = {"baseline": ends(0.0, 0.2), "lrt": ends(0.1, 0.3), "far": ends(1.0)}
    assert plots.ends_title(curves, lead="x: ") == ("x: tie within the seed spread: baseline 2.100, lrt 2.200 bits "
                                                    "per byte (far 3.000) at the last mark")
    apart = {"baseline": ends(0.0, 0.2), "lrt": ends(0.3, 0.5)}
    assert plots.ends_title(apart).startswith("baseline ends lowest")


# --------------------------------------------------------------------------------------------- 4. contraction
def dynamics(loss: float, passes: int = 8) -> pd.DataFrame:
    k = np.arange(1, passes + 1)
    return pd.DataFrame({"pass": k, "delta": 0.5 ** k, "fixed_point_distance": 0.5 ** k, "loss": loss * k})


def test_contraction_curves_loss_scale_per_row_and_the_notes_line_breaks_survive():
    runs = {f"mix_{m}_s{s}": dynamics(2.0) for m in ("a", "b", "c") for s in (0, 1)}
    runs["reg_lrt"] = dynamics(0.01)
    note = "registers: T = 138, passes 1..103 " * 3 + "\nverdict: not tested"
    fig = plots.contraction_curves(runs, chance={"chance 0.693": 0.693}, note=note)
    fbt_loss, lrt_loss = fig.axes[2], fig.axes[5]
    assert lrt_loss.get_ylim()[1] < 1.0 < 10.0 < fbt_loss.get_ylim()[1]  # the LRT row not flattened by the FBT's
    assert fig.axes[1].get_ylim() == fig.axes[4].get_ylim()  # the log columns still compare down the column
    assert "\nverdict: not tested" in fig.get_suptitle()


# --------------------------------------------------------------------------------------------- 5. chance
def traces() -> pd.DataFrame:
    return pd.DataFrame([{"regime": r, "length": n, "correct": ok, "example": i} for r in ("standard", "soft")
                         for i, (n, ok) in enumerate(((5, True), (7, False), (9, True)))])


def test_trace_lengths_draws_chance_on_the_accuracy_panel():
    fig = plots.trace_lengths(traces(), chance=0.12)
    accuracy = fig.axes[1]
    assert len(hlines(accuracy, 0.12)) == 1 and "chance 0.12" in texts(fig)
    assert not hlines(fig.axes[0], 0.12)  # not on the length panel
    assert len(hlines(plots.trace_lengths(traces().assign(chance=0.25)).axes[1], 0.25)) == 1  # from the data
    assert not [line for line in plots.trace_lengths(traces()).axes[1].lines if line.get_linestyle() == ":"]
    with pytest.raises(ValueError, match="^chance="):
        plots.trace_lengths(traces(), chance=2.0)


# --------------------------------------------------------------------------------------------- 6. flips
def test_swap_flips_probe_and_twin_marks_do_not_overprint_and_ticks_are_legible():
    swaps = pd.DataFrame([{"task": "delayed_memory", "scratch_updates": s, "specimen": f"delayed_memory s{s} seed 1",
                           "design": "site", "probe_accuracy": 1.0, "probe_twin_accuracy": 1.0,
                           **{f"{k}_{c}": 0.5 for k in ("swap", "control") for c in ("flip", "low", "high")}}
                          for s in (0, 8, 32)])
    fig = plots.swap_flips(swaps)
    (ax,) = fig.axes
    fig.draw_without_rendering()
    probe, twin = ([c for c in ax.collections if c.get_label().startswith(start)][0]
                   for start in ("probe acc.", "untrained twin"))
    apart = np.abs(ax.transData.transform(probe.get_offsets())[:, 0] - ax.transData.transform(twin.get_offsets())[:, 0])
    size = np.sqrt(probe.get_sizes()[0]) * fig.dpi / 72  # a marker's width in pixels
    assert (apart >= size).all()
    assert all(t.get_fontsize() >= 8 for t in ax.get_xticklabels()) and overlapping_ticks(ax) == []


# --------------------------------------------------------------------------------------------- 7. probes
def layer0_rows() -> pd.DataFrame:
    rows = [{"task": task, "scratch_updates": n, "model": model, "condition": c, "layer": 0,
             "accuracy": 0.5 if model == "baseline" or c == "standard" else 0.95, "majority": 0.5,
             "twin_accuracy": 0.5, "upper_bound": 0.99}
            for task, lengths in (("delayed_memory", (0, 8, 32)), ("multi_register", (0,)))
            for n in lengths for model in ("baseline", "fbt") for c in ("standard", "suffix1")]
    return pd.DataFrame(rows)


def test_layer0_comparison_draws_only_panels_with_data_and_bounds_only_feedback_models():
    fig = plots.layer0_comparison(layer0_rows())
    assert [ax.get_title() for ax in fig.axes] == ["delayed_memory / 0 scratch lines", "multi_register / 0 scratch "
                                                   "lines", "delayed_memory / 8 scratch lines",
                                                   "delayed_memory / 32 scratch lines"]
    assert all(ax.patches for ax in fig.axes) and not [t for ax in fig.axes for t in ax.texts]
    width = 0.8 / 2  # two models: baseline's bars left, fbt's right; suffix1 at x = 1
    for ax in fig.axes:
        (stars,) = [c for c in ax.collections if c.get_label().startswith("upper bound")]
        x = np.ma.filled(np.ma.asarray(stars.get_offsets(), dtype=float), np.nan)
        assert x[np.isfinite(x[:, 1]), 0].tolist() == pytest.approx([1.0 - 0.4 + 1.5 * width + 0.25 * width])
    by_arm = layer0_rows().assign(arm=lambda d: d["model"], model=lambda d: "specimen " + d["model"].str[0])
    marks = plots.layer0_comparison(by_arm).axes[0].collections
    assert len([c for c in marks if c.get_label().startswith("upper bound")]) == 1  # the arm says "baseline"


def test_accuracy_vs_scratch_title_colours_by_name_and_no_bound_without_feedback():
    df = layer0_rows()
    fig = plots.accuracy_vs_scratch(df)
    assert fig.get_suptitle().replace("\n", " ") == ("suffix1 at depth 0, fewest->most scratch lines: baseline "
                                                    "0.50->0.50, fbt 0.95->0.95; majority 0.50")
    assert plots.accuracy_vs_scratch(df, title="").get_suptitle() == ""
    colour = {line.get_label(): line.get_color() for line in fig.axes[0].lines if line.get_label() in ("baseline",
                                                                                                        "fbt")}
    flipped = plots.accuracy_vs_scratch(df.iloc[::-1])  # rows in another order: the same colour per name
    assert {line.get_label(): line.get_color() for line in flipped.axes[0].lines
            if line.get_label() in colour} == colour
    dotted = [line for line in fig.axes[0].lines if line.get_linestyle() == ":"]
    assert [to_rgba(line.get_color()) for line in dotted] == [to_rgba(colour["fbt"])]  # the baseline has no bound


def test_accuracy_vs_scratch_draws_a_panel_only_where_a_group_has_data_and_a_lone_point_whole():
    df = layer0_rows()
    df = df[(df["task"] == "delayed_memory") | (df["model"] == "fbt")]  # the baseline never saw multi_register
    fig = plots.accuracy_vs_scratch(df, groups={"fbt": ["fbt"], "baseline": ["baseline"]})
    assert [ax.get_title() for ax in fig.axes] == ["delayed_memory / fbt", "multi_register / fbt",
                                                   "delayed_memory / baseline"]
    low, high = fig.axes[1].get_xlim()  # multi_register has one scratch length, 0
    assert low < 0 < high and high - low >= 2


def path_rows(order=1) -> pd.DataFrame:
    rows = [{"task": task, "arm": "fbt", "specimen": specimen, "model": model, "C": c,
             "accuracy": base + (0.02 if c == 10.0 else 0.0), "plausible": c >= 1.0}
            for task in ("delayed_memory", "multi_register") for specimen, base in (("FBT s0", 0.94), ("FBT s8", 0.6))
            for model in ("trained", "random init") for c in (0.01, 1.0, 10.0)]
    return pd.DataFrame(rows[::order])


def test_regularisation_paths_title_majority_line_and_colours_by_name():
    fig = plots.regularisation_paths(path_rows(), threshold=0.95, chance=0.5)
    assert fig.get_suptitle() == ("strongest vs weakest C within 0.01 on 0 of 4 trained specimens; "
                                  "the 0.95 verdict flips with C on 2")
    assert all(len(hlines(ax, 0.5)) == 1 for ax in fig.axes) and "majority 0.5" in texts(fig)

    def colours(f) -> dict:
        return {(ax.get_title(), line.get_label()): line.get_color() for ax in f.axes for line in ax.lines
                if line.get_label().startswith("FBT")}

    drawn = colours(fig)
    assert drawn == colours(plots.regularisation_paths(path_rows(order=-1)))
    assert drawn["delayed_memory / fbt", "FBT s8"] == drawn["multi_register / fbt", "FBT s8"]
    assert plots.regularisation_paths(path_rows(), title="").get_suptitle() == ""


# --------------------------------------------------------------------------------------------- 8. diagram
@pytest.mark.parametrize("source_layer, block", [(1, "1"), (-1, "2")])
def test_recurrence_highlighted_box_reads_the_block_the_title_names(source_layer, block):
    fig = diagrams.recurrence(positions=3, layers=3, mechanism="lrt", source_layer=source_layer)
    (ax,) = fig.axes
    depth = int(block) + 1  # the input row x sits at depth 0
    boxes = [t for t in ax.texts if t.get_position()[0] >= 0]  # the boxes' labels, not the "block" axis word
    assert {t.get_text() for t in boxes if t.get_position()[1] == depth} == {block}
    assert f"block {block}" in ax.get_title()
    assert {t.get_text() for t in boxes if t.get_position()[1] == 0} == {"x"}


# --------------------------------------------------------------------------------------------- 9. schedules
def test_jacobi_settling_colorbar_label_clears_its_tick_labels():
    rows = [{"pass": k, "position": t, "error": 0.0 if t < k else 10 ** (0.15 * np.sin(k + t))}
            for k in range(1, 13) for t in range(12)]
    fig = plots.jacobi_settling(pd.DataFrame(rows))
    fig.draw_without_rendering()
    bar = fig.axes[-1]
    right = max(t.get_window_extent().x1 for t in bar.get_yticklabels() if t.get_text())
    assert bar.yaxis.label.get_window_extent().x0 - right >= 8 * fig.dpi / 72  # at least 8 pt between them


def test_schedule_distance_legend_off_the_drop_and_coinciding_rings_apart():
    values = np.arange(1, 5)
    sweeps = pd.concat([pd.DataFrame({"schedule": "multipass", "value": values, "distance": [1e-1, 1e-2, 1e-3, 1e-8]}),
                        pd.DataFrame({"schedule": "interleaved", "value": values,
                                      "distance": [1e-1, 1e-1, 1e-1, 1e-7]})], ignore_index=True)
    fig = plots.schedule_distance(sweeps, selected={"multipass": 4, "interleaved": 4})
    (ax,) = fig.axes
    assert ax.get_legend() is None and len(fig.legends) == 1
    fig.draw_without_rendering()
    assert not fig.legends[0].get_window_extent().overlaps(ax.get_window_extent())
    assert "selected setting" in texts(fig)
    rings = [line for line in ax.lines if line.get_markerfacecolor() == "none" and len(line.get_xdata())]
    assert len(rings) == 2 and all(r.get_xdata()[0] == 4 for r in rings)
    assert len({r.get_markersize() for r in rings}) == 2 and len({r.get_markeredgecolor() for r in rings}) == 2
