"""Recipe figures say their takeaway and keep an arm's colour: ``bar_figure`` states the best over every panel (none
for one arm), ``text_figure`` shows the unigram whenever a point reaches it and is titled by the exact end points,
crosses / lrt_memory_sanity / reasoning_traces / causal_use redrawn from their committed tables draw what their
recipe drew (takeaway, chance line)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from workbench.experiments import experiment_figure
from workbench.experiments.common import ARM_COLOURS, arm_colour, bar_figure
from workbench.experiments.recipes import (
    crosses,
    gate_control,
    injection_ablation,
    lrt_memory_sanity,
    memory_source,
    source_layer,
)
from workbench.experiments.results_table import recipe_tables
from workbench.experiments.store import checkpoints_root
from workbench.experiments.text_arms import ARMS, end_points, saved_figure, text_figure, text_title
from workbench.plots.base import MAX_WIDTH


def bar_colours(fig) -> dict[str, tuple]:
    """Each bar's arm (its tick label, unwrapped) -> its colour, over every panel."""
    out = {}
    for ax in fig.axes:
        names = [t.get_text().replace("\n", "_") for t in ax.get_xticklabels()]
        for name, patch in zip(names, ax.patches):
            out[name] = to_rgb(patch.get_facecolor())
    return out


def test_bar_figure_states_the_best_over_every_panel_not_each_panel_s_own():
    table = pd.DataFrame({"arm": [f"arm_{i}" for i in range(15)], "metric": "bpb",
                          "value": [2.0 - 0.05 * i for i in range(14)] + [1.9]})  # arm_13 is best, in panel 3
    fig = bar_figure(table, "t")
    assert len(fig.axes) == 3
    assert fig.get_suptitle() == "t\nbest: arm_13 1.350 (lower is better)"
    assert not any("best" in ax.get_title() for ax in fig.axes)
    accuracy = pd.DataFrame({"arm": ["a", "b"], "metric": "accuracy", "value": [0.4, 0.9]})
    assert bar_figure(accuracy, "").get_suptitle() == "best: b 0.900 (higher is better)"


def test_a_single_arm_figure_names_no_best():
    one = pd.DataFrame({"arm": ["sequential"], "metric": "accuracy", "value": [0.999], "floor": 0.25,
                        "floor_label": "chance"})
    assert bar_figure(one, "x").get_suptitle() == "x"
    assert "best" not in bar_figure(one, "").get_suptitle()


def test_the_same_arm_keeps_its_colour_in_two_figures():
    first = bar_figure(pd.DataFrame({"arm": ["lrt_interleaved", "lrt_blockwise"], "metric": "bpb",
                                     "value": [2.2, 2.1]}), "")
    second = bar_figure(pd.DataFrame({"arm": ["baseline", "gates_only", "lrt_interleaved"], "metric": "bpb",
                                      "value": [2.1, 2.0, 2.2]}), "")
    assert bar_colours(first)["lrt_interleaved"] == bar_colours(second)["lrt_interleaved"]
    assert bar_colours(second)["lrt_interleaved"] == to_rgb(arm_colour("lrt_interleaved"))
    assert arm_colour("glu_mix_x3") == arm_colour("glu_random") != arm_colour("add_mix")  # a family, one colour


@pytest.mark.parametrize("arms", [("lrt_interleaved", "lrt_blockwise"), *(
    m.ARMS for m in (source_layer, memory_source, injection_ablation)), gate_control.ARMS])
def test_each_text_recipe_s_arms_have_colours_of_their_own_none_grey(arms):
    assert {"baseline", *ARMS} <= set(ARM_COLOURS)
    indices = [ARM_COLOURS[a] for a in arms]
    assert len(set(indices)) == len(indices) and 7 not in indices  # grey: the keys and reference lines


def curves(end: float, seeds: int = 3) -> list[pd.DataFrame]:
    return [pd.DataFrame({"flops": [1.0, 2.0], "val_bpb": [end + 1.0, end + 0.01 * s]}) for s in range(seeds)]


def points(exact: dict[str, list[float]], own: dict[str, list[float]] | None = None) -> pd.DataFrame:
    own = own or {}
    return pd.DataFrame([{"arm": a, "run": f"text_{a}_s{i}", "exact": v,
                          "own": own.get(a, [np.nan] * len(vs))[i]} for a, vs in exact.items()
                         for i, v in enumerate(vs)])


def unigram_in_view(ax, unigram: float) -> bool:
    low, high = ax.get_ylim()
    return low <= unigram <= high and any(list(line.get_ydata()) == [unigram, unigram] for line in ax.get_lines())


def test_text_figure_draws_the_unigram_when_a_point_lies_above_it():
    unigram = 4.59
    above = points({"lrt_interleaved": [2.2, 2.3, 2.25], "lrt_blockwise": [4.9, 2.5, 4.7]},
                   {"lrt_interleaved": [2.2, 2.2, 2.2], "lrt_blockwise": [2.1, 2.1, 2.1]})
    fig = text_figure({"lrt_interleaved": curves(2.2), "lrt_blockwise": curves(2.05)}, above, unigram,
                      text_title(above))
    ax = fig.axes[1]
    fig.canvas.draw()
    assert unigram_in_view(ax, unigram) and "scale" not in ax.get_title()
    assert any(t.get_text().startswith("unigram") for t in ax.get_legend().get_texts())
    below = points({"baseline": [2.08, 2.09, 2.11], "lrt_interleaved": [2.2, 2.3, 2.25]})
    far = text_figure({"baseline": curves(2.05), "lrt_interleaved": curves(2.2)}, below, unigram,
                      text_title(below)).axes[1]
    assert not unigram_in_view(far, unigram) and far.get_title().endswith("(unigram 4.59 above the scale)")


