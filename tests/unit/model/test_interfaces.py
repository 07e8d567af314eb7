"""The written interfaces: every key/value store is a KVStore, the decoding caches DecodeCaches, and GPT and
FeedbackLM both FeedbackModels; rewinding a cache recomputes exactly."""

from __future__ import annotations

import inspect

import pytest
import torch

import workbench as wb
from workbench.kv_cache import DecodeCache, KVBuffer, KVStore, StaticKVCache
from workbench.model import FeedbackModel


def _model(mechanism: str = "fbt") -> wb.GPT:
    torch.manual_seed(0)
    config = wb.ModelConfig(vocab_size=13, n_layer=2, n_head=2, n_embd=16, seq_len=12, mechanism=mechanism,
                            tie_embeddings=mechanism == "fbt")
    return wb.build_model(config).double().eval()


def test_stores_and_models_satisfy_the_protocols():
    model = _model()
    cache = model.new_kv_cache(2, 12)
    assert isinstance(cache, KVStore) and isinstance(cache, DecodeCache)
    assert isinstance(model.new_kv_cache(2, 12, static=True), StaticKVCache)
    assert isinstance(model.new_kv_cache(2, 12, static=True), KVStore)
    assert isinstance(KVBuffer(2, 2), KVStore)
    assert isinstance(model, FeedbackModel)
    hf = pytest.importorskip("workbench.hf")
    assert isinstance(hf.HFKVCache(None, 4), DecodeCache)
    # the wrapper defines every member of the protocol, each method with the protocol's own parameters
    members = [name for name in vars(FeedbackModel) if not name.startswith("_")]
    assert {"step", "new_kv_cache", "readout_weight", "flops_per_token"} <= set(members)
    for name in members:
        ours, theirs = getattr(FeedbackModel, name), getattr(hf.FeedbackLM, name, None)
        assert theirs is not None, f"hf.FeedbackLM lacks {name}"
        if callable(ours):
            assert list(inspect.signature(theirs).parameters) == list(inspect.signature(ours).parameters), name


def test_rewind_recomputes_exactly_and_refuses_the_future():
    model = _model()
    idx = torch.randint(0, 13, (2, 8))
    cache = model.new_kv_cache(2, 12)
    first = model.step(idx, kv=cache).logits
    cache.rewind(5)
    again = model.step(idx[:, 5:], positions=torch.arange(5, 8), kv=cache).logits
    assert cache.pos == 8 and torch.allclose(again, first[:, 5:], atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="position=9"):
        cache.rewind(9)
