"""The GPU path, checked without a GPU.

On the ``meta`` device a tensor has a shape, a dtype and a device but no values: reading one
(``.item()``, ``bool(tensor)``, ``int(tensor)``, ``.tolist()``, ``.cpu()``) raises, and so does mixing
it with a stray CPU tensor. So everything that runs here to the end neither waits for an
accelerator (each such read is a device-to-host synchronisation on a GPU) nor puts a tensor on the
wrong device. ``torch.autocast("cpu", dtype=torch.bfloat16)`` runs the same code in the mixed
precision a GPU trains in: the matrices in bfloat16, the norms and the loss in float32.
"""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import variant_config
from workbench.analysis import condition_features, pass_dynamics, run_with_cache
from workbench.schedules import SCHEDULES

S = wb.schedules
B, T = 2, 9
VALUES = {"single": S.Single(), "sequential": S.Sequential(), "multipass": S.Multipass(3),
          "interleaved": S.Interleaved(3), "blockwise": S.Blockwise(4), "fixed_point": S.FixedPoint(3)}
REPRESENTATIVE = ("none", "lrt_per_layer_mid", "fbt")  # one variant per mechanism where a loop over all is slow


def _meta_model(variant: str) -> wb.GPT:
    return wb.build_model(variant_config(variant), device="meta")


def _tokens(cfg: wb.ModelConfig, device: str = "cpu", seed: int = 0) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed)).to(device)


def _prefix(device: str) -> torch.Tensor:
    """A per-sequence plain prefix (FBT's prefix mix-in), on the device: its values are never read there."""
    return torch.tensor([0, 3]).to(device)


def autocast() -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16)


# ------------------------------------------------------------------------------------------ meta device
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_schedule_trains_on_meta(variant, schedule):
    model = _meta_model(variant).train()
    idx = torch.empty(B, T, dtype=torch.long, device="meta")
    out = VALUES[schedule].run(model, idx, _prefix("meta"))
    loss = out.loss(idx)
    loss.backward()
    assert loss.device.type == "meta" and out.logits.shape == (B, T, model.config.vocab_size)
    assert out.memory.shape == (B, T, model.mechanism.memory_width)
    assert model.wte.weight.grad is not None and model.wte.weight.grad.device.type == "meta"


@pytest.mark.parametrize("regime", wb.decode.REGIMES)
def test_generate_on_meta(variant, regime):
    model = _meta_model(variant).eval()
    prompt = torch.empty(B, 4, dtype=torch.long, device="meta")
    tokens, logits = wb.generate(model, prompt, 5, regime=regime, prefill_passes=2, return_logits=True)
    assert tokens.shape == (B, 9) and tokens.device.type == "meta"
    assert logits.shape == (B, 5, model.config.vocab_size)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("variant", REPRESENTATIVE)
def test_run_with_cache_on_meta(variant, schedule):
    model = _meta_model(variant).eval()
    idx = torch.empty(B, T, dtype=torch.long, device="meta")
    value = VALUES[schedule]
    _, cache = run_with_cache(model, idx, value)
    assert cache["hook_input"].shape == (B, T, model.config.n_embd) and cache["hook_input"].device.type == "meta"
    _, kept = run_with_cache(model, idx, value, names_filter="hook_memory", positions=[2, 5])
    assert kept["hook_memory"].shape == (B, 2, model.mechanism.memory_width)
    _, per_example = run_with_cache(model, idx, value, names_filter=["blocks.0.attn.hook_pattern"],
                                    positions=torch.tensor([[3], [8]]))
    assert per_example["blocks.0.attn.hook_pattern"].shape == (B, model.config.n_head, T)


def test_meta_refuses_a_stray_cpu_tensor():
    """Guard the tests above: a CPU tensor of more than one element next to a meta one does fail."""
    model = _meta_model("fbt")
    with pytest.raises((RuntimeError, ValueError)):
        model.step(torch.empty(B, T, dtype=torch.long, device="meta"), memory=torch.zeros(B, T, model.config.n_embd))


# ------------------------------------------------------------------------------------------ bf16 autocast
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_schedule_trains_under_bf16_autocast(variant, schedule):
    """bfloat16 matrices, float32 norms and loss: the same maths as float32 to bfloat16's precision."""
    cfg = variant_config(variant)
    torch.manual_seed(0)
    model = wb.build_model(cfg).eval()
    idx, targets = _tokens(cfg), _tokens(cfg, seed=1)
    value, prefix = VALUES[schedule], _prefix("cpu")
    reference = value.run(model, idx, prefix)
    with autocast():
        out = value.run(model, idx, prefix)
        loss = out.loss(targets)
    loss.backward()
    assert out.logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    torch.testing.assert_close(out.logits.float(), reference.logits, atol=0.05, rtol=0.05)
    torch.testing.assert_close(loss, reference.loss(targets), atol=0.02, rtol=0.02)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("regime", wb.decode.REGIMES)
@pytest.mark.parametrize("variant", REPRESENTATIVE)
def test_generate_under_bf16_autocast(variant, regime):
    cfg = variant_config(variant)
    torch.manual_seed(0)
    model = wb.build_model(cfg).eval()
    prompt = _tokens(cfg)[:, :4]
    _, reference = wb.generate(model, prompt, 4, regime=regime, prefill_passes=2, return_logits=True)
    with autocast():
        tokens, logits = wb.generate(model, prompt, 4, regime=regime, prefill_passes=2, return_logits=True)
    assert tokens.shape == (B, 8) and logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits[:, 0].float(), reference[:, 0], atol=0.05, rtol=0.05)  # same prompt


def test_analysis_under_bf16_autocast():
    """The analysis entry points that read values (norms, losses, probe features) in mixed precision."""
    cfg = variant_config("fbt")
    torch.manual_seed(0)
    model = wb.build_model(cfg).eval()
    idx = _tokens(cfg)
    with autocast():
        _, cache = run_with_cache(model, idx, wb.schedules.Multipass(2))
        dynamics = pass_dynamics(model, idx, passes=3, targets=_tokens(cfg, seed=1))
    assert cache.n_passes == 2 and torch.isfinite(cache["hook_input"]).all()
    assert dynamics["loss"].notna().all() and dynamics["fixed_point_distance"].notna().all()
    task = wb.tasks.get("arith_cot", steps=2, max_value=20)
    probe_model = wb.build_model(variant_config("fbt", vocab_size=task.vocab_size, seq_len=task.seq_len)).eval()
    batch = task.sample(4, seed=0)
    with autocast():
        feats = condition_features(probe_model, batch, ("standard", "suffix2", "multipass2"))
    assert all(f.dtype == torch.float32 and torch.isfinite(f).all() for f in feats.values())
