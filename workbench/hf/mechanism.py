"""``HFMechanism``: the workbench's own FBT fusion and LRT residual injection, at a wrapped HF model's points.

The wrapper holds no mechanism of its own: ``fusion`` is an ``mechanisms.FBT`` and ``injection`` an
``mechanisms.LRT`` that injects into the residual stream only, both built from a ``ModelConfig`` of the HF
model's width and depth, and ``FeedbackLM.step`` calls their points where ``GPT.step`` does (``fuse_input``
on the input embedding, ``inject_residual`` on every decoder layer's input). Their parameters, init, hook
points and arithmetic are the workbench's. Two things differ on an HF stack, and are handled here:

- **Scale.** An HF stack reads ``inputs_embeds`` at its raw scale (RMS about 0.02 at init), while
  ``GPT`` feeds unit-RMS inputs. FBT fuses the *normed* embedding and the unit-RMS result is brought
  back to ``rms(e)`` per position; a plain position keeps ``e`` itself (``norm(e) * rms(e)`` differs
  from it by the norm's epsilon).
- **Jitter.** The wrapper draws it once on the carried memory, so that the fusion and the injection
  read the same noisy memory; FBT's own jitter is off.
"""

from __future__ import annotations

import torch

from ..config import ModelConfig
from ..fast import ops
from ..mechanisms import FBT, LRT, Feedback, Mechanism
from .config import FeedbackConfig


def _mechanism_config(config: FeedbackConfig, mechanism: str, source_layer: int) -> ModelConfig:
    """The ``ModelConfig`` a workbench mechanism is built from for a wrapped HF model. FBT and LRT read its
    width, its depth and their own options; heads, rotary and context length describe ``GPT``'s backbone,
    which the HF model replaces, and stay neutral."""
    return ModelConfig(vocab_size=config.vocab_size, n_layer=config.n_layer, n_head=1, n_embd=config.n_embd,
                       seq_len=1, rope=False, mechanism=mechanism, lrt_source_layer=source_layer,
                       lrt_inject=("residual",), lrt_gamma_init=config.gamma_init, fbt_jitter=0.0)


class HFMechanism(Mechanism):
    """What the wrapper adds to the HF model, under ``GPT``'s name for it: where the memory is read
    (``source_layer``, as in ``mechanisms.py``: the block whose output is the memory, -1 = the top
    after the final norm) and how it is consumed (``fusion``, ``injection``; either may be None)."""

    def __init__(self, config: FeedbackConfig) -> None:
        depth = config.source_depth
        source_layer = -1 if depth == config.n_layer else depth - 1
        super().__init__(_mechanism_config(config, "none", source_layer))
        self.source_layer = source_layer
        self.fusion = FBT(_mechanism_config(config, "fbt", source_layer)) if config.fusion == "glu" else None
        self.injection = LRT(_mechanism_config(config, "lrt", source_layer)) if config.inject == "residual" else None
        for part in (self.fusion, self.injection):
            if part is not None:
                part.init_weights()

    def fuse_input(self, embedded: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        """FBT's fused input at ``embedded``'s raw scale: ``RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))) * rms(e)``;
        plain positions (outside ``feedback.mask``) keep ``e``."""
        if self.fusion is None or feedback.memory is None:
            return embedded
        scale = embedded.pow(2).mean(dim=-1, keepdim=True).sqrt()
        fused = self.fusion.fuse_input(ops().norm(embedded), Feedback(feedback.memory)) * scale
        return fused if feedback.mask is None else torch.where(feedback.mask.unsqueeze(-1), fused, embedded)

    def inject_residual(self, layer: int, x: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        """LRT's ``alpha_l * x + gamma_l * m`` (plain positions ``alpha_l * x``), when the wrapper injects."""
        return x if self.injection is None else self.injection.inject_residual(layer, x, feedback)
