"""The LRT training treatment: the reference code's own AdamW groups for gamma / alpha and its uniform
K/V-projection init, as options whose defaults keep old configs and checkpoints meaning what they meant."""

from __future__ import annotations

import math

import pytest
import torch

import workbench as wb
from workbench.optim import build_optimizers, lr_factor, set_lr

MODEL = dict(n_layer=2, n_head=2, n_embd=32, mechanism="lrt", lrt_gamma_init=0.1)


def tiny(**kw) -> wb.TrainConfig:
    return wb.TrainConfig(task="running_sum", model=dict(MODEL), steps=10, progress=False, **kw)


def groups_of(opt: torch.optim.Optimizer) -> dict[int, float]:
    """Parameter id -> the peak rate of the group holding it."""
    return {id(p): g["base_lr"] for g in opt.param_groups for p in g["params"]}


def test_scales_get_their_own_adamw_groups_only_when_asked():
    cfg = tiny(lrt_gamma_lr=0.5, lrt_alpha_lr=0.005)
    model = wb.build_model(cfg.model_config(vocab_size=20, seq_len=16))
    own = groups_of(build_optimizers(model, cfg)["adamw"])
    assert own[id(model.mechanism.gamma)] == 0.5 and own[id(model.mechanism.alpha)] == 0.005
    assert own[id(model.wte.weight)] == cfg.lr
    # every parameter is in exactly one group of one optimiser
    opts = build_optimizers(model, cfg)
    held = [id(p) for o in opts.values() for g in o.param_groups for p in g["params"]]
    assert sorted(held) == sorted(id(p) for p in model.parameters())
    shared = groups_of(build_optimizers(model, tiny())["adamw"])  # the default: one shared group at lr
    assert shared[id(model.mechanism.gamma)] == shared[id(model.mechanism.alpha)] == tiny().lr
    only_gamma = groups_of(build_optimizers(model, tiny(lrt_gamma_lr=0.5))["adamw"])
    assert only_gamma[id(model.mechanism.gamma)] == 0.5 and only_gamma[id(model.mechanism.alpha)] == tiny().lr


def test_the_schedule_scales_the_own_groups_too():
    cfg = tiny(lrt_gamma_lr=0.5, lrt_alpha_lr=0.005)
    model = wb.build_model(cfg.model_config(vocab_size=20, seq_len=16))
    opts = build_optimizers(model, cfg)
    factor = lr_factor(cfg, 9)
    set_lr(opts, factor)
    rates = {id(p): g["lr"] for g in opts["adamw"].param_groups for p in g["params"]}
    assert rates[id(model.mechanism.gamma)] == pytest.approx(0.5 * factor) and factor < 1


def test_gamma_moves_faster_under_its_own_rate():
    """A few steps of the reference treatment move gamma by ~lr per step (Adam's normalised step)."""
    moved = {}
    for name, kw in (("shared", {}), ("own", {"lrt_gamma_lr": 0.5, "lrt_alpha_lr": 0.005})):
        result = wb.train(tiny(lr_schedule="constant", schedule="interleaved", **kw).replace(steps=3))
        moved[name] = (result.model.mechanism.gamma.detach() - 0.1).abs().max().item()
    assert moved["shared"] < 0.02 < moved["own"]


@pytest.mark.parametrize("field", ["lrt_gamma_lr", "lrt_alpha_lr"])
def test_scale_rates_are_validated(field):
    with pytest.raises(ValueError, match=field):
        tiny(**{field: 0.0})
    with pytest.raises(ValueError, match=field):
        wb.TrainConfig(task="running_sum", model=dict(n_layer=1, n_embd=32, n_head=2), **{field: 0.5})
    with pytest.raises(ValueError, match=field):
        wb.TrainConfig(task="running_sum", model={**MODEL, "lrt_inject": ("kv",)}, **{field: 0.5})


def test_uniform_kv_init_is_the_reference_scale_and_zero_stays_the_default():
    cfg = wb.ModelConfig(vocab_size=20, seq_len=16, **MODEL)
    assert cfg.lrt_kv_init == "zero"
    zero = wb.build_model(cfg).mechanism
    assert all(lin.weight.abs().max() == 0 for lin in [*zero.rec_k, *zero.rec_v, *zero.gates])
    uniform = wb.build_model(cfg.replace(lrt_kv_init="uniform")).mechanism
    bound = math.sqrt(3.0 / cfg.n_embd)
    for lin in [*uniform.rec_k, *uniform.rec_v]:
        w = lin.weight
        assert w.abs().max() <= bound and w.abs().max() > 0.5 * bound and abs(w.std().item() - bound / 3 ** 0.5) < 0.03
    assert all(lin.weight.abs().max() == 0 for lin in uniform.gates)  # gates still start at 2*sigmoid(0) = 1
    with pytest.raises(ValueError, match="lrt_kv_init"):
        cfg.replace(lrt_kv_init="normal")


def test_old_configs_keep_their_meaning():
    """A config stored before these fields existed loads with today's behaviour."""
    stored = tiny().to_dict()
    for key in ("lrt_gamma_lr", "lrt_alpha_lr"):
        stored.pop(key)
    assert wb.TrainConfig.from_dict(stored) == tiny()
    model = wb.ModelConfig(vocab_size=20, seq_len=16, **MODEL).to_dict()
    model.pop("lrt_kv_init")
    assert wb.ModelConfig.from_dict(model).lrt_kv_init == "zero"
