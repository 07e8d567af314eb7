"""``FeedbackConfig``: a wrapped HF model's ``config``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..validation import check_choice, check_float, fail

FUSIONS = (None, "glu")
INJECTIONS = (None, "residual")
OPTION_NAMES = ("fusion", "inject", "feedback_layer", "jitter", "gamma_init", "document_token")


@dataclass(frozen=True)
class FeedbackConfig:
    """HF shape fields plus the wrapper's saved options, read as ``model.config``."""

    vocab_size: int  # token ids the HF model reads and predicts
    n_layer: int  # hidden_states has n_layer + 1 entries
    n_embd: int  # width of hidden states, memory and inputs_embeds
    seq_len: int | None  # max_position_embeddings, if declared
    fusion: str | None = "glu"  # FBT input fusion
    inject: str | None = None  # LRT residual injection
    feedback_layer: int = -1  # hidden_states entry fed back: -1 = after the final norm
    jitter: float = 0.02  # half-width of uniform training noise on the memory
    gamma_init: float = 0.0  # 0: start exactly as the HF model
    document_token: int | None = None  # a position holding it reads no memory

    def __post_init__(self) -> None:
        check_choice("fusion", self.fusion, FUSIONS)
        check_choice("inject", self.inject, INJECTIONS)
        if self.fusion is None and self.inject is None:
            raise ValueError("fusion=None and inject=None consume no memory: give fusion='glu' or inject='residual'")
        L = self.n_layer
        if isinstance(self.feedback_layer, bool) or not isinstance(self.feedback_layer, int) \
                or not -L <= self.feedback_layer <= L or self.feedback_layer == 0:
            fail("feedback_layer", self.feedback_layer, f"must be an int in [1, {L}] or [-{L}, -1]")
        check_float("jitter", self.jitter, 0.0, 1.0)
        check_float("gamma_init", self.gamma_init, -10.0, 10.0)
        if self.document_token is not None and (isinstance(self.document_token, bool)
                                                or not isinstance(self.document_token, int)
                                                or not 0 <= self.document_token < self.vocab_size):
            fail("document_token", self.document_token, f"must be None or a token id in [0, {self.vocab_size - 1}]")

    @property
    def mechanism(self) -> str:
        """The workbench mechanism this wrapper plays."""
        return "fbt" if self.fusion is not None else "lrt"

    @property
    def source_depth(self) -> int:
        """``feedback_layer`` in [1, n_layer]."""
        return self.feedback_layer % (self.n_layer + 1)

    def options(self) -> dict[str, Any]:
        """The wrapper's options, as ``save_pretrained`` stores them."""
        return {k: v for k, v in asdict(self).items() if k in OPTION_NAMES}
