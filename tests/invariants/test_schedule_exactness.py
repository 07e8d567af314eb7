"""The exact invariants that tie mechanisms and schedules together (float64, perturbed models): multipass(T) =
interleaved(T) = sequential, blockwise limits, LRT at init = the baseline, generation = the recurrence."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config, token_batch, variant_config

S = wb.schedules
ATOL = 1e-11




def test_single_equals_sequential_for_baseline():
    cfg = small_config()
    model, idx = perturbed_model(cfg), token_batch(cfg)
    torch.testing.assert_close(S.Sequential().run(model, idx).logits, S.Single().run(model, idx).logits,
                               rtol=0, atol=ATOL)


def test_multipass_T_equals_sequential(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    ref = S.Sequential().run(model, idx)
    out = S.Multipass(idx.size(1)).run(model, idx)
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
    torch.testing.assert_close(out.memory, ref.memory, rtol=0, atol=ATOL)


def test_multipass_is_exact_on_the_first_k_positions_only():
    """Jacobi on a causal system: pass k is exact for positions < k, and not yet beyond."""
    cfg = variant_config("fbt")
    model, idx = perturbed_model(cfg), token_batch(cfg)
    ref = S.Sequential().run(model, idx).logits
    for k in (1, 3, 5):
        out = S.Multipass(k).run(model, idx).logits
        torch.testing.assert_close(out[:, :k], ref[:, :k], rtol=0, atol=ATOL)
        assert (out[:, k:] - ref[:, k:]).abs().max() > 1e-6


def test_interleaved_T_equals_sequential(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    ref = S.Sequential().run(model, idx)
    out = S.Interleaved(idx.size(1)).run(model, idx)
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
    torch.testing.assert_close(out.memory, ref.memory, rtol=0, atol=ATOL)
    assert len(out.pass_logits) == idx.size(1) + 1


def test_interleaved_without_write_back_would_not_be_exact():
    """Guard the test above: fewer subsets than positions is only an approximation."""
    cfg = variant_config("lrt_shared_top")
    model, idx = perturbed_model(cfg), token_batch(cfg)
    ref = S.Sequential().run(model, idx).logits
    assert (S.Interleaved(2).run(model, idx).logits - ref).abs().max() > 1e-6


def test_blockwise_limits(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    torch.testing.assert_close(S.Blockwise(1).run(model, idx).logits, S.Sequential().run(model, idx).logits,
                               rtol=0, atol=ATOL)
    torch.testing.assert_close(S.Blockwise(idx.size(1)).run(model, idx).logits, S.Single().run(model, idx).logits,
                               rtol=0, atol=ATOL)


def test_plain_prefix_reads_no_memory(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    out = S.Sequential().run(model, idx, 4)
    torch.testing.assert_close(out.logits[:, :4], S.Single().run(model, idx).logits[:, :4], rtol=0, atol=ATOL)
    prefix = torch.tensor([2, 6])
    mp = S.Multipass(idx.size(1)).run(model, idx, prefix)
    for b in range(2):
        ref = S.Sequential().run(model, idx[b:b + 1], int(prefix[b])).logits
        torch.testing.assert_close(mp.logits[b:b + 1], ref, rtol=0, atol=ATOL)


def test_a_prefix_drawn_per_pass_is_each_pass_under_its_own_mask(variant):
    """One row per pass that reads memory: pass k is the Jacobi pass under row k - 2's prefix, chained by hand;
    a per-pass tensor whose rows agree is the shared prefix itself."""
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    B, T = idx.shape
    rows = torch.tensor([[2, 6], [0, 3], [5, 1]])  # passes 2, 3, 4
    out = S.Multipass(4).run(model, idx, rows)
    memory = None
    for k in range(4):
        reads = S.feedback_mask(B, T, rows[k - 1] if k else 0)
        step = S.jacobi_pass(model, idx, memory, reads)
        torch.testing.assert_close(out.pass_logits[k], step.logits, rtol=0, atol=ATOL)
        memory = step.memory
    streamed = [o.logits for o in S.iterate_passes(model, idx, rows, passes=4)]
    for got, want in zip(streamed, out.pass_logits):
        torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    shared = torch.tensor([2, 6])
    torch.testing.assert_close(S.Multipass(4).run(model, idx, shared.expand(3, B)).logits,
                               S.Multipass(4).run(model, idx, shared).logits, rtol=0, atol=ATOL)
    if model.mechanism.reads:  # the draws matter wherever memory is read
        assert not torch.equal(out.logits, S.Multipass(4).run(model, idx, rows[0]).logits)
    with pytest.raises(ValueError, match=r"plain_prefix.*\(2, 2\).*\(3, 2\)"):
        S.Multipass(4).run(model, idx, rows[:2])
    with pytest.raises(ValueError, match="plain_prefix.*finite"):
        next(S.iterate_passes(model, idx, rows))
    with pytest.raises(ValueError, match="(?s)plain_prefix=.*multipass"):
        S.Sequential().run(model, idx, rows)


@pytest.mark.parametrize("name", ["lrt_shared_top", "lrt_per_layer_mid", "lrt_kv_only", "lrt_residual_only_gqa"])
def test_lrt_at_init_is_the_baseline(name):
    cfg = variant_config(name)
    lrt = wb.build_model(cfg, dtype=torch.float64)
    base = wb.build_model(cfg.replace(mechanism="none"), dtype=torch.float64)
    base.load_state_dict({k: v for k, v in lrt.state_dict().items() if not k.startswith("mechanism.")})
    with torch.no_grad():  # move the backbone off its init so blocks are not identities
        for n, p in base.named_parameters():
            p.add_(torch.randn_like(p) * 0.3)
            lrt.get_parameter(n).copy_(p)
    idx = token_batch(cfg)
    ref = base(idx)
    for value in (S.Sequential(), S.Multipass(3), S.Interleaved(3)):
        torch.testing.assert_close(value.run(lrt, idx).logits, ref, rtol=0, atol=ATOL)


def test_generation_reproduces_sequential_logits(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    tokens, logits = wb.generate(model, idx[:, :4], max_new_tokens=6, regime="soft", return_logits=True)
    ref = S.Sequential().run(model, tokens, 4).logits
    torch.testing.assert_close(logits, ref[:, 3:-1], rtol=0, atol=ATOL)
    tokens, logits = wb.generate(model, idx[:, :4], max_new_tokens=6, regime="standard", return_logits=True)
    torch.testing.assert_close(logits, model(tokens)[:, 3:-1], rtol=0, atol=ATOL)


def test_fused_prefill_with_enough_passes_is_sequential(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    P = 5
    tokens, logits = wb.generate(model, idx[:, :P], max_new_tokens=4, regime="fused", prefill_passes=P - 1,
                                 return_logits=True)
    ref = S.Sequential().run(model, tokens).logits
    torch.testing.assert_close(logits, ref[:, P - 1:-1], rtol=0, atol=ATOL)


# ------------------------------------------------------------------------ decoding regimes as schedule values
@pytest.mark.parametrize("regime", ["standard", "soft", "fused"])
def test_a_regime_value_run_teacher_forced_is_generate_bit_for_bit(variant, regime):
    """``schedules.regime(r)`` run over the greedy continuation computes exactly the logits that chose it: bit
    for bit where the value decodes token by token (SOFT, FUSED); STANDARD is ``Single()``, one plain pass
    over the whole text, so it equals the cached token steps to rounding."""
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    P = 4
    tokens, chosen = wb.generate(model, idx[:, :P], max_new_tokens=5, regime=regime, prefill_passes=2,
                                 return_logits=True)
    value = S.regime(regime, prefill_passes=2, prompt_len=P)
    with torch.no_grad():
        logits = value.run(model, tokens).logits
    if regime == "standard":
        torch.testing.assert_close(logits[:, P - 1:-1], chosen, rtol=0, atol=ATOL)
    else:
        assert torch.equal(logits[:, P - 1:-1], chosen)
    again = wb.generate(model, idx[:, :P], max_new_tokens=5, regime=value, return_logits=True)
    assert torch.equal(again[0], tokens) and torch.equal(again[1], chosen)  # generate takes the value itself


@pytest.mark.parametrize("k", [1, 3])
def test_a_suffix_condition_decodes_soft_started_inside_the_prompt(variant, k):
    """``generate(..., regime=condition("suffixK"))`` prefills the prompt but its last K tokens plainly and runs
    those by the recurrence: bit for bit SOFT with a prompt K tokens shorter, run teacher-forced."""
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    P = 6
    tokens, chosen = wb.generate(model, idx[:, :P], max_new_tokens=4, regime=S.condition(f"suffix{k}"),
                                 return_logits=True)
    with torch.no_grad():
        logits = S.Prefilled(S.Single(), S.Sequential(), prompt_len=P - k).run(model, tokens).logits
    assert torch.equal(logits[:, P - 1:-1], chosen)
    soft = wb.generate(model, idx[:, :P], max_new_tokens=1, regime="soft", return_logits=True)[1]
    assert not model.mechanism.reads or not torch.equal(soft[:, 0], chosen[:, 0])  # the first token reads feedback


def test_soft_is_the_recurrence_with_a_plain_prefix_and_a_suffix_condition_is_soft_from_there(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    for p in (1, 4, idx.size(1)):
        soft = S.Prefilled(S.Single(), S.Sequential(), prompt_len=p).run(model, idx).logits
        torch.testing.assert_close(soft, S.Sequential().run(model, idx, p).logits, rtol=0, atol=ATOL)
    suffix = S.condition("suffix3").anchored(7)
    assert suffix == S.Prefilled(S.Single(), S.Sequential(), prompt_len=5)
    torch.testing.assert_close(suffix.run(model, idx).logits, S.Sequential().run(model, idx, 5).logits,
                               rtol=0, atol=ATOL)


def test_the_pure_continuation_is_the_recurrence_and_writes_nothing(variant):
    """``continuation`` (what every Jacobian and Lyapunov exponent differentiates) continues the exact recurrence
    from a cache's prefix, leaves that cache as it was, and gives the same memories when called again."""
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), token_batch(cfg)
    T, t = idx.size(1), 3
    exact = S.Sequential().run(model, idx).memory
    cache = model.new_kv_cache(idx.size(0), T)
    S.Sequential().prefill(model, idx[:, :t], cache)
    before = [k.clone() for k in cache.k], cache.pos, cache.state.clone()
    run = S.continuation(model, idx, cache, t, T)
    first, again = run(cache.state), run(cache.state)
    torch.testing.assert_close(first, exact[:, t:], rtol=0, atol=ATOL)
    assert torch.equal(first, again)
    assert all(torch.equal(a, b) for a, b in zip(before[0], cache.k)) and cache.pos == before[1]
    assert torch.equal(cache.state, before[2])
    with pytest.raises(ValueError, match="stop"):
        S.continuation(model, idx, cache, t, T + 1)
