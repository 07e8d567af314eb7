"""Key/value stores a wrapped HF model attends against: its decoding cache, and workbench stores lent to HF."""

from __future__ import annotations

from typing import Any

import torch

from ..kv_cache import Cursor, KVBuffer, position_mask


class HFKVCache(Cursor):
    """A ``transformers.DynamicCache`` plus the carried memory ``state``."""

    def __init__(self, cache: Any, max_len: int) -> None:
        self.cache = cache
        self.max_len = max_len
        self.pos = 0
        self.state: torch.Tensor | None = None

    @property
    def k(self) -> list[torch.Tensor]:
        """Keys per layer, (B, kv_heads, pos, head_dim)."""
        return [layer.keys for layer in self.cache.layers]

    @property
    def v(self) -> list[torch.Tensor]:
        """Values per layer, (B, kv_heads, pos, head_dim)."""
        return [layer.values for layer in self.cache.layers]

    def prepare(self, positions: torch.Tensor) -> None:
        """Ready a step at ``positions``; entries past ``pos`` are dropped, so a rewind is exact."""
        n = positions.numel()
        if self.pos + n > self.max_len:
            raise ValueError(f"HFKVCache is full: max_len={self.max_len}, asked for {self.pos + n}")
        expected = torch.arange(self.pos, self.pos + n, device=positions.device)
        if not torch.equal(positions, expected):
            raise ValueError(f"positions must be {self.pos}..{self.pos + n - 1}, got {positions.tolist()}")
        stored = self.cache.get_seq_length()
        if stored > self.pos:
            self.cache.crop(self.pos - stored)  # a negative count removes that many trailing positions


class StoreCache:
    """A workbench key/value store lent to HF attention."""

    def __init__(self, store: Any, positions: torch.Tensor) -> None:
        self.store, self.positions = store, positions

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        k, v, _ = self.store.update(layer_idx, key_states, value_states, self.positions)
        return k, v


def store_mask(store: Any, positions: torch.Tensor, dtype: torch.dtype,
               attn_implementation: str | None) -> torch.Tensor:
    """The additive 4-D mask for a workbench store."""
    if attn_implementation not in ("eager", "sdpa"):
        raise NotImplementedError(f"attn_implementation={attn_implementation!r}: a workbench store needs 'eager' "
                                  "or 'sdpa'")
    if isinstance(store, KVBuffer):
        n_keys = positions.numel() if store.refining is None else store.seq_len
        allowed = position_mask(positions, torch.arange(n_keys, device=positions.device))
    elif positions.numel() == 1:
        allowed = torch.ones(1, 1, dtype=torch.bool, device=positions.device)
    else:
        raise NotImplementedError(f"a {type(store).__name__} steps one token at a time on HF; use new_kv_cache")
    mask = torch.zeros(allowed.shape, dtype=dtype, device=positions.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]
