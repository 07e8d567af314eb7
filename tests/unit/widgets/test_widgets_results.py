"""Notebooks 07-09's package code: results gathered from a checkpoints folder, their figures and front-ends.

The checkpoints folder is written here (tiny configs, FLOPs from the trainer's own accounting), so
nothing depends on trained models.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench import experiments, plots, schedules, tasks, widgets
from workbench.experiments import results_table as results
from workbench.model import build_model
from workbench.train_config import TrainConfig

TASK = {"p": 5, "length": 8}
SUMMARY = {"claim": "LRT beats the baseline.", "setting": "tiny", "number": "LRT - baseline: +0.01", "verdict":
           "inconclusive", "scale": 0.01}
ARMS = pd.DataFrame({"task": ["running_sum"] * 2, "arm": ["baseline", "lrt_interleaved"], "metric": ["accuracy"] * 2,
                     "value": [0.2, 0.3], "seed_std": [0.01, 0.02]})
DYNAMICS = pd.DataFrame({"run": ["mix_a"] * 3 + ["mix_b"] * 3, "pass": [1, 2, 3] * 2,
                         "delta": [float("nan"), 0.1, 0.01] * 2, "fixed_point_distance": [0.5, 0.1, 0.0] * 2,
                         "loss": [2.0, 1.9, 1.9, 2.0, 2.1, 2.3]})


def step_flops(cfg: TrainConfig, mean_passes: float | None) -> float:
    """One step as the trainer counts it; with ``mean_passes``, that many plain passes (a pass mix)."""
    task = tasks.get(cfg.task, **cfg.task_params)
    model = build_model(cfg.model_config(task.vocab_size, task.seq_len), device="meta")
    if mean_passes is not None:
        return mean_passes * schedules.Single().flops(model, cfg.batch_size, task.seq_len)
    return cfg.schedule.flops(model, cfg.batch_size, task.seq_len)


def write_run(root, recipe: str, run: str, cfg: TrainConfig, extra_steps: int = 0,
              mean_passes: float | None = None) -> None:
    """A saved run as the recipes write it: the untrained model and the trainer's recorded counts."""
    steps = cfg.steps + extra_steps
    metrics = {"train": {"step": steps, "flops": steps * step_flops(cfg, mean_passes)},
               "train_config": cfg.trajectory_dict()}
    task = tasks.get(cfg.task, **cfg.task_params)
    wb.save_checkpoint(wb.build_model(cfg.model_config(task.vocab_size, task.seq_len)), root / recipe / run,
                       metrics=metrics)


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A checkpoints folder with two recipes: runs at matched compute (one of them a step over), and a mix table."""
    monkeypatch.setenv(experiments.ROOT_ENV, str(tmp_path))
    model = {"n_layer": 1, "n_head": 2, "n_embd": 16}
    base = TrainConfig(task="running_sum", task_params=TASK, model=model, steps=4, batch_size=4)
    lrt = base.replace(model={**model, "mechanism": "lrt"}, schedule=schedules.Interleaved(2), steps=2)
    write_run(tmp_path, "lrt_vs_baseline", "state_baseline_s0", base)
    write_run(tmp_path, "lrt_vs_baseline", "state_lrt_interleaved_s0", lrt)
    write_run(tmp_path, "lrt_vs_baseline", "text_baseline_s0", base.replace(task="text", task_params={"seq_len": 8}))
    write_run(tmp_path, "lrt_vs_baseline", "text_lrt_interleaved_s0",
              lrt.replace(task="text", task_params={"seq_len": 8}), extra_steps=2)
    (tmp_path / "lrt_vs_baseline" / "summary.json").write_text(json.dumps(SUMMARY))
    pd.DataFrame({"example": [0, 1], "accuracy": [0.5, 1.0]}).to_csv(
        tmp_path / "lrt_vs_baseline" / "state_baseline_s0" / experiments.EVAL_FILE, index=False)
    ARMS.to_csv(tmp_path / "lrt_vs_baseline" / "results.csv", index=False)
    mixes = tmp_path / "fbt_pass_mixes"
    write_run(tmp_path, "fbt_pass_mixes", "mix_a", base.replace(model={**model, "mechanism": "fbt"},
                                                                 schedule=schedules.PassMix.of({1: 0.5, 2: 0.5})),
              mean_passes=1.5)
    pd.DataFrame({"arm": ["mix_a"], "loss_last": [1.9]}).to_csv(mixes / "results.csv", index=False)
    DYNAMICS.to_csv(mixes / "pass_dynamics.csv", index=False)
    return tmp_path


# ---------------------------------------------------------------------------------------------- analysis
def test_summary_table_is_one_row_per_recipe():
    table = results.summary_table({"lrt_vs_baseline": SUMMARY, "crosses": {**SUMMARY, "verdict": "exploratory"}})
    assert list(table.columns) == results.SUMMARY_COLUMNS
    assert list(table["recipe"]) == ["lrt_vs_baseline", "crosses"] and table["verdict"].iloc[1] == "exploratory"
    with pytest.raises(ValueError, match="summaries"):
        results.summary_table({})
    with pytest.raises(ValueError, match="verdict"):
        results.summary_table({"x": {k: v for k, v in SUMMARY.items() if k != "verdict"}})


def test_recipe_tables_finds_the_extra_tables(root):
    assert set(results.recipe_tables("lrt_vs_baseline")) == {"results"}
    tables = results.recipe_tables("fbt_pass_mixes")
    assert set(tables) == {"results", "pass_dynamics"} and len(tables["pass_dynamics"]) == len(DYNAMICS)
    with pytest.raises(ValueError, match="recipe"):
        results.recipe_tables("no_such_recipe")


def test_per_example_reads_a_runs_evaluation(root):
    assert list(results.per_example("lrt_vs_baseline", "state_baseline_s0")["accuracy"]) == [0.5, 1.0]
    with pytest.raises(ValueError, match="run='text_baseline_s0'"):
        results.per_example("lrt_vs_baseline", "text_baseline_s0")


def test_run_compute_recounts_the_trainers_flops(root):
    compute = results.run_compute("lrt_vs_baseline")
    assert list(compute.columns) == results.COMPUTE_COLUMNS and len(compute) == 4
    compute = compute.set_index("run")
    # the recorded count is steps x one step of the schedule, and interleaved costs two passes a step
    pd.testing.assert_series_equal(compute["expected_flops"], compute["flops"], check_names=False)
    assert compute.loc["state_lrt_interleaved_s0", "mean_passes"] == pytest.approx(2.0)
    assert compute.loc["state_baseline_s0", "mean_passes"] == pytest.approx(1.0)
    assert compute.loc["state_lrt_interleaved_s0", "steps"] == 2
    mix = results.run_compute("fbt_pass_mixes").iloc[0]
    assert pd.isna(mix["flops_per_step"]) and mix["mean_passes"] == pytest.approx(1.5)  # work varies per step
    with pytest.raises(ValueError, match="runs"):
        results.run_compute("crosses")


def test_compute_matching_allows_one_step_and_no_more(root):
    matching = results.compute_matching(results.run_compute("lrt_vs_baseline"), by="task").set_index("task")
    assert matching.loc["running_sum", "runs"] == 2
    state = matching.loc["running_sum"]
    assert state["spread"] <= state["largest_step"] and state["matched"]
    text = matching.loc["text"]  # the LRT text run was given two extra steps
    assert text["spread"] > text["largest_step"] and not text["matched"]
    assert text["ratio"] == pytest.approx(text["flops_max"] / text["flops_min"])
    with pytest.raises(ValueError, match="seedling"):
        results.compute_matching(results.run_compute("lrt_vs_baseline"), by="seedling")


# ---------------------------------------------------------------------------------------------- figures
TRACES = pd.DataFrame({
    "regime": ["standard"] * 3 + ["soft"] * 3 + ["fused"] * 3,
    "example": [0, 1, 2] * 3,
    "length": [20, 12, 16, 8, 4, 6, 10, 2, 30],
    "answered": [True, True, True, True, True, True, True, True, False],
    "correct": [True, False, True, True, True, False, False, True, False],
    "text": [f"> step {i}\n#### {i}\n" for i in range(9)],
})


def test_trace_example_draws_one_bar_per_regime_coloured_by_correctness():
    fig = plots.trace_example(TRACES, example=2, regime="soft")
    ax = fig.axes[0]
    assert [b.get_height() for b in ax.patches] == [16, 6, 30]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["standard", "soft", "fused"]
    assert ax.patches[1].get_linewidth() == pytest.approx(2.5) and ax.patches[0].get_linewidth() != 2.5
    assert ax.patches[2].get_hatch() == "//"  # no answer line written
    with pytest.raises(ValueError, match="example"):
        plots.trace_example(TRACES, example=7)
    with pytest.raises(ValueError, match="regime"):
        plots.trace_example(TRACES, example=0, regime="greedy")
    with pytest.raises(ValueError, match=r"df.*\['a', 'b'\]"):
        plots.trace_example(pd.concat([TRACES.assign(run="a"), TRACES.assign(run="b")]), example=0)


def test_experiment_figure_follows_the_tables_content():
    assert len(experiments.experiment_figure({"results": ARMS}).axes) == 1
    assert len(experiments.experiment_figure({"results": ARMS[:1], "pass_dynamics": DYNAMICS}).axes) == 3
    assert len(experiments.experiment_figure({"results": ARMS, "traces": TRACES}).axes) == 2
    probes = pd.DataFrame({"task": ["t"] * 2, "model": ["FBT"] * 2, "condition": ["standard", "suffix1"],
                           "layer": [0, 0], "accuracy": [0.5, 0.9]})
    assert experiments.experiment_figure({"results": probes}).axes[0].get_ylabel() == "probe accuracy at depth 0"
    with pytest.raises(ValueError, match="results"):
        experiments.experiment_figure({})


# ---------------------------------------------------------------------------------------------- widgets
def test_trace_explorer_shows_the_chosen_trace():
    prompts = [f"Q: {i}+1\n" for i in range(3)]
    explorer = widgets.trace_explorer(TRACES, prompts=prompts, answers=[1, 2, 3])
    assert list(explorer.controls) == ["regime", "example"]
    assert list(explorer.controls["regime"].options) == ["standard", "soft", "fused"]
    assert "<b>standard</b>, example 0: length 20 tokens" in explorer.summary.value
    first = explorer.image.value
    explorer.controls["example"].value = 1
    assert "length 12 tokens" in explorer.summary.value and "wrong; expected answer 2" in explorer.summary.value
    assert "Q: 1+1\n&gt; step 1" in explorer.summary.value  # the question, then the trace, escaped
    explorer.controls["regime"].value = "fused"
    assert "length 2 tokens" in explorer.summary.value and "right" in explorer.summary.value
    explorer.controls["example"].value = 2
    assert "no answer line written" in explorer.summary.value
    assert [b.get_height() for b in explorer.figure.axes[0].patches] == [16, 6, 30]
    assert explorer.image.value != first and explorer.controls["example"].continuous_update is False


def test_trace_explorer_adds_a_run_menu_and_refuses_bad_input():
    two = pd.concat([TRACES.assign(run="s0"), TRACES.assign(run="s1", length=TRACES["length"] + 100)])
    explorer = widgets.trace_explorer(two)
    assert "(s0)" in explorer.summary.value and "length 20 tokens" in explorer.summary.value
    explorer.controls["run"].value = "s1"
    assert "(s1)" in explorer.summary.value and "length 120 tokens" in explorer.summary.value
    with pytest.raises(ValueError, match="traces"):
        widgets.trace_explorer(TRACES.drop(columns="text"))
    with pytest.raises(ValueError, match="prompts"):
        widgets.trace_explorer(TRACES, prompts=["Q: 1\n"])


def test_recipe_explorer_switches_recipe(root):
    names = ["lrt_vs_baseline", "fbt_pass_mixes"]
    summaries = {"lrt_vs_baseline": SUMMARY, "fbt_pass_mixes": {**SUMMARY, "verdict": "does not reproduce",
                                                                 "claim": "75/25 diverges"}}
    explorer = widgets.recipe_explorer(summaries, {n: results.recipe_tables(n) for n in names})
    assert "<b>lrt_vs_baseline</b>: verdict <b>inconclusive</b>" in explorer.summary.value
    assert "lrt_interleaved" in explorer.summary.value and len(explorer.figure.axes) == 1
    explorer.controls["recipe"].value = "fbt_pass_mixes"
    assert "verdict <b>does not reproduce</b>" in explorer.summary.value and "75/25 diverges" in explorer.summary.value
    assert len(explorer.figure.axes) == 3  # contraction curves with a loss panel
    mixed = {"results": ARMS.assign(flips=[0.625, np.nan], nats=[np.nan, 0.875])}
    blank = widgets.recipe_explorer({"lrt_vs_baseline": SUMMARY}, {"lrt_vs_baseline": mixed}).summary.value
    assert "NaN" not in blank and "0.625" in blank and "0.875" in blank  # a cell a row kind lacks reads blank
    with pytest.raises(ValueError, match="tables"):
        widgets.recipe_explorer(summaries, {})
    with pytest.raises(ValueError, match="verdict"):
        widgets.recipe_explorer({"x": {"claim": "c"}}, {"x": {"results": ARMS}})


def test_a_recipe_record_shows_its_verdict_and_folds_the_rest():
    summary = {**SUMMARY, "rule": "reproduces when <0", "gates": [
        {"name": "learned", "quantity": "accuracy above chance", "value": 0.3, "op": ">=", "threshold": 0.1,
         "passed": True}]}
    record = widgets.recipe_record("tiny_recipe", summary).data
    shown, folded = record.split("<details>", 1)
    assert "<b>tiny_recipe</b></td><td>inconclusive</td>" in shown and "LRT beats" not in shown
    for text in ("LRT beats the baseline.", "tiny", "reproduces when &lt;0", "LRT - baseline: +0.01", "learned",
                 "accuracy above chance"):
        assert text in folded, text
    with pytest.raises(ValueError, match=r"summary.*\['verdict'\]"):
        widgets.recipe_record("tiny_recipe", {k: v for k, v in SUMMARY.items() if k != "verdict"})
