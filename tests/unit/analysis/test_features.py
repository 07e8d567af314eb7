"""Probe features: the prefill conditions are the exact recurrences they claim, whatever the padding and chunking,
and a model's answers under a condition are ``evaluation``'s."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import tasks
from workbench.analysis.cache import run_with_cache
from workbench.analysis.features import (
    answer_correct,
    condition_features,
    probe_features,
    residual_names,
)
from workbench.evaluation import per_example_metrics

VOCAB = tasks.CharTokenizer().vocab_size


def test_bad_conditions_are_refused():
    S = wb.schedules
    with pytest.raises(ValueError, match="suffixK"):
        S.condition("suffix0")
    with pytest.raises(ValueError, match="multipassK"):
        S.condition("recurrent")
    with pytest.raises(ValueError, match="conditions='suffix1'"):
        condition_features(None, None, "suffix1")  # a bare name is not a sequence of conditions
    assert S.condition("suffix12") == S.Prefilled(S.Single(), S.Sequential(), suffix=12)
    assert S.condition("sequential") == S.Sequential() and S.condition("multipass3") == S.Multipass(3)
    for name in ("standard", "sequential", "suffix12", "multipass3"):  # the tables' labels survive the round trip
        assert S.condition_name(S.condition(name)) == name
        assert S.parse(S.condition(name).to_dict()) == S.condition(name)


@pytest.fixture(scope="module")
def arith_batch():
    """Variable label positions and right padding: the case the conditions must get right."""
    batch = tasks.get("arith_cot", steps=2, max_value=20).sample(6, seed=0)
    assert len(batch.label_positions.unique()) > 1 and len(batch.lengths.unique()) > 1
    return batch


@pytest.mark.parametrize("mechanism,overrides", [("fbt", {}), ("lrt", dict(lrt_source_layer=1))])
def test_conditions_are_the_exact_recurrences(arith_batch, mechanism, overrides):
    model = perturbed_model(small_config(mechanism, vocab_size=VOCAB, seq_len=64, **overrides))
    conditions = ("standard", "suffix1", "suffix2", "suffix4", "sequential", "multipass3")
    feats = condition_features(model, arith_batch, conditions, batch_size=4)
    P = arith_batch.label_positions
    names = residual_names(model.config.n_layer)

    def reference(schedule: str | wb.schedules.Schedule, plain_prefix: int | torch.Tensor = 0) -> torch.Tensor:
        _, cache = run_with_cache(model, arith_batch.tokens, schedule, names_filter=names, positions=P[:, None],
                                  plain_prefix=plain_prefix)
        return cache.accumulated_resid()

    tight = dict(rtol=0, atol=1e-9)
    torch.testing.assert_close(feats["standard"], reference("single"), **tight)
    torch.testing.assert_close(feats["sequential"], reference("sequential"), **tight)
    torch.testing.assert_close(feats["multipass3"], reference(wb.schedules.Multipass(3)), **tight)
    for k in (1, 2, 4):  # k fused tokens after a plain prefix: sequential and k + 1 Jacobi passes agree
        torch.testing.assert_close(feats[f"suffix{k}"], reference("sequential", plain_prefix=P - k + 1), **tight)
        fused = reference(wb.schedules.Multipass(k + 1), plain_prefix=P - k + 1)
        torch.testing.assert_close(feats[f"suffix{k}"], fused, **tight)
    assert (feats["suffix1"] - feats["standard"]).abs().max() > 1e-3  # the recurrence did change something
    torch.testing.assert_close(probe_features(model, arith_batch, "suffix2"), feats["suffix2"], rtol=0, atol=0)
    # a schedule value is a condition: the named forms' values give their features, under their names
    S = wb.schedules
    values = condition_features(model, arith_batch, (S.Single(), S.Prefilled(suffix=2), S.Multipass(3)), batch_size=4)
    assert list(values) == ["standard", "suffix2", "multipass3"]
    for name, feat in values.items():
        torch.testing.assert_close(feat, feats[name], rtol=0, atol=0)


@pytest.mark.parametrize("mechanism", ["fbt", "lrt"])
def test_any_schedule_value_is_a_condition_computed_as_the_value_runs(arith_batch, mechanism):
    """A value outside the four named forms (here FUSED: a 3-pass prefill, then the exact recurrence over the last
    two tokens; and blockwise) is run whole, per label position: its features are its own run's, under its label."""
    S = wb.schedules
    overrides = {"lrt_source_layer": 1} if mechanism == "lrt" else {}
    model = perturbed_model(small_config(mechanism, vocab_size=VOCAB, seq_len=64, **overrides))
    fused, blocks = S.Prefilled(S.Multipass(3), S.Sequential(), suffix=2), S.Blockwise(3)
    feats = condition_features(model, arith_batch, (fused, blocks, "suffix2"), batch_size=4)
    assert set(feats) == {fused.label, blocks.label, "suffix2"}
    names = residual_names(model.config.n_layer)
    for value in (fused, blocks):
        for pos in arith_batch.label_positions.unique().tolist():
            rows = (arith_batch.label_positions == pos).nonzero().squeeze(1)
            idx = arith_batch.tokens[rows, : pos + 1]
            _, cache = run_with_cache(model, idx, value.anchored(pos), names_filter=names)
            expected = cache.accumulated_resid()[:, :, -1]
            torch.testing.assert_close(feats[value.label][:, rows], expected, rtol=0, atol=1e-9)
    assert (feats[fused.label] - feats["suffix2"]).abs().max() > 1e-6  # the multipass prefix changed the state


