"""Activation caches per depth and per pass, under any schedule (TransformerLens-style).

Forwards fill the current **pass** until it holds all T positions, so ``multipass(K)`` gives K passes (from 1).
Positions are counted, never read: recording never waits for a device."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tqdm.auto import tqdm

from .. import schedules
from ..hooks import hook_points, with_hooks
from ..model import GPT
from ..validation import check_tokens, fail

NamesFilter = str | Sequence[str] | Callable[[str], bool] | None
# run_with_cache(progress=None) shows its bar only once a run has taken this long: silent for short runs
PROGRESS_DELAY_S = 10.0


RESIDUAL_HOOKS = ("hook_embed", "hook_input", "hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_final",
                  "hook_memory", "hook_memory_in")


def residual_stream(name: str) -> bool:
    """Default ``names_filter``: the residual stream and memory only (per-head tensors add up over passes)."""
    return name.rsplit(".", 1)[-1] in RESIDUAL_HOOKS


def position_dim(name: str) -> int:
    """The dimension of a hook's tensor that indexes positions (queries, for patterns)."""
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
            raise ValueError(f"names_filter: unknown hook points {unknown}; known: {names[:6]}...")
        selected = [n for n in names if n in set(names_filter)]
    if not selected:
        raise ValueError(f"names_filter={names_filter!r} selects no hook point")
    return selected


# TransformerLens' short names (``utils.get_act_name``): cache["resid_post", 3] is blocks.3.hook_resid_post.
_BLOCK_NAMES = {"resid_pre": "hook_resid_pre", "resid_mid": "hook_resid_mid", "resid_post": "hook_resid_post",
                "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v", "pattern": "attn.hook_pattern",
                "gate": "attn.hook_gate"}
_MODEL_NAMES = {"embed": "hook_embed", "input": "hook_input", "memory": "hook_memory", "memory_in": "hook_memory_in",
                "final": "hook_final"}


def act_name(name: str, layer: int | None = None) -> str:
    """The full hook name of a TransformerLens-style short name and layer."""
    if layer is None:
        return _MODEL_NAMES.get(name, name)
    if name not in _BLOCK_NAMES:
        raise KeyError(f"cache[{name!r}, {layer}]: the second index is a layer of {sorted(_BLOCK_NAMES)}; "
                       "for passes use cache.pass_(k)[name]")
    return f"blocks.{layer}.{_BLOCK_NAMES[name]}"


class ActivationCache:
    """Activations by hook name per pass; ``cache[name]`` is the last pass, ``cache["resid_post", 3]`` a layer."""

    def __init__(self, passes: list[dict[str, torch.Tensor]], positions: torch.Tensor | None,
                 schedule: str, n_layer: int) -> None:
        self.passes = passes
        self.positions = positions  # run_with_cache's positions: None (all), 1-D (shared) or (B, 1) (per example)
        self.schedule = schedule
        self.n_layer = n_layer

    @property
    def n_passes(self) -> int:
        return len(self.passes)

    def pass_(self, k: int) -> ActivationCache:
        """Pass ``k`` (from 1; negative from the end) as a one-pass cache."""
        n = self.n_passes
        if isinstance(k, bool) or not isinstance(k, int) or not (1 <= k <= n or -n <= k <= -1):
            fail("k", k, f"must be in [1, {n}] or [-{n}, -1]")
        return ActivationCache([self.passes[k - 1 if k > 0 else k]], self.positions, self.schedule, self.n_layer)

    def keys(self) -> list[str]:
        return list(self.passes[-1]) if self.passes else []

    def values(self) -> list[torch.Tensor]:
        return [self[n] for n in self.keys()]

    def items(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, self[n]) for n in self.keys()]

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, name: str) -> bool:
        return act_name(name) in self.passes[-1]

    def __getitem__(self, key: str | tuple[str, int]) -> torch.Tensor:
        name = act_name(key) if isinstance(key, str) else act_name(*key)
        if name not in self.passes[-1]:
            raise KeyError(f"{name!r} is not in this cache ({self.keys()[:6]}...)")
        return self.passes[-1][name]

    def stack_passes(self, name: str) -> torch.Tensor:
        """(n_passes, ...) for one hook; index i holds pass i + 1."""
        name = act_name(name)
        return torch.stack([p[name] for p in self.passes])

    def stack_activation(self, activation_name: str, layer: int = -1) -> torch.Tensor:
        """(layers, ...): a short-named block activation of every layer below ``layer`` (-1: all)."""
        stop = self.n_layer if layer == -1 else layer
        if not 0 < stop <= self.n_layer:
            fail("layer", layer, f"must be -1 or in [1, {self.n_layer}]")
        return torch.stack([self[activation_name, l] for l in range(stop)])

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, return_labels: bool = False
                          ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """(components, ...): the stream each block reads (``hook_input`` first) up to ``layer``, then the final."""
        stop = self.n_layer if layer is None or layer == -1 else layer
        if not 0 <= stop <= self.n_layer:
            fail("layer", layer, f"must be None, -1 or in [0, {self.n_layer}]")
        names, labels = [], []
        for depth in range(stop + 1):  # depth n_layer, the final stream, is the last block's output
            names.append("hook_input" if depth == 0 else f"blocks.{depth - 1}.hook_resid_post")
            labels.append("final_post" if depth == self.n_layer else f"{depth}_pre")
            if incl_mid and depth < stop:
                names.append(f"blocks.{depth}.hook_resid_mid")
                labels.append(f"{depth}_mid")
        stacked = torch.stack([self[n] for n in names])
        return (stacked, labels) if return_labels else stacked


