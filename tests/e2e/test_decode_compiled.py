"""The fixed-shape decoding cache and the compiled decode step agree with eager decoding."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config, variant_config
from workbench import schedules as S


@torch.no_grad()
def test_static_cache_steps_match_the_sequential_schedule(variant):
    """Attending to every slot under a position mask equals the growing cache (float64, all mechanisms)."""
    cfg = variant_config(variant)
    model = perturbed_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 11))
    P = 4
    for feedback in (False, True):
        cache = model.new_kv_cache(2, idx.size(1), static=True)
        out = model.step(idx[:, :P], kv=cache)
        cache.state, logits = out.memory[:, -1], [out.logits]
        for t in range(P, idx.size(1)):
            logits.append(S.carry(model, idx[:, t:t + 1], torch.tensor([t]), cache, reads=feedback).logits)
        ref = S.Sequential().run(model, idx, P).logits if feedback else model(idx)
        torch.testing.assert_close(torch.cat(logits, dim=1), ref, rtol=0, atol=1e-12)


def test_static_cache_refuses_autograd():
    model = perturbed_model(small_config()).train()
    cache = model.new_kv_cache(1, 4, static=True)
    with pytest.raises(ValueError, match="StaticKVCache"):
        model.step(torch.zeros(1, 2, dtype=torch.long), kv=cache)


@pytest.mark.slow
@pytest.mark.compiles
@pytest.mark.parametrize("mechanism,regime", [("lrt", "standard"), ("lrt", "soft"), ("fbt", "soft")])
def test_compiled_generation_matches_eager(mechanism, regime):
    """torch.compile'd decoding picks the same tokens with the same logits (float32 rounding apart)."""
    torch.manual_seed(0)
    cfg = small_config(mechanism, n_layer=2, lrt_gamma_init=0.1)
    model = wb.build_model(cfg)
    with torch.no_grad():  # move the zero-initialised mechanism weights so feedback really changes the logits
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.eval()
    prompt = torch.randint(0, cfg.vocab_size, (3, 4))
    eager_tokens, eager_logits = wb.generate(model, prompt, 8, regime=regime, return_logits=True)
    tokens, logits = wb.generate(model, prompt, 8, regime=regime, return_logits=True, compile=True)
    assert torch.equal(tokens, eager_tokens)
    torch.testing.assert_close(logits, eager_logits, rtol=1e-5, atol=1e-5)
