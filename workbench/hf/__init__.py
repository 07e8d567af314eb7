"""Latent feedback on any Hugging Face causal LM: ``FeedbackLM(hf_model, fusion="glu")`` has ``GPT``'s interface, so
schedules, trainer, ``generate`` and analysis run on it unchanged. Not supported: ALiBi models, activation checkpointing
with ``inject="residual"``; workbench stores need attention "eager" or "sdpa" (SDPA for float64 exactness on Llama).
"""

from .cache import HFKVCache
from .config import FeedbackConfig
from .mechanism import HFMechanism
from .wrapper import FeedbackLM, decoder_layers

__all__ = ["FeedbackConfig", "FeedbackLM", "HFKVCache", "HFMechanism", "decoder_layers"]
