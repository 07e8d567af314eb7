"""Notebook 05b's front-end: the intervention explorer, its analysis rows and its figures."""

from __future__ import annotations

import ipywidgets
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model
from workbench import plots, widgets
from workbench.experiments import decodability


@pytest.fixture(scope="module")
def batch() -> wb.tasks.Batch:
    return wb.tasks.get("delayed_memory", scratch_updates=0, label_at="answer").sample(8, seed=0, split="val")


@pytest.fixture(scope="module")
def model(batch) -> wb.GPT:
    task = wb.tasks.get("delayed_memory", scratch_updates=0, label_at="answer")
    return perturbed_model(wb.ModelConfig(vocab_size=task.vocab_size, n_layer=2, n_head=2, n_embd=16,
                                          seq_len=task.seq_len, mechanism="fbt", tie_embeddings=True))


def test_example_logits_rows_follow_the_interventions(model, batch):
    frame = decodability.example_logits(model, batch, 0)
    mate = int(decodability.mate_rows(batch)[0][0])
    assert list(frame["intervention"].unique()) == ["clean", f"patch from #{mate}", "mean", "zero"]
    assert len(frame) == 8 and frame.groupby("intervention")["true"].sum().eq(1).all()
    own = decodability.example_logits(model, batch, 0, source=0)  # its own memory: the clean logits
    clean = own[own["intervention"] == "clean"]["logit"].to_numpy()
    torch.testing.assert_close(torch.tensor(own[own["intervention"] == "patch from #0"]["logit"].to_numpy()),
                               torch.tensor(clean), rtol=0, atol=0)
    with pytest.raises(ValueError, match="position"):
        decodability.example_logits(model, batch, 0, position=0)
    with pytest.raises(ValueError, match="example"):
        decodability.example_logits(model, batch, 8)


def test_intervention_explorer_redraws_on_every_control(model, batch):
    explorer = widgets.intervention_explorer(model, batch)
    assert isinstance(explorer, ipywidgets.VBox)
    mate = int(decodability.mate_rows(batch)[0][0])
    assert explorer.controls["source"].value == mate and "<b>example #0</b>" in explorer.summary.value
    assert f"patch from #{mate}" in explorer.summary.value
    first_image, first_summary = explorer.image.value, explorer.summary.value
    explorer.controls["source"].value = 0  # the example's own memory: the patch equals the clean run
    assert "patch from #0" in explorer.summary.value and explorer.summary.value != first_summary
    margins = [part.split("margin ")[1].split(" ")[0] for part in explorer.summary.value.split("; ")[:2]]
    assert margins[0] == margins[1]
    explorer.controls["example"].value = 3
    assert "<b>example #3</b>" in explorer.summary.value
    explorer.controls["position"].value = 5
    assert "memory edited at 5" in explorer.figure.axes[0].get_title() and explorer.image.value != first_image
    title = explorer.figure.axes[0].get_title()
    assert title.endswith("the answer") or title.endswith("wrong before any edit")  # the takeaway, computed
    other = wb.tasks.get("delayed_memory", scratch_updates=[0, 8], label_at="answer").sample(16, seed=0, split="val")
    assert other.label_positions.unique().numel() > 1
    with pytest.raises(ValueError, match="batch"):
        widgets.intervention_explorer(model, other)


def test_figures_of_the_causal_use_recipe():
    swaps = pd.DataFrame({"task": ["delayed_memory"], "scratch_updates": [8], "probe_accuracy": [0.97],
                          "probe_twin_accuracy": [0.99],
                          **{f"{k}_{c}": [v] for k, v in (("swap", 0.9), ("control", 0.05), ("mean", 0.3),
                                                           ("zero", 0.5)) for c in ("flip", "low", "high")}})
    fig = plots.swap_flips(swaps)
    assert len(fig.axes[0].patches) == 4 and len(fig.axes[0].collections) >= 2
    frame = pd.DataFrame({"run": ["a"] * 4, "distance": [1, 2, 1, 2], "position": [1, 1, 2, 2],
                          "increase": [0.1, 0.01, 0.2, 0.0]})
    fig = plots.ablation_distance(frame)
    assert fig.axes[0].lines[0].get_ydata().tolist() == pytest.approx([0.15, 0.005])
    from workbench.experiments.recipes.causal_use import causal_use_figure

    fig = causal_use_figure(pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    assert len(fig.axes) == 4  # specimens, positive control, and the two LRT distance panels
    # the recipe's saved table, read back by content (what load_run / notebook 08 draw): both parts drawn
    table = pd.concat([swaps.assign(part="swap", specimen="delayed_memory s8", design="stream"),
                       swaps.assign(part="positive control", specimen="reg_s0", design="site")])
    fig = wb.experiments.experiment_figure({"results": table, "distances": frame})
    assert len(fig.axes) == 4 and [len(ax.patches) for ax in fig.axes[:2]] == [2, 2]  # the deciding swap, control
    assert fig.axes[1].get_xticklabels()[0].get_text() == "reg\ns0\nsite"
    with pytest.raises(ValueError, match="answer_logits"):
        plots.answer_logits(pd.DataFrame({"intervention": []}))


def test_flip_takeaway_names_the_edits_that_flip_the_answer():
    from workbench.widgets.interventions import flip_takeaway

    def frame(margins: dict[str, float]) -> pd.DataFrame:
        return pd.DataFrame([row for name, m in margins.items()
                             for row in ({"intervention": name, "token": "a", "logit": m, "true": True},
                                         {"intervention": name, "token": "b", "logit": 0.0, "true": False})])

    assert flip_takeaway(frame({"clean": 2.0, "patch": 1.0, "zero": -1.0})) == "only zero flips the answer"
    assert flip_takeaway(frame({"clean": 2.0, "patch": -1.0, "zero": -1.0})) == "patch and zero flip the answer"
    assert flip_takeaway(frame({"clean": 2.0, "zero": 1.0})) == "no edit flips the answer"
    assert flip_takeaway(frame({"clean": -2.0, "zero": 1.0})) == "wrong before any edit"
