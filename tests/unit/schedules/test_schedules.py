"""Schedules as values: validation, objectives, FLOP accounts, parameter overheads, training through each (the
exact invariants are in tests/invariants/test_schedule_exactness.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config, token_batch

S = wb.schedules
ATOL = 1e-11




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


def test_generation_stops_at_eos_and_pads():
    cfg = small_config()
    model = perturbed_model(cfg)
    prompt = token_batch(cfg, batch=3, length=3)
    free = wb.generate(model, prompt, 8)
    eos = int(free[0, 4])
    out = wb.generate(model, prompt, 8, eos=eos)
    row = out[0, 3:]
    first = int((row == eos).nonzero()[0])
    assert torch.all(row[first:] == eos)
    sampled = wb.generate(model, prompt, 5, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    again = wb.generate(model, prompt, 5, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, again) and sampled.shape == (3, 8)
    rows = [torch.Generator().manual_seed(10 + i) for i in range(3)]
    per_row = wb.generate(model, prompt, 5, temperature=1.0, generator=rows)
    alone = wb.generate(model, prompt[1:2], 5, temperature=1.0, generator=[torch.Generator().manual_seed(11)])
    assert torch.equal(per_row[1:2], alone)  # a row with its own generator samples the same in any batch


@pytest.mark.parametrize("kwargs,field", [
    (dict(regime="hard"), "regime"), (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(prefill_passes=0), "prefill_passes"), (dict(temperature=-1.0), "temperature"),
    (dict(temperature=1.0, generator=[torch.Generator()] * 2), "generator")])
def test_generate_validates(kwargs, field):
    model = wb.build_model(small_config())
    args = dict(max_new_tokens=2) | kwargs
    with pytest.raises(ValueError, match=field):
        wb.generate(model, torch.zeros(1, 2, dtype=torch.long), **args)


def test_generate_says_what_model_must_be():
    """None, a TrainResult (pointed to its .model) and a model with no weights (meta device: pointed to to_empty or
    cpu) are refused by name; before, they failed on .config or on a device mismatch deep in the first forward."""
    model, prompt = wb.build_model(small_config()), torch.zeros(1, 2, dtype=torch.long)
    result = wb.TrainResult(pd.DataFrame(), model, None, {}, wb.TrainConfig())
    with pytest.raises(ValueError, match="^model=NoneType"):
        wb.generate(None, prompt, 2)
    with pytest.raises(ValueError, match=r"^model=TrainResult.*\.model"):
        wb.generate(result, prompt, 2)
    meta = wb.build_model(small_config(), device="meta")
    with pytest.raises(ValueError, match="^model=GPT.*meta device.*to_empty.*cpu"):
        wb.generate(meta, prompt, 2)
    assert wb.generate(meta, prompt.to("meta"), 2).shape == (1, 4)  # a meta prompt: the shape-only dry run


@pytest.mark.parametrize("call,field", [(lambda m, i: S.Interleaved(0).run(m, i), "subsets"),
                                        (lambda m, i: S.Interleaved(99).run(m, i), "subsets"),
                                        (lambda m, i: S.Multipass(0).run(m, i), "passes"),
                                        (lambda m, i: S.Blockwise(0).run(m, i), "block"),
                                        (lambda m, i: S.parse("jacobi").run(m, i), "schedule")])
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
        idx = token_batch(cfg)
        out = S.parse({"schedule": schedule, S.KNOBS[schedule]: 3} if schedule in S.KNOBS else schedule).run(model, idx)
        out.loss(torch.roll(idx, -1, 1)).backward()
        grads = [p.grad for p in model.mechanism.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert any(g.abs().sum() > 0 for g in grads)


def test_objective_weights():
    cfg = small_config("fbt")
    model, idx = perturbed_model(cfg), token_batch(cfg)
    targets = torch.roll(idx, -1, 1)
    mp = S.Multipass(3, aux_weight=0.5).run(model, idx)
    l1, l2, l3 = mp.pass_losses(targets)
    torch.testing.assert_close(mp.loss(targets), l1 + 0.5 * (l2 + l3) / 2)
    il = S.Interleaved(2).run(model, idx)
    torch.testing.assert_close(il.loss(targets), sum(il.pass_losses(targets)) / 3)


def test_schedule_flops_count_passes():
    model = wb.build_model(small_config())
    one = S.parse("single").flops(model, 4, 16)
    assert S.Multipass(3).flops(model, 4, 16) == 3 * one
    assert S.Interleaved(4).flops(model, 4, 16) == 2 * one
    assert S.parse("sequential").flops(model, 4, 16) == one


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
    assert mix.passes == 3 and S.parse({"schedule": "multipass", "passes": 2, "pass_mix": {1: 0.5, 3: 0.5}}).passes == 2
    assert mix.draw(np.random.default_rng(0)) in (S.Multipass(1), S.Multipass(2), S.Multipass(3))
    assert S.parse("multipass") == S.Multipass() and S.KNOBS == {"multipass": "passes", "interleaved": "subsets",
                                                                  "blockwise": "block", "fixed_point": "passes"}
    assert S.parse({"schedule": "multipass", "pass_mix": {"1": 0.75, "2": 0.22, "3": 0.03}}) == mix  # JSON's keys
    # a name is that schedule at its defaults
    assert S.parse("interleaved") == S.Interleaved() and S.parse("fixed_point") == S.FixedPoint()
    with pytest.raises(ValueError, match="schedule='nope'"):
        S.parse("nope")
    with pytest.raises(ValueError, match=r"\['subset'\]"):
        S.parse({"schedule": "interleaved", "subset": 2})
    with pytest.raises(ValueError, match="passes"):
        S.Multipass(0)


def test_a_value_runs_exactly_as_its_name():
    S = wb.schedules
    torch.manual_seed(0)
    model = wb.build_model(wb.ModelConfig(vocab_size=13, n_layer=2, n_head=2, n_embd=16, seq_len=8, mechanism="lrt"))
    model = model.double().eval()
    idx = torch.randint(0, 13, (2, 8))
    for value in (S.Interleaved(2), S.Multipass(3), S.Blockwise(4)):
        assert torch.equal(S.parse(value).run(model, idx).logits, S.parse(value.to_dict()).run(model, idx).logits)
    with pytest.raises(ValueError, match="block"):  # run() no longer clamps what blockwise() refuses
        S.Blockwise(9).run(model, idx)


def test_evaluation_takes_a_schedule_value_or_its_string_form():
    """per_example_metrics parses once at its boundary: a value and its name-plus-keywords agree exactly."""
    from workbench.evaluation import per_example_metrics

    task = wb.tasks.get("running_sum")
    batch = task.sample(6, seed=0)
    model = perturbed_model(small_config("lrt", vocab_size=task.vocab_size, seq_len=task.seq_len))
    by_value = per_example_metrics(model, batch, wb.schedules.Multipass(2), batch_size=4, plain_prefix=2)
    by_name = per_example_metrics(model, batch, "multipass", batch_size=4, plain_prefix=2)
    pd.testing.assert_frame_equal(by_value, by_name)
    exact = per_example_metrics(model, batch, schedule="sequential", plain_prefix=2)
    pd.testing.assert_frame_equal(exact, per_example_metrics(model, batch, wb.schedules.Sequential(), plain_prefix=2))


# ------------------------------------------------------------------------ one value for every way to compute
def test_each_value_says_which_positions_read_memory():
    B, T = 2, 8
    t = torch.arange(T)
    assert not S.Single().reads(B, T).any()
    assert torch.equal(S.Sequential().reads(B, T)[0], t >= 1)
    assert torch.equal(S.Sequential().reads(B, T, plain_prefix=3)[0], t >= 3)
    assert torch.equal(S.Blockwise(3).reads(B, T)[0], (t >= 1) & (t % 3 == 0))
    assert torch.equal(S.regime("soft", prompt_len=5).reads(B, T)[0], t >= 5)
    assert torch.equal(S.regime("fused", prompt_len=5).reads(B, T)[0], t >= 1)
    assert not S.regime("standard", prompt_len=5).reads(B, T).any()
    assert S.regime("standard") == S.Single() and S.regime("fused", 2) == S.Prefilled(S.Multipass(3))


def test_a_value_knows_its_batches_depth_and_final_passes():
    rng = np.random.default_rng(0)
    mix = S.PassMix.of({1: 0.5, 3: 0.5})
    assert {mix.draw(rng) for _ in range(40)} == {S.Multipass(1), S.Multipass(3)}
    assert S.Interleaved(3).draw(rng) == S.Interleaved(3) and S.Single().draw(rng) == S.Single()
    assert [S.Multipass(4).jacobi_passes, S.Interleaved(4).jacobi_passes, mix.jacobi_passes] == [4, 1, 3]
    assert S.Multipass(4).final_passes(4) == [4] and mix.final_passes(1) == [1]
    assert S.Interleaved(3).final_passes() == [2, 3, 4]
    assert S.FixedPoint(5).final_passes() == [2] and S.Sequential().final_passes() == [1]


def test_prefilled_round_trips_and_refuses_what_it_cannot_compute():
    value = S.Prefilled(S.Multipass(3), S.Sequential(), prompt_len=4)
    assert S.parse(value.to_dict()) == value
    assert S.parse(S.regime("soft").to_dict()) == S.regime("soft")
    assert value.label == "multipass(K=3) prefill, then sequential"
    model = perturbed_model(small_config("fbt"))
    idx = token_batch(model.config)
    with pytest.raises(ValueError, match="then="):
        S.Prefilled(S.Single(), S.Multipass(2))
    with pytest.raises(ValueError, match="prefill_with="):
        S.Prefilled(S.Interleaved(2))
    with pytest.raises(ValueError, match="prefill_with="):
        S.Prefilled(S.Prefilled())
    with pytest.raises(ValueError, match="prompt_len"):
        S.Prefilled().run(model, idx)
    with pytest.raises(ValueError, match="prompt_len"):
        S.Prefilled(prompt_len=idx.size(1) + 1).run(model, idx)
    with pytest.raises(ValueError, match="regime="):
        wb.generate(model, idx, 2, regime=S.Interleaved(2))
    with pytest.raises(ValueError, match="regime="):
        S.regime("hard")


@pytest.mark.parametrize("spec,message", [
    ({"schedule": "sequential", "passes": 3}, r"\['passes'\]"),
    ({"schedule": "interleaved", "block": 3}, r"\['block'\]"),
    ({"schedule": "prefilled", "passes": 3}, r"\['passes'\]"),
])
def test_the_json_form_refuses_another_schedules_knob(spec, message):
    """A knob the schedule does not have would be silently dropped: the one parser refuses it."""
    with pytest.raises(ValueError, match=message):
        S.parse(spec)
    assert S.parse({"schedule": "interleaved", "subsets": 3}) == S.Interleaved(3)


def test_train_config_stores_the_schedule_value_itself():
    for value in (S.Multipass(3, aux_weight=0.5), S.Interleaved(4), S.PassMix.of({1: 0.75, 2: 0.25}),
                  S.FixedPoint(8, tol=0.1), S.Blockwise(4), S.Single()):
        cfg = wb.TrainConfig(schedule=value)
        assert cfg.schedule == value
        assert wb.TrainConfig.from_dict(cfg.to_dict()) == cfg  # the JSON round trip
    assert wb.TrainConfig(schedule=S.Interleaved(4)) == wb.TrainConfig(schedule={"schedule": "interleaved",
                                                                                  "subsets": 4})
    with pytest.raises(ValueError, match="schedule"):
        wb.TrainConfig(schedule=S.regime("soft"))
