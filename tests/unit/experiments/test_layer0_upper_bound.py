"""layer0_probes' upper bound: the top-layer probe one position before the label, the ceiling of a layer-0 probe
after one recurrent step."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import tasks
from workbench.analysis.features import probe_features
from workbench.analysis.probes import fit_probe
from workbench.experiments.recipes.layer0_probes import upper_bound

VOCAB = tasks.CharTokenizer().vocab_size


def test_upper_bound_reads_the_top_layer_one_before_the_label():
    task = tasks.get("delayed_memory", scratch_updates=8, label_at="answer")
    batch = task.sample(48, seed=0)
    model = perturbed_model(small_config("fbt", vocab_size=VOCAB, seq_len=task.seq_len))
    bound = upper_bound(model, batch, folds=4)
    shifted = wb.tasks.Batch(**{**vars(batch), "label_positions": batch.label_positions - 1})
    top = probe_features(model, shifted, "standard")[-1].numpy()
    assert bound["accuracy"] == pytest.approx(fit_probe(top, batch.labels.numpy(), batch.groups.numpy())["accuracy"])
    assert bound["accuracy_low"] <= bound["accuracy"] <= bound["accuracy_high"] and bound["n"] == 48
    at_zero = wb.tasks.Batch(**{**vars(batch), "label_positions": torch.zeros_like(batch.label_positions)})
    with pytest.raises(ValueError, match="batch"):
        upper_bound(model, at_zero)
