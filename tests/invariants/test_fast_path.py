"""The fast path (``workbench.fast``) computes what the plain path (``functional``'s own code) computes.

Bit for bit where the op sequence is the same (every forward in float32 and float64); gradients to float64
rounding (the hand-derived backwards reorder sums). Whole models too, under every mechanism and a multi-pass
schedule, so a speed-up that changed the maths shows here and not only in a benchmark.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench import fast, functional


def _both(fn, *args):
    on = fn(*args)
    with fast.disabled():
        assert not fast.ENABLED
        off = fn(*args)
    assert fast.ENABLED  # restored
    return on, off


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_each_function_is_its_plain_twin_bit_for_bit(dtype):
    x = torch.randn(3, 7, 4, 16, dtype=dtype)
    for name in ("norm", "relu_squared"):
        on, off = _both(lambda n=name: getattr(fast.ops(), n)(x.clone()))
        assert torch.equal(on, off), name
    cos, sin = functional.rotary(torch.arange(3, 10), 16, 10000.0, dtype)
    on, off = _both(lambda: fast.ops().apply_rotary(x, fast.ops().per_head(cos, 4), fast.ops().per_head(sin, 4)))
    assert torch.equal(on, off)
    on, off = _both(lambda: fast.ops().apply_rotary(x, cos, sin))  # (T, hd) tables: broadcast either way
    assert torch.equal(on, off)
    on, off = _both(lambda: fast.ops().rotary(torch.arange(3, 10), 16, 10000.0, dtype))
    assert all(torch.equal(a, b) for a, b in zip(on, off))
    with fast.disabled():
        assert fast.ops().per_head(cos, 4).shape == (7, 1, 16)  # the plain path broadcasts over heads
    assert fast.ops().per_head(cos, 4).shape == (7, 4, 16) and fast.ops().per_head(cos, 4).is_contiguous()


def test_the_switch_hands_out_the_plain_functions_when_off_and_is_read_in_one_place():
    assert fast.ops() is fast
    with fast.disabled():
        assert fast.ops() is functional
    package = Path(wb.__file__).parent
    assert [p.name for p in package.rglob("*.py") if p.name != "fast.py" and "ENABLED" in p.read_text()] == []
    assert "fast" not in (package / "functional.py").read_text().split('"""', 2)[2]  # the reading path imports none


@pytest.mark.parametrize("mechanism", ["none", "lrt", "fbt"])
def test_a_model_computes_the_same_logits_and_gradients_on_both_paths(mechanism):
    torch.manual_seed(0)
    config = wb.ModelConfig(vocab_size=23, n_layer=2, n_head=2, n_embd=16, seq_len=9, mechanism=mechanism,
                            tie_embeddings=mechanism == "fbt", lrt_gamma_init=0.5)
    m = wb.build_model(config, dtype=torch.float64)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))  # off the init, so every path carries signal
    idx = torch.randint(0, 23, (3, 9))

    def run():
        torch.manual_seed(1)  # FBT's jitter draws from the global generator: the same draws on both paths
        m.zero_grad()
        out = wb.schedules.Multipass(3).run(m, idx)
        out.logits.square().mean().backward()
        return out.logits.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

    (logits_on, grads_on), (logits_off, grads_off) = _both(run)
    assert torch.equal(logits_on, logits_off)
    assert grads_on.keys() == grads_off.keys() and grads_on
    for name in grads_on:
        torch.testing.assert_close(grads_on[name], grads_off[name], rtol=1e-10, atol=1e-12, msg=name)


def test_the_switch_is_restored_after_an_error():
    with pytest.raises(RuntimeError), fast.disabled():
        raise RuntimeError
    assert fast.ENABLED


@pytest.mark.parametrize("inject", [("kv", "residual"), ("kv",), ("residual",)])
def test_an_lrt_with_an_edited_read_is_the_same_on_both_paths(inject):
    """LRT's per-forward lookups (``LRT._layer``'s memo) see the hook at one layer's read, on both paths."""
    torch.manual_seed(0)
    config = wb.ModelConfig(vocab_size=23, n_layer=3, n_head=2, n_embd=16, seq_len=9, mechanism="lrt",
                            lrt_inject=inject, lrt_gamma_init=0.5)
    m = wb.build_model(config, dtype=torch.float64)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))  # off the init (zero output projections, zero gates)
    idx = torch.randint(0, 23, (2, 9))

    def run():
        with wb.with_hooks(m, {"mechanism.hook_read.1": lambda x, hook: 3.0 * x}):
            edited = wb.schedules.Multipass(2).run(m, idx).logits
        return edited, wb.schedules.Multipass(2).run(m, idx).logits

    (edited_on, clean_on), (edited_off, clean_off) = _both(run)
    assert torch.equal(edited_on, edited_off) and torch.equal(clean_on, clean_off)
    assert not torch.allclose(edited_on, clean_on)  # the edit reached the model on both paths
