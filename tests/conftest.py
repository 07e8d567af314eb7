"""Shared test setup: few threads (the machine is shared), float64 models with every weight perturbed."""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")  # headless figures in every test, before matplotlib loads

import pytest
import torch

import workbench as wb

torch.set_num_threads(int(os.environ.get("WORKBENCH_TEST_THREADS", "1")))


def perturbed_model(config: wb.ModelConfig, seed: int = 0, scale: float = 0.3) -> wb.GPT:
    """A float64 model whose every parameter is moved off its init (zero inits would hide bugs)."""
    torch.manual_seed(seed)
    model = wb.build_model(config, dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model.eval()


def small_config(mechanism: str = "none", **overrides) -> wb.ModelConfig:
    base = dict(vocab_size=23, n_layer=3, n_head=4, n_embd=32, seq_len=16, mechanism=mechanism,
                tie_embeddings=mechanism == "fbt")
    base.update(overrides)
    return wb.ModelConfig(**base)


MECHANISM_VARIANTS = {
    "none": {},
    "lrt_shared_top": dict(lrt_source_layer=-1),
    "lrt_per_layer_mid": dict(lrt_source_layer=1, lrt_projection="per_layer"),
    "lrt_kv_only": dict(lrt_inject=("kv",), lrt_source_layer=0),
    "lrt_residual_only_gqa": dict(lrt_inject=("residual",), n_kv_head=2),
    "fbt": {},
    # the block's ablations (no RoPE, no QK-norm) keep every invariant too
    "none_ablated": dict(rope=False, qk_norm=False),
    "lrt_nope": dict(rope=False, lrt_source_layer=1),
    "fbt_no_qk_norm": dict(qk_norm=False),
}


def variant_config(name: str, **overrides) -> wb.ModelConfig:
    mechanism = name.split("_")[0]
    return small_config(mechanism, **{**MECHANISM_VARIANTS[name], **overrides})


@pytest.fixture(params=sorted(MECHANISM_VARIANTS))
def variant(request) -> str:
    return request.param
