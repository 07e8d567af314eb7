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

**How it is consumed.**
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
else construction fails with a clear error. Models whose positions do not come from
``position_ids`` (ALiBi: BLOOM, MPT) are not supported. Tested offline on GPT-2 and Llama with
transformers 5.

**Schedules and analysis.** ``single``, ``sequential``, ``blockwise``, ``multipass`` and the three
decoding regimes run through a ``transformers.DynamicCache`` (``new_kv_cache``). ``interleaved``
passes a workbench ``KVBuffer``: the wrapper lends it to HF attention as the cache (HF writes each
layer's post-RoPE keys and values through ``cache.update``, which the buffer answers with the keys
and values of every position) and passes the matching position-aware 4-D attention mask. Other
workbench stores (``analysis.contraction``'s frozen prefix) work the same way, one token at a
time. Custom masks need ``attn_implementation`` "eager" or "sdpa" (flash/flex kernels take none:
a clear ``NotImplementedError``). For float64 exactness use SDPA with Llama-like models: their
eager attention takes its softmax in float32.

Not supported: activation checkpointing together with ``inject="residual"`` (the recomputation
runs outside ``step``, where the injection hooks are idle).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from torch import nn

from .checkpoint import atomic_directory, read_json, read_safetensors, try_json, write_json_atomic
from .fast import ops
from .functional import glu_state, residual_inject, uniform_init_
from .hooks import HookPoint, name_hook_points
from .kv_cache import Cursor, KVBuffer, position_mask
from .mechanisms import Feedback
from .model import StepOutput, resolve_positions
from .validation import check_tokens

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FUSIONS = (None, "glu")
INJECTIONS = (None, "residual")
LAYER_PATHS = ("transformer.h", "model.layers", "gpt_neox.layers")  # the families named in the docstring
FEEDBACK_CONFIG = "feedback_config.json"
FEEDBACK_WEIGHTS = "feedback.safetensors"
FORMAT = "workbench.hf/1"
OPTION_NAMES = ("fusion", "inject", "feedback_layer", "jitter", "gamma_init", "document_token")
HF_SAVED_NAMES = ("config.json", "generation_config.json")  # what HF's save_pretrained writes beside the weights


def saved_wrapper_names(path: Path) -> set[str] | None:
    """The files a ``FeedbackLM.save_pretrained`` wrote in ``path`` (what the next save may replace; the
    rest, such as a tokenizer or a README, is kept); None when ``path`` holds no wrapper of ours."""
    saved = try_json(path / FEEDBACK_CONFIG)
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        return None
    files = saved.get("files")
    if isinstance(files, list) and all(isinstance(n, str) for n in files):
        return set(files) | {FEEDBACK_CONFIG}
    # saved before the wrapper listed its files: the names HF and the wrapper write
    return {n for n in os.listdir(path) if n in (*HF_SAVED_NAMES, FEEDBACK_CONFIG, FEEDBACK_WEIGHTS)
            or (n.startswith(("model", "pytorch_model")) and n.endswith((".safetensors", ".bin", ".index.json")))}


@dataclass(frozen=True)
class FeedbackConfig:
    """What schedules, decoding and analysis read from ``model.config``, for a wrapped HF model.

    The shape fields come from the HF config; the options are the wrapper's own (saved with it).
    """

    vocab_size: int  # token ids the HF model reads and predicts
    n_layer: int  # decoder layers; hidden_states has n_layer + 1 entries
    n_embd: int  # width of the hidden states, hence of the memory (D)
    embed_dim: int  # width of inputs_embeds (D for GPT-2 and Llama)
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
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter={self.jitter!r} is invalid: must be in [0, 1]")
        if not -10.0 <= self.gamma_init <= 10.0:
            raise ValueError(f"gamma_init={self.gamma_init!r} is invalid: must be in [-10, 10]")
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


class HFKVCache(Cursor):
    """Decoding cache of a wrapped model: a ``transformers.DynamicCache`` plus the carried memory.

    ``state`` is what ``schedules`` and ``generate`` read and write (the memory the next token will
    read); ``pos`` counts the positions stored, so a step at the wrong positions fails loudly
    instead of attending to the wrong keys.
    """

    def __init__(self, cache: Any, max_len: int) -> None:
        self.cache = cache
        self.max_len = max_len
        self.pos = 0
        self.state: torch.Tensor | None = None

    @property
    def k(self) -> list[torch.Tensor]:
        """Keys stored per layer, (B, kv_heads, pos, head_dim) as ``KVCache.k`` (analysis builds frozen prefixes)."""
        return [layer.keys for layer in self.cache.layers]

    @property
    def v(self) -> list[torch.Tensor]:
        """Values stored per layer, (B, kv_heads, pos, head_dim)."""
        return [layer.values for layer in self.cache.layers]

    def prepare(self, positions: torch.Tensor) -> None:
        """Ready the cache for a step at ``positions``, which must continue it (``pos, pos + 1, ...``
        within ``max_len``). Entries at or beyond ``pos`` are dropped first, so a caller that rewinds
        ``pos`` (``rewind``, as ``analysis.probes`` does) recomputes from there exactly."""
        n = positions.numel()
        if self.pos + n > self.max_len:
            raise ValueError(f"HFKVCache is full: max_len={self.max_len}, asked to store up to {self.pos + n}")
        expected = torch.arange(self.pos, self.pos + n, device=positions.device)
        if not torch.equal(positions, expected):
            raise ValueError(f"a cache step must compute positions {self.pos}..{self.pos + n - 1} in order, "
                             f"got {positions.tolist()}")
        stored = self.cache.get_seq_length()
        if stored > self.pos:
            self.cache.crop(self.pos - stored)  # a negative count removes that many trailing positions


class _StoreCache:
    """Lends a workbench key/value store (``KVBuffer``, or any object with the ``update(layer, k, v,
    positions) -> (k_all, v_all, mask)`` / ``advance(n)`` protocol of ``kv_cache.py``) to HF attention
    through the one cache method it calls.

    ``update`` writes the chunk's keys/values at their absolute positions and returns those of every
    position the store holds; the matching mask goes in separately as a 4-D attention mask.
    """

    def __init__(self, store: Any, positions: torch.Tensor) -> None:
        self.store, self.positions = store, positions

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        k, v, _ = self.store.update(layer_idx, key_states, value_states, self.positions)
        return k, v


class GLUFusion(nn.Module):
    """FBT's GLU fusion adapted to raw embedding scale: ``RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))) * rms(e)``."""

    def __init__(self, d_memory: int, d_embed: int) -> None:
        super().__init__()
        self.W_U = nn.Linear(d_memory, d_embed, bias=False)  # value path: the carried state
        self.W_G = nn.Linear(d_embed, d_embed, bias=False)  # gate path: the token
        uniform_init_(self.W_U.weight)
        uniform_init_(self.W_G.weight)

    def forward(self, embedded: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        scale = embedded.pow(2).mean(dim=-1, keepdim=True).sqrt()
        fused = ops().norm(glu_state(memory, ops().norm(embedded), self.W_U, self.W_G)) * scale
        return fused if mask is None else torch.where(mask.unsqueeze(-1), fused, embedded)


class ResidualInjection(nn.Module):
    """LRT's residual injection ``alpha_l * x + gamma_l * m`` (plain positions get ``alpha_l * x``)."""

    def __init__(self, n_layer: int, gamma_init: float) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(n_layer))
        self.gamma = nn.Parameter(torch.full((n_layer,), float(gamma_init)))

    def forward(self, layer: int, x: torch.Tensor, memory: torch.Tensor | None) -> torch.Tensor:
        return residual_inject(x, self.alpha[layer], self.gamma[layer], memory)


class BlockHooks(nn.Module):
    """The hook points of one HF decoder layer: its input (after injection) and its output."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_resid_pre, self.hook_resid_post = HookPoint(), HookPoint()


class HFMechanism(nn.Module):
    """What the wrapper adds to the HF model, under ``GPT``'s name for it: where the memory is read
    (``source_layer``, as in ``mechanisms.py``: the block whose output is the memory, -1 = the top
    after the final norm) and how it is consumed (``fusion``, ``injection``; either may be None)."""

    def __init__(self, config: FeedbackConfig) -> None:
        super().__init__()
        depth = config.source_depth
        self.source_layer = -1 if depth == config.n_layer else depth - 1
        self.fusion = GLUFusion(config.n_embd, config.embed_dim) if config.fusion == "glu" else None
        self.injection = ResidualInjection(config.n_layer, config.gamma_init) if config.inject == "residual" else None


def decoder_layers(hf_model: nn.Module, n_layer: int) -> nn.ModuleList:
    """The decoder-layer list of an HF causal LM: a known path, else its only ModuleList of n_layer modules."""
    for path in LAYER_PATHS:
        try:
            layers = hf_model.get_submodule(path)
        except AttributeError:
            continue
        if isinstance(layers, nn.ModuleList) and len(layers) == n_layer:
            return layers
    found = [m for m in hf_model.modules() if isinstance(m, nn.ModuleList) and len(m) == n_layer]
    if len(found) == 1:
        return found[0]
    raise ValueError(f"cannot find the decoder layers of {type(hf_model).__name__}: looked for {LAYER_PATHS} and "
                     f"for a single ModuleList of num_hidden_layers={n_layer} modules (found {len(found)}); "
                     "supported families are documented in workbench.hf")


def _cache_keyword(hf_model: nn.Module) -> str:
    """The name of the KV-cache argument: ``cache`` in recent transformers, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(hf_model.forward).parameters else "past_key_values"


def _first_arg(args: tuple, kwargs: dict) -> torch.Tensor:
    """A decoder layer's hidden states: positional in every HF layer we know, by name otherwise."""
    return args[0] if args else kwargs["hidden_states"]


def _with_first_arg(args: tuple, kwargs: dict, x: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (x, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": x}


class FeedbackLM(nn.Module):
    """A Hugging Face causal LM with latent feedback, presenting the interface of ``workbench.GPT``.

    ``FeedbackLM(hf_model, fusion="glu", inject=None, feedback_layer=-1, jitter=0.02, gamma_init=0.0,
    document_token=None)``;
    see the module docstring for what is fed back and how. Hook points: ``hook_positions``,
    ``hook_embed`` (the plain token embedding, raw HF scale), ``hook_input`` (depth 0: what goes in
    as ``inputs_embeds``, after fusion and before any position embedding the model adds),
    ``blocks.{l}.hook_resid_pre`` (layer l's input, after injection), ``blocks.{l}.hook_resid_post``
    (layer l's output, ``hidden_states[l + 1]`` except that the last is before the final norm),
    ``hook_final`` (the readout's input: ``hidden_states[-1]``) and ``hook_memory``.

    The HF model stays usable on its own: outside ``step`` the wrapper's layer hooks do nothing.
    """

    def __init__(self, hf_model: PreTrainedModel, fusion: str | None = "glu", *, inject: str | None = None,
                 feedback_layer: int = -1, jitter: float = 0.02, gamma_init: float = 0.0,
                 document_token: int | None = None) -> None:
        super().__init__()
        text = hf_model.config.get_text_config()
        embedding = hf_model.get_input_embeddings()
        self.config = FeedbackConfig(
            vocab_size=text.vocab_size, n_layer=text.num_hidden_layers, n_embd=text.hidden_size,
            embed_dim=embedding.weight.size(1), seq_len=getattr(text, "max_position_embeddings", None),
            fusion=fusion, inject=inject, feedback_layer=feedback_layer, jitter=jitter, gamma_init=gamma_init,
            document_token=document_token)
        c = self.config
        if c.inject is not None and c.n_embd != c.embed_dim:
            raise ValueError(f"inject='residual' needs hidden states as wide as the layer inputs: hidden_size="
                             f"{c.n_embd} but inputs_embeds has width {c.embed_dim}")
        self.hf = hf_model
        self.mechanism = HFMechanism(c).to(device=embedding.weight.device, dtype=embedding.weight.dtype)
        self.hook_positions = HookPoint()
        self.hook_embed, self.hook_input = HookPoint(), HookPoint()
        self.blocks = nn.ModuleList(BlockHooks() for _ in range(c.n_layer))
        self.hook_final, self.hook_memory = HookPoint(), HookPoint()
        name_hook_points(self)
        self._cache_keyword = _cache_keyword(hf_model)
        # a learned position table (GPT-2's wpe) has seq_len rows and fails with a bare IndexError past them;
        # rotary models compute any position, so only a table limits where ``step`` may go
        self._position_limit = c.seq_len if c.seq_len is not None and any(
            isinstance(m, nn.Embedding) and m is not embedding and m.num_embeddings == c.seq_len
            for m in hf_model.modules()) else None
        # Per-step scratch, set only inside ``step``: the feedback the injection reads, and the
        # top state and readout input the layer/readout hooks hand back.
        self._feedback: Feedback | None = None
        self._top: torch.Tensor | None = None
        self._final: torch.Tensor | None = None
        layers = decoder_layers(hf_model, c.n_layer)
        for layer, module in enumerate(layers):
            # prepend: transformers records hidden_states with forward hooks of its own; ours run first,
            # so hidden_states show any intervention made through our hook points. Partials of bound
            # methods, not closures: copy.deepcopy(wrapper) rebinds them to the copy.
            module.register_forward_pre_hook(partial(self._layer_input_hook, layer), with_kwargs=True, prepend=True)
            module.register_forward_hook(partial(self._layer_output_hook, layer), prepend=True)
        readout = hf_model.get_output_embeddings()
        if readout is None:
            raise ValueError(f"{type(hf_model).__name__} has no output embeddings: not a causal LM")
        readout.register_forward_pre_hook(self._readout_hook, prepend=True)

    # ------------------------------------------------------------------ hooks on the HF modules
    def _layer_input_hook(self, layer: int, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """Layer ``layer``'s input: residual injection, then ``blocks.{layer}.hook_resid_pre``."""
        if self._feedback is None:
            return None
        x = _first_arg(args, kwargs)
        if self.mechanism.injection is not None:
            x = self.mechanism.injection(layer, x, self._feedback.masked_memory())
        return _with_first_arg(args, kwargs, self.blocks[layer].hook_resid_pre(x))

    def _layer_output_hook(self, layer: int, module: nn.Module, args: tuple, output: Any) -> Any:
        """Layer ``layer``'s output (a tensor, or a tuple led by one): ``blocks.{layer}.hook_resid_post``."""
        if self._feedback is None:
            return None
        h = self.blocks[layer].hook_resid_post(output[0] if isinstance(output, tuple) else output)
        if layer == self.config.n_layer - 1:
            self._top = h
        return (h, *output[1:]) if isinstance(output, tuple) else h

    def _readout_hook(self, module: nn.Module, args: tuple) -> tuple | None:
        """The readout's input (``hidden_states[-1]``) through ``hook_final``; kept for the memory."""
        if self._feedback is None:
            return None
        self._final = self.hook_final(args[0])
        return (self._final, *args[1:])

    @property
    def readout_weight(self) -> torch.Tensor:
        """The readout matrix (V, D), as ``GPT.readout_weight``: analysis reads the device and dtype from it."""
        return self.hf.get_output_embeddings().weight

    # ------------------------------------------------------------------ forward
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """One plain pass with no feedback: logits (B, T, V)."""
        return self.step(idx).logits

    def step(self, idx: torch.Tensor, *, memory: torch.Tensor | None = None,
             memory_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None,
             kv: HFKVCache | KVBuffer | Any | None = None) -> StepOutput:
        """The general forward, with ``GPT.step``'s semantics, over tokens ``idx`` (B, T).

        ``memory`` (B, T, n_embd): what each position reads (already shifted, ``m_{t-1}``);
        ``memory_mask`` (B, T) bool: the positions that read it (others get the plain embedding and
        no injection). ``positions``: absolute positions (default 0..T-1), passed to the HF model as
        ``position_ids``. ``kv``: an ``HFKVCache`` from ``new_kv_cache`` (chunks in order), a
        ``KVBuffer`` (interleaved schedule), another store with the ``kv_cache.py`` protocol for a
        single token (e.g. a frozen prefix), or None (causal self-attention over ``idx`` alone).
        """
        check_tokens(self.config.vocab_size, idx)  # an id past the table would index out of bounds in the HF model
        B, T = idx.shape
        positions = self.hook_positions(resolve_positions(idx, positions))
        if self._position_limit is not None and positions.device.type == "cpu" and \
                int(positions.max()) >= self._position_limit:
            raise ValueError(f"positions reach {int(positions.max())}, past this model's position table "
                             f"(max_position_embeddings={self._position_limit}: positions in [0, "
                             f"{self._position_limit - 1}])")
        if memory is not None and tuple(memory.shape) != (B, T, self.config.n_embd):
            raise ValueError(f"memory must have shape (B, T, n_embd) = {(B, T, self.config.n_embd)}, "
                             f"got {tuple(memory.shape)}")
        if memory is not None and self.config.document_token is not None:  # no memory crosses a document start
            opens = idx == self.config.document_token
            memory_mask = ~opens if memory_mask is None else memory_mask & ~opens
        if memory is not None and self.training and self.config.jitter > 0:
            memory = memory + torch.empty_like(memory).uniform_(-self.config.jitter, self.config.jitter)
        feedback = Feedback(memory, memory_mask)
        x = self.hook_embed(self.hf.get_input_embeddings()(idx))
        if self.mechanism.fusion is not None and memory is not None:
            x = self.mechanism.fusion(x, memory, memory_mask)
        x = self.hook_input(x)
        kwargs: dict[str, Any] = dict(inputs_embeds=x, position_ids=positions[None].expand(B, T),
                                      output_hidden_states=self.config.source_depth < self.config.n_layer,
                                      use_cache=kv is not None)
        if isinstance(kv, HFKVCache):
            kv.prepare(positions)
            kwargs[self._cache_keyword] = kv.cache
        elif kv is not None:
            if not (hasattr(kv, "update") and hasattr(kv, "advance")):
                raise TypeError(f"kv must be an HFKVCache (from new_kv_cache), a key/value store with update/advance "
                                f"(kv_cache.py) or None, got {type(kv).__name__}")
            kwargs[self._cache_keyword] = _StoreCache(kv, positions)
            kwargs["attention_mask"] = self._store_mask(kv, positions, x.dtype)
        self._feedback = feedback
        try:
            out = self.hf(**kwargs)
            top, final = self._top, self._final
        finally:
            self._feedback = self._top = self._final = None
        depth = self.config.source_depth
        memory_out = final if depth == self.config.n_layer else ops().norm(out.hidden_states[depth])
        if kv is not None:
            kv.advance(T)
        return StepOutput(logits=out.logits, memory=self.hook_memory(memory_out), top=top)

    def _store_mask(self, store: Any, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The additive 4-D attention mask for a workbench store, built before HF attention runs.

        A ``KVBuffer`` holds keys by absolute position: (1, 1, Tq, Tk), a query sees keys at its
        position or earlier (on the interleaved init pass the buffer is empty and takes every
        position: causal). Any other store answers a *single* token with every key it holds visible
        (``KVCache`` and frozen prefixes do): a (1, 1, 1, 1) zero mask that broadcasts over them.
        Eager and SDPA attention both add a float mask to the scores; flash/flex kernels take none.
        """
        impl = getattr(self.hf.config, "_attn_implementation", None)
        if impl not in ("eager", "sdpa"):
            raise NotImplementedError(f"a workbench key/value store (interleaved schedule) needs attn_implementation "
                                      f"'eager' or 'sdpa' (a custom position-aware mask); this model uses {impl!r}")
        if isinstance(store, KVBuffer):
            n_keys = positions.numel() if store.refining is None else store.seq_len
            allowed = position_mask(positions, torch.arange(n_keys, device=positions.device))
        elif positions.numel() == 1:
            allowed = torch.ones(1, 1, dtype=torch.bool, device=positions.device)
        else:
            raise NotImplementedError(f"a {type(store).__name__} can only step one token at a time on a wrapped HF "
                                      f"model (its mask is known only inside attention); use new_kv_cache")
        mask = torch.zeros(allowed.shape, dtype=dtype, device=positions.device)
        return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]

    def new_kv_cache(self, batch: int, max_len: int) -> HFKVCache:
        """An empty decoding cache for ``max_len`` positions (a DynamicCache grows as it is filled)."""
        from transformers import DynamicCache

        try:
            cache = DynamicCache(config=self.hf.config)
        except TypeError:  # transformers 4.x: no config argument
            cache = DynamicCache()
        return HFKVCache(cache, max_len)

    # ------------------------------------------------------------------ accounting (trainer helpers)
    def num_params_by_group(self) -> dict[str, int]:
        """Parameter counts: the HF model, the feedback the wrapper adds, total."""
        counts = {"hf_model": sum(p.numel() for p in self.hf.parameters()),
                  "mechanism": sum(p.numel() for p in self.mechanism.parameters())}
        counts["total"] = sum(counts.values())
        return counts

    def num_params(self) -> int:
        return self.num_params_by_group()["total"]

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimiser role, as ``GPT.parameter_groups``: embedding tables (token and learned
        position) in ``embedding``, an untied readout in ``readout``, other matrices in ``matrices``,
        vectors (norm gains, biases, injection scalars) in ``scalars``."""
        embeddings = {id(m.weight): m.weight for m in self.hf.modules() if isinstance(m, nn.Embedding)}
        readout = self.hf.get_output_embeddings().weight
        groups: dict[str, list[nn.Parameter]] = {"matrices": [], "embedding": list(embeddings.values()),
                                                 "readout": [] if id(readout) in embeddings else [readout],
                                                 "scalars": []}
        taken = set(embeddings) | {id(readout)}
        for p in self.parameters():
            if id(p) not in taken:
                groups["matrices" if p.ndim == 2 else "scalars"].append(p)
        return groups

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs (forward + backward) per token of one pass, with ``GPT.flops_per_token``'s estimate:
        ``6 *`` the parameters of every matrix a token goes through (not the embedding lookups) plus
        ``12 * L * D * T`` for attention over ``T`` keys."""
        c = self.config
        T = c.seq_len if seq_len is None else seq_len
        if T is None:
            raise ValueError("the HF config declares no max_position_embeddings: pass seq_len")
        groups = self.parameter_groups()
        matmul = sum(p.numel() for key in ("matrices", "readout") for p in groups[key])
        if not groups["readout"]:  # tied readout: the embedding matrix is multiplied at the top
            matmul += self.hf.get_output_embeddings().weight.numel()
        return 6.0 * matmul + 12.0 * c.n_layer * c.n_embd * T

    def random_init(self, seed: int = 0) -> FeedbackLM:
        """A randomly initialised twin (same HF config and options, the HF model's own init, fresh feedback
        weights) on this model's device and dtype, in eval mode: the random-network baseline of probes.
        Seeded without touching the global RNG."""
        from transformers import AutoModelForCausalLM

        weight = self.readout_weight
        with torch.random.fork_rng(devices=[weight.device] if weight.device.type == "cuda" else []):
            torch.manual_seed(seed)
            twin_hf = AutoModelForCausalLM.from_config(self.hf.config,
                                                       attn_implementation=self.hf.config._attn_implementation)
            twin = FeedbackLM(twin_hf, **self.config.options())
        return twin.to(device=weight.device, dtype=weight.dtype).eval()

    # ------------------------------------------------------------------ saving and loading
    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write the HF model (``save_pretrained``) plus the wrapper's options (``feedback_config.json``,
        which lists the files written) and weights (``feedback.safetensors``) into ``path``, replacing it
        atomically (a reader never sees half a directory); ``FeedbackLM.from_pretrained(path)`` restores it.

        ``path`` must be absent, empty or a wrapper this method saved: a plain HF model directory is
        refused (save beside it), and files a user added to a saved wrapper (a tokenizer) are kept.
        """
        with atomic_directory(path, saved_wrapper_names) as tmp:
            self.hf.save_pretrained(tmp)
            own = {name: p.detach().contiguous() for name, p in self.mechanism.named_parameters()}
            save_file(own, str(tmp / FEEDBACK_WEIGHTS))
            files = sorted([*os.listdir(tmp), FEEDBACK_CONFIG])
            write_json_atomic(tmp / FEEDBACK_CONFIG, {"format": FORMAT, **self.config.options(), "files": files})

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> FeedbackLM:
        """Load a model from a local directory; nothing is downloaded (``local_files_only=True``).

        A directory written by ``save_pretrained`` restores its options and feedback weights; a plain
        HF directory (a user's own model) gets fresh feedback weights. Keyword arguments named like
        the options (``fusion``, ``inject``, ``feedback_layer``, ``jitter``, ``gamma_init``,
        ``document_token``) configure the wrapper (for a saved wrapper they must agree with what it
        stored); every other one goes to
        ``AutoModelForCausalLM.from_pretrained`` (e.g. ``dtype``, ``attn_implementation``).
        """
        from transformers import AutoModelForCausalLM

        path = Path(path)
        if not path.is_dir():
            raise ValueError(f"FeedbackLM.from_pretrained: {path} is not a local directory (nothing is downloaded: "
                             f"save the HF model with save_pretrained first)")
        if kwargs.pop("use_safetensors", True) is not True:
            raise ValueError("FeedbackLM.from_pretrained: use_safetensors must stay True "
                             "(the workbench never unpickles)")
        if not any(p.name != FEEDBACK_WEIGHTS for p in path.glob("*.safetensors")):
            pickled = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl"))
            raise ValueError(f"FeedbackLM.from_pretrained: {path} holds no safetensors weights"
                             + (f", only pickled ones {pickled}" if pickled else "") + ": the workbench never "
                             "unpickles (a pickle can run code); save the model with save_pretrained(path, "
                             "safe_serialization=True) where you trust it, then load that directory")
        options = {k: kwargs.pop(k) for k in OPTION_NAMES if k in kwargs}
        saved = None
        if os.path.lexists(path / FEEDBACK_CONFIG):
            saved = read_json(path / FEEDBACK_CONFIG)
            if not isinstance(saved, dict) or saved.pop("format", None) != FORMAT:
                raise ValueError(f"{path / FEEDBACK_CONFIG} is not a {FORMAT} file")
            saved.pop("files", None)
            conflicts = {k: (v, saved.get(k)) for k, v in options.items() if saved.get(k) != v}
            if conflicts:
                raise ValueError(f"options {conflicts} (given, stored) disagree with the saved wrapper in {path}")
            options = saved
        hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, use_safetensors=True,
                                                        **kwargs)
        model = cls(hf_model, **options)
        if saved is not None:
            weights = read_safetensors(path / FEEDBACK_WEIGHTS)
            own = dict(model.mechanism.named_parameters())
            if set(weights) != set(own):
                raise ValueError(f"{path / FEEDBACK_WEIGHTS} holds {sorted(weights)}, expected {sorted(own)}")
            with torch.no_grad():
                for name, p in own.items():
                    if weights[name].shape != p.shape:
                        raise ValueError(f"{name}: stored shape {tuple(weights[name].shape)}, "
                                         f"expected {tuple(p.shape)}")
                    p.copy_(weights[name])
        return model
