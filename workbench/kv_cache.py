"""Key/value stores that attention reads and writes, indexed by absolute position.

Every store satisfies ``KVStore`` (``update(layer, k, v, positions) -> (k_all, v_all, mask)`` and
``advance(n)``), the one interface attention, the schedules and the Hugging Face wrapper rely on;
the decoding caches also satisfy ``DecodeCache`` (a cursor ``pos`` with ``rewind``, and the carried
``state``), which is what ``generate`` and the probes' recurrent suffixes rely on:

- ``KVCache``: the decoding cache. Positions arrive in order (a prefill chunk, then one token at a
  time); inference writes into preallocated tensors, and under autograd it concatenates instead,
  so the exact ``sequential`` schedule can be trained through the very same code path. Next to the
  keys and values it carries the recurrent ``state``: the memory the next token will read.
- ``StaticKVCache``: the decoding cache for a compiled decode step. Its shapes never change: a
  step writes at the positions it is given and attends to every slot under a position mask, so no
  Python integer (a write cursor, a length) enters the step and ``torch.compile`` traces one graph
  for every token.
- ``PurePrefix``: a cache's first positions, extended by concatenation and never written in place, so a
  stretch of the recurrence is a pure function of the memory it starts from (``schedules.continuation``:
  what Jacobians, Lyapunov exponents and power iterations differentiate, again and again).
- ``KVBuffer``: the interleaved-training buffer. It holds K/V for every position in S strided
  groups (group s = positions s, s+S, ...); refining group s replaces that group outright (no
  detach, so gradients flow through earlier refinements, and no copy of the whole buffer) and
  attends to every position, re-interleaved into position order, under a position-aware mask.

``mask`` is what ``F.scaled_dot_product_attention`` needs: ``"causal"`` when queries and keys are
the same positions, ``None`` when every key is visible, else a boolean (Tq, Tk) tensor.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from .validation import check_fits

Mask = torch.Tensor | str | None


@runtime_checkable
class KVStore(Protocol):
    """What attention needs from a key/value store: write a chunk at its positions, read what to attend to."""

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        """Store this chunk's keys/values; return every key/value to attend to and the mask for them."""
        ...

    def advance(self, n: int) -> None:
        """Called once per forward, after every layer wrote its ``n`` positions."""
        ...


@runtime_checkable
class DecodeCache(Protocol):
    """A store decoding steps through in order: ``pos`` positions stored, and the memory the next reads."""

    pos: int
    state: torch.Tensor | None

    def advance(self, n: int) -> None:
        ...

    def rewind(self, position: int) -> None:
        """Forget every position from ``position`` on: the next step recomputes from there exactly."""
        ...


