"""Key/value stores a wrapped HF model attends against: ``HFKVCache`` (its decoding cache) and ``StoreCache`` (a
workbench store lent to HF attention, masked by ``store_mask``)."""

from __future__ import annotations

from typing import Any

import torch

from ..kv_cache import Cursor, KVBuffer, position_mask


class HFKVCache(Cursor):
    """Decoding cache of a wrapped model: a ``transformers.DynamicCache`` plus the carried memory ``state``.

    ``pos`` counts the positions stored, so a step at the wrong positions fails loudly instead of attending to the wrong
    keys.
    """

    def __init__(self, cache: Any, max_len: int) -> None:
        self.cache = cache
        self.max_len = max_len
        self.pos = 0
        self.state: torch.Tensor | None = None

    @property
    def k(self) -> list[torch.Tensor]:
        """Keys stored per layer, (B, kv_heads, pos, head_dim) as ``KVCache.k``."""
        return [layer.keys for layer in self.cache.layers]

    @property
    def v(self) -> list[torch.Tensor]:
        """Values stored per layer, (B, kv_heads, pos, head_dim)."""
        return [layer.values for layer in self.cache.layers]

    def prepare(self, positions: torch.Tensor) -> None:
        """Ready the cache for a step at ``positions``, which must continue it within ``max_len``. Entries at or beyond
        ``pos`` are dropped first, so a caller that rewinds ``pos`` recomputes from there exactly."""
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


class StoreCache:
    """Lends a workbench key/value store (the ``update``/``advance`` protocol of ``kv_cache.py``) to HF attention.

    ``update`` writes the chunk's keys/values at their absolute positions and returns every position's; the matching
    mask goes in separately.
    """

    def __init__(self, store: Any, positions: torch.Tensor) -> None:
        self.store, self.positions = store, positions

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        k, v, _ = self.store.update(layer_idx, key_states, value_states, self.positions)
        return k, v


def store_mask(store: Any, positions: torch.Tensor, dtype: torch.dtype,
               attn_implementation: str | None) -> torch.Tensor:
    """The additive 4-D attention mask for a workbench store, built before HF attention runs.

    A ``KVBuffer`` holds keys by absolute position: (1, 1, Tq, Tk), causal. Any other store answers a *single* token
    with every key visible: a (1, 1, 1, 1) zero mask. Flash/flex kernels take no float mask.
    """
    if attn_implementation not in ("eager", "sdpa"):
        raise NotImplementedError(f"a workbench key/value store (interleaved schedule) needs attn_implementation "
                                  f"'eager' or 'sdpa' (a custom position-aware mask); this model uses "
                                  f"{attn_implementation!r}")
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
