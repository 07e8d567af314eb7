"""Optimisers, the learning-rate schedule, and optimiser state as safetensors + JSON.

Muon orthogonalises the updates of 2-D hidden matrices; embeddings, the readout and 1-D scalars stay on AdamW, as in
nanochat. LRT's injection scales may get their own AdamW groups, as the reference code trains them: gamma at 0.5 moves
~170x faster than in the shared group at 3e-3, so the memory's residual path can open within a short run. Every group's
rate is ``base_lr * lr_factor(step)``, so a resumed run recomputes it from the step alone."""

from __future__ import annotations

import math
from typing import Any

import torch

from .model import GPT
from .train_config import TrainConfig

ADAMW_BETAS = (0.9, 0.95)
MUON_MOMENTUM = 0.95


def build_optimizers(model: GPT, cfg: TrainConfig) -> dict[str, torch.optim.Optimizer]:
    """The run's optimisers by name; each group remembers its peak rate as ``base_lr``."""
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
    """One AdamW group per LRT injection scale given its own rate."""
    mechanism = getattr(model, "mechanism", None)
    out = []
    for name, lr in (("gamma", cfg.lrt_gamma_lr), ("alpha", cfg.lrt_alpha_lr)):
        param = getattr(mechanism, name, None)
        if lr is None:
            continue
        if not isinstance(param, torch.nn.Parameter):
            raise ValueError(f"TrainConfig.lrt_{name}_lr={lr!r} is invalid for this model: it has no LRT {name} "
                             f"(needs mechanism='lrt' with residual injection)")
        out.append({"params": [param], "lr": lr, "base_lr": lr, "weight_decay": 0.0})
    return out


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """Multiplier of the peak learning rate at 0-based ``step``: linear warmup, then the schedule."""
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
    """Optimiser state split into tensors (for safetensors) and everything else (for JSON).

    Hyper-parameters are not stored: they come from the TrainConfig, which a resume must match. Tensor
    ``NAME.PARAM.KEY`` is state entry KEY of parameter index PARAM in optimiser NAME."""
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
    """Inverse of ``optimizer_state`` onto freshly built optimisers of the same config."""
    if sorted(meta) != sorted(optimizers):
        raise ValueError(f"optimizer state holds {sorted(meta)}, this run builds {sorted(optimizers)}")
    for name, opt in optimizers.items():
        state = {int(pid): {**rec["values"], **{k: tensors[f"{name}.{pid}.{k}"] for k in rec["tensors"]}}
                 for pid, rec in meta[name].items()}
        opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
