"""Activation caches per depth and per pass, under any schedule (TransformerLens-style).

``run_with_cache(model, idx, schedule=...)`` runs a schedule with hooks attached and returns an
``ActivationCache`` keyed by hook names (``hook_input`` is depth 0, after any fusion;
``blocks.{l}.hook_resid_post`` is depth l+1; ``hook_memory``; ``blocks.{l}.attn.hook_gate``;
``blocks.{l}.attn.hook_pattern`` only on request, since it forces an explicit attention).

Schedules call the model several times. The cache groups those forwards into **passes** with one
rule: forwards accumulate into the current pass until one recomputes a position the pass already
has. So ``multipass(K)`` gives K passes; ``sequential`` and ``blockwise`` give one pass assembled
from their chunks; ``interleaved(S)`` gives two — the init pass and the refined one assembled from
its S subsets.

Filtering keeps memory small: ``names_filter`` (a name, a list, or a predicate) and either
``positions`` (the same positions for every example) or ``example_positions`` (one position per
example, e.g. the final colon of a probe task: entries are then (B, ...)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .. import schedules
from ..hooks import hook_points
from ..hooks import hooks as attach_hooks
from ..model import GPT

NamesFilter = str | Sequence[str] | Callable[[str], bool] | None


def position_dim(name: str) -> int:
    """Which dimension of a hook's tensor indexes positions (queries, for attention patterns)."""
    return 2 if name.split(".")[-1] in ("hook_q", "hook_k", "hook_v", "hook_pattern") else 1


def _select_names(model: GPT, names_filter: NamesFilter) -> list[str]:
    names = [n for n in hook_points(model) if n != "hook_positions"]
    if names_filter is None:
        return [n for n in names if not n.endswith("hook_pattern")]
    if isinstance(names_filter, str):
        selected = [n for n in names if n == names_filter]
    elif callable(names_filter):
        selected = [n for n in names if names_filter(n)]
    else:
        unknown = sorted(set(names_filter) - set(names))
        if unknown:
            raise ValueError(f"names_filter names unknown hook points {unknown}; known: {names[:6]}...")
        selected = [n for n in names if n in set(names_filter)]
    if not selected:
        raise ValueError(f"names_filter={names_filter!r} selects no hook point")
    return selected


class ActivationCache:
    """Activations by hook name and pass. ``cache[name]`` is the last pass; ``cache[name, k]`` pass k."""

    def __init__(self, passes: list[dict[str, torch.Tensor]], positions: torch.Tensor | None,
                 schedule: str, n_layer: int) -> None:
        self.passes = passes
        self.positions = positions  # the kept positions (None = all, or one per example)
        self.schedule = schedule
        self.n_layer = n_layer

    @property
    def n_passes(self) -> int:
        return len(self.passes)

    def keys(self) -> list[str]:
        return list(self.passes[-1]) if self.passes else []

    def __contains__(self, name: str) -> bool:
        return name in self.passes[-1]

    def __getitem__(self, key: str | tuple[str, int]) -> torch.Tensor:
        name, k = (key, -1) if isinstance(key, str) else key
        if name not in self.passes[k]:
            raise KeyError(f"{name!r} is not in this cache (recorded: {self.keys()[:6]}...)")
        return self.passes[k][name]

    def stack_passes(self, name: str) -> torch.Tensor:
        """(n_passes, ...) for one hook."""
        return torch.stack([p[name] for p in self.passes])

    def accumulated_resid(self, pass_index: int = -1) -> torch.Tensor:
        """Residual stream at every depth: (L + 1, B, ..., D), depth 0 = the input after fusion."""
        names = ["hook_input"] + [f"blocks.{l}.hook_resid_post" for l in range(self.n_layer)]
        return torch.stack([self[n, pass_index] for n in names])

    stack_activation = accumulated_resid  # TransformerLens spelling for the residual stack