def test_a_model_without_memory_gives_every_condition_the_plain_pass(arith_batch):
    model = perturbed_model(small_config("none", vocab_size=VOCAB, seq_len=64))
    feats = condition_features(model, arith_batch, ("standard", "suffix2", "sequential", "multipass2"))
    reference = probe_features(model, arith_batch, "standard")
    _, cache = run_with_cache(model, arith_batch.tokens, "sequential", names_filter=residual_names(3),
                              positions=arith_batch.label_positions[:, None])
    torch.testing.assert_close(reference, cache.accumulated_resid(), rtol=0, atol=1e-9)
    for c in feats:
        torch.testing.assert_close(feats[c], reference, rtol=0, atol=0)


def test_features_do_not_depend_on_padding_or_chunking(arith_batch):
    model = perturbed_model(small_config("fbt", vocab_size=VOCAB, seq_len=64))
    one = condition_features(model, arith_batch, ("standard", "suffix2"), batch_size=1)
    padded = wb.tasks.Batch(**{**vars(arith_batch), "tokens": torch.nn.functional.pad(arith_batch.tokens, (0, 5))})
    many = condition_features(model, padded, ("standard", "suffix2"), batch_size=64)
    for c in one:
        torch.testing.assert_close(one[c], many[c], rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------- competence
@pytest.mark.parametrize("mechanism", ["fbt", "lrt"])
def test_answer_correct_is_the_condition_computed_exactly(mechanism):
    """suffixK = the exact recurrence after a plain prefix of label_pos - K + 1 tokens, carried through
    the answer; standard = one plain pass; sequential = the full recurrence."""
    task = tasks.get("delayed_memory", scratch_updates=[0, 8], label_at="answer")
    batch = task.sample(12, seed=0)
    overrides = {"lrt_source_layer": 1} if mechanism == "lrt" else {}
    model = perturbed_model(small_config(mechanism, vocab_size=VOCAB, seq_len=task.seq_len, **overrides))
    for pos in batch.label_positions.unique().tolist():
        rows = (batch.label_positions == pos).nonzero().squeeze(1)
        sub = wb.tasks.Batch(**{k: v[rows] if isinstance(v, torch.Tensor) else
                                ([v[i] for i in rows.tolist()] if isinstance(v, list) and k != "label_names" else v)
                                for k, v in vars(batch).items()})
        sub.tokens, sub.targets = sub.tokens[:, : int(sub.lengths.max())], sub.targets[:, : int(sub.lengths.max())]
        for condition, kw in (("standard", {"schedule": "single"}),
                              ("suffix1", {"schedule": "sequential", "plain_prefix": pos}),
                              ("suffix2", {"schedule": "sequential", "plain_prefix": pos - 1}),
                              ("sequential", {"schedule": "sequential"}),
                              ("multipass2", {"schedule": wb.schedules.Multipass(2)})):
            expected = per_example_metrics(model, sub, **kw)["answer_correct"].to_numpy()
            assert np.array_equal(answer_correct(model, sub, condition, batch_size=5), expected), condition
            value = wb.schedules.condition(condition)  # the condition's schedule value scores the same
            assert np.array_equal(answer_correct(model, sub, value, batch_size=5), expected), condition