def position_mask(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """Boolean (Tq, Tk) mask: a query sees keys at its own position or earlier."""
    return k_positions[None, :] <= q_positions[:, None]


class _Preallocated:
    """Per-layer K/V tensors of ``max_len`` slots, and the carried recurrent state."""

    def __init__(self, n_layer: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
        shape = (batch, kv_heads, max_len, head_dim)
        check_fits("max_len", max_len, 2 * n_layer * batch * kv_heads * max_len * head_dim * dtype.itemsize,
                   f"a K/V cache of {batch} sequences x {max_len} positions x {n_layer} layers", device)
        self.max_len = max_len
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.state: torch.Tensor | None = None  # (B, D_mem) memory produced by the last stored position


class Cursor:
    """The write cursor of a decoding cache: ``pos`` positions stored, moved on by ``advance`` and back by
    ``rewind`` (shared by ``KVCache`` and ``hf.HFKVCache``)."""

    pos: int = 0  # number of positions already stored (``advance`` counts them per instance)

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as stored (called once per forward, after every layer)."""
        self.pos += n

    def rewind(self, position: int) -> None:
        """Forget positions ``position`` and later (the next step overwrites them)."""
        if not 0 <= position <= self.pos:
            raise ValueError(f"position={position!r} is invalid: must be in [0, {self.pos}] (the positions stored)")
        self.pos = position


class KVCache(Cursor, _Preallocated):
    """Per-layer K/V of the positions processed so far, plus the carried recurrent state."""

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



class StaticKVCache(_Preallocated):
    """Fixed-shape K/V of ``max_len`` slots plus the carried ``state``, addressed only by position.

    Slots not yet written hold zeros and are masked out (a query sees keys at its position or
    earlier), so attending to all of them gives the same result as ``KVCache``'s growing slice. The
    caller keeps the cursor: the positions it passes are where the step writes. Inference only.
    """

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            raise ValueError("StaticKVCache is for inference (it writes in place); use KVCache under autograd")
        self.k[layer].index_copy_(2, positions, k)
        self.v[layer].index_copy_(2, positions, v)
        slots = torch.arange(self.max_len, device=positions.device)
        return self.k[layer], self.v[layer], position_mask(positions, slots)

    def advance(self, n: int) -> None:
        """Nothing to do: positions, not a cursor, say where each step writes."""


class PurePrefix:
    """Positions ``< t`` of a cache, then every position written after them, appended by concatenation.

    Nothing is written in place and the source cache is only read, so calling the same stretch of the
    recurrence again (or under ``torch.func`` transforms) always starts from the same prefix; the tangent
    of a memory flows through the keys/values later positions attend to as well as through the memory chain.
    ``state`` is the memory position ``t`` reads (a ``DecodeCache``'s, for ``schedules.carry``).
    """

    def __init__(self, cache: KVCache, t: int, state: torch.Tensor | None) -> None:
        self.k = [k[:, :, :t] for k in cache.k]
        self.v = [v[:, :, :t] for v in cache.v]
        self.pos, self.state = t, state

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        self.k[layer] = torch.cat([self.k[layer], k], dim=2)
        self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer], None

    def advance(self, n: int) -> None:
        self.pos += n

    def rewind(self, position: int) -> None:
        raise ValueError("a PurePrefix only grows: build a new one from the source cache to start again")


def interleave(groups: list[torch.Tensor], dim: int, length: int) -> torch.Tensor:
    """Inverse of strided splitting: ``groups[s]`` holds positions s, s+S, ... along ``dim``; returns
    the ``length`` positions in order (one stack; shorter trailing groups are padded, then cut off)."""
    longest = groups[0].size(dim)
    padded = []
    for g in groups:
        if g.size(dim) < longest:
            pad = [0, 0] * (g.ndim - 1 - dim) + [0, longest - g.size(dim)]
            g = F.pad(g, pad)
        padded.append(g)
    return torch.stack(padded, dim=dim + 1).flatten(dim, dim + 1).narrow(dim, 0, length)


class KVBuffer:
    """K/V of every position of a sequence, refined one strided group at a time (interleaved training).

    The init pass (``refining is None``) stores every position; ``refine(s)`` then selects group s,
    whose next ``update`` replaces that group's keys/values in place of the stale ones. Storing the
    groups separately is what makes a refinement cheap: writing a subset back into one
    whole-sequence tensor would copy all of it per layer and refinement, forwards and backwards.
    """

    def __init__(self, n_layer: int, subsets: int) -> None:
        self.subsets = subsets
        self.seq_len: int | None = None  # set by the init pass
        self.k: list[list[torch.Tensor] | None] = [None] * n_layer  # per layer: S groups (B, H, T_s, hd)
        self.v: list[list[torch.Tensor] | None] = [None] * n_layer
        self.refining: int | None = None  # the group the next forward computes (None: the init pass)
        self._mask: torch.Tensor | None = None  # (T_s, T) mask of the current group, shared by every layer

    def refine(self, group: int) -> torch.Tensor:
        """Select group ``group`` for the next forward; returns its absolute positions."""
        if self.seq_len is None:
            raise ValueError("refine() needs the init pass first: run one forward over every position")
        if not 0 <= group < self.subsets:
            raise ValueError(f"group={group} is invalid: must be in [0, {self.subsets})")
        self.refining, self._mask = group, None
        return torch.arange(group, self.seq_len, self.subsets, device=self.k[0][0].device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        S = self.subsets
        if self.refining is None:  # the init pass: every position, split into strided views (no copy)
            self.seq_len = k.size(2)
            self.k[layer] = [k[:, :, s::S] for s in range(S)]
            self.v[layer] = [v[:, :, s::S] for s in range(S)]
            return k, v, "causal"
        self.k[layer][self.refining], self.v[layer][self.refining] = k, v
        if self._mask is None:
            self._mask = position_mask(positions, torch.arange(self.seq_len, device=positions.device))
        return (interleave(self.k[layer], 2, self.seq_len), interleave(self.v[layer], 2, self.seq_len),
                self._mask)

    def advance(self, n: int) -> None:
        """Nothing to do: the buffer is indexed by group and position, not by a write cursor."""
