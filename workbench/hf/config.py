"""``FeedbackConfig``: what schedules, decoding and analysis read from a wrapped HF model's ``config``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..validation import check_float

FUSIONS = (None, "glu")
INJECTIONS = (None, "residual")
OPTION_NAMES = ("fusion", "inject", "feedback_layer", "jitter", "gamma_init", "document_token")


@dataclass(frozen=True)
class FeedbackConfig:
    """What schedules, decoding and analysis read from ``model.config``: HF shape fields plus the wrapper's saved
    options."""

    vocab_size: int  # token ids the HF model reads and predicts
    n_layer: int  # decoder layers; hidden_states has n_layer + 1 entries
    n_embd: int  # width of the hidden states, hence of the memory (D), and of inputs_embeds
    seq_len: int | None  # the HF model's max_position_embeddings (None when it declares none)
    fusion: str | None = "glu"  # FBT input fusion into inputs_embeds: "glu" or None
    inject: str | None = None  # LRT residual injection into every layer's input: "residual" or None
    feedback_layer: int = -1  # hidden_states entry fed back: -1 = last (after the final norm), or 1..n_layer
    jitter: float = 0.02  # half-width of uniform noise on the carried memory in training
    gamma_init: float = 0.0  # initial residual-injection scale (0 = start exactly as the HF model)
    document_token: int | None = None  # a position holding it reads no memory (``ModelConfig.document_token``)

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion={self.fusion!r} is invalid: must be one of {FUSIONS}")
        if self.inject not in INJECTIONS:
            raise ValueError(f"inject={self.inject!r} is invalid: must be one of {INJECTIONS}")
        if self.fusion is None and self.inject is None:
            raise ValueError("fusion=None and inject=None would consume no memory: give fusion='glu' "
                             "and/or inject='residual'")
        L = self.n_layer
        if isinstance(self.feedback_layer, bool) or not isinstance(self.feedback_layer, int) \
                or not -L <= self.feedback_layer <= L or self.feedback_layer == 0:
            raise ValueError(f"feedback_layer={self.feedback_layer!r} is invalid: must be an int index into "
                             f"hidden_states in [1, {L}] or [-{L}, -1] (0, the input itself, is no memory)")
        check_float("jitter", self.jitter, 0.0, 1.0)  # a number first: jitter="0.1" must not fail on the comparison
        check_float("gamma_init", self.gamma_init, -10.0, 10.0)
        if self.document_token is not None and (isinstance(self.document_token, bool)
                                                or not isinstance(self.document_token, int)
                                                or not 0 <= self.document_token < self.vocab_size):
            raise ValueError(f"document_token={self.document_token!r} is invalid: must be None or a token id in "
                             f"[0, {self.vocab_size - 1}]")

    @property
    def mechanism(self) -> str:
        """The workbench mechanism this wrapper plays: "fbt" with input fusion, else "lrt"."""
        return "fbt" if self.fusion is not None else "lrt"

    @property
    def source_depth(self) -> int:
        """``feedback_layer`` as a non-negative index into hidden_states (n_layer = the final-normed top)."""
        return self.feedback_layer % (self.n_layer + 1)

    def options(self) -> dict[str, Any]:
        """The wrapper's own options (what ``save_pretrained`` stores)."""
        return {k: v for k, v in asdict(self).items() if k in OPTION_NAMES}