class _Recorder:
    """Collects hook outputs into passes; positions map to slots on-device, never read."""

    def __init__(self, seq_len: int, keep: torch.Tensor | None, per_example: bool, device: torch.device,
                 bar: tqdm) -> None:
        self.seq_len, self.per_example, self.bar = seq_len, per_example, bar
        self.keep = None if keep is None else keep.to(device)
        targets = torch.arange(seq_len) if keep is None or per_example else keep
        self.kept = len(targets)
        slot_of = torch.full((seq_len,), self.kept, dtype=torch.long)  # position -> slot (built on the host)
        slot_of[targets] = torch.arange(self.kept)
        self.slot_of = slot_of.to(device)
        self.passes: list[dict[str, torch.Tensor]] = []
        self.filled = seq_len  # positions the current pass holds (full: the next forward opens a pass)
        self.step_positions: torch.Tensor | None = None

    def on_positions(self, positions: torch.Tensor, hook) -> None:
        if self.filled + positions.numel() > self.seq_len:
            self.passes.append({})
            self.filled = 0
        self.filled += positions.numel()
        self.step_positions = positions.detach()
        self.bar.update(1)
        self.bar.set_postfix(passes=len(self.passes), refresh=False)

    def on_activation(self, tensor: torch.Tensor, hook) -> None:
        name, dim, pos = hook.name, position_dim(hook.name), self.step_positions
        t = tensor.detach()
        if name.endswith("hook_pattern") and t.size(-1) < self.seq_len:  # keys seen so far; pad to T
            t = torch.nn.functional.pad(t, (0, self.seq_len - t.size(-1)))
        store = self.passes[-1]
        if name not in store:  # one position per example: (B, ...) without the position dim; else a slot each
            shape = list(t.shape)
            shape[dim:dim + 1] = [] if self.per_example else [self.kept + 1]
            store[name] = torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)
        if not self.per_example:
            store[name].index_copy_(dim, self.slot_of[pos], t)
            return
        index = torch.full((self.seq_len,), -1, dtype=torch.long, device=pos.device)
        index[pos] = torch.arange(pos.numel(), device=pos.device)
        where = index[self.keep]  # (B,) each example's position in this forward, -1 if absent
        picked = t.movedim(dim, 1)[torch.arange(t.size(0), device=t.device), where.clamp(min=0)]
        found = (where >= 0).view(-1, *[1] * (picked.ndim - 1))
        store[name] = torch.where(found, picked, store[name])

    def finish(self) -> list[dict[str, torch.Tensor]]:
        """The passes, without the spare slot."""
        if self.per_example:
            return self.passes
        return [{name: t.narrow(position_dim(name), 0, self.kept).contiguous() for name, t in p.items()}
                for p in self.passes]


def _kept_positions(positions: Sequence[int] | torch.Tensor | None, B: int, T: int
                   ) -> tuple[torch.Tensor | None, bool]:
    """``positions`` as (kept positions on the host, one per example?)."""
    if positions is None:
        return None, False
    keep = torch.as_tensor(positions, dtype=torch.long).cpu()
    per_example = keep.ndim == 2
    if not ((keep.ndim == 1 and len(keep) > 0) or keep.shape == (B, 1)):
        raise ValueError(f"positions of shape {tuple(keep.shape)} is invalid: must be non-empty 1-D or ({B}, 1)")
    if int(keep.min()) < 0 or int(keep.max()) >= T:
        raise ValueError(f"positions={keep.flatten().tolist()} is invalid: must be in [0, {T - 1}]")
    return (keep[:, 0] if per_example else keep), per_example


@torch.no_grad()
def run_with_cache(model: GPT, idx: torch.Tensor, schedule: str | schedules.Schedule = "single", *,
                   plain_prefix: int | torch.Tensor = 0,
                   names_filter: NamesFilter = residual_stream, positions: Sequence[int] | torch.Tensor | None = None,
                   progress: bool | None = None) -> tuple[schedules.ScheduleOutput, ActivationCache]:
    """Run ``schedule`` and cache the selected activations of every pass; ``positions`` (B, 1) keeps one per
    example. Entries a pass did not compute are NaN, so a mistake shows rather than reads as zero."""
    check_tokens(model.config.vocab_size, idx)
    if progress is not None and not isinstance(progress, bool):
        fail("progress", progress, "must be None, True or False")
    value = schedules.parse(schedule)
    B, T = idx.shape
    keep, per_example = _kept_positions(positions, B, T)
    names = _select_names(model, names_filter)
    forwards = value.jacobi_passes  # a multipass run makes one forward per pass; other counts are not known ahead
    with tqdm(total=forwards if forwards > 1 else None, desc="run_with_cache", unit="forward",
              disable=progress is False, delay=0.0 if progress else PROGRESS_DELAY_S) as bar:
        recorder = _Recorder(T, keep, per_example, idx.device, bar)
        fwd_hooks = [("hook_positions", recorder.on_positions)] + [(n, recorder.on_activation) for n in names]
        with with_hooks(model, fwd_hooks):
            out = value.run(model, idx, plain_prefix)
    stored = keep[:, None] if per_example else keep  # as given: 1-D shared, or the (B, 1) column
    return out, ActivationCache(recorder.finish(), stored, value.name, model.config.n_layer)
