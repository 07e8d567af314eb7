"""TransformerLens-style named hook points.

Every activation worth reading passes through an identity ``HookPoint`` whose name is its place in
the module tree (``blocks.3.hook_resid_post``). A hook is ``fn(tensor, *, hook) -> tensor | None``:
returning a tensor replaces the activation (an intervention), returning None only observes it.
"""

from __future__ import annotations

import sys
import types
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
        """True when a hook is attached: lets costly optional activations be computed only on request."""
        return bool(self._forward_hooks)

    def add_hook(self, fn: HookFn) -> torch.utils.hooks.RemovableHandle:
        return self.register_forward_hook(lambda _module, _inputs, output: fn(output, hook=self))


def name_hook_points(model: nn.Module) -> None:
    """Give every HookPoint its dotted path inside ``model``."""
    for name, module in model.named_modules():
        if isinstance(module, HookPoint):
            module.name = name


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """All hook points of a model by name, in forward order of definition."""
    return {name: m for name, m in model.named_modules() if isinstance(m, HookPoint)}


@contextmanager
def with_hooks(model: nn.Module, fwd_hooks: dict[str, HookFn] | list[tuple[str, HookFn]]) -> Iterator[None]:
    """Attach hooks by name for the duration of a ``with`` block; always removed afterwards."""
    points = hook_points(model)
    items = fwd_hooks.items() if isinstance(fwd_hooks, dict) else fwd_hooks
    handles = []
    try:
        for name, fn in items:
            if name not in points:
                raise ValueError(f"hook name {name!r} is not a hook point of this model; "
                                 f"known names look like {list(points)[:4]}")
            handles.append(points[name].add_hook(fn))
        yield
    finally:
        for h in handles:
            h.remove()


class _CallableModule(types.ModuleType):
    """``wb.hooks`` is this module (``import workbench.hooks`` gives the module, as one expects); calling it,
    ``wb.hooks(model, {...})``, still means ``with_hooks``: the context manager had that name first."""

    def __call__(self, model: nn.Module, fwd_hooks: dict[str, HookFn] | list[tuple[str, HookFn]]):
        return with_hooks(model, fwd_hooks)


hooks = with_hooks  # the old name, kept working
sys.modules[__name__].__class__ = _CallableModule
