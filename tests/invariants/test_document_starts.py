"""Packed documents: a position holding ``document_token`` reads no memory, in every schedule, decoding regime
and mechanism, and the exactness invariants still hold (float64, perturbed models). Decoding never draws jitter."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, token_batch, variant_config

S = wb.schedules
ATOL = 1e-11
DOC = 0  # the document token of these tests' vocabulary


def packed(cfg: wb.ModelConfig) -> torch.Tensor:
    """Two rows of random tokens, each with document starts inside it (never the document token elsewhere)."""
    idx = token_batch(cfg, length=12).clamp(min=1)
    idx[0, [0, 5]] = DOC
    idx[1, [3, 4, 9]] = DOC  # two starts in a row: an empty document
    return idx


def documents_config(variant: str) -> wb.ModelConfig:
    return variant_config(variant, document_token=DOC)


def test_every_exact_schedule_agrees_on_packed_documents(variant):
    cfg = documents_config(variant)
    model = perturbed_model(cfg)
    idx = packed(cfg)
    T = idx.size(1)
    ref = S.Sequential().run(model, idx)
    for out in (S.Multipass(T).run(model, idx), S.Interleaved(T).run(model, idx),
                S.Blockwise(1).run(model, idx)):
        torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
        torch.testing.assert_close(out.memory, ref.memory, rtol=0, atol=ATOL)


@pytest.mark.parametrize("variant", ["fbt", "lrt_shared_top", "lrt_kv_only"])
def test_the_recurrence_from_a_document_start_ignores_the_memory_before_it(variant):
    """The exact recurrence from a document start on is the same whatever memory the start is handed (row 0 opens
    a document at position 5, row 1 does not); without the document token the memory crosses (the test could
    fail)."""
    cfg = documents_config(variant)
    memories = torch.randn(2, 2, cfg.n_embd, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for document_token, crosses in ((DOC, False), (None, True)):
        model = perturbed_model(cfg.replace(document_token=document_token))
        idx = packed(cfg)
        cache = model.new_kv_cache(2, idx.size(1))
        S.Sequential().prefill(model, idx[:, :5], cache)
        run = S.continuation(model, idx, cache, 5, idx.size(1))
        a, b = run(memories[0]), run(memories[1])
        assert ((a[0] - b[0]).abs().max() > 1e-6) == crosses
        assert (a[1] - b[1]).abs().max() > 1e-6


@pytest.mark.parametrize("variant", ["fbt", "lrt_shared_top"])
def test_a_prefix_drawn_per_pass_and_the_document_starts_combine(variant):
    """Multipass under a per-pass prefix with document starts is the same weights without a document token, each
    pass run under its prefix's mask with the starts taken out by hand."""
    cfg = documents_config(variant)
    model = perturbed_model(cfg)
    by_hand = perturbed_model(cfg.replace(document_token=None))
    idx = packed(cfg)
    prefix = torch.tensor([[2, 0], [0, 7]])  # pass 2's and pass 3's prefixes, per row
    out = S.Multipass(3).run(model, idx, prefix)
    masks = S.pass_masks(2, idx.size(1), prefix, 3)
    memory = None
    for k, logits in enumerate(out.pass_logits):
        step = S.jacobi_pass(by_hand, idx, memory, masks(k) & (idx != DOC))
        torch.testing.assert_close(logits, step.logits, rtol=0, atol=ATOL)
        memory = step.memory


@pytest.mark.parametrize("regime", ["soft", "fused"])
def test_decoding_through_a_document_start_is_the_teacher_forced_regime(regime):
    """Generation continues across a ``<bos>`` in the prompt and in the continuation exactly as the regime's value
    computes the whole sequence teacher-forced."""
    cfg = documents_config("fbt")
    model = perturbed_model(cfg)
    prompt = packed(cfg)[:, :7]
    value = S.regime(regime, prefill_passes=2, prompt_len=prompt.size(1))
    tokens, logits = wb.generate(model, prompt, 5, regime=value, return_logits=True)
    forced = value.run(model, tokens).logits[:, prompt.size(1) - 1: -1]
    torch.testing.assert_close(logits, forced, rtol=0, atol=ATOL)


@pytest.mark.parametrize("regime", ["standard", "soft", "fused"])
def test_decoding_never_draws_jitter_whatever_the_models_mode(regime):
    cfg = variant_config("fbt", fbt_jitter=0.3)
    model = perturbed_model(cfg)
    prompt = token_batch(cfg, length=6)
    reference = wb.generate(model.eval(), prompt, 6, regime=regime, return_logits=True)[1]
    model.train()
    for seed in (1, 2):
        torch.manual_seed(seed)
        torch.testing.assert_close(wb.generate(model, prompt, 6, regime=regime, return_logits=True)[1], reference,
                                   rtol=0, atol=0)
    assert model.training  # the caller's mode is given back
    if regime != "standard":  # the guard: in training mode the model's own forward does draw jitter
        torch.manual_seed(1)
        first = S.Multipass(2).run(model, prompt).logits
        torch.manual_seed(2)
        assert (S.Multipass(2).run(model, prompt).logits - first).abs().max() > 1e-6


def test_document_token_is_checked_against_the_vocabulary():
    with pytest.raises(ValueError, match="document_token"):
        variant_config("fbt", document_token=23)
