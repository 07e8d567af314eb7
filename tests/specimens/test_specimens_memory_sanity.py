"""The shipped lrt_memory_sanity specimens still pass their gate on a fresh sample, and still need their memory.

RESULTS.md says "passes" from these two runs: exact accuracy far above the chance floor, and above the
same weights run without memory. Here both are re-measured on running_sum sequences drawn with a seed
neither training nor the recorded evaluation used; the checks are the gate and the rule, not pinned
numbers, so they hold on any CPU and thread count.
"""

from __future__ import annotations

from workbench import tasks
from workbench.evaluation import per_example_metrics
from workbench.experiments import load_run
from workbench.experiments.recipes import lrt_memory_sanity as recipe

FRESH_SEED = 4243  # neither a training seed nor the recorded evaluation's (EVAL_SEED)


def test_each_sanity_specimen_learned_and_uses_its_memory():
    task = tasks.get("running_sum", **recipe.PARAMS)
    batch = task.sample(128, seed=FRESH_SEED, split="val")
    gate = {g.name: g for g in recipe.RECIPE.gates}["sequential learned"]
    for spec in recipe.build(1.0):
        model = load_run(recipe.RECIPE.name, spec.name)
        exact = per_example_metrics(model, batch, spec.eval_schedule)["accuracy"].mean()
        without = per_example_metrics(model, batch)["accuracy"].mean()
        assert gate.check(exact - task.chance_accuracy()).passed, (spec.name, exact)
        assert exact - without > gate.threshold, (spec.name, exact, without)
