"""The figure standard's parameters: floor / chance lines drawn at the value given and named in a legend, titles that
carry a computed takeaway, legends off the data. Bad input is a ValueError naming the parameter."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from workbench import diagrams, plots


def hlines(ax, y: float) -> list:
    """The horizontal lines of ``ax`` drawn at ``y`` (axhline or a floor artist)."""
    return [l for l in ax.lines if len(l.get_ydata()) == 2 and np.allclose(l.get_ydata(), y)]


def legend_texts(fig: Figure) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def history(offset: float = 0.0) -> pd.DataFrame:
    steps = np.arange(1, 11)
    return pd.DataFrame(dict(step=steps, flops=steps * 1e9, loss=3.0 - 0.1 * steps + offset,
                             loss_pass1=3.1 - 0.1 * steps, loss_pass2=2.9 - 0.1 * steps))


# --------------------------------------------------------------------------------------------- training
def test_loss_curves_floor_is_drawn_at_its_value_and_named():
    fig = plots.loss_curves({"pass 1": history(), "pass 2": history(0.3)}, floor=1.6, floor_label="target marginal")
    ax, _ = fig.axes  # the curves, and pass 2 minus pass 1 under them
    assert len(hlines(ax, 1.6)) == 1
    assert "target marginal 1.600" in legend_texts(fig)
    assert not hlines(plots.loss_curves(history()).axes[0], 1.6)  # no floor by default
    with pytest.raises(ValueError, match="^floor="):
        plots.loss_curves(history(), floor=float("nan"))


def test_loss_vs_flops_names_the_column_in_words_and_puts_the_title_over_every_panel():
    curves = {"a": [history().assign(val_bpb=lambda d: d["loss"])],
              "b": [history(0.5).assign(val_bpb=lambda d: d["loss"])]}
    fig = plots.loss_vs_flops(curves, x=("flops",), title="takeaway")
    assert fig.axes[0].get_ylabel() == "held-out bits per byte" and fig.axes[0].get_title() == "takeaway"
    two = plots.loss_vs_flops(curves, title="takeaway", extra_panel=True)
    assert two.get_suptitle() == "takeaway" and two.axes[0].get_title() == ""


def test_loss_vs_flops_extra_panel_floor_follows_the_callers_points():
    """The extra panel's floor does not stretch its y range: it shows where the caller's points reach it."""
    curves = {"a": [history().assign(val_bpb=lambda d: d["loss"])]}
    fig = plots.loss_vs_flops(curves, floor=4.59, extra_panel=True)
    ax = fig.axes[1]
    ax.scatter([0, 1], [2.0, 5.0])
    line = [a for a in ax.get_children() if getattr(a, "get_label", lambda: "")() == "unigram 4.590"]
    assert len(line) == 1 and np.allclose(line[0].get_ydata(), 4.59)
    low, high = ax.get_ylim()
    assert low <= 4.59 <= high  # inside the caller's range: drawn there
    far = plots.loss_vs_flops(curves, floor=40.0, extra_panel=True).axes[1]
    far.scatter([0, 1], [2.0, 3.0])
    far.figure.canvas.draw()
    assert far.get_ylim()[1] < 40.0  # not a data limit: the points keep the scale
    with pytest.raises(ValueError, match="^floor="):
        plots.loss_vs_flops(curves, floor="4.5")


def test_ends_title_states_the_end_points_it_computes():
    curves = {"baseline": [history(0.0).assign(val_bpb=lambda d: d["loss"]),
                           history(0.2).assign(val_bpb=lambda d: d["loss"])],
              "lrt": [history(0.5).assign(val_bpb=lambda d: d["loss"])]}
    assert plots.final_marks(curves) == pytest.approx({"baseline": 2.1, "lrt": 2.5})
    title = plots.ends_title(curves, lead="x: ")
    assert title == "x: baseline ends lowest, 2.100 bits per byte (lrt 2.500) at the last mark"
    with pytest.raises(ValueError, match="curves"):
        plots.final_marks({"a": []})


def test_pass_losses_floor_shared_legend_below_and_takeaway_title():
    runs = {f"run{i}": history().assign(loss_pass2=lambda d: d["loss_pass2"].where(d["step"] > 3)) for i in range(3)}
    fig = plots.pass_losses(runs, floor=3.18, title="every run ends below the unigram")
    assert all(len(hlines(ax, 3.18)) == 1 for ax in fig.axes)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1  # one legend, off the data
    assert legend_texts(fig) == ["pass 1", "pass 2", "unigram 3.180"]
    assert fig.get_suptitle() == "every run ends below the unigram"
    assert "pass 1 10, pass 2 7" in fig.axes[0].get_title()  # the logged steps per pass, in the panel title
    with pytest.raises(ValueError, match="^floor="):
        plots.pass_losses(runs, floor=np.inf)


# --------------------------------------------------------------------------------------------- diagrams
def test_recurrence_baseline_title_says_it_reads_no_memory():
    title = diagrams.recurrence(mechanism="none").axes[0].get_title()
    assert "no memory" in title and "reads" not in title


# --------------------------------------------------------------------------------------------- schedules
def sweeps() -> pd.DataFrame:
    values = np.arange(1, 7)
    return pd.concat([
        pd.DataFrame({"schedule": "multipass", "value": values, "distance": [1e-1, 1e-2, 1e-3, 1e-7, 1e-7, 1e-7]}),
        pd.DataFrame({"schedule": "interleaved", "value": values, "distance": [1e-1] * 5 + [1e-7]}),
        pd.DataFrame({"schedule": "blockwise", "value": values, "distance": [0.0] + [1e-2] * 5}),
    ], ignore_index=True)


def test_schedule_distance_rings_have_a_legend_entry_and_the_title_is_computed():
    positions = {"multipass(K=2)": pd.DataFrame({"position": range(5), "distance": [0.0, 1e-8, 1e-3, 1e-2, 1e-2]})}
    fig = plots.schedule_distance(sweeps(), positions, {"multipass": 2, "interleaved": 2})
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels.count("selected setting") == 1  # one entry for every ring
    assert fig.get_suptitle() == ("within 1e-05 of the exact recurrence: multipass from K = 4, "
                                  "interleaved from S = 6, blockwise only at B = 1")  # B = 1 is sequential
    never = sweeps().assign(distance=lambda d: d["distance"].where(d["schedule"] != "blockwise", 1e-2))
    assert plots.schedule_takeaway(never).endswith("interleaved from S = 6; blockwise never")
    assert "multipass(K=2) t < 2" in fig.axes[1].get_title()
    assert plots.schedule_distance(sweeps(), title="mine").get_suptitle() == "mine"
    assert plots.schedule_distance(sweeps(), title="").get_suptitle() == ""
    with pytest.raises(ValueError, match="^exact_below="):
        plots.schedule_distance(sweeps(), exact_below=0)


def test_jacobi_settling_explains_the_contour():
    rows = [{"pass": k, "position": t, "error": 0.0 if t < k else 0.1} for k in range(1, 5) for t in range(4)]
    fig = plots.jacobi_settling(pd.DataFrame(rows))
    assert "exact boundary t < k" in legend_texts(fig)


def test_regime_losses_floor_title_and_takeaway():
    frame = pd.DataFrame({"regime": ["standard"] * 3 + ["soft"] * 3, "position": [0, 1, 2] * 2,
                          "loss": [1.5, 1.6, 1.7, 1.4, 1.6, 1.6]})
    takeaway = plots.regime_takeaway(frame)
    assert takeaway == "soft - standard: -0.067 nats / token (mean over 3 positions)"
    fig = plots.regime_losses(frame, title=takeaway, floor=3.1)
    ax, _ = fig.axes  # the losses, and soft minus standard under them
    assert ax.get_title() == takeaway and len(hlines(ax, 3.1)) == 1 and "unigram 3.100" in legend_texts(fig)
    with pytest.raises(ValueError, match="^floor="):
        plots.regime_losses(frame, floor=float("inf"))
    with pytest.raises(ValueError, match="^reference="):
        plots.regime_takeaway(frame, reference="fused")


# --------------------------------------------------------------------------------------------- probes
def gates_frame() -> pd.DataFrame:
    return pd.DataFrame([{"task": task, "arm": arm, "scratch_updates": n, "gate_value": 0.9 + 0.01 * n}
                         for task in ("a", "b") for arm in ("fbt", "lrt") for n in (0, 8)])


def test_specimen_gates_chance_line_and_title():
    fig = plots.specimen_gates(gates_frame(), 0.95, chance=0.5, title="3 of 8 specimens clear the gate")
    assert all(len(hlines(ax, 0.5)) == 1 for ax in fig.axes) and "chance 0.5" in legend_texts(fig)
    assert fig.get_suptitle() == "3 of 8 specimens clear the gate"
    assert not hlines(plots.specimen_gates(gates_frame(), 0.95).axes[0], 0.5)
    with pytest.raises(ValueError, match="^chance="):
        plots.specimen_gates(gates_frame(), 0.95, chance=2.0)


def test_accuracy_vs_scratch_legend_holds_every_panels_models():
    rows = [{"task": task, "model": model, "scratch_updates": n, "condition": "suffix1", "layer": 0, "accuracy": 0.9,
             "majority": 0.5} for task, models in (("a", ("fbt",)), ("b", ("fbt", "lrt"))) for model in models
            for n in (0, 8)]
    fig = plots.accuracy_vs_scratch(pd.DataFrame(rows))
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert legend_texts(fig) == ["fbt", "majority", "lrt", "solid: trained"]  # lrt is drawn only in the second panel
    rows = pd.DataFrame(rows).assign(twin_accuracy=0.5)
    split = plots.accuracy_vs_scratch(rows, groups={"FBT": ["fbt"], "LRT": ["lrt"]})
    assert [ax.get_title() for ax in split.axes] == ["a / FBT", "b / FBT", "b / LRT"]  # lrt never saw "a"
    fbt_colour = split.axes[1].lines[0].get_color()
    assert split.axes[2].lines[0].get_color() != fbt_colour  # each model keeps its own colour in every row
    assert "dashed: untrained twin" in legend_texts(split)
    with pytest.raises(ValueError, match="^groups="):
        plots.accuracy_vs_scratch(rows, groups={"x": ["gpt"]})


def test_regularisation_paths_explains_filled_and_open_markers():
    path = pd.DataFrame([{"task": "a", "specimen": "s", "C": c, "accuracy": 0.8, "plausible": c >= 1}
                         for c in (0.1, 1.0, 10.0)])
    texts = legend_texts(plots.regularisation_paths(path))
    assert "filled: C as good as the best (CV)" in texts and "open: other C" in texts


# --------------------------------------------------------------------------------------------- interventions
def swaps_frame() -> pd.DataFrame:
    rows = []
    for task, scratch in (("delayed_memory", 0), ("delayed_memory", 8), ("multi_register", 0)):
        for design, verdict in (("site", "not tested"), ("stream", "uses")):
            rows.append({"task": task, "scratch_updates": scratch, "specimen": f"{task} s{scratch} seed 1",
                         "design": design, "verdict": verdict,
                         **{f"{k}_{c}": 0.5 for k in ("swap", "control") for c in ("flip", "low", "high")}})
    return pd.DataFrame(rows)


def test_swap_flips_one_panel_per_task_designs_explained_and_the_answer_as_title():
    fig = plots.swap_flips(swaps_frame())
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["delayed_memory (95 % intervals)",
                                                             "multi_register (95 % intervals)"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "s0\nseed\u00a01\nsite", "s0\nseed\u00a01\nstream", "s8\nseed\u00a01\nsite", "s8\nseed\u00a01\nstream"]
    texts = legend_texts(fig)
    assert "site: one memory read edited" in texts and "stream: every memory read of a 2-pass run edited" in texts
    assert fig.get_suptitle() == ("does the answer follow the memory?\n"
                                  "site edits: 3 of 3 'not tested'; stream edits: 3 of 3 'uses'")
    assert plots.swap_flips(swaps_frame(), title="mine").get_suptitle() == "mine"


def test_ablation_distance_and_answer_logits_titles():
    frame = pd.DataFrame({"run": ["a"] * 6, "distance": [1, 2, 3] * 2, "position": [1] * 3 + [2] * 3,
                          "increase": [0.3, 0.01, 0.0, 0.5, 0.03, 0.0]})
    fig = plots.ablation_distance(frame)
    assert fig.get_suptitle() == plots.ablation_takeaway(frame)
    assert plots.ablation_takeaway(frame) == "only the memory 1 position back matters: +0.400 nats at d = 1, " \
                                             "at most +0.020 beyond"
    assert plots.ablation_distance(frame, title="mine").get_suptitle() == "mine"
    logits = pd.DataFrame({"intervention": ["clean", "clean", "zero", "zero"], "token": ["0", "1"] * 2,
                           "logit": [3.0, -1.0, 0.5, 0.4]})
    fig = plots.answer_logits(logits, title="x")
    (ax,) = fig.axes
    assert ax.get_legend() is None and len(fig.legends) == 1  # off the bars
    assert ax.get_title() == "x"


# --------------------------------------------------------------------------------------------- dynamics
def dynamics(exact_from: int, passes: int = 8, loss: float = 2.0) -> pd.DataFrame:
    k = np.arange(1, passes + 1)
    distance = np.where(k >= exact_from, 0.0, 0.5 ** k)
    return pd.DataFrame({"pass": k, "delta": distance, "fixed_point_distance": distance, "loss": loss + 0.0 * k})


def test_contraction_takeaway_is_computed_from_the_distances():
    assert plots.contraction_takeaway({"a": dynamics(5), "b": dynamics(5)}) == \
        "exact fixed point (< 1e-09) at pass 5 for every run"
    assert plots.contraction_takeaway(dynamics(3)) == "exact fixed point (< 1e-09) at pass 3"
    assert plots.contraction_takeaway({"a": dynamics(3), "b": dynamics(99)}) == \
        "exact fixed point (< 1e-09) at a pass 3, b never"


def test_contraction_curves_splits_the_lrt_cross_and_draws_chance_on_every_loss_panel():
    runs = {f"mix_{m}_s{s}": dynamics(5) for m in ("1pass", "75_25", "75_22_3") for s in (0, 1)}
    runs["reg_lrt_75_22_3"] = dynamics(6, loss=1.0)
    fig = plots.contraction_curves(runs, chance={"chance 0.693": 0.693}, note="a long note " * 30)
    assert len(fig.axes) == 6  # two rows of three panels: six FBT runs, then the LRT cross
    assert [fig.axes[0].get_title(loc="left"), fig.axes[3].get_title(loc="left")] == ["FBT", "LRT"]
    assert len(fig.axes[2].get_lines()) == 7 and len(fig.axes[5].get_lines()) == 2  # runs and the chance line
    assert all(len(hlines(fig.axes[i], 0.693)) == 1 for i in (2, 5))
    assert fig.axes[1].get_ylim() == fig.axes[4].get_ylim()  # one log scale down a column (each row its own loss)
    assert "\n" in fig.get_suptitle()  # wrapped: never cut off at the figure's edge
    assert legend_texts(fig).count("chance 0.693") == 1
    assert len(plots.contraction_curves(dict(list(runs.items())[:6])).axes) == 3  # six fit one row
    with pytest.raises(ValueError, match="^chance="):
        plots.contraction_curves(runs, chance={"chance": float("nan")})


def quality(best: float, exact: float) -> pd.DataFrame:
    rows = [{"pass": k, "schedule": "multipass", "correct": c} for k in (1, 2, 3)
            for c in ([1.0] * int(10 * best) + [0.0] * (10 - int(10 * best)))]
    rows += [{"pass": 0, "schedule": "sequential", "correct": c}
             for c in [1.0] * int(10 * exact) + [0.0] * (10 - int(10 * exact))]
    return pd.DataFrame(rows)


def test_fixed_point_accuracy_chance_groups_and_takeaway():
    results = {"FBT a": quality(1.0, 0.0), "FBT b": quality(1.0, 0.2), "LRT": quality(1.0, 1.0)}
    takeaway = plots.fixed_point_takeaway(results)
    assert takeaway == "the fixed point answers worse than the best pass in 2 of 3 models (worst: FBT a, 0.00 vs 1.00)"
    fig = plots.fixed_point_accuracy(results, trained_depth=3, chance=0.5, title=takeaway,
                                     groups={"FBT": ["FBT a", "FBT b"], "LRT": ["LRT"]})
    assert [ax.get_title() for ax in fig.axes] == ["FBT", "LRT"] and fig.get_suptitle() == takeaway
    assert all(len(hlines(ax, 0.5)) == 1 for ax in fig.axes)
    texts = legend_texts(fig)
    assert {"chance 0.5", "solid: accuracy at pass k", "dashed to ◆: the exact recurrence (fixed point)"} <= set(texts)
    # integer passes, not 10^0, then the exact recurrence's own column
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "2", "3", "exact"]
    with pytest.raises(ValueError, match="^groups="):
        plots.fixed_point_accuracy(results, groups={"x": ["nope"]})
    with pytest.raises(ValueError, match="^chance="):
        plots.fixed_point_accuracy(results, chance=1.5)


def lyapunov(final: float, path: str = "full") -> pd.DataFrame:
    return pd.DataFrame({"index": 1, "path": path, "horizon": [1, 2, 3], "exponent": [0.5, 0.0, final]})


def test_lyapunov_title_states_the_sign_it_computes():
    negative = {"a": pd.concat([lyapunov(-0.1), lyapunov(-0.3, "memory")])}
    assert plots.lyapunov_curves(negative).get_suptitle() == \
        "all 2 top exponents negative (at most -0.100): perturbations die out"
    mixed = plots.lyapunov_takeaway({"a": lyapunov(-0.1), "b": lyapunov(0.2)})
    assert mixed == "1 of 2 top exponents not negative (b (full) +0.200): perturbations persist"
    assert plots.lyapunov_curves(negative, title="").get_suptitle() == ""


def test_lens_by_pass_labels_its_colourbar_and_states_what_fades():
    def lens(values: list[float]) -> pd.DataFrame:
        return pd.DataFrame([{"pass": k + 1, "depth": d, "lens": "logit", "top1_is_answer": v if d else 0.0}
                             for k, v in enumerate(values) for d in (0, 1)])

    results = {"fbt": lens([0.9, 1.0, 0.1]), "lrt": lens([0.8, 1.0, 1.0])}
    fig = plots.lens_by_pass(results)
    assert fig.axes[-1].get_ylabel() == "share whose top token is the answer"  # the colour bar
    assert fig.get_suptitle().endswith("at the top depth the answer fades by pass 3 in fbt (1.00 at pass 2 -> 0.10)"
                                       "; lrt keeps it")


def test_arm_words_replace_code_names_and_readability_explains_the_dots():
    from workbench.plots.dynamics import arm_words

    assert arm_words("ft_share_50_25_25") == "passes 1/2/3:\n50/25/25 %"
    assert arm_words("ft_mix_4500") == "recipe's mix,\n4500 steps"
    table = pd.DataFrame([{"arm": arm, "family": "training", "accuracy_pass1": 0.8, "accuracy_pass2": 1.0,
                           "accuracy_pass3": 1.0, "accuracy_exact": 0.0, "lyapunov_top": -0.1}
                          for arm in ("ft_mix", "ft_random_1_8") for _ in range(2)])
    fig = plots.fixed_point_readability(table)
    assert "one seed (dot)" in legend_texts(fig)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["recipe's mix", "random depth 1-8"]
    assert arm_words("ft_fixed_point_4500", 24) == "fixed-point target, 4500\nsteps"  # the Lyapunov rows: 2 lines
    assert fig.get_suptitle() == "no arm reads its fixed point on every seed (exact recurrence >= 0.95)"
    table.loc[table["arm"] == "ft_random_1_8", "accuracy_exact"] = [0.97, 0.99]
    long = table.assign(family="long", arm="long_mix", long_accuracy_exact=[0.5, 0.5, 1.0, 1.0])
    both = plots.fixed_point_readability(pd.concat([table, long]))
    assert both.get_suptitle() == (
        "every seed reads its fixed point (exact recurrence >= 0.95): random depth 1-8 (training)")
    panel = both.axes[2]  # the long family's bars are its long-prompt scores: the exact one's mean, 0.75
    assert panel.get_title(loc="left").startswith("long, on its long prompts")
    assert sorted(round(p.get_height(), 3) for p in panel.patches if np.isfinite(p.get_height()))[-1] == 0.75


# --------------------------------------------------------------------------------------------- traces
def traces() -> pd.DataFrame:
    rows = []
    for regime, lengths, correct in (("standard", [5, 7, 9], [True, True, False]), ("soft", [6, 7, 8], [1, 0, 0]),
                                     ("soft_last", [7, 7, 7], [True, True, True])):
        rows += [{"regime": regime, "length": n, "correct": bool(ok), "example": i}
                 for i, (n, ok) in enumerate(zip(lengths, correct))]
    return pd.DataFrame(rows)


def test_trace_lengths_title_legend_words_and_regimes_explained():
    fig = plots.trace_lengths(traces())
    assert fig.get_suptitle() == ("median trace 7 tokens in every regime; most accurate soft_last (100%), "
                                  "least soft (33%)")
    assert set(legend_texts(fig)) >= {"wrong answer (point)", "right answer (point)"}
    assert "soft_last: SOFT started at the prompt's last token" in fig.get_supxlabel()
    assert plots.trace_lengths(traces(), title="").get_suptitle() == ""


def test_trace_example_explains_the_outline_and_titles_the_outlined_regime():
    fig = plots.trace_example(traces(), example=2, regime="soft")
    (ax,) = fig.axes
    assert ax.get_title() == "example 2: soft writes 8 tokens (median 7) and answers wrong"
    assert ax.get_legend() is None and "selected regime (soft)" in legend_texts(fig)  # below, off the bars
    assert plots.trace_example(traces(), example=0).axes[0].get_title() == \
        "example 0: right under standard, soft, soft_last"


# --------------------------------------------------------------------------------------------- recipes' bars
def test_a_shipped_study_redrawn_from_its_files_is_its_recipe_figure():
    """The recipe explorer redraws from results.csv / pass_dynamics.csv and summary.json: the pass-mix study keeps
    its baseline and verdict, the layer-0 probes a colour per trained specimen (not one for "trained")."""
    from workbench import experiments
    from workbench.experiments.results_table import recipe_tables

    summary = experiments.ensure("fbt_pass_mixes")
    fig = experiments.experiment_figure(recipe_tables("fbt_pass_mixes"), summary=summary)
    assert summary["verdict"].replace(" ", "") in fig.get_suptitle().replace("\n", "").replace(" ", "")
    assert summary["chance"] in {t for ax in fig.axes for t in ax.get_legend_handles_labels()[1]} | set(
        legend_texts(fig))
    results = recipe_tables("layer0_probes")["results"]
    record = experiments.ensure("layer0_probes")
    probes = experiments.experiment_figure({"results": results}, summary=record)
    assert probes.get_suptitle() == f"layer0_probes: {record['verdict']}"
    drawn = {t for ax in probes.axes for t in ax.get_legend_handles_labels()[1]} | set(legend_texts(probes))
    trained = set(results.loc[(results["model"] == "trained") & (results["layer"] == 0), "label"])
    assert trained <= drawn and "trained" not in drawn
def test_bar_figure_splits_many_arms_names_bpb_and_keeps_the_floor_legend_off_the_bars():
    from workbench.experiments import experiment_figure
    from workbench.experiments.common import bar_figure

    table = pd.DataFrame({"arm": [f"arm_{i}" for i in range(15)], "metric": "bpb", "value": np.linspace(2.0, 1.0, 15),
                          "floor": 4.59, "floor_label": "unigram"})
    fig = bar_figure(table, "t")
    assert len(fig.axes) == 3 and all(len(ax.patches) <= 6 for ax in fig.axes)
    assert all(ax.get_ylabel() == "bits per byte" and len(hlines(ax, 4.59)) == 1 for ax in fig.axes)
    assert all(ax.get_legend() is None for ax in fig.axes) and legend_texts(fig) == ["unigram 4.590"]
    assert fig.axes[2].get_title() == "bits per byte (3/3)\n(lower is better)"
    assert fig.get_suptitle() == "t\nbest: arm_14 1.000 (lower is better)"  # over every panel, not one panel's
    redrawn = experiment_figure({"results": table})  # the recipe explorer's redraw from results.csv keeps the line
    assert all(len(hlines(ax, 4.59)) == 1 for ax in redrawn.axes)
    accuracy = pd.DataFrame({"arm": ["a", "b"], "metric": "accuracy", "value": [0.4, 0.9]})
    assert bar_figure(accuracy, "").get_suptitle() == "best: b 0.900 (higher is better)"


def test_layer0_comparison_draws_one_family_in_the_colours_of_all():
    rows = [{"task": "t", "model": m, "condition": c, "layer": 0, "accuracy": 0.5 + 0.1 * i, "majority": 0.5}
            for i, m in enumerate(("baseline", "fbt", "lrt")) for c in ("standard", "suffix1")]
    df = pd.DataFrame(rows)
    every = plots.layer0_comparison(df)
    fbt_only = plots.layer0_comparison(df, models=["fbt"])
    fbt_colour = every.axes[0].patches[2].get_facecolor()  # bars by model in sorted order: baseline's two, then fbt's
    bars = fbt_only.axes[0].patches
    assert len(bars) == 2 and {p.get_facecolor() for p in bars} == {fbt_colour}
    assert [t for t in legend_texts(fbt_only) if t in ("baseline", "fbt", "lrt")] == ["fbt"]
    with pytest.raises(ValueError, match="^models="):
        plots.layer0_comparison(df, models=["gpt"])


def test_regularisation_paths_one_panel_per_task_and_arm():
    path = pd.DataFrame([{"task": task, "arm": arm, "specimen": f"{arm} {s}", "model": model, "C": c,
                          "accuracy": 0.8, "plausible": True}
                         for task, arms in (("a", ("fbt", "lrt")), ("b", ("fbt",))) for arm in arms
                         for s in ("s0", "s8") for model in ("trained", "twin") for c in (0.1, 1.0)])
    fig = plots.regularisation_paths(path, threshold=0.9)
    assert [ax.get_title() for ax in fig.axes] == ["a / fbt", "a / lrt", "b / fbt"]
    # its specimens in the first row, then their lines drawn one on another (every accuracy is 0.8) said in words
    # (the texts column by column: matplotlib fills a legend's columns first)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "fbt s0", "2 lines at 0.80 (overlaid)", "fbt s8", "2 dashed at 0.80 (overlaid)"]
    assert {"dashed: its untrained twin", "claim needs 0.9"} <= set(legend_texts(fig))


def test_probe_profile_puts_at_most_six_series_in_a_panel():
    df = pd.DataFrame([{"condition": "suffix1", "model": f"m{i}", "layer": layer, "accuracy": 0.5 + 0.05 * i,
                        "majority": 0.5} for i in range(8) for layer in range(3)])
    fig = plots.probe_profile(df, highlight_depth=1, title="at depth 1: m7 reads best")
    assert len(fig.axes) == 2 and fig.get_suptitle() == "at depth 1: m7 reads best"
    series = [[t.get_text() for t in ax.get_legend().get_texts() if t.get_text().startswith("suffix1")]
              for ax in fig.axes]
    assert [len(s) for s in series] == [6, 2]
