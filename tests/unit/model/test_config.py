"""ModelConfig: every bad value raises a ValueError naming its field; JSON round trip is exact."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench as wb

VALID = dict(vocab_size=64, n_layer=4, n_head=4, n_embd=128, seq_len=256)

# field -> strategy of values that are invalid for it (all else valid)
INVALID = {
    "vocab_size": st.integers(max_value=1) | st.just(3.5) | st.just(True),
    "n_layer": st.integers(max_value=0),
    "n_head": st.integers(max_value=0),
    "n_kv_head": st.sampled_from([0, 3, 5, 8]),
    "n_embd": st.sampled_from([130, 127, 4, 0]),  # not divisible by 4 heads, or odd head size, or too small
    "seq_len": st.integers(max_value=0),
    "rope_base": st.floats(max_value=0.0) | st.just(float("nan")),
    "logit_softcap": st.floats(max_value=-1e-9, allow_nan=False),
    "tie_embeddings": st.sampled_from([1, "yes", 0.0]),
    "rope": st.sampled_from([1, 0, "no", None]),
    "qk_norm": st.sampled_from([1, 0, "off", None]),
    "mechanism": st.text().filter(lambda s: s not in ("none", "lrt", "fbt")),
    "lrt_source_layer": st.integers(max_value=-2) | st.integers(min_value=4),
    "lrt_inject": st.sampled_from([(), ("kv", "kv"), ("attention",), ("kv", "mlp")]),
    "lrt_projection": st.sampled_from(["layerwise", "", "SHARED"]),
    "lrt_gamma_init": st.floats(min_value=10.001, allow_infinity=False) | st.just(float("nan")),
    "lrt_gate_channels": st.integers(max_value=0) | st.integers(min_value=129),
    "fbt_jitter": st.floats(max_value=-1e-9, allow_nan=False) | st.floats(min_value=1.001, allow_infinity=False),
}


@pytest.mark.parametrize("field", sorted(INVALID))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_invalid_values_name_their_field(field, data):
    value = data.draw(INVALID[field])
    with pytest.raises(ValueError, match=field):
        wb.ModelConfig(**{**VALID, field: value})


def test_fbt_ties_its_embeddings_by_default_and_refuses_them_untied():
    assert wb.ModelConfig(**VALID, mechanism="fbt").tie_embeddings is True
    assert wb.ModelConfig(**VALID, mechanism="lrt").tie_embeddings is False  # nanochat's untied default
    assert wb.ModelConfig(**VALID).to_dict()["tie_embeddings"] is False  # stored resolved, never None
    with pytest.raises(ValueError, match="tie_embeddings"):
        wb.ModelConfig(**VALID, mechanism="fbt", tie_embeddings=False)


def test_an_odd_head_size_needs_rope_off_and_older_configs_keep_the_full_block():
    """RoPE rotates pairs of channels, so only ``rope=False`` admits an odd head size; a config written
    before the ablation flags existed (a shipped checkpoint's) loads with RoPE and QK-norm on."""
    with pytest.raises(ValueError, match="n_embd"):
        wb.ModelConfig(**{**VALID, "n_embd": 12, "n_head": 4})
    assert wb.ModelConfig(**{**VALID, "n_embd": 12, "n_head": 4, "rope": False}).head_dim == 3
    old = {k: v for k, v in json.loads(wb.ModelConfig(**VALID).to_json()).items() if k not in ("rope", "qk_norm")}
    cfg = wb.ModelConfig.from_dict(old)
    assert cfg.rope is True and cfg.qk_norm is True


def test_unknown_field_is_refused():
    with pytest.raises(ValueError, match="n_layers"):
        wb.ModelConfig.from_dict({**VALID, "n_layers": 3})


@settings(max_examples=40, deadline=None)
@given(mechanism=st.sampled_from(["none", "lrt", "fbt"]), n_layer=st.integers(1, 6),
       source=st.integers(-1, 5), inject=st.sampled_from([("kv",), ("residual",), ("kv", "residual")]),
       gamma=st.floats(-1, 1), jitter=st.floats(0, 0.1), kv_head=st.sampled_from([None, 1, 2, 4]))
def test_json_round_trip_is_exact(mechanism, n_layer, source, inject, gamma, jitter, kv_head):
    cfg = wb.ModelConfig(vocab_size=50, n_layer=n_layer, n_head=4, n_kv_head=kv_head, n_embd=64, seq_len=32,
                         mechanism=mechanism, tie_embeddings=mechanism == "fbt",
                         lrt_source_layer=min(source, n_layer - 1), lrt_inject=inject, lrt_gamma_init=gamma,
                         fbt_jitter=jitter)
    again = wb.ModelConfig.from_json(cfg.to_json())
    assert again == cfg
    assert json.loads(again.to_json()) == json.loads(cfg.to_json())


def test_lists_become_tuples_and_gate_channels_default():
    cfg = wb.ModelConfig(**VALID, lrt_inject=["kv"])
    assert cfg.lrt_inject == ("kv",)
    assert cfg.gate_channels == 32
    assert wb.ModelConfig(vocab_size=8, n_head=2, n_embd=8).gate_channels == 8
