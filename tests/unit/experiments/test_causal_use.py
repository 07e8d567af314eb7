"""The decodability-vs-use design (``experiments.decodability``) and the ``causal_use`` recipe that runs it: a swap
is the edit a learner would make by hand, and the recipe's verdicts follow its rule."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
import workbench.experiments as E
from conftest import perturbed_model
from workbench import schedules
from workbench.analysis import interventions as iv
from workbench.experiments import decodability
from workbench.experiments.recipes import causal_use


def test_label_swap_pairs_group_mates_and_patches_what_a_learner_would_by_hand():
    task = wb.tasks.get("completion_tracking", scratch_updates=0, label_at="answer")
    batch = task.sample(32, seed=0, split="val")
    swap, control = decodability.mate_rows(batch)
    labels, groups = batch.labels, batch.groups
    assert (labels[swap] != labels).all() and (groups[swap] == groups).all()
    assert (labels[control] == labels).all() and (control != torch.arange(32)).all()
    model = perturbed_model(wb.ModelConfig(vocab_size=task.vocab_size, n_layer=2, n_head=2, n_embd=16,
                                           seq_len=task.seq_len, mechanism="fbt", tie_embeddings=True))
    frame = decodability.label_swap(model, batch)
    assert set(frame["intervention"]) == {"swap", "control", "mean", "zero"} and len(frame) == 4 * 32
    # the swap of example 0, by hand: its plain prefix, then the label position reads the mate's memory
    p, mate = int(batch.label_positions[0]), int(swap[0])
    tokens = batch.tokens[:, : p + 1]
    with torch.no_grad():
        mate_memory = model.step(tokens[mate:mate + 1, :p]).memory[:, -1:]
        cache = model.new_kv_cache(1, p + 1)
        model.step(tokens[:1, :p], kv=cache)
        logits = model.step(tokens[:1, p:], memory=mate_memory, positions=torch.tensor([p]), kv=cache).logits[0, 0]
    answers, foils = decodability.label_tokens(batch)
    row = frame[(frame["intervention"] == "swap") & (frame["example"] == 0)].iloc[0]
    assert row["logit_diff"] == pytest.approx(float(logits[answers[0]] - logits[foils[0]]), abs=1e-12)
    with pytest.raises(ValueError, match="kinds"):
        decodability.label_swap(model, batch, kinds=("flip",))


def test_a_stream_swap_is_pass_two_run_on_the_mates_pass_one_memory():
    """span="stream" under Multipass(2): every memory read of pass 2 is the mate's, so the edited run is pass 2
    computed by hand from the mate's plain pass; the cross-context pairs come from other groups."""
    task = wb.tasks.get("completion_tracking", scratch_updates=0, label_at="answer")
    batch = task.sample(32, seed=0, split="val")
    cross, control = decodability.cross_rows(batch)
    assert (batch.groups[cross] != batch.groups).all() and (batch.labels[cross] != batch.labels).all()
    assert (batch.groups[control] != batch.groups).all() and (batch.labels[control] == batch.labels).all()
    assert (batch.label_positions[cross] == batch.label_positions).all()
    model = perturbed_model(wb.ModelConfig(vocab_size=task.vocab_size, n_layer=2, n_head=2, n_embd=16,
                                           seq_len=task.seq_len, mechanism="fbt", tie_embeddings=True))
    frame = decodability.label_swap(model, batch, kinds=("swap", "cross"), schedule=schedules.Multipass(2),
                                    span="stream")
    assert set(frame["span"]) == {"stream"} and (frame["position"] == -1).all()
    p, mate = int(batch.label_positions[0]), int(decodability.mate_rows(batch)[0][0])
    tokens = batch.tokens[:, : p + 1]
    with torch.no_grad():
        mate_memory = model.step(tokens[mate:mate + 1]).memory
        reads = schedules.feedback_mask(1, p + 1)
        logits = model.step(tokens[:1], memory=schedules.shift_right(mate_memory), memory_mask=reads).logits[0, p]
    answers, foils = decodability.label_tokens(batch)
    row = frame[(frame["intervention"] == "swap") & (frame["example"] == 0)].iloc[0]
    assert row["logit_diff"] == pytest.approx(float(logits[answers[0]] - logits[foils[0]]), abs=1e-5)
    # a stream patch from the run's own record changes nothing
    idx = batch.tokens[:4, : p + 1]
    clean = iv.record_site(model, idx, schedule=schedules.Multipass(2))
    same = iv.intervene(model, idx, iv.Intervention("patch", rows=torch.arange(4)), None, clean=clean,
                        schedule=schedules.Multipass(2))
    torch.testing.assert_close(same, clean.logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match="span"):
        decodability.label_swap(model, batch, span="everything")
    with pytest.raises(ValueError, match="answer_positions"):
        iv.intervention_effects(model, idx, None, answers[:4])


