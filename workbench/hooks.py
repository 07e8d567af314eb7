"""TransformerLens-style named hook points: ``fn(tensor, *, hook)`` returns a replacement tensor, or None to observe."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

HookFn = Callable[..., "torch.Tensor | None"]


class HookPoint(nn.Module):
    """Identity module that names an activation so hooks can observe or replace it."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # set by the owning model to the module's dotted path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # Skip nn.Module's call machinery when nothing listens: decoding calls dozens per token.
        if self._forward_hooks or self._forward_pre_hooks:
            return super().__call__(x)
        return x

    @property
    def active(self) -> bool:
        """A hook is attached: costly optional activations are computed only then."""
        return bool(self._forward_hooks)

    def add_hook(self, fn: HookFn) -> torch.utils.hooks.RemovableHandle:
        return self.register_forward_hook(lambda _module, _inputs, output: fn(output, hook=self))


def name_hook_points(model: nn.Module) -> None:
    """Give every HookPoint its dotted path inside ``model``."""
    for name, module in model.named_modules():
        if isinstance(module, HookPoint):
            module.name = name


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """All hook points of a model by name, in order of definition."""
    return {name: m for name, m in model.named_modules() if isinstance(m, HookPoint)}


HookName = str | Callable[[str], bool]  # a hook point's name, or a predicate on names (TransformerLens' filters)


def _select(points: dict[str, HookPoint], name: HookName) -> list[HookPoint]:
    """The hook points a name or predicate means; none is a ``ValueError``."""
    if callable(name):
        chosen = [point for n, point in points.items() if name(n)]
        if not chosen:
            raise ValueError(f"hook name {name!r} accepts no hook point; names look like {list(points)[:4]}")
        return chosen
    if not isinstance(name, str) or name not in points:
        raise ValueError(f"hook name {name!r} is not a hook point; names look like {list(points)[:4]}")
    return [points[name]]


@contextmanager
def with_hooks(model: nn.Module, fwd_hooks: dict[HookName, HookFn] | list[tuple[HookName, HookFn]]) -> Iterator[None]:
    """Attach hooks (keyed by hook name or a predicate on names) for a ``with`` block; always removed afterwards."""
    points = hook_points(model)  # one walk of the module tree, however many hooks
    items = fwd_hooks.items() if isinstance(fwd_hooks, dict) else fwd_hooks
    handles = []
    try:
        for name, fn in items:
            handles += [point.add_hook(fn) for point in _select(points, name)]
        yield
    finally:
        for h in handles:
            h.remove()


