"""Key/value stores that attention reads and writes, indexed by absolute position.

Two stores share one tiny interface, ``update(layer, k, v, positions) -> (k_all, v_all, mask)``:

- ``KVCache``: the decoding cache. Positions arrive in order (a prefill chunk, then one token at a
  time); inference writes into preallocated tensors, and under autograd it concatenates instead,
  so the exact ``sequential`` schedule can be trained through the very same code path. Next to the
  keys and values it carries the recurrent ``state``: the memory the next token will read.
- ``KVBuffer``: the interleaved-training buffer. It holds K/V for every position; a refinement
  writes the K/V of an arbitrary subset of positions back out of place (no detach, so gradients
  flow through earlier refinements) and attends to the whole buffer under a position-aware mask.

``mask`` is what ``F.scaled_dot_product_attention`` needs: ``"causal"`` when queries and keys are
the same positions, ``None`` when every key is visible, else a boolean (Tq, Tk) tensor.
"""

from __future__ import annotations

import torch

Mask = torch.Tensor | str | None


def position_mask(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """Boolean (Tq, Tk) mask: a query sees keys at its own position or earlier."""
    return k_positions[None, :] <= q_positions[:, None]


class KVCache:
    """Per-layer K/V of the positions processed so far, plus the carried recurrent state."""

    def __init__(self, n_layer: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
        shape = (batch, kv_heads, max_len, head_dim)
        self.max_len = max_len
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.pos = 0  # number of positions already stored
        self.state: torch.Tensor | None = None  # (B, D_mem) memory produced by the last stored position

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        n = k.size(2)
        start, stop = self.pos, self.pos + n
        if stop > self.max_len:
            raise ValueError(f"KVCache is full: max_len={self.max_len}, asked to store up to {stop}")
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            # Autograd forbids overwriting tensors earlier steps saved; grow by concatenation instead.
            self.k[layer] = torch.cat([self.k[layer][:, :, :start], k, self.k[layer][:, :, stop:]], dim=2)
            self.v[layer] = torch.cat([self.v[layer][:, :, :start], v, self.v[layer][:, :, stop:]], dim=2)
        else:
            self.k[layer][:, :, start:stop] = k
            self.v[layer][:, :, start:stop] = v
        k_all, v_all = self.k[layer][:, :, :stop], self.v[layer][:, :, :stop]
        if n == 1:
            return k_all, v_all, None
        if start == 0:
            return k_all, v_all, "causal"
        return k_all, v_all, position_mask(positions, torch.arange(stop, device=positions.device))

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as stored (called once per forward, after every layer)."""
        self.pos += n


class KVBuffer:
    """K/V of every position of a sequence, refined in place of subsets (interleaved training)."""

    def __init__(self, n_layer: int) -> None:
        self.k: list[torch.Tensor | None] = [None] * n_layer
        self.v: list[torch.Tensor | None] = [None] * n_layer
        self._mask: tuple[torch.Tensor, torch.Tensor] | None = None  # (positions, mask) of the current refinement

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        if self.k[layer] is None:  # the init pass fills the buffer with every position
            self.k[layer], self.v[layer] = k, v
            return k, v, "causal"
        self.k[layer] = self.k[layer].index_copy(2, positions, k)
        self.v[layer] = self.v[layer].index_copy(2, positions, v)
        if self._mask is None or self._mask[0] is not positions:  # every layer of one refinement shares it
            k_positions = torch.arange(self.k[layer].size(2), device=positions.device)
            self._mask = (positions, position_mask(positions, k_positions))
        return self.k[layer], self.v[layer], self._mask[1]

    def advance(self, n: int) -> None:
        """Nothing to do: the buffer is indexed by absolute position, not by a write cursor."""
