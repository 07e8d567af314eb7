"""The backbone's building blocks (``workbench.functional``) and the ``Mechanism`` base every mechanism shares."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from workbench import fast, functional, model
from workbench.config import ModelConfig
from workbench.mechanisms import FBT, LRT, MECHANISM_CLASSES, Feedback, Mechanism, NoFeedback, build_mechanism


def test_every_mechanism_is_a_mechanism_and_none_is_the_identity():
    assert all(issubclass(cls, Mechanism) for cls in MECHANISM_CLASSES.values())
    assert not issubclass(LRT, NoFeedback) and not issubclass(FBT, NoFeedback)
    config = ModelConfig(vocab_size=16, n_layer=2, n_head=2, n_embd=16, seq_len=8)
    none = build_mechanism(config)
    assert type(none) is NoFeedback and none.source_layer == -1 and not list(none.parameters())
    x, k = torch.randn(2, 3, 16), torch.randn(2, 3, 2, 8)
    feedback = Feedback(torch.randn(2, 3, 16))
    assert none.fuse_input(x, feedback) is x and none.inject_residual(0, x, feedback) is x
    assert none.inject_kv(1, x, k, k, feedback) == (k, k, None)


@pytest.mark.parametrize("fn, reference", [
    (fast.norm, lambda x: F.rms_norm(x, (x.size(-1),))),
    (fast.relu_squared, lambda h: F.relu(h).square()),
])
def test_hand_derived_backwards_are_exact(fn, reference):
    """float64 gradcheck and gradgradcheck (the analyses take vjps of vjps), and in float32 the forward is
    PyTorch's own bit for bit and the gradient the composite's to rounding (ReLU^2's bit for bit)."""
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (x,)) and torch.autograd.gradgradcheck(fn, (x,))
    x32 = torch.randn(4, 16, 64, requires_grad=True)
    g = torch.randn(4, 16, 64)
    y, want = fn(x32), reference(x32)
    assert torch.equal(y, want)
    (got_grad,), (want_grad,) = torch.autograd.grad(y, x32, g), torch.autograd.grad(want, x32, g)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # inference: PyTorch's values bit for bit
        assert torch.equal(fn(x32), want)


@pytest.mark.parametrize("shape", [(16, 1, 256), (16, 1, 8, 32), (3, 7, 40), (1, 1, 1, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_norm_without_a_gradient_is_pytorchs_rms_norm_bit_for_bit(shape, dtype):
    """Decoding and the analyses norm without a gradient through the hand-written op sequence (fewer ops);
    every dtype, decode-sized or not, gets exactly ``F.rms_norm``'s values."""
    x = (torch.randn(*shape) * 3).to(dtype)
    with torch.no_grad():
        assert torch.equal(functional.norm(x), F.rms_norm(x, (x.size(-1),)))


def test_rotary_tables_laid_out_per_head_rotate_bit_for_bit_the_same():
    """The model lays the tables out per head once per forward (faster products); the rotation is unchanged."""
    cos, sin = functional.rotary(torch.arange(5, 12), 16, 10000.0, torch.float32)
    x = torch.randn(3, 7, 4, 16)
    laid_out = fast.per_head(cos, 4), fast.per_head(sin, 4)
    assert laid_out[0].shape == (7, 4, 16) and laid_out[0].is_contiguous()
    assert torch.equal(fast.apply_rotary(x, *laid_out), functional.apply_rotary(x, cos, sin))
    x1, x2 = x[..., :8], x[..., 8:]  # the pairs (x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin)
    c, s = cos[None, :, None, :8], sin[None, :, None, :8]
    torch.testing.assert_close(functional.apply_rotary(x, cos, sin), torch.cat([x1 * c + x2 * s, x2 * c - x1 * s], -1))


def test_stored_once_is_the_identity_bit_for_bit():
    table = torch.tensor([0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 1e-40])
    out = fast.stored_once(table)
    assert torch.equal(out.isnan(), table.isnan())
    finite = ~table.isnan()
    assert torch.equal(out[finite], table[finite]) and torch.equal(out[finite].signbit(), table[finite].signbit())


@pytest.mark.compiles
def test_compiled_training_computes_the_rotary_angles_once_whatever_the_depth():
    """Under torch.compile the tables are stored once: the number of generated kernels that evaluate a cosine
    (forward and backward) does not grow with the layers that read them (inlined, it grew by one per layer)."""
    from torch._inductor.utils import run_and_get_code

    def kernels_with_cos(n_layer: int) -> int:
        torch.manual_seed(0)
        m = model.build_model(ModelConfig(vocab_size=32, n_layer=n_layer, n_head=2, n_embd=32, seq_len=16))
        step = torch.compile(lambda idx: m(idx).sum())
        idx = torch.randint(0, 32, (2, 16))
        _, code = run_and_get_code(lambda: step(idx).backward())
        torch._dynamo.reset()
        return len({name for name in re.findall(r"cpp_fused_\w+", "\n".join(code)) if "cos" in name})

    assert kernels_with_cos(1) == kernels_with_cos(3) >= 1