class _Recorder:
    """Collects hook outputs forward by forward and assembles them into passes."""

    def __init__(self, names: list[str], batch: int, seq_len: int, keep: torch.Tensor | None,
                 per_example: bool) -> None:
        self.names, self.batch, self.seq_len = names, batch, seq_len
        self.keep, self.per_example = keep, per_example
        self.passes: list[dict[str, torch.Tensor]] = []
        self.seen = torch.zeros(seq_len, dtype=torch.bool)
        self.step_positions: torch.Tensor | None = None

    def on_positions(self, positions: torch.Tensor, hook) -> None:
        pos = positions.detach().cpu()
        if not self.passes or bool(self.seen[pos].any()):
            self.passes.append({})
            self.seen.zero_()
        self.seen[pos] = True
        self.step_positions = pos

    def on_activation(self, tensor: torch.Tensor, hook) -> None:
        name, dim, pos = hook.name, position_dim(hook.name), self.step_positions
        t = tensor.detach()
        if name.endswith("hook_pattern") and t.size(-1) < self.seq_len:  # keys seen so far; pad to T
            t = torch.nn.functional.pad(t, (0, self.seq_len - t.size(-1)))
        store = self.passes[-1]
        if self.per_example:  # one position per example: (B, ...) with the position dim removed
            if name not in store:
                shape = list(t.shape)
                del shape[dim]
                store[name] = torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)
            slot = torch.full((self.seq_len,), -1, dtype=torch.long)
            slot[pos] = torch.arange(len(pos))
            where = slot[self.keep]  # (B,) index of each example's position in this forward, -1 if absent
            found = (where >= 0).nonzero().squeeze(1)
            if len(found):
                rows, cols = found.to(t.device), where[found].to(t.device)
                store[name][rows] = t.movedim(dim, 1)[rows, cols]
            return
        targets = torch.arange(self.seq_len) if self.keep is None else self.keep
        lookup = torch.full((self.seq_len,), -1, dtype=torch.long)
        lookup[targets] = torch.arange(len(targets))
        slots = lookup[pos]
        kept = slots >= 0
        if name not in store:
            shape = list(t.shape)
            shape[dim] = len(targets)
            store[name] = torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)
        index = kept.nonzero().squeeze(1).to(t.device)
        store[name].index_copy_(dim, slots[kept].to(t.device), t.index_select(dim, index))


@torch.no_grad()
def run_with_cache(model: GPT, idx: torch.Tensor, schedule: str = "single", *, passes: int = 2,
                   subsets: int = 2, block: int = 32, plain_prefix: int | torch.Tensor = 0,
                   names_filter: NamesFilter = None, positions: Sequence[int] | torch.Tensor | None = None,
                   example_positions: torch.Tensor | None = None,
                   ) -> tuple[schedules.ScheduleOutput, ActivationCache]:
    """Run ``schedule`` on ``idx`` and cache the selected activations of every pass.

    Returns the schedule's output and the cache. Unwritten entries (a position a pass did not
    compute) are NaN, so a mistake shows rather than reads as zero.
    """
    if positions is not None and example_positions is not None:
        raise ValueError("give positions or example_positions, not both")
    B, T = idx.shape
    keep, per_example = None, False
    if positions is not None:
        keep = torch.as_tensor(positions, dtype=torch.long).cpu()
        if keep.ndim != 1 or len(keep) == 0 or int(keep.min()) < 0 or int(keep.max()) >= T:
            raise ValueError(f"positions must be a non-empty 1-D list of indices in [0, {T - 1}]")
    if example_positions is not None:
        keep, per_example = torch.as_tensor(example_positions, dtype=torch.long).cpu(), True
        if keep.shape != (B,) or int(keep.min()) < 0 or int(keep.max()) >= T:
            raise ValueError(f"example_positions must have shape ({B},) with indices in [0, {T - 1}]")
    names = _select_names(model, names_filter)
    recorder = _Recorder(names, B, T, keep, per_example)
    fwd_hooks = [("hook_positions", recorder.on_positions)] + [(n, recorder.on_activation) for n in names]
    with attach_hooks(model, fwd_hooks):
        out = schedules.run(model, idx, schedule, passes=passes, subsets=subsets, block=block,
                            plain_prefix=plain_prefix)
    return out, ActivationCache(recorder.passes, keep, schedule, model.config.n_layer)
