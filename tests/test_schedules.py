"""The exact invariants that tie mechanisms and schedules together (float64, perturbed models)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config, variant_config

S = wb.schedules
ATOL = 1e-11


def _idx(cfg, batch=2, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, length), generator=g)


def test_single_equals_sequential_for_baseline():
    cfg = small_config()
    model, idx = perturbed_model(cfg), _idx(cfg)
    torch.testing.assert_close(S.sequential(model, idx).logits, S.single(model, idx).logits, rtol=0, atol=ATOL)


def test_multipass_T_equals_sequential(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), _idx(cfg)
    ref = S.sequential(model, idx)
    out = S.multipass(model, idx, passes=idx.size(1))
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
    torch.testing.assert_close(out.memory, ref.memory, rtol=0, atol=ATOL)


def test_multipass_is_exact_on_the_first_k_positions_only():
    """Jacobi on a causal system: pass k is exact for positions < k, and not yet beyond."""
    cfg = variant_config("fbt")
    model, idx = perturbed_model(cfg), _idx(cfg)
    ref = S.sequential(model, idx).logits
    for k in (1, 3, 5):
        out = S.multipass(model, idx, passes=k).logits
        torch.testing.assert_close(out[:, :k], ref[:, :k], rtol=0, atol=ATOL)
        assert (out[:, k:] - ref[:, k:]).abs().max() > 1e-6


def test_interleaved_T_equals_sequential(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), _idx(cfg)
    ref = S.sequential(model, idx)
    out = S.interleaved(model, idx, subsets=idx.size(1))
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
    torch.testing.assert_close(out.memory, ref.memory, rtol=0, atol=ATOL)
    assert len(out.pass_logits) == idx.size(1) + 1


def test_interleaved_without_write_back_would_not_be_exact():
    """Guard the test above: fewer subsets than positions is only an approximation."""
    cfg = variant_config("lrt_shared_top")
    model, idx = perturbed_model(cfg), _idx(cfg)
    ref = S.sequential(model, idx).logits
    assert (S.interleaved(model, idx, subsets=2).logits - ref).abs().max() > 1e-6


def test_blockwise_limits(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), _idx(cfg)
    torch.testing.assert_close(S.blockwise(model, idx, block=1).logits, S.sequential(model, idx).logits,
                               rtol=0, atol=ATOL)
    torch.testing.assert_close(S.blockwise(model, idx, block=idx.size(1)).logits, S.single(model, idx).logits,
                               rtol=0, atol=ATOL)


def test_plain_prefix_reads_no_memory(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), _idx(cfg)
    out = S.sequential(model, idx, plain_prefix=4)
    torch.testing.assert_close(out.logits[:, :4], S.single(model, idx).logits[:, :4], rtol=0, atol=ATOL)
    prefix = torch.tensor([2, 6])
    mp = S.multipass(model, idx, passes=idx.size(1), plain_prefix=prefix)
    for b in range(2):
        ref = S.sequential(model, idx[b:b + 1], plain_prefix=int(prefix[b])).logits
        torch.testing.assert_close(mp.logits[b:b + 1], ref, rtol=0, atol=ATOL)


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
    idx = _idx(cfg)
    ref = base(idx)
    for sched in ("sequential", "multipass", "interleaved"):
        torch.testing.assert_close(S.run(lrt, idx, sched, passes=3, subsets=3).logits, ref, rtol=0, atol=ATOL)


def test_lrt_shared_overhead_at_d20_shape():
    d20 = dict(vocab_size=65536, n_layer=20, n_head=10, n_embd=1280, seq_len=2048)
    base = wb.build_model(wb.ModelConfig(**d20), device="meta").num_params()
    lrt = wb.build_model(wb.ModelConfig(**d20, mechanism="lrt"), device="meta")
    extra = lrt.num_params() - base
    pair = 2 * 1280 * 1280
    gates_and_scalars = 20 * (32 * 2 * 10) + 2 * 20
    assert extra == pair + gates_and_scalars
    assert 3.2e6 < extra < 3.4e6
    assert 0.005 < extra / base < 0.007  # about 0.6 % of the lean backbone
    assert 0.002 < extra / wb.model.PAPER_D20_BASELINE_PARAMS < 0.003  # about 0.25 % of the paper's


def test_lrt_per_layer_has_one_pair_per_block():
    cfg = small_config("lrt", lrt_projection="per_layer")
    shared = wb.build_model(cfg.replace(lrt_projection="shared")).num_params()
    assert wb.build_model(cfg).num_params() - shared == (cfg.n_layer - 1) * 2 * cfg.n_embd * cfg.kv_dim


def test_fbt_adds_exactly_two_fusion_matrices():
    cfg = small_config("fbt")
    tied_base = wb.build_model(cfg.replace(mechanism="none")).num_params()
    assert wb.build_model(cfg).num_params() - tied_base == 2 * cfg.n_embd * cfg.n_embd


def test_generation_reproduces_sequential_logits(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), _idx(cfg)
    tokens, logits = wb.generate(model, idx[:, :4], max_new_tokens=6, regime="soft", return_logits=True)
    ref = S.sequential(model, tokens, plain_prefix=4).logits
    torch.testing.assert_close(logits, ref[:, 3:-1], rtol=0, atol=ATOL)
    tokens, logits = wb.generate(model, idx[:, :4], max_new_tokens=6, regime="standard", return_logits=True)
    torch.testing.assert_close(logits, model(tokens)[:, 3:-1], rtol=0, atol=ATOL)


def test_fused_prefill_with_enough_passes_is_sequential(variant):
    cfg = variant_config(variant)
    model, idx = perturbed_model(cfg), _idx(cfg)
    P = 5
    tokens, logits = wb.generate(model, idx[:, :P], max_new_tokens=4, regime="fused", prefill_passes=P - 1,
                                 return_logits=True)
    ref = S.sequential(model, tokens).logits
    torch.testing.assert_close(logits, ref[:, P - 1:-1], rtol=0, atol=ATOL)


def test_generation_stops_at_eos_and_pads():
    cfg = small_config()
    model = perturbed_model(cfg)
    prompt = _idx(cfg, batch=3, length=3)
    free = wb.generate(model, prompt, 8)
    eos = int(free[0, 4])
    out = wb.generate(model, prompt, 8, eos=eos)
    row = out[0, 3:]
    first = int((row == eos).nonzero()[0])
    assert torch.all(row[first:] == eos)
    sampled = wb.generate(model, prompt, 5, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    again = wb.generate(model, prompt, 5, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, again) and sampled.shape == (3, 8)


@pytest.mark.parametrize("kwargs,field", [
    (dict(regime="hard"), "regime"), (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(prefill_passes=0), "prefill_passes"), (dict(temperature=-1.0), "temperature")])
def test_generate_validates(kwargs, field):
    model = wb.build_model(small_config())
    args = dict(max_new_tokens=2) | kwargs
    with pytest.raises(ValueError, match=field):
        wb.generate(model, torch.zeros(1, 2, dtype=torch.long), **args)


@pytest.mark.parametrize("call,field", [(lambda m, i: S.interleaved(m, i, subsets=0), "subsets"),
                                        (lambda m, i: S.interleaved(m, i, subsets=99), "subsets"),
                                        (lambda m, i: S.multipass(m, i, passes=0), "passes"),
                                        (lambda m, i: S.blockwise(m, i, block=0), "block"),
                                        (lambda m, i: S.run(m, i, "jacobi"), "schedule")])
def test_schedule_parameters_are_validated(call, field):
    model = wb.build_model(small_config())
    with pytest.raises(ValueError, match=field):
        call(model, torch.zeros(1, 8, dtype=torch.long))


@pytest.mark.parametrize("schedule", ["sequential", "multipass", "interleaved", "blockwise"])
def test_every_schedule_trains(schedule):
    """Gradients reach the mechanism through every schedule (no in-place autograd errors)."""
    for mech in ("lrt", "fbt"):
        cfg = small_config(mech, lrt_gamma_init=0.1)
        model = wb.build_model(cfg).train()
        idx = _idx(cfg)
        out = S.run(model, idx, schedule, passes=3, subsets=3, block=3)
        out.loss(torch.roll(idx, -1, 1)).backward()
        grads = [p.grad for p in model.mechanism.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert any(g.abs().sum() > 0 for g in grads)


def test_objective_weights():
    cfg = small_config("fbt")
    model, idx = perturbed_model(cfg), _idx(cfg)
    targets = torch.roll(idx, -1, 1)
    mp = S.multipass(model, idx, passes=3, aux_weight=0.5)
    l1, l2, l3 = mp.pass_losses(targets)
    torch.testing.assert_close(mp.loss(targets), l1 + 0.5 * (l2 + l3) / 2)
    il = S.interleaved(model, idx, subsets=2)
    torch.testing.assert_close(il.loss(targets), sum(il.pass_losses(targets)) / 3)


def test_schedule_flops_count_passes():
    model = wb.build_model(small_config())
    one = S.schedule_flops(model, "single", 4, 16)
    assert S.schedule_flops(model, "multipass", 4, 16, passes=3) == 3 * one
    assert S.schedule_flops(model, "interleaved", 4, 16, subsets=4) == 2 * one
    assert S.schedule_flops(model, "sequential", 4, 16) == one


def test_schedules_are_values_with_one_flop_account_and_a_json_round_trip():
    S = wb.schedules
    model = wb.build_model(wb.ModelConfig(vocab_size=13, n_layer=2, n_head=2, n_embd=16, seq_len=8, mechanism="lrt"),
                        device="meta")
    values = [S.Single(), S.Sequential(), S.Multipass(3), S.Interleaved(4), S.Blockwise(2),
              S.PassMix.of({1: 0.75, 2: 0.22, 3: 0.03})]
    for value in values:
        assert S.parse(value.to_dict()) == value
        assert value.flops(model, 4, 8) == value.pass_equivalents() * model.flops_per_token(8) * 32
    assert [v.label for v in values] == ["single", "sequential", "multipass(K=3)", "interleaved(S=4)", "blockwise(B=2)",
                                         "pass mix 75/22/3"]
    assert [v.max_passes for v in values] == [1, 1, 3, 5, 1, 3]
    mix = values[-1]
    assert mix.pass_equivalents() == pytest.approx(1.28) and mix.deepest == S.Multipass(3)
    # a pass mix runs (evaluates) at the depth it is given, the deepest by default, and draws each batch's depth
    assert mix.passes == 3 and S.parse("multipass", passes=2, pass_mix={1: 0.5, 3: 0.5}).passes == 2
    assert mix.draw(np.random.default_rng(0)) in (S.Multipass(1), S.Multipass(2), S.Multipass(3))
    assert S.parse("multipass") == S.Multipass() and S.KNOBS == {"multipass": "passes", "interleaved": "subsets",
                                                                  "blockwise": "block", "fixed_point": "passes"}
    assert S.parse("multipass", pass_mix={1: 0.75, 2: 0.22, 3: 0.03}) == mix
    # the string form keeps working and means the same value
    assert S.parse("interleaved", subsets=4) == values[3] and S.schedule_flops(model, "multipass", 4, 8, passes=3) \
        == values[2].flops(model, 4, 8)
    with pytest.raises(ValueError, match="schedule='nope' is invalid"):
        S.parse("nope")
    with pytest.raises(ValueError, match="unknown keys"):
        S.parse({"schedule": "interleaved", "subset": 2})
    with pytest.raises(ValueError, match="passes"):
        S.Multipass(0)


def test_a_value_runs_exactly_as_its_name():
    S = wb.schedules
    torch.manual_seed(0)
    model = wb.build_model(wb.ModelConfig(vocab_size=13, n_layer=2, n_head=2, n_embd=16, seq_len=8, mechanism="lrt"))
    model = model.double().eval()
    idx = torch.randint(0, 13, (2, 8))
    for value, (name, kw) in [(S.Interleaved(2), ("interleaved", {"subsets": 2})),
                              (S.Multipass(3), ("multipass", {"passes": 3})),
                              (S.Blockwise(4), ("blockwise", {"block": 4}))]:
        assert torch.equal(S.run(model, idx, value).logits, S.run(model, idx, name, **kw).logits)
    with pytest.raises(ValueError, match="block"):  # run() no longer clamps what blockwise() refuses
        S.run(model, idx, "blockwise", block=9)


def test_evaluation_takes_a_schedule_value_or_its_string_form():
    """per_example_metrics parses once at its boundary: a value and its name-plus-keywords agree exactly."""
    from workbench.evaluation import per_example_metrics

    task = wb.tasks.get("running_sum")
    batch = task.sample(6, seed=0)
    model = perturbed_model(small_config("lrt", vocab_size=task.vocab_size, seq_len=task.seq_len))
    by_value = per_example_metrics(model, batch, wb.schedules.Multipass(2), batch_size=4, plain_prefix=2)
    by_name = per_example_metrics(model, batch, "multipass", batch_size=4, plain_prefix=2, passes=2)
    pd.testing.assert_frame_equal(by_value, by_name)
    exact = per_example_metrics(model, batch, schedule="sequential", plain_prefix=2)
    pd.testing.assert_frame_equal(exact, per_example_metrics(model, batch, wb.schedules.Sequential(), plain_prefix=2))
