"""``HFMechanism``: the workbench's own FBT fusion and LRT residual injection, at a wrapped HF model's points.

``fusion`` is a ``mechanisms.FBT`` and ``injection`` a residual-only ``mechanisms.LRT``, built for the HF model's width
and depth and called where ``GPT.step`` calls them. Two things differ on an HF stack:

- **Scale.** HF reads ``inputs_embeds`` at raw scale (RMS ~0.02), ``GPT`` at unit RMS: FBT fuses the normed embedding
  and scales the result back to ``rms(e)``; a plain position keeps ``e`` itself (``norm(e) * rms(e)`` differs by the
  norm's epsilon).
- **Jitter.** Drawn once on the carried memory so fusion and injection read the same noisy memory; FBT's own is off.
"""

from __future__ import annotations

import torch

from ..config import ModelConfig
from ..fast import ops
from ..mechanisms import FBT, LRT, Feedback, Mechanism
from .config import FeedbackConfig


def _mechanism_config(config: FeedbackConfig, mechanism: str, source_layer: int) -> ModelConfig:
    """The ``ModelConfig`` for a wrapped model's mechanisms: its width and depth; backbone fields (heads, rotary) stay
    neutral."""
    return ModelConfig(vocab_size=config.vocab_size, n_layer=config.n_layer, n_head=1, n_embd=config.n_embd,
                       seq_len=1, rope=False, mechanism=mechanism, lrt_source_layer=source_layer,
                       lrt_inject=("residual",), lrt_gamma_init=config.gamma_init, fbt_jitter=0.0)


class HFMechanism(Mechanism):
    """What the wrapper adds to the HF model, under ``GPT``'s names: ``source_layer`` (-1: the top, after the final
    norm) and ``fusion``/``injection`` (either may be None)."""

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
        """FBT's fused input at ``embedded``'s raw scale; plain positions (outside ``feedback.mask``) keep ``e``."""
        if self.fusion is None or feedback.memory is None:
            return embedded
        scale = embedded.pow(2).mean(dim=-1, keepdim=True).sqrt()
        fused = self.fusion.fuse_input(ops().norm(embedded), Feedback(feedback.memory)) * scale
        return fused if feedback.mask is None else torch.where(feedback.mask.unsqueeze(-1), fused, embedded)

    def inject_residual(self, layer: int, x: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        """LRT's ``alpha_l * x + gamma_l * m`` (plain positions ``alpha_l * x``), when the wrapper injects."""
        return x if self.injection is None else self.injection.inject_residual(layer, x, feedback)
