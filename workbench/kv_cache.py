"""Key/value stores that attention reads and writes, indexed by absolute position.

``mask``: ``"causal"``, ``None`` (every key visible) or a boolean (Tq, Tk) tensor."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from .validation import check_fits, fail

Mask = torch.Tensor | str | None


@runtime_checkable
class KVStore(Protocol):
    """What attention needs from a key/value store."""

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        """Store this chunk; return every key/value to attend to and their mask."""
        ...

    def advance(self, n: int) -> None:
        """Called once per forward, after every layer wrote its ``n`` positions."""
        ...


@runtime_checkable
class DecodeCache(Protocol):
    """A store decoding steps through in order; ``state`` is the memory the next position reads."""

    pos: int
    state: torch.Tensor | None

    def advance(self, n: int) -> None:
        ...

    def rewind(self, position: int) -> None:
        """Forget every position from ``position`` on."""
        ...


def position_mask(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """Boolean (Tq, Tk) causal mask by position."""
    return k_positions[None, :] <= q_positions[:, None]


class _Preallocated:
    """Per-layer K/V tensors of ``max_len`` slots, and the carried recurrent state."""

    def __init__(self, n_layer: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
        shape = (batch, kv_heads, max_len, head_dim)
        check_fits("max_len", max_len, 2 * n_layer * batch * kv_heads * max_len * head_dim * dtype.itemsize,
                   f"a K/V cache of {batch} x {max_len} positions x {n_layer} layers", device)
        self.max_len = max_len
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.state: torch.Tensor | None = None  # (B, D_mem) memory produced by the last stored position


class Cursor:
    """The write cursor of a decoding cache."""

    pos: int = 0  # number of positions already stored (``advance`` counts them per instance)

    def advance(self, n: int) -> None:
        self.pos += n

    def rewind(self, position: int) -> None:
        if not 0 <= position <= self.pos:
            fail("position", position, f"must be in [0, {self.pos}]")
        self.pos = position


class KVCache(Cursor, _Preallocated):
    """Per-layer K/V so far plus the carried state; concatenates under autograd, so ``sequential`` trains through
    the decoding path."""

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        n = k.size(2)
        start, stop = self.pos, self.pos + n
        if stop > self.max_len:
            raise ValueError(f"KVCache is full: max_len={self.max_len}, asked for {stop}")
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
    """Fixed-shape K/V, so ``torch.compile`` traces one decode graph (inference only); unwritten slots are masked."""

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Mask]:
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            raise ValueError("StaticKVCache writes in place: use KVCache under autograd")
        self.k[layer].index_copy_(2, positions, k)
        self.v[layer].index_copy_(2, positions, v)
        slots = torch.arange(self.max_len, device=positions.device)
        return self.k[layer], self.v[layer], position_mask(positions, slots)

    def advance(self, n: int) -> None:
        """No-op: positions, not a cursor, say where each step writes."""


class PurePrefix:
    """A cache's positions ``< t``, then appends: never in place, so a stretch is a pure function (``torch.func``)."""

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
        raise ValueError("a PurePrefix only grows: build a new one to rewind")


def interleave(groups: list[torch.Tensor], dim: int, length: int) -> torch.Tensor:
    """Inverse of strided splitting (``groups[s]``: positions s, s+S, ...)."""
    longest = groups[0].size(dim)
    padded = []
    for g in groups:
        if g.size(dim) < longest:
            pad = [0, 0] * (g.ndim - 1 - dim) + [0, longest - g.size(dim)]
            g = F.pad(g, pad)
        padded.append(g)
    return torch.stack(padded, dim=dim + 1).flatten(dim, dim + 1).narrow(dim, 0, length)


class KVBuffer:
    """K/V refined one strided group at a time (interleaved training), groups apart to avoid full copies."""

    def __init__(self, n_layer: int, subsets: int) -> None:
        self.subsets = subsets
        self.seq_len: int | None = None  # set by the init pass
        self.k: list[list[torch.Tensor] | None] = [None] * n_layer  # per layer: S groups (B, H, T_s, hd)
        self.v: list[list[torch.Tensor] | None] = [None] * n_layer
        self.refining: int | None = None  # the group the next forward computes (None: the init pass)
        self._mask: torch.Tensor | None = None  # (T_s, T) mask of the current group, shared by every layer

    def refine(self, group: int) -> torch.Tensor:
        """Select ``group`` for the next forward; its absolute positions."""
        if self.seq_len is None:
            raise ValueError("refine() needs the init pass first")
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
        """No-op: the buffer is indexed by group and position."""
