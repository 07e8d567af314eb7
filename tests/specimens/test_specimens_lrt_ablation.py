"""The shipped specimens of the LRT ablations on language still model held-out bytes as recorded, on a slice
nobody evaluated.

``source_layer``, ``memory_source``, ``injection_ablation`` and ``gate_control`` recorded each run's held-out bits
per byte on windows drawn with ``EVAL_SEED``, under the exact recurrence. Each recipe is checked once it is shipped
(its ``summary.json`` exists), and skipped until then: every run it builds is shipped and nothing else; its baseline
and reference LRT runs are ``lrt_vs_baseline``'s, byte for byte (``test_specimens_lrt_text`` checks those on a fresh
slice); and every other run, reloaded and evaluated the same way on a fresh slice (``test_specimens_lrt_text``'s
seed, size and sampling margin), sits within that margin of its record. No run here is gated below the unigram BPB
(the recipes gate the baseline only), so none is checked against it.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from test_specimens_lrt_text import FRESH_N, FRESH_SEED, MARGIN

from workbench import tasks
from workbench.evaluation import per_example_metrics
from workbench.experiments import checkpoints_root, load_run, run_metrics
from workbench.experiments.core import EVAL_SEED
from workbench.experiments.recipes import gate_control, injection_ablation, lrt_vs_baseline, memory_source, source_layer

RECIPES = {m.RECIPE.name: m.RECIPE for m in (source_layer, memory_source, injection_ablation, gate_control)}
SHIPPED = {name: checkpoints_root() / name / "summary.json" for name in RECIPES}
SHARED = {spec.name for spec in lrt_vs_baseline.RECIPE.build(1.0)}  # trained by lrt_vs_baseline, copied here


def shipped(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not SHIPPED[name].is_file(), reason=f"{name} has not been reproduced here")


NAMES = [pytest.param(name, marks=shipped(name), id=name) for name in RECIPES]
# the runs each recipe trains itself (the shared ones are lrt_vs_baseline's, checked on a fresh slice there)
OWN = [pytest.param(name, spec.name, marks=shipped(name), id=f"{name}/{spec.name}")
       for name, recipe in RECIPES.items() for spec in recipe.build(1.0) if spec.name not in SHARED]


@pytest.mark.parametrize("name", NAMES)
def test_every_run_of_the_recipe_is_shipped_and_nothing_else(name):
    expected = {spec.name for spec in RECIPES[name].build(1.0)}
    assert set(json.loads(SHIPPED[name].read_text())["runs"]) == expected, f"{name}: reproduce it"
    assert {p.name for p in (checkpoints_root() / name).iterdir() if p.is_dir()} == expected
    assert FRESH_SEED != EVAL_SEED and all(spec.train.seed != FRESH_SEED for spec in RECIPES[name].build(1.0))


@pytest.mark.parametrize("name", NAMES)
def test_the_shared_runs_are_lrt_vs_baseline_s(name):
    """The baseline and reference LRT of every ablation are the runs of lrt_vs_baseline: same weights, same record."""
    for run in SHARED:
        here, there = (checkpoints_root() / r / run for r in (name, lrt_vs_baseline.RECIPE.name))
        assert (here / "model.safetensors").read_bytes() == (there / "model.safetensors").read_bytes(), run
        assert run_metrics(name, run)["eval"] == run_metrics(lrt_vs_baseline.RECIPE.name, run)["eval"], run


@pytest.mark.parametrize("recipe,run", OWN)
def test_specimen_bpb_holds_on_a_fresh_slice(recipe, run):
    torch.set_num_threads(1)
    recorded = run_metrics(recipe, run)
    assert recorded["eval_schedule"] == {"schedule": "sequential"}
    task = tasks.get("text", **recorded["train_config"]["task_params"])
    fresh = per_example_metrics(load_run(recipe, run), task.sample(FRESH_N, FRESH_SEED, "val"), schedule="sequential")
    bpb = float(np.mean(fresh["loss"])) / math.log(2)
    then = recorded["eval"]["bpb"]
    assert abs(bpb - then) <= MARGIN, f"{recipe}/{run}: fresh {bpb:.3f} bits/byte, recorded {then:.3f}"
