"""Activation cache: passes assembled per schedule, filters, and agreement with the schedules."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench.analysis import run_with_cache


@pytest.fixture(scope="module")
def fbt_model():
    return perturbed_model(small_config("fbt"))


def _idx(T=8, B=2):
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("schedule,n_passes", [("single", 1), ("multipass", 3), ("sequential", 1),
                                               ("interleaved", 2), ("blockwise", 1)])
def test_passes_are_grouped_by_schedule(fbt_model, schedule, n_passes):
    out, cache = run_with_cache(fbt_model, _idx(), schedule, passes=3, subsets=3, block=3)
    assert cache.n_passes == n_passes
    resid = cache.accumulated_resid()
    assert resid.shape == (4, 2, 8, 32) and not torch.isnan(resid).any()
    torch.testing.assert_close(cache["hook_memory"], out.memory)


def test_exact_schedules_cache_the_same_states(fbt_model):
    idx = _idx()
    _, seq = run_with_cache(fbt_model, idx, "sequential")
    _, mp = run_with_cache(fbt_model, idx, "multipass", passes=8)
    _, il = run_with_cache(fbt_model, idx, "interleaved", subsets=8)
    for name in ("hook_input", "blocks.2.hook_resid_post", "blocks.1.attn.hook_k"):
        torch.testing.assert_close(mp[name], seq[name], rtol=0, atol=1e-11)
        torch.testing.assert_close(il[name], seq[name], rtol=0, atol=1e-11)
    # depth 0 of the first pass is the plain embedding; later passes differ after position 0
    torch.testing.assert_close(mp["hook_input", 0], mp["hook_embed", 0])
    assert (mp["hook_input", 1][:, 1:] - mp["hook_embed", 1][:, 1:]).abs().max() > 1e-3


def test_patterns_only_on_request_and_padded_for_sequential(fbt_model):
    _, cache = run_with_cache(fbt_model, _idx(), "single")
    assert not any(k.endswith("hook_pattern") for k in cache.keys())
    _, full = run_with_cache(fbt_model, _idx(), "multipass", passes=8, names_filter="blocks.0.attn.hook_pattern")
    _, seq = run_with_cache(fbt_model, _idx(), "sequential", names_filter=["blocks.0.attn.hook_pattern"])
    assert full.keys() == ["blocks.0.attn.hook_pattern"]
    torch.testing.assert_close(seq["blocks.0.attn.hook_pattern"], full["blocks.0.attn.hook_pattern"],
                               rtol=0, atol=1e-11)


def test_position_filters(fbt_model):
    idx = _idx()
    _, full = run_with_cache(fbt_model, idx, "interleaved", subsets=3)
    _, some = run_with_cache(fbt_model, idx, "interleaved", subsets=3, positions=[1, 6])
    torch.testing.assert_close(some["blocks.1.hook_resid_post"], full["blocks.1.hook_resid_post"][:, [1, 6]])
    where = torch.tensor([5, 2])
    _, one = run_with_cache(fbt_model, idx, "sequential", example_positions=where,
                            names_filter=lambda n: n.endswith("resid_post"))
    expected = full["blocks.2.hook_resid_post"][torch.arange(2), where]
    _, seq = run_with_cache(fbt_model, idx, "sequential")
    torch.testing.assert_close(one["blocks.2.hook_resid_post"], seq["blocks.2.hook_resid_post"][torch.arange(2), where])
    assert one["blocks.2.hook_resid_post"].shape == expected.shape == (2, 32)


def test_gates_are_cached_for_lrt():
    model = perturbed_model(small_config("lrt"))
    _, cache = run_with_cache(model, _idx(), "multipass", passes=2, names_filter=lambda n: n.endswith("hook_gate"))
    assert cache["blocks.0.attn.hook_gate"].shape == (2, 8, 2, 4, 1)
    assert torch.all((cache["blocks.0.attn.hook_gate"] > 0) & (cache["blocks.0.attn.hook_gate"] < 2))


def test_bad_filters_are_refused(fbt_model):
    with pytest.raises(ValueError, match="unknown hook points"):
        run_with_cache(fbt_model, _idx(), names_filter=["blocks.0.nope"])
    with pytest.raises(ValueError, match="positions"):
        run_with_cache(fbt_model, _idx(), positions=[99])
    with pytest.raises(ValueError, match="example_positions"):
        run_with_cache(fbt_model, _idx(), example_positions=torch.tensor([1, 2, 3]))


def test_cache_leaves_no_hooks_behind(fbt_model):
    run_with_cache(fbt_model, _idx(), "multipass", passes=2)
    assert not any(m._forward_hooks for m in fbt_model.modules())
    assert isinstance(wb.schedules.single(fbt_model, _idx()).logits, torch.Tensor)
