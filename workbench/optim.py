"""Optimisers (Muon for hidden matrices, AdamW for the rest, as nanochat), the LR schedule and optimiser state.
LRT's scales may get their own, much larger rates, as in the reference code (``TrainConfig.lrt_gamma_lr``)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .model import GPT
from .train_config import TrainConfig

ADAMW_BETAS = (0.9, 0.95)
MUON_MOMENTUM = 0.95


def build_optimizers(model: GPT, cfg: TrainConfig) -> dict[str, torch.optim.Optimizer]:
    """Each group keeps its peak rate as ``base_lr``."""
    groups = model.parameter_groups()
    own = _lrt_scale_groups(model, cfg)
    claimed = {id(p) for g in own for p in g["params"]}
    rest = [p for p in groups["embedding"] + groups["readout"] + groups["scalars"] if id(p) not in claimed]
    adam_groups = [{"params": rest, "lr": cfg.lr, "base_lr": cfg.lr, "weight_decay": 0.0}, *own]
    optimizers: dict[str, torch.optim.Optimizer] = {}
    if cfg.optimizer == "muon":
        optimizers["muon"] = torch.optim.Muon(groups["matrices"], lr=cfg.matrix_lr, momentum=MUON_MOMENTUM,
                                              weight_decay=cfg.weight_decay)
        optimizers["muon"].param_groups[0]["base_lr"] = cfg.matrix_lr
    else:
        adam_groups.append({"params": groups["matrices"], "lr": cfg.lr, "base_lr": cfg.lr,
                            "weight_decay": cfg.weight_decay})
    optimizers["adamw"] = torch.optim.AdamW(adam_groups, betas=ADAMW_BETAS, eps=1e-8)
    return optimizers


def _lrt_scale_groups(model: GPT, cfg: TrainConfig) -> list[dict[str, Any]]:
    """An AdamW group per LRT scale given its own rate."""
    mechanism = getattr(model, "mechanism", None)
    out = []
    for name, lr in (("gamma", cfg.lrt_gamma_lr), ("alpha", cfg.lrt_alpha_lr)):
        param = getattr(mechanism, name, None)
        if lr is None:
            continue
        if not isinstance(param, torch.nn.Parameter):
            raise ValueError(f"TrainConfig.lrt_{name}_lr={lr!r} is invalid: needs mechanism='lrt' with residual "
                             f"injection")
        out.append({"params": [param], "lr": lr, "base_lr": lr, "weight_decay": 0.0})
    return out


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """Multiplier of the peak rate at 0-based ``step``: linear warmup, then the schedule."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return 1.0
    if cfg.lr_schedule == "cosine":
        start = cfg.warmup_steps
    else:  # wsd: flat, then a linear decay over the last decay_frac of the run
        start = max(cfg.warmup_steps, cfg.steps - round(cfg.decay_frac * cfg.steps))
        if step < start:
            return 1.0
    progress = (step - start) / max(1, cfg.steps - start)
    if cfg.lr_schedule == "cosine":
        return cfg.min_lr_frac + (1.0 - cfg.min_lr_frac) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - (1.0 - cfg.min_lr_frac) * progress


def set_lr(optimizers: dict[str, torch.optim.Optimizer], factor: float) -> None:
    for opt in optimizers.values():
        for group in opt.param_groups:
            group["lr"] = group["base_lr"] * factor


def optimizer_state(optimizers: dict[str, torch.optim.Optimizer]
                    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors ``NAME.PARAM.KEY`` and the rest (JSON); hyper-parameters come from the TrainConfig."""
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, Any] = {}
    for name, opt in optimizers.items():
        meta[name] = {}
        for pid, entry in opt.state_dict()["state"].items():
            record: dict[str, Any] = {"tensors": [], "values": {}}
            for key, value in entry.items():
                if torch.is_tensor(value):
                    tensors[f"{name}.{pid}.{key}"] = value
                    record["tensors"].append(key)
                else:
                    record["values"][key] = value
            meta[name][str(pid)] = record
    return tensors, meta


def load_optimizer_state(optimizers: dict[str, torch.optim.Optimizer], tensors: dict[str, torch.Tensor],
                         meta: dict[str, Any]) -> None:
    """Inverse of ``optimizer_state`` (fresh optimisers, same config)."""
    if sorted(meta) != sorted(optimizers):
        raise ValueError(f"optimizer state holds {sorted(meta)}, this run builds {sorted(optimizers)}")
    for name, opt in optimizers.items():
        state = {int(pid): {**rec["values"], **{k: tensors[f"{name}.{pid}.{k}"] for k in rec["tensors"]}}
                 for pid, rec in meta[name].items()}
        opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
