"""The backbone's building blocks (``workbench.functional``) and the ``Mechanism`` base every mechanism shares."""

from __future__ import annotations

import torch

from workbench import functional, mechanisms, model
from workbench.config import ModelConfig
from workbench.mechanisms import FBT, LRT, MECHANISM_CLASSES, Feedback, Mechanism, NoFeedback, build_mechanism


def test_helpers_keep_their_old_addresses():
    assert mechanisms.norm is functional.norm and mechanisms.uniform_init_ is functional.uniform_init_
    assert model.norm is functional.norm and model.rotary is functional.rotary
    assert model.apply_rotary is functional.apply_rotary


def test_every_mechanism_is_a_mechanism_and_none_is_the_identity():
    assert all(issubclass(cls, Mechanism) for cls in MECHANISM_CLASSES.values())
    assert not issubclass(LRT, NoFeedback) and not issubclass(FBT, NoFeedback)
    config = ModelConfig(vocab_size=16, n_layer=2, n_head=2, n_embd=16, seq_len=8)
    none = build_mechanism(config)
    assert type(none) is NoFeedback and none.source_layer == -1 and not list(none.parameters())
    x, k = torch.randn(2, 3, 16), torch.randn(2, 3, 2, 8)
    feedback = Feedback(torch.randn(2, 3, 16))
    assert none.fuse_input(x, feedback) is x and none.inject_residual(0, x, feedback) is x
    assert none.inject_kv(1, x, k, k, feedback) == (k, k, None)
