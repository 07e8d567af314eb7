"""The shipped layer-0 specimens still pass (or still miss) their competence gates on a fresh sample.

The recipe gated each specimen on held-out examples drawn with ``EVAL_SEED``; here every shipped
specimen of the recipe is re-checked on examples drawn with another seed, which neither training
nor the recorded evaluation saw. The check is a gate with a sampling margin, not a pinned number,
so it holds on any x86-64 CPU and thread count: a specimen recorded as passing may fall below its
threshold by no more than ``MARGIN`` (over 3 standard errors of a 0.95 accuracy on ``FRESH_N``
examples), and one recorded as missing may not now clear it by more.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from workbench import tasks
from workbench.analysis.features import probe_features
from workbench.analysis.probes import PROBE_CS, fit_probe
from workbench.evaluation import per_example_metrics
from workbench.experiments import checkpoints_root, load_run
from workbench.experiments.recipes import layer0_probes as recipe

FRESH_SEED = 7919  # neither a training seed (0) nor the recorded evaluation's (EVAL_SEED)
FRESH_N = 256
MARGIN = 0.05  # a 0.95 accuracy on 256 examples has a standard error of 0.014
TEXT_MARGIN = 0.1  # nats/byte of sampling slack on the text model's held-out loss (64 windows)

ROOT = checkpoints_root() / recipe.RECIPE.name
SUMMARY = ROOT / "summary.json"
pytestmark = pytest.mark.skipif(not SUMMARY.is_file(), reason="layer0_probes has not been reproduced here")


def _summary() -> dict:
    return json.loads(SUMMARY.read_text())


def test_every_run_of_the_recipe_is_shipped_and_nothing_else():
    expected = {spec.name for spec in recipe.build(1.0)}
    assert set(_summary()["runs"]) == expected
    shipped = {p.name for p in ROOT.iterdir() if p.is_dir()}
    assert shipped == expected
    assert FRESH_SEED not in (recipe.EVAL_SEED, recipe.PROBE_SEED)
    assert all(spec.train.seed != FRESH_SEED for spec in recipe.build(1.0))


SPECIMENS = ([(s["task"], s["arm"], s["seed"], s["scratch_updates"]) for s in _summary()["specimens"]]
             if SUMMARY.is_file() else [])


@pytest.mark.parametrize("task,arm,seed,scratch", SPECIMENS)
def test_specimen_gate_holds_on_a_fresh_sample(task, arm, seed, scratch):
    torch.set_num_threads(1)
    recorded = next(s for s in _summary()["specimens"]
                    if (s["task"], s["arm"], s["seed"], s["scratch_updates"]) == (task, arm, seed, scratch))
    model = load_run(recipe.RECIPE.name, recipe.run_name(task, arm, seed))
    gate = recipe.specimen_gate(task, arm, scratch, seed)
    condition = recipe.GATE_CONDITION[arm]
    value = recipe.answer_accuracies(model, task, arm, scratch, seed=FRESH_SEED, n=FRESH_N,
                                     conditions=(condition,))[condition]
    message = f"{gate.name}: fresh {value:.3f}, recorded {recorded['gate_value']:.3f}"
    if recorded["gated"]:
        assert value >= gate.threshold - MARGIN, message
    else:
        assert value < gate.threshold + MARGIN, message


def test_text_model_gate_holds_on_a_fresh_sample():
    torch.set_num_threads(1)
    recorded = _summary()["text_gate"]
    spec = next(s for s in recipe.build(1.0) if s.name == "text_fbt")
    task = tasks.get("text", **recipe.TEXT_TASK)
    batch = task.sample(64, FRESH_SEED, "val")
    per_example = per_example_metrics(load_run(recipe.RECIPE.name, "text_fbt"), batch, spec.eval_schedule)
    margin = recorded["unigram"] - float(per_example["nats"].sum() / per_example["targets"].sum())
    assert np.isfinite(margin)
    if recorded["passed"]:
        assert margin >= recipe.TEXT_GATE.threshold - TEXT_MARGIN
    else:
        assert margin < recipe.TEXT_GATE.threshold + TEXT_MARGIN


# A probe's accuracy grows with the examples it is trained on, so a smaller fresh sample reads lower for that reason
# alone (multi_register seed 1 at 8 lines: 0.73 and 0.77 on two samples of 400, at the C nested CV chose there, 0.01
# and 10; 0.80 and 0.78 on two of 1,600, recorded 0.81). So an outcome with a lower bar to hold ("between", "fails")
# is re-read on as many examples as the recipe probed (PROBE_N), while "lifts" needs only to stay above LIFT - MARGIN,
# which a smaller sample makes harder, not easier: LIFTS_FRESH_N, a quarter of the forward passes (a 0.95 accuracy
# over 400 pooled held-out examples has a standard error of ~0.011).
PROBE_FRESH_N = recipe.PROBE_N
LIFTS_FRESH_N = 400
OUTCOMES = [(o["task"], o["arm"], o["seed"], o["scratch_updates"]) for o in _summary().get("outcomes", [])
            if o["arm"] == "fbt"] if SUMMARY.is_file() else []


@pytest.mark.parametrize("task,arm,seed,scratch", OUTCOMES)
def test_rule_a_outcome_holds_on_a_fresh_sample(task, arm, seed, scratch):
    """Each FBT specimen's layer-0 suffix1 probe (L2 strength by nested CV) re-read on examples no probe saw:
    one recorded as lifting still clears the claim's bar within the sampling margin, one recorded as failing
    still sits below the failing bar, one in between stays between."""
    torch.set_num_threads(1)
    recorded = next(o for o in _summary()["outcomes"]
                    if (o["task"], o["arm"], o["seed"], o["scratch_updates"]) == (task, arm, seed, scratch))
    model = load_run(recipe.RECIPE.name, recipe.run_name(task, arm, seed))
    n = LIFTS_FRESH_N if recorded["outcome"] == "lifts" else PROBE_FRESH_N
    batch = recipe.probe_task(task, scratch).sample(n, FRESH_SEED, "val")
    features = probe_features(model, batch, "suffix1")[0].numpy()
    value = fit_probe(features, batch.labels.numpy(), batch.groups.numpy(), C=PROBE_CS)["accuracy"]
    message = f"{task} s{scratch}: fresh {value:.3f}, recorded {recorded['accuracy']:.3f} ({recorded['outcome']})"
    if recorded["outcome"] == "lifts":
        assert value >= recipe.LIFT - MARGIN, message
    elif recorded["outcome"] == "fails":
        assert value < recipe.FAILS + MARGIN, message
    else:
        assert recipe.FAILS - MARGIN <= value < recipe.LIFT + MARGIN, message
