"""``HFMechanism``: the workbench's FBT fusion and LRT residual injection at a wrapped HF model's points.

HF reads ``inputs_embeds`` at raw scale (RMS ~0.02), so FBT fuses the normed embedding and scales back to ``rms(e)``.
"""

from __future__ import annotations

import torch

from ..config import ModelConfig
from ..fast import ops
from ..mechanisms import FBT, LRT, Feedback, Mechanism
from .config import FeedbackConfig


def _mechanism_config(config: FeedbackConfig, mechanism: str, source_layer: int) -> ModelConfig:
    return ModelConfig(vocab_size=config.vocab_size, n_layer=config.n_layer, n_head=1, n_embd=config.n_embd,
                       seq_len=1, rope=False, mechanism=mechanism, lrt_source_layer=source_layer,
                       lrt_inject=("residual",), lrt_gamma_init=config.gamma_init, fbt_jitter=0.0)


class HFMechanism(Mechanism):
    """What the wrapper adds, under ``GPT``'s names; ``fusion`` or ``injection`` may be None."""

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
        """FBT's fused input at ``embedded``'s raw scale; plain positions keep ``embedded`` exactly."""
        if self.fusion is None or feedback.memory is None:
            return embedded
        scale = embedded.pow(2).mean(dim=-1, keepdim=True).sqrt()
        fused = self.fusion.fuse_input(ops().norm(embedded), Feedback(feedback.memory)) * scale
        return fused if feedback.mask is None else torch.where(feedback.mask.unsqueeze(-1), fused, embedded)

    def inject_residual(self, layer: int, x: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        """LRT's ``alpha_l * x + gamma_l * m``, when the wrapper injects."""
        return x if self.injection is None else self.injection.inject_residual(layer, x, feedback)
