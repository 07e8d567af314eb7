"""Latent feedback on any Hugging Face causal LM: ``FeedbackLM(hf_model, fusion="glu")``.

The wrapper gives a ``transformers`` ``AutoModelForCausalLM`` the interface of the workbench's own
``GPT`` — a ``config`` with ``n_layer``/``vocab_size``/``n_embd``/``mechanism``, ``step(...) ->
StepOutput``, ``new_kv_cache`` and TransformerLens-style hook points — so the schedules, the
trainer's multi-pass recipe (``schedules.run``, ``schedule_flops``, ``build_optimizers``),
``generate`` (STANDARD / SOFT / FUSED) and ``analysis.run_with_cache`` run on it unchanged.

**What is fed back.** The memory a position produces is an entry of the ``hidden_states`` the HF
model returns (``output_hidden_states``; entry 0 is the input of the first layer, entry ``l`` the
output of layer ``l - 1``). By default (``feedback_layer=-1``) it is the **last entry, which is
after the final norm** — GPT-2: ``ln_f(h^L)``, Llama: ``norm(h^L)`` (RMSNorm with its learned
gain) — i.e. exactly the vector the readout (``lm_head``) reads, FBT's top state. It is taken at the
readout's input, so an intervention on ``hook_final`` reaches the memory as it does in ``GPT``.
``feedback_layer=l`` with ``1 <= l < n_layer`` feeds back the raw output of layer ``l - 1``,
RMS-normed without a gain (as the workbench's mechanisms norm every memory), so its scale is
O(1) whatever the depth; index 0 (the input itself) is refused.

**How it is consumed.** By the workbench's own mechanisms (``mechanisms.FBT`` and ``mechanisms.LRT``,
called at the points ``GPT`` calls them: ``HFMechanism``, in ``mechanism.py``, says what differs):
- ``fusion="glu"`` (FBT input fusion), into ``inputs_embeds``::

      e = E[token]                                   the HF model's own input embedding, raw scale
      u = RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))) * rms(e)

  The last factor rescales the unit-RMS fused vector to the RMS of the plain embedding *at that
  position*: HF stacks were trained on raw embedding scale (RMS typically 0.01-0.2: 0.02 at init
  for GPT-2 and Llama), so a unit-RMS input would drown the first layers, while the per-token RMS
  keeps plain and fused inputs interchangeable (a model that scales ``inputs_embeds`` itself, like
  Gemma's ``sqrt(D)``, scales both alike). Positions outside ``memory_mask`` get ``e`` itself. In
  training mode uniform jitter ``U(-jitter, jitter)`` is added to the carried memory before it is
  consumed (FBT's noise regularisation).
- ``inject="residual"`` (LRT residual injection): a forward pre-hook on every decoder layer makes
  its input ``alpha_l * x + gamma_l * m`` (``alpha = 1``, ``gamma = gamma_init = 0`` at init, so the
  wrapped model starts exactly as the HF model). Both may be combined; LRT's gated K/V projection
  lives inside attention and is not offered.

**Positions.** Every forward passes explicit ``position_ids`` (the absolute positions of the tokens
computed), so architectures that add learned position embeddings to ``inputs_embeds`` inside the
model (GPT-2's ``wpe``; the fused vector is what ``inputs_embeds`` carries, ``wpe`` is added after)
and those that rotate queries and keys (Llama's RoPE) see the right positions in a full pass, a
cache step and a strided subset alike.

**Supported families.** The wrapper needs ``inputs_embeds``, ``position_ids``,
``output_hidden_states`` and the decoder-layer list (for the hook points, the top state and the
residual injection), found at ``transformer.h`` (GPT-2, GPT-J, GPT-Neo, CodeGen, ...),
``model.layers`` (Llama, Mistral, Qwen2/3, Gemma, Phi-3, OLMo, ...) or ``gpt_neox.layers``
(Pythia); any other model must hold exactly one ``ModuleList`` of ``num_hidden_layers`` modules,
else construction fails with a clear error. The input embedding must be as wide as the hidden
states (the memory is fused and injected at the width it is read). Models whose positions do not come from
``position_ids`` (ALiBi: BLOOM, MPT) are not supported. Tested offline on GPT-2 and Llama with
transformers 5.

**Schedules and analysis.** ``single``, ``sequential``, ``blockwise``, ``multipass`` and the three
decoding regimes run through a ``transformers.DynamicCache`` (``new_kv_cache``). ``interleaved``
passes a workbench ``KVBuffer``: the wrapper lends it to HF attention as the cache (HF writes each
layer's post-RoPE keys and values through ``cache.update``, which the buffer answers with the keys
and values of every position) and passes the matching position-aware 4-D attention mask. Other
workbench stores (``analysis.jacobians``' frozen prefix) work the same way, one token at a
time. Custom masks need ``attn_implementation`` "eager" or "sdpa" (flash/flex kernels take none:
a clear ``NotImplementedError``). For float64 exactness use SDPA with Llama-like models: their
eager attention takes its softmax in float32. ``model.generate(input_ids, max_new_tokens, do_sample=...,
temperature=..., top_k=..., eos_token_id=...)`` takes Hugging Face's generation arguments and decodes
with ``wb.generate`` (SOFT by default: every new token reads its predecessor's memory).

Not supported: activation checkpointing together with ``inject="residual"`` (the recomputation
runs outside ``step``, where the injection hooks are idle).
"""


from .cache import HFKVCache
from .config import FeedbackConfig
from .mechanism import HFMechanism
from .wrapper import FeedbackLM, decoder_layers

__all__ = ["FeedbackConfig", "FeedbackLM", "HFKVCache", "HFMechanism", "decoder_layers"]
