"""The LRT memory sources of the paper's ablation, read off the hook points under the exact recurrence (float64):
``older`` injects the source state two positions back, ``pooled`` a decayed average of the earlier ones, ``none``
nothing (the gates and scales alone)."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, token_batch, variant_config
from workbench.functional import norm
from workbench.hooks import with_hooks

ATOL = 1e-11


def recorded(model: wb.GPT, idx: torch.Tensor, source: int) -> dict[str, torch.Tensor]:
    """What block 0's injections read, the memory each position left, and each position's source state, under
    multipass(T) (the exact recurrence; its last pass is the one kept)."""
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def fn(x, hook):
            seen[name] = x.detach().clone()
        return fn

    with with_hooks(model, {"mechanism.hook_read.0": keep("read"), "hook_memory": keep("memory"),
                            f"blocks.{source}.hook_resid_post": keep("state")}):
        wb.schedules.Multipass(idx.size(1)).run(model, idx)
    return {**seen, "state": norm(seen["state"])}


def test_older_injects_the_state_two_positions_back():
    model = perturbed_model(variant_config("lrt_older", lrt_source_layer=1))
    idx = token_batch(model.config)
    seen = recorded(model, idx, 1)
    D = model.config.n_embd
    torch.testing.assert_close(seen["memory"][..., :D], seen["state"], rtol=0, atol=ATOL)
    torch.testing.assert_close(seen["read"][:, 2:], seen["state"][:, :-2], rtol=0, atol=ATOL)
    assert seen["read"][:, :2].abs().max() == 0  # positions 0 and 1 have no state two back


@pytest.mark.parametrize("decay", [0.5, 0.9])
def test_pooled_injects_the_decayed_average_of_the_earlier_states(decay):
    model = perturbed_model(variant_config("lrt_pooled_mid", lrt_pool_decay=decay))
    idx = token_batch(model.config)
    seen = recorded(model, idx, 1)
    h = seen["state"]
    average = [h[:, 0]]
    for t in range(1, h.size(1)):
        average.append(decay * average[-1] + (1 - decay) * h[:, t])
    expected = torch.stack(average, dim=1)
    torch.testing.assert_close(seen["memory"], expected, rtol=0, atol=ATOL)
    torch.testing.assert_close(seen["read"][:, 1:], expected[:, :-1], rtol=0, atol=ATOL)


def test_none_reads_nothing_and_keeps_only_the_gates_and_scales():
    cfg = variant_config("lrt_gates_only")
    model = perturbed_model(cfg)
    idx = token_batch(cfg)
    torch.testing.assert_close(wb.schedules.Sequential().run(model, idx).logits,
                               wb.schedules.Single().run(model, idx).logits,
                               rtol=0, atol=ATOL)
    names = {n for n, _ in model.mechanism.named_parameters()}
    assert names == {"alpha"} | {f"gates.{l}.weight" for l in range(cfg.n_layer)}
    with_memory = wb.build_model(cfg.replace(lrt_memory="previous"))
    extra = with_memory.num_params() - wb.build_model(cfg).num_params()
    assert extra == 2 * cfg.n_embd * cfg.kv_dim + cfg.n_layer  # the recurrent K/V pair and gamma


@pytest.mark.parametrize("field,value", [("lrt_memory", "next"), ("lrt_pool_decay", 1.0), ("lrt_pool_decay", 0.0)])
def test_bad_memory_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        variant_config("lrt_shared_top", **{field: value})
