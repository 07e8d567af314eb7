"""The shipped LRT text specimens still model held-out bytes as recorded, on a slice nobody evaluated.

``lrt_vs_baseline`` and ``schedules`` recorded each run's held-out bits per byte on windows drawn
with ``EVAL_SEED``, under the exact recurrence. Here every shipped text specimen is reloaded and
evaluated the same way on ``FRESH_N`` windows drawn with another seed. The check is a sampling
margin, not a pinned number, so it holds on any x86-64 CPU and thread count: the fresh BPB must sit
within ``MARGIN`` of the recorded one (over 3 standard errors of the difference: windows of stdlib
source vary by 0.6-0.85 bits/byte), and a gated specimen (baseline, LRT interleaved) below the
unigram BPB by the recipes' competence margin, less ``MARGIN``. Block-wise is the control no recipe
gates: its exact-recurrence BPB is a finding, not a competence.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from workbench import tasks
from workbench.evaluation import per_example_metrics
from workbench.experiments import checkpoints_root, load_run, run_metrics
from workbench.experiments.core import EVAL_SEED
from workbench.experiments.recipes import lrt_vs_baseline as text
from workbench.experiments.recipes import schedules

FRESH_SEED = 7919  # neither a training seed nor the recorded evaluation's (EVAL_SEED)
FRESH_N = 64
MARGIN = 0.4  # bits/byte: > 3 standard errors of (64-window mean - 256-window mean) at a 0.85 spread

RECIPES = {r.RECIPE.name: r.RECIPE for r in (text, schedules)}
SHIPPED = {name: checkpoints_root() / name / "summary.json" for name in RECIPES}
pytestmark = pytest.mark.skipif(not all(p.is_file() for p in SHIPPED.values()),
                                reason="lrt_vs_baseline / schedules have not been reproduced here")
SPECIMENS = sorted({(name, spec.name) for name, recipe in RECIPES.items() for spec in recipe.build(1.0)})


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_run_of_the_recipe_is_shipped_and_nothing_else(name):
    expected = {spec.name for spec in RECIPES[name].build(1.0)}
    assert set(json.loads(SHIPPED[name].read_text())["runs"]) == expected
    assert {p.name for p in (checkpoints_root() / name).iterdir() if p.is_dir()} == expected
    assert FRESH_SEED != EVAL_SEED and all(spec.train.seed != FRESH_SEED for spec in RECIPES[name].build(1.0))


def test_the_shared_interleaved_runs_are_one_run():
    """``schedules`` copies the interleaved runs of ``lrt_vs_baseline``: same weights, same record."""
    for spec in schedules.RECIPE.build(1.0):
        if "interleaved" in spec.name:
            a, b = (checkpoints_root() / r / spec.name / "model.safetensors" for r in RECIPES)
            assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("recipe,run", SPECIMENS, ids=[f"{r}/{n}" for r, n in SPECIMENS])
def test_specimen_bpb_holds_on_a_fresh_slice(recipe, run):
    torch.set_num_threads(1)
    recorded = run_metrics(recipe, run)
    assert recorded["eval_schedule"] == {"schedule": "sequential"}
    task = tasks.get("text", **recorded["train_config"]["task_params"])
    batch = task.sample(FRESH_N, FRESH_SEED, "val")
    fresh = per_example_metrics(load_run(recipe, run), batch, schedule="sequential")
    bpb = float(np.mean(fresh["loss"])) / math.log(2)
    then = recorded["eval"]["bpb"]
    assert abs(bpb - then) <= MARGIN, f"{recipe}/{run}: fresh {bpb:.3f} bits/byte, recorded {then:.3f}"
    if "blockwise" not in run:
        unigram = task.unigram_loss() / math.log(2)
        assert unigram - bpb >= text.UNIGRAM_MARGIN - MARGIN, f"{recipe}/{run}: {bpb:.3f} vs unigram {unigram:.3f}"


@pytest.mark.parametrize("name,arm", [("lrt_vs_baseline", "baseline"), ("schedules", "lrt_interleaved")])
def test_the_flattened_gate_is_the_shipped_curves_own(name, arm):
    """The 'flattened' gate read from the shipped runs' held-out curves (evaluations recorded during training, not
    a sample one can redraw): recomputed from each run's history, it is the recorded value and within the gate."""
    from workbench.experiments.common import last_quarter_improvement

    runs = [spec.name for spec in RECIPES[name].build(1.0) if spec.name.startswith(f"text_{arm}_s")]
    worst = max(last_quarter_improvement(pd.read_csv(checkpoints_root() / name / r / "history.csv"), "val_bpb")
                for r in runs)
    (gate,) = [g for g in json.loads(SHIPPED[name].read_text())["gates"] if g["name"].endswith("flattened")]
    assert worst == pytest.approx(gate["value"], abs=1e-12) and gate["passed"] == (worst <= text.FLAT)
    assert worst <= text.FLAT, f"{name}: the shipped {arm} curves fell {worst:.4f} over their last quarter"
