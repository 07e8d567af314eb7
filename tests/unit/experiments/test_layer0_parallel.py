"""layer0_probes probes its specimens in worker processes when the runner has several (``reproduce(jobs=2)``):
the workers load the saved checkpoints, and the rows are the ones one process would have written."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from workbench.checkpoint import save_checkpoint
from workbench.experiments.core import Context
from workbench.experiments.probe_specimens import FBT_MODEL, run_name, specimen_label
from workbench.experiments.recipes import layer0_probes as recipe
from workbench.model import GPT, ModelConfig


def test_specimen_labels_tell_seeds_apart_and_keep_seed_0_names():
    assert run_name("delayed_memory", "fbt") == "delayed_memory_fbt"  # what causal_use and the notebooks read
    assert run_name("delayed_memory", "fbt", 1) == "delayed_memory_fbt_s1"
    assert (specimen_label("fbt"), specimen_label("fbt", 1)) == ("fbt", "fbt seed 1")
    names = [s.name for s in recipe.build(0.01)]
    assert len(names) == len(set(names)) and "multi_register_fbt_s1" in names


@pytest.mark.slow
@pytest.mark.subprocess
def test_probes_in_two_workers_equal_probes_in_one_process(tmp_path):
    torch.manual_seed(0)
    models = {}
    for seed in (0, 1):
        run = run_name("delayed_memory", "fbt", seed)
        small = {**FBT_MODEL, "n_embd": 32, "n_head": 2, "tie_embeddings": True}
        models[run] = GPT(ModelConfig(vocab_size=128, **small))
        save_checkpoint(models[run], tmp_path / run)
    table = pd.DataFrame([{"run": run_name("delayed_memory", "fbt", s), "arm": "fbt", "seed": s,
                           "label": specimen_label("fbt", s), "task": "delayed_memory", "scratch_updates": 0,
                           "gated": True} for s in (0, 1)])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count: the same arithmetic, so the same rows
    try:
        one, path_one = recipe.probes(Context(recipe.RECIPE, {}, models, {}, tmp_path, 1.0, jobs=1), table, False,
                                      n=64)
        two, path_two = recipe.probes(Context(recipe.RECIPE, {}, models, {}, tmp_path, 1.0, jobs=2), table, False,
                                      n=64)
    finally:
        torch.set_num_threads(threads)
    assert set(one["label"]) == {"fbt", "fbt seed 1"} and set(path_one["specimen"]) == {"FBT s0", "FBT s0 seed 1"}
    pd.testing.assert_frame_equal(one, two)
    pd.testing.assert_frame_equal(path_one, path_two)
