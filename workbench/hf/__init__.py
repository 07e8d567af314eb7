"""Latent feedback on any Hugging Face causal LM: ``FeedbackLM(hf_model, fusion="glu")``.

The wrapper gives an ``AutoModelForCausalLM`` the interface of ``GPT`` (``config``, ``step``, ``new_kv_cache``, hook
points), so the schedules, the trainer, ``generate`` and ``analysis.run_with_cache`` run on it unchanged.

**What is fed back.** By default (``feedback_layer=-1``) the last ``hidden_states`` entry, after the final norm: what
``lm_head`` reads (FBT's top state), taken at the readout's input so an intervention on ``hook_final`` reaches it.
``feedback_layer=l`` feeds back layer ``l - 1``'s output, RMS-normed without a gain so its scale is O(1) at any depth.

**How it is consumed.** By the workbench's own mechanisms (``HFMechanism`` says what differs): ``fusion="glu"`` fuses it
into ``inputs_embeds`` at the raw embedding's per-token RMS (HF stacks were trained on that scale, which a unit-RMS
input would drown); ``inject="residual"`` makes each decoder layer's input ``alpha_l * x + gamma_l * m`` (``gamma`` 0 at
init, so the wrapped model starts as the HF model). LRT's gated K/V projection is not offered.

**Positions.** Every forward passes explicit ``position_ids``, so learned position tables (GPT-2's ``wpe``) and RoPE are
right in a full pass, a cache step and a strided subset alike; ALiBi models (BLOOM, MPT) are not supported.

**Supported families.** Decoder layers at ``transformer.h`` (GPT-2, GPT-J, ...), ``model.layers`` (Llama, Mistral, Qwen,
Gemma, ...) or ``gpt_neox.layers`` (Pythia), else the only ``ModuleList`` of ``num_hidden_layers`` modules; the
embedding as wide as the hidden states. Tested offline on GPT-2 and Llama with transformers 5.

**Caches.** Workbench stores (``interleaved``'s ``KVBuffer``) are lent to HF attention with a 4-D mask, which needs
``attn_implementation`` "eager" or "sdpa". For float64 exactness use SDPA with Llama-like models (their eager softmax
runs in float32). Activation checkpointing with ``inject="residual"`` is unsupported: the recomputation runs outside
``step``, where the injection hooks are idle.
"""


from .cache import HFKVCache
from .config import FeedbackConfig
from .mechanism import HFMechanism
from .wrapper import FeedbackLM, decoder_layers

__all__ = ["FeedbackConfig", "FeedbackLM", "HFKVCache", "HFMechanism", "decoder_layers"]
