"""``FeedbackLM``: a Hugging Face causal LM with latent feedback."""

from __future__ import annotations

import inspect
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..decode import generate
from ..fast import ops
from ..hooks import HookPoint, name_hook_points
from ..kv_cache import KVBuffer
from ..mechanisms import Feedback
from ..model import StepOutput, resolve_positions
from ..validation import check_float, check_int, check_memory, check_tokens
from .cache import HFKVCache, StoreCache, store_mask
from .config import OPTION_NAMES, FeedbackConfig
from .mechanism import HFMechanism
from .saving import check_loadable, load_weights, save_wrapper, saved_options

if TYPE_CHECKING:
    from transformers import PreTrainedModel

LAYER_PATHS = ("transformer.h", "model.layers", "gpt_neox.layers")  # GPT-2/GPT-J, Llama-likes, Pythia


class BlockHooks(nn.Module):
    """One HF decoder layer's hook points: input (after injection) and output."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_resid_pre, self.hook_resid_post = HookPoint(), HookPoint()


def decoder_layers(hf_model: nn.Module, n_layer: int) -> nn.ModuleList:
    """An HF causal LM's decoder layers: a known path, else its only ModuleList of n_layer modules."""
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
    raise ValueError(f"cannot find the decoder layers of {type(hf_model).__name__}: no {LAYER_PATHS}, "
                     f"{len(found)} ModuleLists of num_hidden_layers={n_layer} modules")


