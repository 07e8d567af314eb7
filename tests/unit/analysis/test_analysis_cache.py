"""Activation cache: passes assembled per schedule, filters, and agreement with the schedules."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench.analysis import run_with_cache
from workbench.analysis.cache import ActivationCache


@pytest.fixture(scope="module")
def fbt_model():
    return perturbed_model(small_config("fbt"))


def _idx(T=8, B=2):
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("schedule,n_passes", [("single", 1), (wb.schedules.Multipass(3), 3), ("sequential", 1),
                                               (wb.schedules.Interleaved(3), 2), (wb.schedules.Blockwise(3), 1)])
def test_passes_are_grouped_by_schedule(fbt_model, schedule, n_passes):
    out, cache = run_with_cache(fbt_model, _idx(), schedule)
    assert cache.n_passes == n_passes
    resid = cache.accumulated_resid()
    assert resid.shape == (4, 2, 8, 32) and not torch.isnan(resid).any()
    torch.testing.assert_close(cache["hook_memory"], out.memory)


def test_a_schedule_value_caches_what_its_string_form_caches(fbt_model):
    idx = _idx()
    out, cache = run_with_cache(fbt_model, idx, wb.schedules.Interleaved(3))
    ref_out, ref = run_with_cache(fbt_model, idx, wb.schedules.Interleaved(3))
    assert cache.schedule == "interleaved" and cache.n_passes == ref.n_passes
    assert torch.equal(out.logits, ref_out.logits) and torch.equal(cache["hook_memory"], ref["hook_memory"])


def test_the_default_caches_the_residual_stream_and_none_every_hook_but_patterns(fbt_model):
    idx = _idx()
    _, residual = run_with_cache(fbt_model, idx, wb.schedules.Multipass(2))
    _, everything = run_with_cache(fbt_model, idx, wb.schedules.Multipass(2), names_filter=None)
    assert set(residual.keys()) == {n for n in everything.keys() if wb.analysis.cache.residual_stream(n)}
    assert "blocks.0.hook_resid_post" in residual.keys() and "hook_memory" in residual.keys()
    assert "blocks.0.attn.hook_k" not in residual.keys() and "blocks.0.attn.hook_k" in everything.keys()
    assert not any(n.endswith("hook_pattern") for n in everything.keys())
    torch.testing.assert_close(residual["blocks.1.hook_resid_post"], everything["blocks.1.hook_resid_post"],
                               rtol=0, atol=0)


def test_exact_schedules_cache_the_same_states(fbt_model):
    idx = _idx()
    _, seq = run_with_cache(fbt_model, idx, "sequential", names_filter=None)
    _, mp = run_with_cache(fbt_model, idx, wb.schedules.Multipass(8), names_filter=None)
    _, il = run_with_cache(fbt_model, idx, wb.schedules.Interleaved(8), names_filter=None)
    for name in ("hook_input", "blocks.2.hook_resid_post", "blocks.1.attn.hook_k"):
        torch.testing.assert_close(mp[name], seq[name], rtol=0, atol=1e-11)
        torch.testing.assert_close(il[name], seq[name], rtol=0, atol=1e-11)
    # depth 0 of the first pass is the plain embedding; later passes differ after position 0
    torch.testing.assert_close(mp.pass_(1)["hook_input"], mp.pass_(1)["hook_embed"])
    assert (mp.pass_(2)["hook_input"][:, 1:] - mp.pass_(2)["hook_embed"][:, 1:]).abs().max() > 1e-3


def test_patterns_only_on_request_and_padded_for_sequential(fbt_model):
    _, cache = run_with_cache(fbt_model, _idx(), "single")
    assert not any(k.endswith("hook_pattern") for k in cache.keys())
    _, full = run_with_cache(fbt_model, _idx(), wb.schedules.Multipass(8), names_filter="blocks.0.attn.hook_pattern")
    _, seq = run_with_cache(fbt_model, _idx(), "sequential", names_filter=["blocks.0.attn.hook_pattern"])
    assert full.keys() == ["blocks.0.attn.hook_pattern"]
    torch.testing.assert_close(seq["blocks.0.attn.hook_pattern"], full["blocks.0.attn.hook_pattern"],
                               rtol=0, atol=1e-11)


def test_position_filters(fbt_model):
    idx = _idx()
    _, full = run_with_cache(fbt_model, idx, wb.schedules.Interleaved(3))
    _, some = run_with_cache(fbt_model, idx, wb.schedules.Interleaved(3), positions=[1, 6])
    torch.testing.assert_close(some["blocks.1.hook_resid_post"], full["blocks.1.hook_resid_post"][:, [1, 6]])
    where = torch.tensor([5, 2])
    _, one = run_with_cache(fbt_model, idx, "sequential", positions=where[:, None],
                            names_filter=lambda n: n.endswith("resid_post"))
    expected = full["blocks.2.hook_resid_post"][torch.arange(2), where]
    _, seq = run_with_cache(fbt_model, idx, "sequential")
    torch.testing.assert_close(one["blocks.2.hook_resid_post"], seq["blocks.2.hook_resid_post"][torch.arange(2), where])
    assert one["blocks.2.hook_resid_post"].shape == expected.shape == (2, 32)


def test_one_positions_parameter_takes_shared_positions_or_one_per_example(fbt_model):
    """A 1-D list is kept for every example, a (B, 1) column is each example's own position: two examples and
    two positions, [5, 2] and [[5], [2]], do not read alike."""
    idx = _idx()
    _, full = run_with_cache(fbt_model, idx, wb.schedules.Multipass(2))
    _, shared = run_with_cache(fbt_model, idx, wb.schedules.Multipass(2), positions=[5, 2])
    _, own = run_with_cache(fbt_model, idx, wb.schedules.Multipass(2), positions=[[5], [2]])
    name = "blocks.0.hook_resid_post"
    torch.testing.assert_close(shared[name], full[name][:, [5, 2]], rtol=0, atol=0)
    torch.testing.assert_close(own[name], full[name][torch.arange(2), torch.tensor([5, 2])], rtol=0, atol=0)
    assert shared[name].shape == (2, 2, 32) and own[name].shape == (2, 32)


def test_progress_bar_on_request_and_silent_by_default(fbt_model, capsys):
    run_with_cache(fbt_model, _idx(), wb.schedules.Multipass(3))
    assert capsys.readouterr().err == ""
    run_with_cache(fbt_model, _idx(), wb.schedules.Multipass(3), progress=True)
    assert "3/3" in capsys.readouterr().err  # one forward per pass of the three
    run_with_cache(fbt_model, _idx(), wb.schedules.Multipass(3), progress=False)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="progress"):
        run_with_cache(fbt_model, _idx(), progress="yes")


def test_gates_are_cached_for_lrt():
    model = perturbed_model(small_config("lrt"))
    _, cache = run_with_cache(model, _idx(), wb.schedules.Multipass(2), names_filter=lambda n: n.endswith("hook_gate"))
    assert cache["blocks.0.attn.hook_gate"].shape == (2, 8, 2, 4, 1)
    assert torch.all((cache["blocks.0.attn.hook_gate"] > 0) & (cache["blocks.0.attn.hook_gate"] < 2))


def test_bad_filters_are_refused(fbt_model):
    with pytest.raises(ValueError, match="names_filter.*blocks.0.nope"):
        run_with_cache(fbt_model, _idx(), names_filter=["blocks.0.nope"])
    for bad in ([99], [-1], [], torch.tensor([[1], [2], [3]]), torch.tensor([[1, 2], [3, 4]]), torch.zeros(2, 1, 1)):
        with pytest.raises(ValueError, match="positions"):
            run_with_cache(fbt_model, _idx(), positions=bad)


def test_cache_leaves_no_hooks_behind(fbt_model):
    run_with_cache(fbt_model, _idx(), wb.schedules.Multipass(2))
    assert not any(m._forward_hooks for m in fbt_model.modules())
    assert isinstance(wb.schedules.Single().run(fbt_model, _idx()).logits, torch.Tensor)


def _hand_built(n_layer: int = 3, passes: int = 2) -> tuple[ActivationCache, dict]:
    """A cache whose every entry is a distinct constant: pass p, hook h -> 100 * p + h."""
    names = ["hook_embed", "hook_input"] + [f"blocks.{l}.{h}" for l in range(n_layer)
                                            for h in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post")]
    value = {(p, n): float(100 * p + i) for p in range(passes) for i, n in enumerate(names)}
    cache = ActivationCache([{n: torch.full((2, 4, 5), value[p, n]) for n in names} for p in range(passes)],
                            None, "multipass", n_layer)
    return cache, value


def test_cache_reads_as_transformerlens_reads_its_cache():
    cache, value = _hand_built()
    last = 1
    assert cache["blocks.1.hook_resid_post"][0, 0, 0] == value[last, "blocks.1.hook_resid_post"]
    # the second index is a layer, never a pass
    assert torch.equal(cache["resid_post", 2], cache["blocks.2.hook_resid_post"])
    assert torch.equal(cache["embed"], cache["hook_embed"]) and "resid_pre" not in cache and "embed" in cache
    with pytest.raises(KeyError, match=r"pass_\(k\)"):
        cache["blocks.0.hook_resid_post", 0]
    # passes have their own accessors
    assert cache.pass_(1)["resid_post", 1][0, 0, 0] == value[0, "blocks.1.hook_resid_post"]
    assert cache.pass_(2)["resid_post", 1][0, 0, 0] == value[1, "blocks.1.hook_resid_post"]
    assert torch.equal(cache.pass_(-1)["hook_input"], cache["hook_input"]) and cache.pass_(1).n_passes == 1
    assert torch.equal(cache.pass_(-2)["hook_input"], cache.pass_(1)["hook_input"])
    assert cache.stack_passes("hook_input")[:, 0, 0, 0].tolist() == [
        value[0, "hook_input"], value[1, "hook_input"]]
    for k in (0, 3, -3, 1.0, True):  # passes count from 1, as pass_dynamics and loss_pass{k} count them
        with pytest.raises(ValueError, match="k="):
            cache.pass_(k)
    # stack_activation: one block activation over layers (TransformerLens' signature)
    stacked = cache.stack_activation("resid_post")
    assert stacked.shape == (3, 2, 4, 5)
    assert stacked[:, 0, 0, 0].tolist() == [value[last, f"blocks.{l}.hook_resid_post"] for l in range(3)]
    assert cache.stack_activation("resid_pre", layer=2).shape[0] == 2
    with pytest.raises(ValueError, match="layer=4"):
        cache.stack_activation("resid_pre", layer=4)
    # accumulated_resid: what each block reads, then the final stream
    resid, labels = cache.accumulated_resid(return_labels=True)
    assert labels == ["0_pre", "1_pre", "2_pre", "final_post"]
    expected = ["hook_input", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post", "blocks.2.hook_resid_post"]
    assert resid[:, 0, 0, 0].tolist() == [value[last, n] for n in expected]
    upto, labels = cache.accumulated_resid(layer=1, incl_mid=True, return_labels=True)
    assert labels == ["0_pre", "0_mid", "1_pre"]
    assert upto[:, 0, 0, 0].tolist() == [value[last, n] for n in ("hook_input", "blocks.0.hook_resid_mid",
                                                                    "blocks.0.hook_resid_post")]
    assert dict(cache.items()).keys() == set(cache) and len(cache) == len(value) // 2


def test_pass_k_is_the_same_pass_in_the_cache_in_pass_dynamics_and_in_multipass(fbt_model):
    """One numbering of passes everywhere: ``cache.pass_(k)``, ``pass_dynamics``' row with ``pass == k`` and
    ``Multipass(k)`` all mean the k-th pass, the first being the plain one."""
    from workbench.analysis.fixed_point import pass_dynamics

    idx, training = _idx(), fbt_model.training
    fbt_model.eval()  # no jitter: every schedule below computes the same passes
    try:
        with torch.no_grad():
            _, cache = run_with_cache(fbt_model, idx, wb.schedules.Multipass(3))
            dynamics = pass_dynamics(fbt_model, idx, passes=3).set_index("pass")
            exact = wb.schedules.Sequential().run(fbt_model, idx).memory.double()
            for k in (1, 2, 3):
                memory = wb.schedules.Multipass(k).run(fbt_model, idx).memory
                torch.testing.assert_close(cache.pass_(k)["hook_memory"], memory, rtol=0, atol=1e-12)
                distance = float(torch.linalg.norm(memory.double() - exact) / torch.linalg.norm(exact))
                assert dynamics.loc[k, "fixed_point_distance"] == pytest.approx(distance, rel=1e-6), k
    finally:
        fbt_model.train(training)
    assert dynamics.loc[1, "fixed_point_distance"] > dynamics.loc[3, "fixed_point_distance"]