def test_causal_use_decision_rule_and_group_means():
    verdict = causal_use.specimen_verdict
    assert verdict({"low": 0.2, "high": 0.9}, 0.8) == "uses"
    assert verdict({"low": 0.01, "high": 0.2}, 0.1) == "partly uses"
    assert verdict({"low": -0.02, "high": 0.03}, 0.0) == "does not use"
    assert verdict({"low": -0.02, "high": 0.2}, 0.1) == "inconclusive"
    # a negative needs power: the memory must be needed, and an edit of the site must move answers
    needed = {"low": 0.05, "high": 0.3, "reference": 0.6, "treatment": 0.8}
    not_needed = {"low": -0.01, "high": 0.01, "reference": 1.0, "treatment": 1.0}
    assert verdict({"low": -0.02, "high": 0.03}, 0.0, needed, site_moves=0.4) == "does not use"
    assert verdict({"low": -0.02, "high": 0.03}, 0.0, not_needed, site_moves=0.4) == "not tested: feedback not needed"
    assert verdict({"low": -0.02, "high": 0.2}, 0.1, not_needed, site_moves=0.4) == "not tested: feedback not needed"
    # a positive needs no power check: the answer followed the memory, needed or not
    assert verdict({"low": 0.2, "high": 0.9}, 0.8, not_needed, site_moves=0.4) == "uses"
    assert verdict({"low": -0.02, "high": 0.03}, 0.0, needed, site_moves=0.0).startswith("not tested: no edit")
    assert verdict({"low": 0.2, "high": 0.9}, 0.8, needed, site_moves=0.0) == "uses"  # a positive needs no control
    frame = pd.DataFrame({"intervention": ["swap"] * 4 + ["control"] * 4, "group": [1, 1, 0, 0] * 2,
                          "flipped": [True, True, True, False, False, False, False, True]})
    np.testing.assert_array_equal(causal_use.group_means(frame, "swap"), [0.5, 1.0])  # groups in order 0, 1
    np.testing.assert_array_equal(causal_use.group_means(frame, "control"), [0.5, 0.0])
    assert E.list_recipes().set_index("recipe").loc["causal_use", "runs"] > 0  # it reads the specimens' runs


def test_a_design_that_detects_no_use_on_the_positive_control_cannot_say_does_not_use():
    swapped = pd.DataFrame({"design": ["site", "stream"], "verdict": ["does not use", "does not use"]})
    controls = pd.DataFrame({"design": ["site", "stream"], "verdict": ["does not use", "uses"]})
    out = causal_use.with_positive_control(swapped, controls)
    assert list(out["verdict"]) == ["not tested: the design detects no use on the positive control", "does not use"]
    assert list(out["controls_detect"]) == [False, True]
    assert causal_use.power({"low": 0.0, "high": 0.392}) == pytest.approx(causal_use.POWER_Z * 0.1)
    assert math.isnan(causal_use.power({"low": 0.0, "high": 0.0}))  # degenerate: no power to read off it


def test_a_task_verdict_is_given_per_design():
    rows = pd.DataFrame({"design": ["site", "stream"] * 2, "scratch_updates": [0, 0, 8, 8], "seed": [0, 0, 0, 0],
                         "verdict": ["not tested: feedback not needed", "uses", "not tested: feedback not needed",
                                     "partly uses"]})
    assert causal_use.task_verdict(rows) == ("site design: not tested: feedback not needed; stream design: mixed "
                                             "(s0 uses, s8 partly uses)")
    assert causal_use.task_verdict(rows.assign(scratch_updates=0, seed=[0, 0, 1, 1])) == (
        "site design: not tested: feedback not needed; stream design: mixed (s0 uses, s0 seed 1 partly uses)")
    assert causal_use.task_verdict(rows.assign(verdict="uses")) == "uses"