class FeedbackLM(nn.Module):
    """An HF causal LM with latent feedback and ``GPT``'s interface; outside ``step`` its hooks on the HF model are
    idle, so the HF model stays usable on its own."""

    def __init__(self, hf_model: PreTrainedModel, fusion: str | None = "glu", *, inject: str | None = None,
                 feedback_layer: int = -1, jitter: float = 0.02, gamma_init: float = 0.0,
                 document_token: int | None = None) -> None:
        super().__init__()
        if not (isinstance(hf_model, nn.Module) and hasattr(getattr(hf_model, "config", None), "get_text_config")
                and callable(getattr(hf_model, "get_input_embeddings", None))):
            raise ValueError(f"hf_model={type(hf_model).__name__} is invalid: must be a transformers causal LM")
        text = hf_model.config.get_text_config()
        embedding = hf_model.get_input_embeddings()
        if embedding.weight.size(1) != text.hidden_size:  # FBT and LRT read and write one width, D
            raise ValueError(f"hf_model={type(hf_model).__name__} is invalid: inputs_embeds width "
                             f"{embedding.weight.size(1)} must equal hidden size {text.hidden_size}")
        self.config = FeedbackConfig(
            vocab_size=text.vocab_size, n_layer=text.num_hidden_layers, n_embd=text.hidden_size,
            seq_len=getattr(text, "max_position_embeddings", None), fusion=fusion, inject=inject,
            feedback_layer=feedback_layer, jitter=jitter, gamma_init=gamma_init, document_token=document_token)
        c = self.config
        self.hf = hf_model
        self.mechanism = HFMechanism(c).to(device=embedding.weight.device, dtype=embedding.weight.dtype)
        self.hook_positions = HookPoint()
        self.hook_embed, self.hook_input = HookPoint(), HookPoint()
        self.blocks = nn.ModuleList(BlockHooks() for _ in range(c.n_layer))
        self.hook_final, self.hook_memory = HookPoint(), HookPoint()
        name_hook_points(self)
        forward_args = inspect.signature(hf_model.forward).parameters
        self._cache_keyword = "cache" if "cache" in forward_args else "past_key_values"
        # a learned position table (GPT-2's wpe) fails with a bare IndexError past seq_len; rotary models do not
        self._position_limit = c.seq_len if c.seq_len is not None and any(
            isinstance(m, nn.Embedding) and m is not embedding and m.num_embeddings == c.seq_len
            for m in hf_model.modules()) else None
        # set only inside ``step``: the feedback the hooks read, and the states they hand back
        self._feedback: Feedback | None = None
        self._top: torch.Tensor | None = None
        self._final: torch.Tensor | None = None
        layers = decoder_layers(hf_model, c.n_layer)
        for layer, module in enumerate(layers):
            # prepend, so HF's hidden_states show our hooks' interventions; partials of bound methods, not
            # closures, so copy.deepcopy(wrapper) rebinds them to the copy
            module.register_forward_pre_hook(partial(self._layer_input_hook, layer), with_kwargs=True, prepend=True)
            module.register_forward_hook(partial(self._layer_output_hook, layer), prepend=True)
        readout = hf_model.get_output_embeddings()
        if readout is None:
            raise ValueError(f"{type(hf_model).__name__} has no output embeddings: not a causal LM")
        readout.register_forward_pre_hook(self._readout_hook, prepend=True)

    def _layer_input_hook(self, layer: int, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if self._feedback is None:
            return None
        # HF hands a layer its hidden_states positionally or by keyword, by model and version
        x = self.mechanism.inject_residual(layer, args[0] if args else kwargs["hidden_states"], self._feedback)
        x = self.blocks[layer].hook_resid_pre(x)
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    def _layer_output_hook(self, layer: int, module: nn.Module, args: tuple, output: Any) -> Any:
        if self._feedback is None:
            return None
        h = self.blocks[layer].hook_resid_post(output[0] if isinstance(output, tuple) else output)
        if layer == self.config.n_layer - 1:
            self._top = h
        return (h, *output[1:]) if isinstance(output, tuple) else h

    def _readout_hook(self, module: nn.Module, args: tuple) -> tuple | None:
        if self._feedback is None:
            return None
        self._final = self.hook_final(args[0])
        return (self._final, *args[1:])

    @property
    def readout_weight(self) -> torch.Tensor:
        """The readout matrix (V, D)."""
        return self.hf.get_output_embeddings().weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """One plain pass: logits (B, T, V)."""
        return self.step(idx).logits

    def step(self, idx: torch.Tensor, *, memory: torch.Tensor | None = None,
             memory_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None,
             kv: HFKVCache | KVBuffer | Any | None = None) -> StepOutput:
        """``GPT.step`` over ``idx`` (B, T); ``memory`` (B, T, n_embd) is already shifted (``m_{t-1}``)."""
        check_tokens(self.config.vocab_size, idx)
        B, T = idx.shape
        positions = self.hook_positions(resolve_positions(idx, positions))
        if self._position_limit is not None and positions.device.type == "cpu" and \
                int(positions.max()) >= self._position_limit:
            raise ValueError(f"positions reach {int(positions.max())}: must be < "
                             f"max_position_embeddings={self._position_limit}")
        check_memory(memory, memory_mask, B, T, self.config.n_embd)
        if memory is not None and self.config.document_token is not None:  # no memory crosses a document start
            opens = idx == self.config.document_token
            memory_mask = ~opens if memory_mask is None else memory_mask & ~opens
        if memory is not None and self.training and self.config.jitter > 0:
            memory = memory + torch.empty_like(memory).uniform_(-self.config.jitter, self.config.jitter)
        feedback = Feedback(memory, memory_mask)
        x = self.hook_embed(self.hf.get_input_embeddings()(idx))
        x = self.hook_input(self.mechanism.fuse_input(x, feedback))
        kwargs: dict[str, Any] = dict(inputs_embeds=x, position_ids=positions[None].expand(B, T),
                                      output_hidden_states=self.config.source_depth < self.config.n_layer,
                                      use_cache=kv is not None)
        if isinstance(kv, HFKVCache):
            kv.prepare(positions)
            kwargs[self._cache_keyword] = kv.cache
        elif kv is not None:
            if not (hasattr(kv, "update") and hasattr(kv, "advance")):
                raise TypeError(f"kv must be an HFKVCache, a store with update/advance or None, got "
                                f"{type(kv).__name__}")
            kwargs[self._cache_keyword] = StoreCache(kv, positions)
            kwargs["attention_mask"] = store_mask(kv, positions, x.dtype,
                                                  getattr(self.hf.config, "_attn_implementation", None))
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

    def new_kv_cache(self, batch: int, max_len: int) -> HFKVCache:
        """An empty decoding cache for ``max_len`` positions."""
        from transformers import DynamicCache

        check_int("batch", batch, 1)  # as GPT.new_kv_cache
        check_int("max_len", max_len, 1)

        try:
            cache = DynamicCache(config=self.hf.config)
        except TypeError:  # transformers 4.x: no config argument
            cache = DynamicCache()
        return HFKVCache(cache, max_len)

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 20, *, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, eos_token_id: int | None = None,
                 regime: str = "soft", generator: torch.Generator | None = None) -> torch.Tensor:
        """``wb.generate`` with HF's arguments."""
        if do_sample:
            check_float("temperature", temperature, 0.0, lo_open=True)
        return generate(self, input_ids, max_new_tokens, regime=regime, temperature=temperature if do_sample else 0.0,
                        top_k=top_k if do_sample else None, eos=eos_token_id, generator=generator)

    def num_params_by_group(self) -> dict[str, int]:
        """Parameter counts: HF model, mechanism, total."""
        counts = {"hf_model": sum(p.numel() for p in self.hf.parameters()),
                  "mechanism": sum(p.numel() for p in self.mechanism.parameters())}
        counts["total"] = sum(counts.values())
        return counts

    def num_params(self) -> int:
        return self.num_params_by_group()["total"]

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimiser role."""
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
        """Training FLOPs per token of one pass, as ``GPT``'s."""
        c = self.config
        T = c.seq_len if seq_len is None else seq_len
        if T is None:
            raise ValueError("no max_position_embeddings: pass seq_len")
        groups = self.parameter_groups()
        matmul = sum(p.numel() for key in ("matrices", "readout") for p in groups[key])
        if not groups["readout"]:  # tied readout: the embedding matrix is multiplied at the top
            matmul += self.hf.get_output_embeddings().weight.numel()
        return 6.0 * matmul + 12.0 * c.n_layer * c.n_embd * T

    def random_init(self, seed: int = 0) -> FeedbackLM:
        """A random-init twin in eval mode; global RNG untouched."""
        from transformers import AutoModelForCausalLM

        weight = self.readout_weight
        with torch.random.fork_rng(devices=[weight.device] if weight.device.type == "cuda" else []):
            torch.manual_seed(seed)
            twin_hf = AutoModelForCausalLM.from_config(self.hf.config,
                                                       attn_implementation=self.hf.config._attn_implementation)
            twin = FeedbackLM(twin_hf, **self.config.options())
        return twin.to(device=weight.device, dtype=weight.dtype).eval()

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Save atomically into ``path``: absent, empty or a wrapper saved before."""
        save_wrapper(self, path)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> FeedbackLM:
        """Load a local directory; a plain HF one gets fresh feedback weights, other keywords go to HF."""
        from transformers import AutoModelForCausalLM

        path = Path(path)
        check_loadable(path, kwargs)
        options = {k: kwargs.pop(k) for k in OPTION_NAMES if k in kwargs}
        saved = saved_options(path, options)
        hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, use_safetensors=True,
                                                        **kwargs)
        model = cls(hf_model, **(options if saved is None else saved))
        if saved is not None:
            load_weights(model, path)
        return model