def test_text_figure_colours_an_arm_by_its_name_in_both_panels_and_every_figure():
    pair = points({"baseline": [2.1, 2.1], "lrt_interleaved": [2.2, 2.3]})
    other = points({"lrt_interleaved": [2.2, 2.3], "lrt_blockwise": [2.5, 4.8]})
    one = text_figure({"baseline": curves(2.1, 2), "lrt_interleaved": curves(2.2, 2)}, pair, 4.59, "t")
    two = text_figure({"lrt_interleaved": curves(2.2, 2), "lrt_blockwise": curves(2.0, 2)}, other, 4.59, "t")
    orange = to_rgb(arm_colour("lrt_interleaved"))
    for fig in (one, two):
        curve = next(x for x in fig.axes[0].get_lines() if x.get_label().startswith("lrt_interleaved ("))
        assert to_rgb(curve.get_color()) == orange
        legend = {t.get_text(): h for t, h in zip(fig.axes[0].get_legend().get_texts(),
                                                  fig.axes[0].get_legend().legend_handles)}
        assert to_rgb(legend["lrt_interleaved (2 seeds)"].get_color()) == orange
        dots = [c for c in fig.axes[1].collections if len(c.get_offsets()) and c.get_offsets()[0][1] == 2.2]
        assert dots and all(to_rgb(c.get_facecolor()[0]) == orange for c in dots)
    assert fig.axes[0].get_ylabel() == "held-out bits per byte"


def test_the_text_title_reads_the_exact_end_points_not_the_own_schedule_curves():
    # block-wise's own schedule ends lower; under the exact recurrence (the decision) it is far worse
    exact = points({"lrt_interleaved": [2.238, 2.242, 2.216], "lrt_blockwise": [4.876, 2.483, 4.753]})
    title = text_title(exact)
    assert title.startswith("exact recurrence: lrt_interleaved ends lowest, 2.232 bits per byte")
    assert "lrt_blockwise 4.037" in title
    per_example = {f"text_a_s{i}": pd.DataFrame({"bpb": [v, v]}) for i, v in enumerate((2.0, 2.2))}
    ends = pd.DataFrame({"run": ["text_a_s1"], "bpb_own_schedule": [2.1]})
    rows = end_points(per_example, {"a": ["text_a_s0", "text_a_s1"]}, ends)
    assert rows["exact"].tolist() == [2.0, 2.2] and rows["own"].isna().tolist() == [True, False]


def shipped(recipe: str) -> dict:
    path = checkpoints_root() / recipe / "summary.json"
    if not path.is_file():
        pytest.skip(f"no shipped {recipe} results")
    return json.loads(path.read_text())


def test_schedules_redrawn_from_its_files_shows_the_unigram_its_seeds_exceed():
    summary = shipped("schedules")
    fig = saved_figure(checkpoints_root() / "schedules")
    assert fig.get_suptitle().startswith("exact recurrence: lrt_interleaved ends lowest")
    assert unigram_in_view(fig.axes[1], summary["unigram_bpb"]) and "scale" not in fig.axes[1].get_title()


@pytest.mark.parametrize("module", [crosses, lrt_memory_sanity])
def test_a_bar_recipe_redrawn_from_its_tables_is_titled_by_its_takeaway(module):
    summary = shipped(module.RECIPE.name)
    tables = recipe_tables(module.RECIPE.name)
    fig = experiment_figure(tables, module.RECIPE.name, summary)
    said = module.takeaway(tables["results"])
    assert fig.get_suptitle().split("\n")[0] == said
    if module is crosses:
        assert said.startswith("FBT above LRT under both schedules") and "chance 0.225" in said
        assert fig.get_suptitle().endswith("best: fbt_interleaved 0.333 (higher is better)")
    else:
        assert fig.get_suptitle() == said and "chance 0.250" in said  # one arm: no "best"


def test_reasoning_traces_redrawn_from_its_tables_draws_the_recipe_s_chance():
    summary = shipped("reasoning_traces")
    tables = recipe_tables("reasoning_traces")
    fig = experiment_figure(tables, "reasoning_traces", summary)
    chance = float(summary["chance"].split()[1].rstrip(":"))
    accuracy = fig.axes[1]
    assert any(list(line.get_ydata()) == [pytest.approx(chance, abs=5e-4)] * 2 for line in accuracy.get_lines())
    assert len(fig.axes) == 3  # the lines panel, as the recipe drew it


def test_causal_use_s_bottom_parts_say_their_takeaway():
    shipped("causal_use")
    fig = experiment_figure(recipe_tables("causal_use"), "causal_use")
    said = [sub.get_suptitle() for sub in fig.subfigs[1:]]  # stacked under the swaps: no part shrunk in a cell
    assert fig.get_size_inches()[0] <= MAX_WIDTH
    assert "swap flips" in said[0] and "control" in said[0].split("\n")[-1]
    assert said[1].startswith("LRT text: only the memory")
